package sqlite

/*
// SQLite's own, compiled into mattn/go-sqlite3, which wraps neither.
typedef struct sqlite3 sqlite3;
int sqlite3_db_config(sqlite3*, int, ...);
int sqlite3_auto_extension(void (*)(void));
#define SQLITE_DBCONFIG_ENABLE_QPSG 1007

static int qpsg_on(sqlite3 *db, char **err, const void *api) {
	return sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_QPSG, 1, (int *)0);
}

static int qpsg_for_every_connection(void) {
	return sqlite3_auto_extension((void (*)(void))qpsg_on);
}
*/
import "C"

// qpsgRC is what registering the query planner stability guarantee for
// every connection this process opens answered (0: registered).
//
// Without it SQLite plans some statements with the values bound to them (a
// LIMIT ?, a col = ? it weighs as a filter, a value matched against a
// partial index's WHERE) and marks those statements to be prepared afresh
// whenever the value is bound again. go-sqlite3 clears every statement's
// bindings when it is reset, so such statements were parsed and planned on
// every execution, cached or not: the Slack outbox claim cost 95 µs instead
// of 11–17, a workflow lookup 14–20 µs instead of 6. With the guarantee a
// plan depends on the SQL and the schema only, which is what the plan tests
// assume anyway. An auto-extension is how SQLite runs a setting on each new
// connection, and it must be registered before the first open, so a package
// variable's initialiser does it.
var qpsgRC = int(C.qpsg_for_every_connection())
