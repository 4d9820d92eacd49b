package sqlite

/*
// SQLite's own, compiled into mattn/go-sqlite3, which wraps no
// sqlite3_config.
int sqlite3_config(int, ...);
#define SQLITE_CONFIG_MEMSTATUS 9

static int memstatus_off(void) { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }
*/
import "C"

// memstatusRC is what turning off SQLite's memory accounting answered: 0, or
// 21 (SQLITE_MISUSE) if SQLite had started already. The accounting (what
// the compile-time SQLITE_DEFAULT_MEMSTATUS=0 turns off) takes a global
// mutex and updates counters in every sqlite3_malloc and free, and
// Holdfast reads none of it (sqlite3_memory_used, the soft heap limit). In interleaved rounds: runs per second 1.10
// (minimal workflow) and 1.07 (four-step), CPU per run 0.92 and 0.88. It
// must be set before SQLite initialises itself on the first open, so a
// package variable's initialiser sets it, before any code can open a
// database.
var memstatusRC = int(C.memstatus_off())
