package sqlite

/*
// SQLite's own, compiled into mattn/go-sqlite3, which wraps none of them.
typedef struct sqlite3 sqlite3;
int sqlite3_config(int, ...);
int sqlite3_db_config(sqlite3*, int, ...);
int sqlite3_auto_extension(void (*)(void));
#define SQLITE_CONFIG_MEMSTATUS 9
#define SQLITE_DBCONFIG_ENABLE_QPSG 1007

static int memstatus_off(void) { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

static int qpsg_on(sqlite3 *db, char **err, const void *api) {
	return sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_QPSG, 1, (int *)0);
}

static int qpsg_for_every_connection(void) {
	return sqlite3_auto_extension((void (*)(void))qpsg_on);
}
*/
import "C"

// Process-wide SQLite settings, made by a package variable's initialiser so
// that they come before any code can open a database. Their order matters:
// sqlite3_config only takes before SQLite initialises itself, and
// registering an auto-extension initialises it.
var memstatusRC, qpsgRC = configure()

// memstatusRC is what turning off SQLite's memory accounting answered: 0, or
// 21 (SQLITE_MISUSE) if SQLite had started already. The accounting (what
// the compile-time SQLITE_DEFAULT_MEMSTATUS=0 turns off) takes a global
// mutex and updates counters in every sqlite3_malloc and free, and Holdfast
// reads none of it (sqlite3_memory_used, the soft heap limit). In
// interleaved rounds: runs per second 1.10 (minimal workflow) and 1.07
// (four-step), CPU per run 0.92 and 0.88.
//
// qpsgRC is what registering the query planner stability guarantee for
// every connection this process opens answered (0: registered; an
// auto-extension is how SQLite runs a setting on each new connection).
// Without it SQLite plans some statements with the values bound to them (a
// LIMIT ?, a col = ? it weighs as a filter, a value matched against a
// partial index's WHERE) and marks those statements to be prepared afresh
// whenever the value is bound again. go-sqlite3 clears every statement's
// bindings when it is reset, so such statements were parsed and planned on
// every execution, cached or not: the Slack outbox claim cost 95 µs instead
// of 11–17, a workflow lookup 14–20 µs instead of 6. With the guarantee a
// plan depends on the SQL and the schema only, which is what the plan tests
// assume anyway.
func configure() (memstatusRC, qpsgRC int) {
	memstatusRC = int(C.memstatus_off())
	qpsgRC = int(C.qpsg_for_every_connection())
	return memstatusRC, qpsgRC
}
