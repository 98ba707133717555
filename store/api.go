package store

// Types of the contract of package store as the other packages use it
// (see docs/store.md). The methods are implemented in db.go (Open, Update,
// View), objects.go, refs.go, writer.go, read.go, statcache.go, gc.go and
// fsck.go.

import "time"

// Options tune Open. The zero value is the durable default.
type Options struct {
	// ReadOnly opens the database without taking write locks and without
	// running migrations (fsck, show on a read-only filesystem).
	ReadOnly bool
	// BusyTimeout is how long a statement waits for another process's
	// write lock. Zero means the default (60 s).
	BusyTimeout time.Duration
	// ReadOnlyWhenFull: when the store's filesystem is full and the
	// database cannot be opened (SQLite cannot grow its -shm index or
	// write at all), open it read-only instead — immutable, without the
	// WAL index, when no WAL holds unapplied transactions — so that
	// reading commands keep working; Full then reports it, and writes
	// fail with ErrNoSpace.
	ReadOnlyWhenFull bool
}

// Ref is a branch.
type Ref struct {
	Name   string `json:"name"`
	Commit ID     `json:"commit"`
}

// Op is one entry of the operation log.
type Op struct {
	Seq    int64  `json:"seq"`
	TimeNs int64  `json:"time_ns"`
	Kind   string `json:"kind"` // import, commit, branch-create, branch-delete, promote, reset, gc, ...
	Ref    string `json:"ref,omitempty"`
	Old    ID     `json:"old,omitempty"`
	New    ID     `json:"new,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Workspace is a registered workspace. Fields beyond these live in Extra
// (JSON) so that later features don't need a migration for each field.
type Workspace struct {
	Name      string `json:"name"`
	Branch    string `json:"branch"`
	Base      ID     `json:"base"`       // the commit the upperdir sits on
	Dir       string `json:"dir"`        // where upper/ and work/ live
	CreatedNs int64  `json:"created_ns"` //
	Extra     []byte `json:"extra,omitempty"`
}

// StatEntry is what the stat cache remembers about a file whose content was
// read: if a later import sees the same stat, it reuses Content without
// reading the file.
type StatEntry struct {
	Dev, Ino uint64
	Mode     uint32
	Size     int64
	MtimeNs  int64
	CtimeNs  int64
	Content  ID
}

// WriterStats counts what a Writer did.
type WriterStats struct {
	NewObjects    int64 // objects inserted
	NewBytes      int64 // bytes stored (after compression) for them
	ReusedObjects int64 // objects that already existed
	ContentBytes  int64 // bytes of content passed to WriteContent/WriteBytes
	// Repaired lists damaged objects rewritten (Writer.Repair).
	Repaired []ID `json:"-"`
}

// GCOptions tune a collection.
type GCOptions struct {
	// Prune keeps commits named by the operation log within this window
	// as roots. Zero keeps none.
	Prune time.Duration
	// DryRun computes what would be removed and removes nothing.
	DryRun bool
	// Progress, if set, is called with (phase, done, total).
	Progress func(phase string, done, total int64)
}

// GCResult reports a collection.
type GCResult struct {
	Marked         int64 `json:"marked"`
	Removed        int64 `json:"removed"`
	RemovedBytes   int64 `json:"removed_bytes"`
	StaleLeases    int64 `json:"stale_leases"`
	StatCacheFreed int64 `json:"stat_cache_freed"`
	DryRun         bool  `json:"dry_run"`
}

// FsckReport lists damage. OK is true when Problems is empty.
type FsckReport struct {
	Objects  int64     `json:"objects"`
	Refs     int64     `json:"refs"`
	Problems []Problem `json:"problems"`
	// StaleLeases counts leases of dead processes; gc removes them. They
	// are not damage.
	StaleLeases int64 `json:"stale_leases"`
	// Info holds notes that are not damage, such as stale leases.
	Info []string `json:"info,omitempty"`
}

// OK reports whether fsck found nothing wrong.
func (r *FsckReport) OK() bool { return len(r.Problems) == 0 }

// Problem is one piece of damage and what it affects.
type Problem struct {
	Object ID     `json:"object,omitempty"`
	Kind   string `json:"kind"` // corrupt, missing, bad-ref, database, ...
	Detail string `json:"detail"`
	// Affected names the refs and workspaces that reach the damaged
	// object: what is lost.
	Affected []string `json:"affected,omitempty"`
}
