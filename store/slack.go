package store

// SlackStore persists the Slack bridge's durable inbox and outbox (SPEC §5).
type SlackStore interface{}
