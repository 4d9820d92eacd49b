package store

// ConsoleStore persists console sign-in sessions (SPEC §6).
type ConsoleStore interface{}
