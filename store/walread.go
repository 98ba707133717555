package store

import (
	"database/sql"
	"fmt"
	"os"
	"syscall"
)

// Reading a store whose write-ahead log holds transactions, without
// writing anything.
//
// A process that dies while it holds the store (SIGKILL, a power cut, a
// full disk that failed its last checkpoint) leaves strata.db-wal with
// committed transactions not yet copied into strata.db, and
// strata.db-shm, the WAL's index. The next ordinary open recovers the
// index: SQLite truncates -shm and grows it again page by page, which
// fails on a full filesystem (SQLITE_IOERR_SHMSIZE) — on ext4, blocks a
// truncate frees are not reused before the journal commits, and anything
// else writing may take them. immutable=1 (what a full store opens with
// when there is no such WAL) reads strata.db alone and would miss those
// transactions.
//
// readonly_shm=1 makes SQLite open -shm read-only. With no live process
// holding the store (no DMS lock), SQLite does not recover the index into
// -shm: each read transaction reads the WAL and builds its index in
// private heap memory (wal.c, walBeginShmUnreliable; SQLite 3.22+), which
// writes nothing. With a live process holding it, the index it maintains
// is read as it is. Either way the connection is read-only (mode=ro,
// query_only) and never checkpoints. -shm must exist: when it does not,
// an empty one is created, which takes an inode and no data block.

// walPending reports whether the WAL of the database at path holds
// frames: it is absent or empty after a clean last close.
func walPending(path string) bool {
	fi, err := os.Stat(path + "-wal")
	return err == nil && fi.Size() > 0
}

// openWALReadOnly opens s.db read-only with readonly_shm (see above) and
// returns the schema version.
func (s *Store) openWALReadOnly() (int, error) {
	shm := s.path + "-shm"
	if _, err := os.Lstat(shm); os.IsNotExist(err) {
		fd, err := syscall.Open(shm, syscall.O_RDONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o644)
		if err != nil && !os.IsExist(err) {
			return 0, fmt.Errorf("create an empty %s for reading the write-ahead log: %w", shm, err)
		}
		if err == nil {
			syscall.Close(fd)
		}
	}
	busy := fmt.Sprintf("_busy_timeout=%d", s.busy.Milliseconds())
	db, err := sql.Open("sqlite", dsn(s.path, []string{"mode=ro", "readonly_shm=1", busy, "_pragma=query_only(1)"}))
	if err != nil {
		return 0, err
	}
	configurePool(db)
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		db.Close()
		return 0, mapErr(err)
	}
	s.db, s.immutable = db, false
	return v, nil
}
