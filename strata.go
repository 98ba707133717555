// Package strata is the public Go API of strata: isolated, writable copies
// of a project for AI agents, test runs and experiments, without root,
// without a daemon and without copying a file.
//
// Terms (see docs/ and DESIGN.md):
//
//   - store: one directory (the "home") holding strata.db and derived caches.
//     The database is the source of truth.
//   - commit: an immutable snapshot of a directory tree, content-addressed.
//   - branch: a named pointer to a commit, moved only by compare-and-swap.
//   - ref: how a user names a commit: a branch name, a commit id or a unique
//     prefix of one (at least 4 hex digits), optionally followed by ~N
//     (N-th first parent) or ^ (first parent).
//   - workspace: a writable view of a commit bound to a branch.
//
// A Repo is the handle on one store. Its methods are safe for concurrent
// use, and many processes may use one store at once.
package strata

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/store"
)

// Errors callers branch on. They are the store's categories, re-exported so
// that users of the API need not import store.
var (
	ErrNotFound    = store.ErrNotFound
	ErrExists      = store.ErrExists
	ErrConflict    = store.ErrConflict
	ErrCorrupt     = store.ErrCorrupt
	ErrInvalidName = store.ErrInvalidName
	ErrReadOnly    = store.ErrReadOnly
	ErrNoSpace     = store.ErrNoSpace
	// ErrNoStore: the home directory holds no store (run `strata init`).
	ErrNoStore = errors.New("no store")
	// ErrUnsupported: the kernel or user lacks a feature (see Doctor).
	ErrUnsupported = errors.ErrUnsupported
	// ErrInvalidArgument: bad input other than a name (a flag value, a
	// batch job, a patch, a range). Errors in this category carry their
	// whole explanation; the sentinel adds no text to them (invalidf).
	ErrInvalidArgument = workspace.ErrInvalidArgument
)

// invalidf returns an ErrInvalidArgument error with the formatted message,
// without a ": invalid argument" suffix.
func invalidf(format string, args ...any) error { return workspace.Invalidf(format, args...) }

// Repo is an open store. The database is opened on first use, so that
// commands that only talk to a running workspace (exec into a live keeper)
// never pay for it.
type Repo struct {
	home     string
	readOnly bool
	// layout names every path of the store; ws runs its workspaces'
	// lifecycle (internal/workspace).
	layout layout.Layout
	ws     *workspace.Manager

	once  sync.Once
	st    *store.Store
	stErr error

	// pending writers hold leases on objects that results handed out
	// (a workspace diff's contents) until Close.
	pending []*store.Writer

	settingsOnce sync.Once
	settings     Settings
	settingsErr  error
}

// OpenOptions tune Open.
type OpenOptions struct {
	// Create makes the store when it does not exist (as Init does).
	Create bool
	// ReadOnly opens without write locks: for inspection (log, show,
	// fsck) of a store on a read-only filesystem.
	ReadOnly bool
}

// DefaultHome is $STRATA_HOME, then $XDG_DATA_HOME/strata, then
// ~/.local/share/strata.
func DefaultHome() (string, error) { return layout.DefaultHome() }

// Init creates the store at home if it does not exist yet (idempotent) and
// opens it.
func Init(home string) (*Repo, error) {
	return Open(home, OpenOptions{Create: true})
}

// Open opens the store at home. The database itself is opened lazily, on
// the first call that needs it.
func Open(home string, opts OpenOptions) (*Repo, error) {
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, err
	}
	r := newRepo(abs, opts.ReadOnly)
	if opts.Create {
		if _, err := r.db(); err != nil {
			return nil, err
		}
		return r, nil
	}
	if _, err := os.Stat(r.layout.DB()); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w (run `strata init`, or pass --home)", abs, ErrNoStore)
	}
	return r, nil
}

// newRepo is the handle on the store at home (absolute), not opened yet.
func newRepo(home string, readOnly bool) *Repo {
	r := &Repo{home: home, readOnly: readOnly, layout: layout.New(home)}
	r.ws = &workspace.Manager{
		Layout: r.layout,
		DB:     r.db,
		Settings: func() (workspace.Settings, error) {
			s, err := r.Settings()
			return workspace.Settings{MaxLayers: s.MaxLayers, ViewRO: s.ViewRO, ViewRW: s.ViewRW}, err
		},
		Source: func(source string) (string, []workspace.Bind) { return sourceDir(source), gitBinds(source) },
	}
	return r
}

// db returns the store, opening it on first use.
func (r *Repo) db() (*store.Store, error) {
	r.once.Do(func() {
		r.st, r.stErr = store.Open(r.home, store.Options{ReadOnly: r.readOnly, ReadOnlyWhenFull: true})
	})
	return r.st, r.stErr
}

// Close releases the store.
// reopen closes the store and opens it again: after a command freed space
// on a full filesystem, the store opened read-only (store.Store.Full) may
// be writable now.
func (r *Repo) reopen() (*store.Store, error) {
	r.once.Do(func() {})
	if r.st != nil {
		_ = r.st.Close()
	}
	r.st, r.stErr = store.Open(r.home, store.Options{ReadOnly: r.readOnly, ReadOnlyWhenFull: true})
	return r.st, r.stErr
}

// noSpace is the error of an operation that needs to write a store whose
// filesystem is full: where, and what frees space.
func (r *Repo) noSpace(what string) error {
	return fmt.Errorf("%s: no space left on %s, which holds the store; free space there: `strata ws rm -f NAME` removes a workspace and its changes, `strata ws stop NAME` releases files deleted inside it, `strata gc --prune 0s` drops unreferenced data: %w",
		what, store.MountPoint(r.home), ErrNoSpace)
}

func (r *Repo) Close() error {
	r.once.Do(func() {}) // no open after Close
	if r.st == nil {
		return nil
	}
	for _, w := range r.pending {
		_ = w.Abort()
	}
	return r.st.Close()
}

// Home is the store directory.
func (r *Repo) Home() string { return r.home }

// Store exposes the underlying object store, for tools and tests.
func (r *Repo) Store() (*store.Store, error) { return r.db() }

// view runs fn in a read transaction.
func (r *Repo) view(ctx context.Context, fn func(tx *store.Tx) error) error {
	st, err := r.db()
	if err != nil {
		return err
	}
	return st.View(ctx, fn)
}

// update runs fn in a write transaction.
func (r *Repo) update(ctx context.Context, fn func(tx *store.Tx) error) error {
	st, err := r.db()
	if err != nil {
		return err
	}
	return st.Update(ctx, fn)
}
