package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// config is every setting of SPEC §1. Each env var has a flag of the same
// meaning; a flag wins over its env var, which wins over the default.
type config struct {
	Addr           string
	DB             string
	BaseURL        string
	InternalKey    string
	AdminPassword  string
	DBSync         string
	DefaultPolicy  string
	StuckRun       time.Duration
	MaxRecovery    int
	PassInterval   time.Duration
	Workers        int
	Model          string
	OpenAIBaseURL  string
	OpenAIAPIKey   string
	SlackBotToken  string
	SlackAppToken  string
	SlackSigning   string
	SlackAPIURL    string
	SlackStewards  string
	SlackHoldsChan string
	SlackAllowBots string
	SlackLease     time.Duration
}

type setting struct {
	env, flag, def, usage string
	dst                   any
}

func (c *config) settings() []setting {
	return []setting{
		{"HOLDFAST_ADDR", "addr", "127.0.0.1:8080", "listen address (console, API, Slack HTTP endpoints)", &c.Addr},
		{"HOLDFAST_DB", "db", "data/holdfast.db", "SQLite file, or a postgres:// URL", &c.DB},
		{"HOLDFAST_BASE_URL", "base-url", "", "public URL used in links posted to Slack (default http://<addr>)", &c.BaseURL},
		{"HOLDFAST_INTERNAL_KEY", "internal-key", "", "key for /api/internal/* (empty: those routes answer 404)", &c.InternalKey},
		{"HOLDFAST_ADMIN_PASSWORD", "admin-password", "", "bootstrap admin password (default: generated and printed once)", &c.AdminPassword},
		{"HOLDFAST_DB_SYNC", "db-sync", "full", "SQLite synchronous: full or normal", &c.DBSync},
		{"HOLDFAST_DEFAULT_POLICY", "default-policy", "auto", "posture a new session starts with: manual, auto or yolo", &c.DefaultPolicy},
		{"HOLDFAST_STUCK_RUN", "stuck-run", "10m", "heartbeat age after which a run is recovered", &c.StuckRun},
		{"HOLDFAST_MAX_RECOVERY", "max-recovery", "5", "recovery attempts before recovery_exhausted", &c.MaxRecovery},
		{"HOLDFAST_PASS_INTERVAL", "pass-interval", "30s", "safety-net tick of the runner", &c.PassInterval},
		{"HOLDFAST_WORKERS", "workers", "4", "runs executed concurrently", &c.Workers},
		{"HOLDFAST_MODEL", "model", "template", "default model: template or openai:<model>", &c.Model},
		{"OPENAI_BASE_URL", "openai-base-url", "", "OpenAI-compatible endpoint", &c.OpenAIBaseURL},
		{"OPENAI_API_KEY", "openai-api-key", "", "API key for the OpenAI-compatible endpoint", &c.OpenAIAPIKey},
		{"SLACK_BOT_TOKEN", "slack-bot-token", "", "xoxb- token; Slack is enabled when set", &c.SlackBotToken},
		{"SLACK_APP_TOKEN", "slack-app-token", "", "xapp- token; Socket Mode when set, else HTTP mode", &c.SlackAppToken},
		{"SLACK_SIGNING_SECRET", "slack-signing-secret", "", "HTTP mode request verification", &c.SlackSigning},
		{"SLACK_API_URL", "slack-api-url", "", "Slack Web API base URL", &c.SlackAPIURL},
		{"SLACK_STEWARDS", "slack-stewards", "", "Slack user IDs allowed to decide holds, comma-separated", &c.SlackStewards},
		{"SLACK_HOLDS_CHANNEL", "slack-holds-channel", "", "also post hold cards in this channel", &c.SlackHoldsChan},
		{"HOLDFAST_SLACK_CLAIM_LEASE", "slack-claim-lease", "15s", "how long a replica's claim of a Slack delivery or outbox message holds unless renewed (takeover time after a crash)", &c.SlackLease},
		{"SLACK_ALLOW_BOTS", "slack-allow-bots", "false", "treat other bots' Slack messages as input (never the bot's own): true or false", &c.SlackAllowBots},
	}
}

// register adds every setting's flag to fs with its env var (or default) as
// the starting value, and returns a check to call after fs.Parse.
func (c *config) register(fs *flag.FlagSet, env map[string]string) func() error {
	var errs []string
	for _, s := range c.settings() {
		v, ok := env[s.env]
		if !ok || v == "" {
			v = s.def
		}
		usage := s.usage + " (env " + s.env + ")"
		switch d := s.dst.(type) {
		case *string:
			fs.StringVar(d, s.flag, v, usage)
		case *int:
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q is not a number", s.env, v))
			}
			fs.IntVar(d, s.flag, n, usage)
		case *time.Duration:
			dur, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q is not a duration (e.g. 30s, 10m)", s.env, v))
			}
			fs.DurationVar(d, s.flag, dur, usage)
		}
	}
	return func() error {
		if len(errs) > 0 {
			return fmt.Errorf("config: %s", strings.Join(errs, "; "))
		}
		return c.validate()
	}
}

func (c *config) validate() error {
	switch c.DefaultPolicy {
	case "manual", "auto", "yolo":
	default:
		return fmt.Errorf("config: default policy must be manual, auto or yolo, got %q", c.DefaultPolicy)
	}
	if c.Workers < 1 {
		return fmt.Errorf("config: workers must be at least 1")
	}
	if c.MaxRecovery < 0 {
		return fmt.Errorf("config: max recovery cannot be negative")
	}
	if c.StuckRun <= 0 || c.PassInterval <= 0 {
		return fmt.Errorf("config: stuck-run and pass-interval must be positive")
	}
	if c.Model != "template" && !strings.HasPrefix(c.Model, "openai:") {
		return fmt.Errorf("config: model must be template or openai:<model>, got %q", c.Model)
	}
	if c.SlackBotToken != "" && c.SlackAppToken == "" && c.SlackSigning == "" {
		return fmt.Errorf("config: Slack HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN for Socket Mode)")
	}
	if c.SlackAllowBots != "true" && c.SlackAllowBots != "false" {
		return fmt.Errorf("config: SLACK_ALLOW_BOTS must be true or false, got %q", c.SlackAllowBots)
	}
	if c.BaseURL == "" {
		c.BaseURL = "http://" + c.Addr
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	return nil
}
