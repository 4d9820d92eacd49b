package store

// EngineStore persists queue items, runs and holds (SPEC §4).
type EngineStore interface{}
