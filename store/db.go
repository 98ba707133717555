package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	sqlite "modernc.org/sqlite"
)

// DBName is the file name of the database inside a store directory.
const DBName = "strata.db"

// DefaultBusyTimeout is how long a statement waits for another process's
// write lock when Options.BusyTimeout is zero.
const DefaultBusyTimeout = 60 * time.Second

// Store is one store directory: strata.db plus caches. Safe for concurrent
// use by many goroutines; many processes may open one store at once.
type Store struct {
	dir  string
	path string
	ro   bool
	busy time.Duration
	// immutable: opened read-only with immutable=1 (a read-only
	// filesystem without the WAL index); see Open.
	immutable bool
	// full: opened read-only because the filesystem is full
	// (Options.ReadOnlyWhenFull).
	full bool

	// db is the durable pool: synchronous=FULL, every write transaction
	// BEGIN IMMEDIATE. Everything a caller commits goes through it.
	db *sql.DB

	// fast is a second pool on the same file with synchronous=NORMAL, for
	// writes that need no durability of their own: leases, Retain, a
	// Writer's intermediate batches, the stat cache. A power loss may roll
	// those back,
	// which is harmless — the lease dies with the machine, and the Writer's
	// final transaction goes through db, whose fsync of the WAL also
	// covers every frame written before it. SQLite keeps a WAL database
	// consistent under NORMAL (checkpoints still sync). Opened on first use.
	fastOnce sync.Once
	fast     *sql.DB
	fastErr  error

	// wsem serializes this process's write transactions. SQLite would
	// serialize them anyway, but its busy handler sleeps in steps of up to
	// 100 ms, which is far slower than a Go channel hand-off between
	// goroutines of one process. Other processes still wait in SQLite.
	wsem chan struct{}

	// scratches: the live scratch Writers, whose objects reads find
	// after the database's (scratch.go).
	scratches scratchSet

	stmts sync.Map // stmtKey → *sql.Stmt
	hot   sync.Map // *sql.DB → *hotStmts
}

// hotStmts are the statements that transactions run most, prepared once
// per pool. Tx.stmt binds them to its connection with Tx.StmtContext,
// which prepares them once per connection and reuses them after; preparing
// in every transaction instead costs about a third of a small one.
type hotStmts struct {
	mu   sync.Mutex
	done bool
}

var hotQueries = []string{
	qGetObject, qObjectOID, qObjectKind, qPutObject,
	qInsertObjectIfNew, qLeaseObject, qLeaseExists, qMarkObject,
}

// prepareHot prepares the hot statements of pool. It runs before a
// transaction begins: preparing through the pool needs a free connection,
// which a goroutine holding one in a transaction must not wait for.
func (s *Store) prepareHot(ctx context.Context, pool *sql.DB) {
	v, _ := s.hot.LoadOrStore(pool, &hotStmts{})
	h := v.(*hotStmts)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	for _, q := range hotQueries {
		// Fails before the migration that creates the tables; then the
		// next transaction tries again, and meanwhile Tx.stmt prepares.
		if _, err := s.prepared(ctx, pool, q); err != nil {
			return
		}
	}
	h.done = true
}

type stmtKey struct {
	db *sql.DB
	q  string
}

// Open opens the store in dir. Unless opts.ReadOnly, it creates the
// directory and database when missing (idempotent) and applies
// migrations; WAL, synchronous=FULL, busy_timeout and foreign keys are set
// on every connection. Write transactions begin IMMEDIATE.
//
// Open reads only the schema version when the store is current, so it is
// cheap enough for every CLI call. A store written by a newer strata
// (higher schema version) is refused.
func Open(dir string, opts Options) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s := &Store{
		dir:  abs,
		path: filepath.Join(abs, DBName),
		ro:   opts.ReadOnly,
		busy: opts.BusyTimeout,
		wsem: make(chan struct{}, 1),
	}
	if s.busy <= 0 {
		s.busy = DefaultBusyTimeout
	}
	if s.ro {
		if _, err := os.Stat(s.path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("open store %s: no %s: %w", abs, DBName, ErrNotFound)
			}
			return nil, fmt.Errorf("open store %s: %w", abs, mapErr(err))
		}
	} else {
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return nil, fmt.Errorf("open store %s: %w", abs, mapErr(err))
		}
		if err := s.create(); err != nil {
			return nil, fmt.Errorf("create store %s: %w", abs, mapErr(err))
		}
	}

	v, err := s.openPool(false)
	if err == nil && opts.ReadOnlyWhenFull && !s.ro && FSFull(abs) {
		// The open worked — the -wal and -shm a close leaves (wal.go)
		// need not grow — but nothing can be written: read-only, as when
		// the open fails below, so that writing commands say "no space
		// left" before they change anything (a half-made freeze, a
		// registry write that fails after the files went).
		s.db.Close()
		s.db = nil
		s.ro, s.full = true, true
		if v, err = s.openPool(false); err != nil {
			s.ro, s.full = false, false // the immutable fallback below
		}
	}
	if err != nil && opts.ReadOnlyWhenFull && FSFull(abs) {
		// A full filesystem: SQLite cannot grow the -shm index a WAL
		// open needs (SQLITE_IOERR_SHMSIZE). immutable=1 reads the
		// database file alone, which is the whole store when no WAL
		// holds transactions not yet copied into it.
		if s.db != nil {
			s.db.Close()
			s.db = nil
		}
		s.ro, s.full = true, true
		if walPending(s.path) {
			// The WAL holds transactions (a process holding the store
			// died before checkpointing them): read them without
			// writing the WAL index (walread.go).
			if v, err = s.openWALReadOnly(); err != nil {
				return nil, fmt.Errorf("open store %s: %w: its write-ahead log holds transactions not yet in %s, which a read-only open could not read: %v",
					abs, &classified{ErrNoSpace, "no space left on " + MountPoint(abs), syscall.ENOSPC}, DBName, err)
			}
		} else {
			v, err = s.openPool(true)
		}
	}
	if err != nil && s.ro && (isCode(err, sqliteCantOpen) || isCode(err, sqliteReadOnly)) && (readOnlyFS(abs) || syscall.Access(abs, 2 /* W_OK */) != nil) {
		// A WAL database on a read-only filesystem cannot be opened
		// mode=ro when its -shm file is absent and cannot be created
		// (SQLITE_CANTOPEN). immutable=1 reads the file without locks or
		// shared memory; it is right when nothing can write the file,
		// which is the case on a read-only filesystem. A directory this
		// user may not write is treated alike: SQLite cannot open its WAL
		// database any other way (SQLITE_READONLY_DIRECTORY), and a
		// reader that wants the store read while its owner writes it
		// should be given write access instead.
		if s.db != nil {
			s.db.Close()
		}
		if walPending(s.path) {
			// immutable=1 would not read the WAL's transactions.
			v, err = s.openWALReadOnly()
		} else {
			v, err = s.openPool(true)
		}
	}
	if err != nil {
		if s.db != nil {
			s.db.Close()
		}
		if !s.ro && isCode(err, sqliteCantOpen) {
			// SQLite says only that it cannot open the file; say why
			// when it is a read-only filesystem or directory.
			if aerr := syscall.Access(abs, 2 /* W_OK */); aerr != nil {
				err = &classified{ErrReadOnly, "store directory is not writable (open the store read-only)", aerr}
			}
		}
		return nil, fmt.Errorf("open store %s: %w", abs, mapErr(err))
	}
	switch {
	case v == schemaVersion:
	case v > schemaVersion:
		s.db.Close()
		return nil, fmt.Errorf("open store %s: schema version %d is newer than this strata understands (%d); upgrade strata", abs, v, schemaVersion)
	case s.ro && v == 0:
		s.db.Close()
		return nil, fmt.Errorf("open store %s: %s is not a strata store (schema version 0): %w", abs, DBName, ErrNotFound)
	case s.ro:
		s.db.Close()
		return nil, fmt.Errorf("open store %s: schema version %d needs an upgrade to %d, which a read-only open cannot do: %w", abs, v, schemaVersion, ErrReadOnly)
	default:
		// A database this strata did not create: make sure of WAL first.
		if _, err := s.db.Exec("PRAGMA journal_mode = WAL"); err != nil {
			s.db.Close()
			return nil, fmt.Errorf("open store %s: journal_mode WAL: %w", abs, mapErr(err))
		}
		if err := s.migrate(context.Background()); err != nil {
			s.db.Close()
			return nil, fmt.Errorf("open store %s: %w", abs, err)
		}
	}
	return s, nil
}

// readOnlyFS reports whether dir is on a filesystem mounted read-only.
func readOnlyFS(dir string) bool {
	var st syscall.Statfs_t
	const stRdonly = 1 // ST_RDONLY, statfs(2)
	return syscall.Statfs(dir, &st) == nil && st.Flags&stRdonly != 0
}

// createPageSize is the page size of new databases; docs/store.md has the
// measurements.
var createPageSize = 8192

// create gives a new database file its fixed settings, which SQLite reads
// only before the first page is written: the page size and
// auto_vacuum=INCREMENTAL (gc.go says why). journal_mode=WAL then writes
// page 1. The pools do not set these on every connection: on an existing
// database PRAGMA auto_vacuum takes the write lock, so each new
// connection would wait for other processes' writes. Two processes
// creating one store at once is harmless: both ask for the same settings.
func (s *Store) create() error {
	if fi, err := os.Stat(s.path); err == nil && fi.Size() > 0 {
		return nil
	}
	// Serialize creators: SQLite answers a second connection's PRAGMA
	// journal_mode=WAL on a file being initialized with SQLITE_BUSY at
	// once, without calling the busy handler.
	dir, err := os.Open(filepath.Dir(s.path))
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := syscall.Flock(int(dir.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(dir.Fd()), syscall.LOCK_UN)
	if fi, err := os.Stat(s.path); err == nil && fi.Size() > 0 {
		return nil
	}
	db, err := sql.Open("sqlite", dsn(s.path, []string{fmt.Sprintf("_busy_timeout=%d", s.busy.Milliseconds())}))
	if err != nil {
		return err
	}
	defer db.Close()
	// One connection, and this order: page_size must precede auto_vacuum,
	// which fixes it, and both must precede journal_mode, which writes
	// page 1. (The driver's DSN keys would run auto_vacuum first.)
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		fmt.Sprintf("PRAGMA page_size = %d", createPageSize),
		"PRAGMA auto_vacuum = INCREMENTAL",
		"PRAGMA journal_mode = WAL",
	} {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// openPool opens s.db and returns the schema version.
func (s *Store) openPool(immutable bool) (int, error) {
	var q []string
	busy := fmt.Sprintf("_busy_timeout=%d", s.busy.Milliseconds())
	if s.ro {
		q = append(q, "mode=ro", busy, "_pragma=query_only(1)")
		if immutable {
			q = append(q, "immutable=1")
		}
	} else {
		q = append(q, rwParams(s.busy, "FULL")...)
	}
	db, err := sql.Open("sqlite", dsn(s.path, q))
	if err != nil {
		return 0, err
	}
	s.immutable = immutable
	configurePool(db)
	s.db = db
	var v int
	err = db.QueryRow("PRAGMA user_version").Scan(&v)
	return v, err
}

func rwParams(busy time.Duration, sync string) []string {
	return []string{
		"_txlock=immediate",
		fmt.Sprintf("_busy_timeout=%d", busy.Milliseconds()),
		// Bound the WAL file that is left after a checkpoint resets it, so
		// that one big import does not keep its size on disk forever.
		"_pragma=journal_size_limit(67108864)",
		"_foreign_keys=1",
		// No _journal_mode=WAL: WAL is a property of the file, set once
		// by create (and checked by Open before a migration); asking for
		// it on every connection cost 0.2 ms a connection.
		"_synchronous=" + sync,
	}
}

// configurePool sets a pool's limits. The number of open connections is
// not limited: a caller holding a connection in View that reads content
// inside it needs a second one, and a limit would deadlock goroutines
// doing that in parallel. Idle connections are kept for reuse, since
// opening one costs about half a millisecond.
func configurePool(db *sql.DB) {
	db.SetMaxOpenConns(0)
	db.SetMaxIdleConns(2*runtime.GOMAXPROCS(0) + 4)
}

// dsn builds a SQLite URI filename for path with params.
func dsn(path string, params []string) string {
	u := url.URL{Scheme: "file", Path: path}
	// url.URL escapes '?' and '#' and '%' in Path, which is what SQLite's
	// URI parser expects; it leaves '/' alone.
	return u.String() + "?" + strings.Join(params, "&")
}

// fastDB returns the synchronous=NORMAL pool, opening it on first use.
func (s *Store) fastDB() (*sql.DB, error) {
	if s.ro {
		return nil, ErrReadOnly
	}
	s.fastOnce.Do(func() {
		db, err := sql.Open("sqlite", dsn(s.path, rwParams(s.busy, "NORMAL")))
		if err != nil {
			s.fastErr = err
			return
		}
		configurePool(db)
		s.fast = db
	})
	return s.fast, s.fastErr
}

// Close closes the database. Writers still open lose their leases only
// when the process exits; call Finish or Abort first.
func (s *Store) Close() error {
	s.stmts.Range(func(k, v any) bool {
		v.(*sql.Stmt).Close()
		return true
	})
	var err error
	if s.fast != nil {
		err = s.fast.Close()
	}
	s.checkpointIfLarge(s.db)
	if e := s.db.Close(); e != nil {
		err = e
	}
	return err
}

// Dir returns the absolute store directory.
func (s *Store) Dir() string { return s.dir }

// Full reports whether the store was opened read-only because its
// filesystem is full (Options.ReadOnlyWhenFull).
func (s *Store) Full() bool { return s.full }

func (s *Store) fullErr() error {
	return &classified{ErrNoSpace, "no space left on " + MountPoint(s.dir) + " (the store is open read-only)", syscall.ENOSPC}
}

// FSFull reports whether the filesystem holding dir has no space left for
// an unprivileged writer (less than one page of 4 KiB free, or no free
// inode).
func FSFull(dir string) bool {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return false
	}
	return uint64(st.Bavail)*uint64(st.Bsize) < 4096 || (st.Files > 0 && st.Ffree == 0)
}

// MountPoint is the mount point of the filesystem holding path (from
// /proc/self/mountinfo: the longest mount point that is a prefix), for
// messages; path itself when unknown.
func MountPoint(path string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return path
	}
	best := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := strings.ReplaceAll(f[4], "\\040", " ")
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return path
	}
	return best
}

// ReadOnly reports whether the store was opened read-only.
func (s *Store) ReadOnly() bool { return s.ro }

// --- migrations ------------------------------------------------------------

// migrations is the ordered list of schema changes; migration i takes the
// schema from version i to i+1 (PRAGMA user_version). Append only: never
// edit a migration that has shipped.
var migrations = [][]string{schemaV1, schemaV2, schemaV3, schemaV4}

// schemaV4: a store that may hold run indexes (kind 6, treeindex.go),
// the form large directories are written in from this version on. No
// table changes, as schemaV3.
var schemaV4 = []string{}

// schemaV3: large directories stored as tree indexes (kind 5,
// treeindex.go). No table changes: the version keeps a strata that does
// not know the kind off a store that may hold it.
var schemaV3 = []string{}

// schemaV2: delta-coded chunks (codec 2, delta.go), indexed so that gc
// finds them without reading the whole table.
var schemaV2 = []string{
	`CREATE INDEX objects_delta ON objects(rowid) WHERE codec = 2`,
}

// schemaVersion is the version this binary writes and understands.
var schemaVersion = len(migrations)

// SchemaVersion is the database schema version this binary writes and
// understands (PRAGMA user_version): a store with a newer one is refused.
func SchemaVersion() int { return schemaVersion }

var schemaV1 = []string{
	// objects: one row per object. A rowid table with a separate unique
	// index on id: ids are random, so a WITHOUT ROWID table keyed by id
	// would insert blobs at random places of the b-tree and split pages
	// holding them; here blobs append in rowid order and only the 40-byte
	// index entries land at random (see docs/store.md for the numbers).
	// data is last so that reading kind or size never reads its overflow
	// pages.
	`CREATE TABLE objects (
		rowid INTEGER PRIMARY KEY,
		id    BLOB    NOT NULL,
		kind  INTEGER NOT NULL,
		codec INTEGER NOT NULL,
		size  INTEGER NOT NULL,
		data  BLOB    NOT NULL
	)`,
	`CREATE UNIQUE INDEX objects_id ON objects(id)`,

	`CREATE TABLE refs (
		name   TEXT PRIMARY KEY,
		commit_id BLOB NOT NULL
	) WITHOUT ROWID`,

	`CREATE TABLE ops (
		seq     INTEGER PRIMARY KEY AUTOINCREMENT,
		time_ns INTEGER NOT NULL,
		kind    TEXT    NOT NULL,
		ref     TEXT    NOT NULL DEFAULT '',
		old     BLOB,
		new     BLOB,
		detail  TEXT    NOT NULL DEFAULT ''
	)`,
	`CREATE INDEX ops_ref ON ops(ref, seq)`,
	`CREATE INDEX ops_time ON ops(time_ns)`,

	`CREATE TABLE workspaces (
		name       TEXT PRIMARY KEY,
		branch     TEXT    NOT NULL,
		base       BLOB,
		dir        TEXT    NOT NULL,
		created_ns INTEGER NOT NULL,
		extra      BLOB
	) WITHOUT ROWID`,

	`CREATE TABLE leases (
		id          INTEGER PRIMARY KEY,
		pid         INTEGER NOT NULL,
		start_ticks INTEGER NOT NULL,
		boot_id     TEXT    NOT NULL,
		pid_ns      TEXT    NOT NULL,
		hostname    TEXT    NOT NULL,
		created_ns  INTEGER NOT NULL,
		purpose     TEXT    NOT NULL
	)`,
	// lease_objects: objects a live Writer wrote or retained. oid is the
	// objects rowid; no foreign key on it, since gc never deletes an object
	// a live lease holds and a dead lease's rows go first.
	`CREATE TABLE lease_objects (
		lease_id INTEGER NOT NULL REFERENCES leases(id) ON DELETE CASCADE,
		oid      INTEGER NOT NULL,
		PRIMARY KEY (lease_id, oid)
	) WITHOUT ROWID`,

	`CREATE TABLE stat_roots (
		id          INTEGER PRIMARY KEY,
		root        TEXT    NOT NULL UNIQUE,
		recorded_ns INTEGER NOT NULL
	)`,
	`CREATE TABLE stat_cache (
		root_id  INTEGER NOT NULL REFERENCES stat_roots(id) ON DELETE CASCADE,
		path     TEXT    NOT NULL,
		dev      INTEGER NOT NULL,
		ino      INTEGER NOT NULL,
		mode     INTEGER NOT NULL,
		size     INTEGER NOT NULL,
		mtime_ns INTEGER NOT NULL,
		ctime_ns INTEGER NOT NULL,
		content  BLOB,
		PRIMARY KEY (root_id, path)
	) WITHOUT ROWID`,
}

// migrate brings the schema to schemaVersion in one IMMEDIATE
// transaction. Several processes may race here; the version is re-read
// under the write lock, so each migration runs once.
func (s *Store) migrate(ctx context.Context) error {
	return s.update(ctx, s.db, func(tx *Tx) error {
		var v int
		if err := tx.tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return mapErr(err)
		}
		if v > schemaVersion {
			return fmt.Errorf("schema version %d is newer than this strata understands (%d); upgrade strata", v, schemaVersion)
		}
		for ; v < schemaVersion; v++ {
			for _, q := range migrations[v] {
				if _, err := tx.tx.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("migrate to schema version %d: %w", v+1, mapErr(err))
				}
			}
		}
		// PRAGMA takes no parameters; v is an int.
		if _, err := tx.tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return fmt.Errorf("set schema version: %w", mapErr(err))
		}
		return nil
	})
}

// --- transactions ----------------------------------------------------------

// Tx is a transaction: a read-only snapshot (View) or an IMMEDIATE write
// transaction (Update). It is valid only inside the callback it was given
// to and is not safe for concurrent use.
type Tx struct {
	s     *Store
	ctx   context.Context
	tx    *sql.Tx
	pool  *sql.DB
	write bool
	stmts map[string]*sql.Stmt
}

// Update runs fn in a write transaction (BEGIN IMMEDIATE). fn's error, or
// a panic, rolls it back; otherwise it commits durably. fn must not call
// Update, NewWriter or a Writer's methods: this process's write
// transactions take turns, and fn holds the turn.
func (s *Store) Update(ctx context.Context, fn func(tx *Tx) error) error {
	if s.full {
		return fmt.Errorf("update store %s: %w", s.dir, s.fullErr())
	}
	if s.ro {
		return fmt.Errorf("update store %s: opened read-only: %w", s.dir, ErrReadOnly)
	}
	return s.update(ctx, s.db, fn)
}

// View runs fn in a read-only snapshot of the store.
func (s *Store) View(ctx context.Context, fn func(tx *Tx) error) error {
	s.prepareHot(ctx, s.db)
	t, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin read: %w", mapErr(err))
	}
	tx := &Tx{s: s, ctx: ctx, tx: t, pool: s.db}
	defer t.Rollback()
	return fn(tx)
}

func (s *Store) lockWrites(ctx context.Context) error {
	select {
	case s.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) unlockWrites() { <-s.wsem }

func (s *Store) update(ctx context.Context, pool *sql.DB, fn func(tx *Tx) error) (err error) {
	if err := s.lockWrites(ctx); err != nil {
		return err
	}
	defer s.unlockWrites()
	s.prepareHot(ctx, pool)
	t, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin write: %w", mapErr(err))
	}
	tx := &Tx{s: s, ctx: ctx, tx: t, pool: pool, write: true}
	done := false
	defer func() {
		if !done {
			t.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	done = true
	if err := t.Commit(); err != nil {
		if isCode(err, sqliteIOErr) {
			// SQLite does not say which file or errno: name the store.
			return fmt.Errorf("commit to %s: %w (the disk or filesystem failed; nothing of this transaction was stored)", s.path, mapErr(err))
		}
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	return nil
}

// stmt returns q prepared on the transaction's connection: a hot
// statement as prepared on that connection before, any other once per
// transaction. (Preparing through the pool here could wait for a second
// connection while this one is held.)
func (tx *Tx) stmt(q string) (*sql.Stmt, error) {
	if st, ok := tx.stmts[q]; ok {
		return st, nil
	}
	var st *sql.Stmt
	if ps, ok := tx.s.stmts.Load(stmtKey{tx.pool, q}); ok {
		st = tx.tx.StmtContext(tx.ctx, ps.(*sql.Stmt))
	} else {
		var err error
		if st, err = tx.tx.PrepareContext(tx.ctx, q); err != nil {
			return nil, mapErr(err)
		}
	}
	if tx.stmts == nil {
		tx.stmts = make(map[string]*sql.Stmt)
	}
	tx.stmts[q] = st
	return st, nil
}

// prepared returns q prepared on the pool, for statements outside
// transactions.
func (s *Store) prepared(ctx context.Context, pool *sql.DB, q string) (*sql.Stmt, error) {
	k := stmtKey{pool, q}
	if st, ok := s.stmts.Load(k); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := pool.PrepareContext(ctx, q)
	if err != nil {
		return nil, mapErr(err)
	}
	if prev, loaded := s.stmts.LoadOrStore(k, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

func (tx *Tx) exec(q string, args ...any) (sql.Result, error) {
	if !tx.write {
		return nil, fmt.Errorf("write in a read-only transaction: %w", ErrReadOnly)
	}
	st, err := tx.stmt(q)
	if err != nil {
		return nil, err
	}
	r, err := st.ExecContext(tx.ctx, args...)
	return r, mapErr(err)
}

func (tx *Tx) queryRow(q string, args ...any) *sql.Row {
	st, err := tx.stmt(q)
	if err != nil {
		// A *sql.Row cannot be built with an error; run the query
		// unprepared so that the same error surfaces from Scan.
		return tx.tx.QueryRowContext(tx.ctx, q, args...)
	}
	return st.QueryRowContext(tx.ctx, args...)
}

func (tx *Tx) query(q string, args ...any) (*sql.Rows, error) {
	st, err := tx.stmt(q)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(tx.ctx, args...)
	return rows, mapErr(err)
}

// --- errors ----------------------------------------------------------------

// Primary SQLite result codes (sqlite3.h).
const (
	sqliteBusy     = 5
	sqliteReadOnly = 8
	sqliteIOErr    = 10
	sqliteCorrupt  = 11
	sqliteFull     = 13
	sqliteCantOpen = 14
	sqliteNotADB   = 26
)

// classified is an error put in one of the package's categories while
// keeping the original for the message and for errors.As.
type classified struct {
	kind error
	msg  string // what to say instead of kind's text, if set
	err  error
}

func (e *classified) Error() string {
	if e.msg != "" {
		return e.msg + ": " + e.err.Error()
	}
	return e.kind.Error() + ": " + e.err.Error()
}
func (e *classified) Unwrap() []error { return []error{e.kind, e.err} }

func isCode(err error, code int) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == code
}

// mapErr puts SQLite and system errors into the categories callers branch
// on: a full disk is ErrNoSpace, a read-only file, filesystem or missing
// permission is ErrReadOnly, a damaged database file is ErrCorrupt.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var c *classified
	if errors.As(err, &c) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteFull:
			return &classified{ErrNoSpace, "", err}
		case sqliteReadOnly:
			return &classified{ErrReadOnly, "", err}
		case sqliteCorrupt, sqliteNotADB:
			return &classified{ErrCorrupt, "database file damaged (see strata fsck)", err}
		case sqliteBusy:
			return fmt.Errorf("store busy: another process held the write lock too long: %w", err)
		}
		return err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOSPC, syscall.EDQUOT:
			return &classified{ErrNoSpace, "", err}
		case syscall.EROFS, syscall.EACCES, syscall.EPERM:
			return &classified{ErrReadOnly, "", err}
		}
	}
	return err
}
