package workflow

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a parsed schedule Invoke. Slots are absolute (epoch multiples
// or cron times in UTC) rather than relative to when the engine started, so
// that every replica and every restart agrees on the slot a run belongs to;
// the scheduler uses the slot time as the queue dedupe key.
type Schedule struct {
	Every time.Duration `json:"every,omitempty"`
	Cron  string        `json:"cron,omitempty"`
}

const (
	minEvery = time.Second
	// maxCronLookback covers the rarest satisfiable cron (29 February in a
	// year that skips a leap day) with room to spare.
	maxCronLookback = 1 << 17 * time.Hour // ~15 years
	maxCronWalk     = 1 << 20
)

// cronEpoch is a fixed start for the "does this cron ever fire" check, so
// that Compile's answer never depends on the wall clock.
var cronEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Next returns the first slot strictly after `after`, in UTC, or the zero
// time when the schedule is invalid or never fires.
func (s *Schedule) Next(after time.Time) time.Time {
	if s == nil {
		return time.Time{}
	}
	if s.Every > 0 {
		q := floorDiv(after.UnixNano(), int64(s.Every))
		return time.Unix(0, (q+1)*int64(s.Every)).UTC()
	}
	sched, err := parseCron(s.Cron)
	if err != nil {
		return time.Time{}
	}
	return sched.Next(after.UTC())
}

// Prev returns the latest slot at or before `at`, so that a scheduler coming
// back from downtime can enqueue the slot it missed (once: the slot is the
// dedupe key). It returns the zero time when there is no such slot within
// the lookback.
func (s *Schedule) Prev(at time.Time) time.Time {
	if s == nil {
		return time.Time{}
	}
	if s.Every > 0 {
		q := floorDiv(at.UnixNano(), int64(s.Every))
		return time.Unix(0, q*int64(s.Every)).UTC()
	}
	sched, err := parseCron(s.Cron)
	if err != nil {
		return time.Time{}
	}
	at = at.UTC()
	// cron can only step forward, so widen the window backwards until it
	// holds a slot, then walk forward to the last one not after at.
	for w := time.Hour; w <= maxCronLookback; w *= 2 {
		n := sched.Next(at.Add(-w))
		if n.IsZero() || n.After(at) {
			continue
		}
		last := n
		for range maxCronWalk {
			n = sched.Next(last)
			if n.IsZero() || n.After(at) {
				break
			}
			last = n
		}
		return last
	}
	return time.Time{}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func parseCron(spec string) (cron.Schedule, error) {
	if spec == "" {
		return nil, fmt.Errorf("empty cron")
	}
	return cron.ParseStandard(spec)
}

var cronNames = map[string]bool{
	"jan": true, "feb": true, "mar": true, "apr": true, "may": true, "jun": true,
	"jul": true, "aug": true, "sep": true, "oct": true, "nov": true, "dec": true,
	"sun": true, "mon": true, "tue": true, "wed": true, "thu": true, "fri": true, "sat": true,
}

// cronish reports whether a word could be a cron field; it decides whether a
// free-text Invoke was meant as a schedule.
func cronish(f string) bool {
	parts := strings.FieldsFunc(f, func(r rune) bool { return r == ',' || r == '-' || r == '/' })
	if len(parts) == 0 {
		return false
	}
	for _, p := range parts {
		if p == "*" || p == "?" || cronNames[strings.ToLower(p)] {
			continue
		}
		for _, r := range p {
			if r < '0' || r > '9' {
				return false
			}
		}
	}
	return true
}

// parseInvoke returns a schedule for `every <duration>` or a cron
// expression, nil for free text, and an error for text that is clearly meant
// as a schedule but is not one, because silently treating a typo'd schedule
// as free text would mean the workflow just never runs.
func parseInvoke(v string) (*Schedule, error) {
	v = strings.TrimSpace(v)
	lv := strings.ToLower(v)
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return nil, nil
	}
	switch {
	case strings.ToLower(fields[0]) == "every":
		rest := strings.TrimSpace(v[len(fields[0]):])
		if rest == "" {
			return nil, fmt.Errorf("Invoke %q has no interval; write every <duration>, like every 24h", v)
		}
		d, err := parseDuration(rest)
		if err != nil && strings.HasPrefix(rest, "-") {
			err = nil // reported below as too short, which is the actionable part
			d = -1
		}
		if err != nil {
			return nil, fmt.Errorf("Invoke %q: %q is not a duration; write every <duration> like every 15m or every 168h, or a 5-field cron like 0 9 * * 1", v, rest)
		}
		if d < minEvery {
			return nil, fmt.Errorf("Invoke %q: the interval must be at least %s", v, minEvery)
		}
		return &Schedule{Every: d}, nil
	case strings.HasPrefix(lv, "@every"):
		return nil, fmt.Errorf("Invoke %q: write every <duration> (without @), like every 1h", v)
	case strings.HasPrefix(lv, "@"):
		if _, err := parseCron(v); err != nil {
			return nil, fmt.Errorf("Invoke %q is not a valid cron descriptor: %v", v, err)
		}
		return &Schedule{Cron: v}, nil
	case strings.HasPrefix(lv, "tz=") || strings.HasPrefix(lv, "cron_tz="):
		return nil, fmt.Errorf("Invoke %q: time zones are not supported; schedules run in UTC", v)
	}
	if len(fields) < 4 || len(fields) > 7 {
		return nil, nil
	}
	anchored := false
	for _, f := range fields {
		if !cronish(f) {
			return nil, nil
		}
		if strings.ContainsAny(f, "*0123456789") {
			anchored = true
		}
	}
	if !anchored {
		return nil, nil
	}
	if len(fields) != 5 {
		return nil, fmt.Errorf("Invoke %q looks like cron but has %d fields; use 5: minute hour day-of-month month day-of-week", v, len(fields))
	}
	spec := strings.Join(fields, " ")
	sched, err := parseCron(spec)
	if err != nil {
		return nil, fmt.Errorf("Invoke %q is not a valid cron expression: %v", v, err)
	}
	if sched.Next(cronEpoch).IsZero() {
		return nil, fmt.Errorf("Invoke %q never fires; check the day and month fields", v)
	}
	return &Schedule{Cron: spec}, nil
}
