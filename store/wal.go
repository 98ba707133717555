package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
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
// at commit (synchronous=FULL) — so every connection is set up so:
//
//   - SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE: the last connection closes
//     without SQLite's checkpoint; Close decides (checkpointIfLarge).
//   - SQLITE_FCNTL_PERSIST_WAL: when a close does checkpoint, the WAL
//     file is kept (truncated) instead of deleted, so no process creates
//     it again.
//
// What a kept WAL costs the next process: the first connection of a
// process that finds no other holder of -shm truncates it (unix VFS, the
// DMS lock) and rebuilds the wal-index by reading and checksumming every
// frame of the WAL — 16–28 µs a frame here, 25 ms for the 900 frames
// SQLite's automatic checkpoint (every 1,000 pages) lets a WAL reach.
// So Close truncates a WAL over walCloseCheckpoint (128 KiB, 16 frames)
// with a checkpoint that does not wait for other processes: the next
// open recovers at most a few frames. BenchmarkOpenWALFrames,
// BenchmarkWriteCloseTrunc and docs/store.md have the figures.
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
// and truncates it. A variable for tests.
var walCloseCheckpoint int64 = 128 << 10

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

// checkpointIfLarge checkpoints and truncates the WAL before the last
// close when it has grown past walCloseCheckpoint (without waiting for
// other processes), or when the filesystem is short of space (lowSpace,
// waiting as long as the busy timeout), as SQLite's default close did: a WAL kept
// there may hold the frames of a write that failed for lack of space (an
// import that ran out of it), the very space gc needs — and once the
// filesystem is full, a checkpoint that must grow strata.db to copy the
// WAL's transactions into it cannot run any more, so the WAL could never
// be given back.
func (s *Store) checkpointIfLarge(db *sql.DB) {
	if s.ro {
		return
	}
	fi, err := os.Stat(s.path + "-wal")
	if err != nil || fi.Size() == 0 {
		return
	}
	switch {
	case lowSpace(filepath.Dir(s.path)):
		s.truncateWAL(db)
	case fi.Size() > walCloseCheckpoint:
		s.truncateWALNoWait(db)
	}
}

// truncateWALNoWait is truncateWAL for a close: it does not wait for
// other processes' readers or writer (busy_timeout 0), checkpointing what
// it can and leaving the WAL to the next close when one is busy.
func (s *Store) truncateWALNoWait(db *sql.DB) {
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return
	}
	_, _ = c.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
}

// truncateWAL copies the WAL's committed transactions into strata.db and
// truncates it to nothing, giving its space back (frames of a transaction
// that failed are dropped). It reports whether the WAL is empty after.
func (s *Store) truncateWAL(db *sql.DB) bool {
	var busy, logPages, ckpt int64
	if err := db.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logPages, &ckpt); err != nil || busy != 0 {
		return false
	}
	fi, err := os.Stat(s.path + "-wal")
	return err != nil || fi.Size() == 0
}

// walLowSpace: with less free space than this on the store's filesystem
// (or than a few times the WAL), a close checkpoints and truncates the
// WAL. A variable for tests.
var walLowSpace int64 = 64 << 20

// lowSpace reports whether the filesystem holding dir is short of space
// for a kept WAL (walLowSpace).
func lowSpace(dir string) bool {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return false
	}
	return int64(st.Bavail)*int64(st.Bsize) < walLowSpace
}

// ReclaimWAL gives back the space a write-ahead log holds on a full
// filesystem: it copies the log's committed transactions into strata.db
// and truncates the log (the frames of a write that failed for lack of
// space are dropped). Only gc calls it — a command that frees space —
// since it writes the store; it reports whether the log is empty now.
// The store at home must not be open read-only in this process.
func ReclaimWAL(home string) bool {
	path := filepath.Join(home, DBName)
	if !walPending(path) {
		return false
	}
	db, err := sql.Open("sqlite", dsn(path, []string{"_busy_timeout=1000"}))
	if err != nil {
		return false
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	s := &Store{path: path}
	return s.truncateWAL(db)
}
