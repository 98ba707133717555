package store

import (
	"database/sql"
	"os"
	"reflect"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Every strata command is a short process, and SQLite's defaults for the
// last connection of a process made each one that wrote pay twice for the
// WAL: closing checkpointed it into strata.db (copying its pages, an
// fsync of strata.db) and deleted strata.db-wal and -shm, which the next
// process created again (with an fsync of the directory). Neither buys
// durability — a transaction is durable once its WAL frames are fsynced
// at commit (synchronous=FULL) — so every connection is set up to leave
// the WAL in place:
//
//   - SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE: the last connection closes
//     without a checkpoint. SQLite still checkpoints as transactions
//     commit (wal_autocheckpoint, 1,000 pages), so the WAL stays bounded;
//     Close checkpoints when it found it larger than walCloseCheckpoint.
//   - SQLITE_FCNTL_PERSIST_WAL: when a close does checkpoint, the WAL
//     file is kept (truncated to journal_size_limit) instead of deleted.
//
// The next process finds -wal and -shm as they were: a valid wal-index
// needs no recovery. After a power loss the -shm is rebuilt from the WAL,
// whose frames carry checksums, as before.
func init() {
	sqlite.RegisterConnectionHook(func(c sqlite.ExecQuerierContext, _ string) error {
		if fc, ok := c.(sqlite.FileControl); ok {
			_, _ = fc.FileControlPersistWAL("main", 1)
		}
		noCheckpointOnClose(c)
		return nil
	})
}

// walCloseCheckpoint: a Close that finds the WAL larger checkpoints it
// first (a long reader kept the automatic checkpoints from resetting it).
// A variable for tests.
var walCloseCheckpoint int64 = 16 << 20

// noCheckpointOnClose sets SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE on a
// connection of the modernc driver, which does not expose
// sqlite3_db_config: it takes the connection's sqlite3 handle and TLS
// from its fields. It reports whether it could; a driver whose
// connection lacks them closes with a checkpoint, as SQLite does by
// default (TestWALKeptAtClose fails then, so an upgrade notices).
func noCheckpointOnClose(c any) bool {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	e := v.Elem()
	dbf, tlsf := e.FieldByName("db"), e.FieldByName("tls")
	if !dbf.IsValid() || dbf.Kind() != reflect.Uintptr || !tlsf.IsValid() || tlsf.Type() != reflect.TypeFor[*libc.TLS]() {
		return false
	}
	db := uintptr(dbf.Uint())
	tls := (*libc.TLS)(unsafe.Pointer(tlsf.Pointer()))
	if db == 0 || tls == nil {
		return false
	}
	const vaSlot = 8 // libc.VaList's stride per argument
	bp := libc.Xmalloc(tls, types.Size_t(2*vaSlot))
	if bp == 0 {
		return false
	}
	defer libc.Xfree(tls, bp)
	return sqlite3.Xsqlite3_db_config(tls, db, sqlite3.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, libc.VaList(bp, int32(1), uintptr(0))) == sqlite3.SQLITE_OK
}

// checkpointIfLarge checkpoints the WAL before the last close when it has
// grown past walCloseCheckpoint.
func (s *Store) checkpointIfLarge(db *sql.DB) {
	if s.ro {
		return
	}
	if fi, err := os.Stat(s.path + "-wal"); err == nil && fi.Size() > walCloseCheckpoint {
		_, _ = db.Exec("PRAGMA wal_checkpoint(PASSIVE)")
	}
}
