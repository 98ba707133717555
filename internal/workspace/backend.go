package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/store"
)

// Backend is what differs between the ways a workspace's writable tree is
// made (Record.Backend; DESIGN.md, "backend"). The verbs — which commits,
// which branches, which registry transactions — are the same for every
// backend; they reach the workspace's files only through this interface.
// Overlay (overlay.go) and reflink and copy (plain.go: a cloned tree in
// the workspace directory, a stat-index scan for Read) implement it.
type Backend interface {
	// Prepare lays out a new workspace's writable tree while its state
	// directory is being built in tmp (renamed to rec.Dir once complete),
	// and records its paths in rec. Nothing is registered yet.
	Prepare(ctx context.Context, rec *Record, tmp string) error
	// Populate makes the base commit readable for the workspace (the
	// overlay's layer stack) once its directory is in place, so that a
	// create fully succeeds or leaves nothing registered.
	Populate(ctx context.Context, rec *Record) error
	// Start starts the workspace's keeper (the spec built from rec).
	Start(ctx context.Context, rec *Record) (*Keeper, error)
	// Read returns the workspace's tree as it is now, written through wr:
	// the changes since its committed state applied to its base.
	Read(ctx context.Context, rec *Record, wr *store.Writer, opts ReadOptions) (*Tree, error)
	// Committed records that commit base was made from t (what Read read):
	// the committed state, after the commit's transaction has landed.
	Committed(rec *Record, base store.ID, t *Tree)
	// Uncommitted reports whether the workspace holds anything its base
	// does not, and how many bytes of regular files that is.
	Uncommitted(rec *Record) (dirty bool, bytes int64)
	// Reset prepares a fresh writable tree for the workspace over a base
	// whose tree is baseTree, holding content (a tree) — or clean when
	// content is zero. The caller stops the keeper, records the switch in
	// one registry transaction (Switch.Apply), and then calls Switch.Done
	// (or Switch.Discard when the transaction failed).
	Reset(ctx context.Context, rec *Record, baseTree, content store.ID) (*Switch, error)
	// DropChanges deletes the workspace's changes (its writable tree's
	// own data), keeping its state directory: to free space before the
	// registry can be written.
	DropChanges(rec *Record) error
	// Remove deletes everything the workspace has on disk.
	Remove(rec *Record) error
}

// Backend returns the backend of workspace rec.
func (m *Manager) Backend(rec *Record) (Backend, error) {
	switch rec.Backend {
	case BackendOverlay, "":
		return overlay{m}, nil
	case BackendReflink, BackendCopy:
		return m.plainBackend(rec.Backend), nil
	}
	return nil, fmt.Errorf("workspace %q: backend %q: not known to this strata (made by a newer one?): %w", rec.Name, rec.Backend, ErrUnsupported)
}

// Switch is a workspace's move to a fresh writable tree (Backend.Reset):
// made beside the current one, recorded in one registry transaction, and
// only then is the old one removed. A failure, or a kill at any instant,
// leaves either the old record with the old tree intact or the new record
// with the new tree (docs/workspaces.md, "Reset: decide, then change").
type Switch struct {
	Upper, Work       string // the new tree
	oldUpper, oldWork string
	// A project on an environment's fresh root upper (switchRoot).
	rootUpper, rootWork, oldRootUpper, oldRootWork string
}

// Apply points rec at the new tree over base (inside the transaction).
func (s *Switch) Apply(rec *Record, base store.ID) {
	rec.Base = base
	rec.MountBase = base.String()
	rec.Upper, rec.Work = s.Upper, s.Work
	if s.rootUpper != "" && rec.Root != nil {
		rec.Root.Upper, rec.Root.Work = s.rootUpper, s.rootWork
	}
}

// Done removes the old tree, which the registry no longer names.
func (s *Switch) Done() {
	for _, d := range []string{s.oldUpper, s.oldWork, s.oldRootUpper, s.oldRootWork} {
		if d != "" {
			_ = RemoveAll(d)
		}
	}
}

// Discard removes the new tree: the transaction did not land.
func (s *Switch) Discard() {
	for _, d := range []string{s.Upper, s.Work, s.rootUpper, s.rootWork} {
		if d != "" {
			_ = RemoveAll(d)
		}
	}
}

// Unchanged reports whether cur (read again inside a transaction) is the
// workspace as rec was read: the same base and the same writable tree.
// Otherwise another process committed or reset it meanwhile.
func (rec *Record) Unchanged(cur *Record) bool {
	return cur.Base == rec.Base && filepath.Base(cur.Upper) == filepath.Base(rec.Upper)
}

// Create lays out the state directory of a new workspace rec atomically
// (a temporary directory renamed into place) with its backend's writable
// tree; undo removes it again. The caller then calls Populate, and
// registers rec (Save) last.
func (m *Manager) Create(ctx context.Context, rec *Record) (undo func(), err error) {
	b, err := m.Backend(rec)
	if err != nil {
		return nil, err
	}
	parent := m.Layout.Workspaces()
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, layout.TempPrefix+rec.Name+"-")
	if err != nil {
		return nil, err
	}
	rec.Dir = m.Layout.Workspace(rec.Name)
	if err := b.Prepare(ctx, rec, tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(tmp, layout.Merged), 0o700); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, rec.Dir); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, fs.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
			return nil, fmt.Errorf("workspace %q: %s exists (left by a crash? remove it with `strata ws rm --force %s`): %w", rec.Name, rec.Dir, rec.Name, store.ErrExists)
		}
		return nil, err
	}
	return func() { _ = b.Remove(rec) }, nil
}

// Populate is rec's Backend.Populate.
func (m *Manager) Populate(ctx context.Context, rec *Record) error {
	b, err := m.Backend(rec)
	if err != nil {
		return err
	}
	return b.Populate(ctx, rec)
}

// Read is rec's Backend.Read.
func (m *Manager) Read(ctx context.Context, rec *Record, wr *store.Writer, opts ReadOptions) (*Tree, error) {
	b, err := m.Backend(rec)
	if err != nil {
		return nil, err
	}
	return b.Read(ctx, rec, wr, opts)
}

// Committed is rec's Backend.Committed.
func (m *Manager) Committed(rec *Record, base store.ID, t *Tree) {
	if b, err := m.Backend(rec); err == nil {
		b.Committed(rec, base, t)
	}
}

// Uncommitted is rec's Backend.Uncommitted; a workspace of an unknown
// backend counts as dirty.
func (m *Manager) Uncommitted(rec *Record) (bool, int64) {
	b, err := m.Backend(rec)
	if err != nil {
		return true, 0
	}
	return b.Uncommitted(rec)
}

// Reset is rec's Backend.Reset.
func (m *Manager) Reset(ctx context.Context, rec *Record, baseTree, content store.ID) (*Switch, error) {
	b, err := m.Backend(rec)
	if err != nil {
		return nil, err
	}
	// The keeper will mount another tree: its spec file goes first, so
	// that no front starts the old one meanwhile (a failed reset only
	// costs the next exec a trip through strata-core).
	InvalidateSpec(rec.Dir)
	return b.Reset(ctx, rec, baseTree, content)
}

// DropChanges is rec's Backend.DropChanges.
func (m *Manager) DropChanges(rec *Record) error {
	b, err := m.Backend(rec)
	if err != nil {
		return err
	}
	return b.DropChanges(rec)
}

// Remove is rec's Backend.Remove.
func (m *Manager) Remove(rec *Record) error {
	b, err := m.Backend(rec)
	if err != nil {
		return err
	}
	return b.Remove(rec)
}
