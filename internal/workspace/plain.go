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
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// The reflink and copy backends (docs/workspaces.md, "Backends"): the
// workspace is a plain directory holding its base commit's whole tree —
// cloned from the layer cache with FICLONE (reflink: every block shared,
// on XFS or Btrfs; on Btrfs a snapshot of the clone cache's subvolume),
// or copied (copy: any filesystem, every byte written again). Nothing is
// mounted over it, so reads are native and renaming a directory of the
// base just works. What it holds that its base does not is found by a
// stat-index scan (snapshot.ScanWorkspace: one lstat per entry, content
// read only where the stat changed).
//
// The record's fields keep their overlay names: Upper is the tree
// (DIR/upper, upper.RANDOM after a reset; a subvolume on Btrfs), Work a
// directory beside it holding the tree's stat index (work/index) and
// the private temporary directory of commands run without namespaces
// (work/tmp). So the layout's names, gc's sweep of replaced trees and a
// reset's switch are the overlay's.
//
// Commands run in the workspace's namespaces where user namespaces work
// (a keeper that binds the tree on the project's path: nsexec.Spec.Plain),
// and without any (nsexec.RunNoNS, fenced by Landlock and seccomp) where
// they are denied.

// Backends besides BackendOverlay.
const (
	BackendReflink = "reflink"
	BackendCopy    = "copy"
	// BackendAuto chooses at create (ChooseBackend): overlay where user
	// namespaces work, else reflink where the store's filesystem can
	// clone, else copy.
	BackendAuto = "auto"
)

// IsPlain reports whether backend makes plain directories (reflink, copy).
func IsPlain(backend string) bool { return backend == BackendReflink || backend == BackendCopy }

// Names in a plain workspace's work directory.
const (
	plainIndexName = "index"         // the tree's stat index
	plainTmpName   = "tmp"           // TMPDIR of commands run without namespaces
	plainLockName  = "populate.lock" // makes one process at a time build a missing tree
)

func plainIndex(rec *Record) string { return filepath.Join(rec.Work, plainIndexName) }

// PlainTmp is the private temporary directory of a plain workspace's
// commands run without namespaces.
func PlainTmp(rec *Record) string { return filepath.Join(rec.Work, plainTmpName) }

// plain is the reflink or copy backend.
type plain struct {
	m    *Manager
	name string
	mode snapshot.CloneMode
}

func (m *Manager) plainBackend(name string) plain {
	mode := snapshot.CloneReflink
	if name == BackendCopy {
		mode = snapshot.CloneCopy
	}
	return plain{m: m, name: name, mode: mode}
}

// CloneCache is the store's clone cache (Btrfs subvolumes of commits'
// trees).
func (m *Manager) CloneCache() *snapshot.CloneCache {
	return snapshot.NewCloneCache(m.Layout.Clones())
}

func (p plain) Prepare(ctx context.Context, rec *Record, tmp string) error {
	if rec.Tmpfs {
		return Invalidf("--tmpfs keeps an overlay's changes on /dev/shm; a %s workspace is a clone on the store's filesystem", p.name)
	}
	if rec.SubIDs {
		return fmt.Errorf("--subids with the %s backend: subordinate ids are mapped in a user namespace, which a %s workspace may run without; use the overlay backend: %w", p.name, p.name, ErrUnsupported)
	}
	if err := mkdirs(0o700, filepath.Join(tmp, layout.Work)); err != nil {
		return err
	}
	rec.Upper, rec.Work = filepath.Join(rec.Dir, layout.Upper), filepath.Join(rec.Dir, layout.Work)
	return nil
}

// Populate makes the tree: the whole base commit, before the workspace
// is registered.
func (p plain) Populate(ctx context.Context, rec *Record) error {
	_, err := p.makeTree(ctx, rec.Base, rec.Upper, rec.Work)
	return err
}

// TreeInfo says how a plain workspace's tree was made.
type TreeInfo struct {
	// Method is "snapshot" (a Btrfs snapshot of the clone cache),
	// "reflink" (FICLONE of every file) or "copy".
	Method string `json:"method"`
	// Built: the clone cache's entry was built for it (a snapshot).
	Built bool `json:"built,omitempty"`
	// Clone is what the clone did (the cache's entry's, when Built).
	Clone *snapshot.CloneResult `json:"clone,omitempty"`
}

// makeTree writes commit's tree into dir (which must not exist) with its
// stat index in work: a snapshot of the clone cache where the store is
// on Btrfs (reflink), otherwise a Clone of the layer stack. The layer
// lock is held shared, so that gc evicts no layer or cache entry being
// read.
func (p plain) makeTree(ctx context.Context, commit store.ID, dir, work string) (*TreeInfo, error) {
	st, err := p.m.DB()
	if err != nil {
		return nil, err
	}
	lo, err := p.m.layerOptions()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	unlock, err := p.m.LayerLock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	opts := snapshot.CloneOptions{Mode: p.mode, Layers: lo, Index: filepath.Join(work, plainIndexName)}
	if p.mode == snapshot.CloneReflink {
		if cc := p.m.CloneCache(); cc.Usable(dir) {
			res, err := cc.Snapshot(ctx, st, p.m.LayerCache(), commit, dir, opts.Index, opts)
			if err != nil {
				return nil, p.treeError(err)
			}
			return &TreeInfo{Method: "snapshot", Built: res.Built, Clone: res.Clone}, nil
		}
	}
	res, err := snapshot.Clone(ctx, st, p.m.LayerCache(), commit, dir, opts)
	if err != nil {
		return nil, p.treeError(err)
	}
	return &TreeInfo{Method: res.Method, Clone: res}, nil
}

func (p plain) treeError(err error) error {
	if p.mode == snapshot.CloneReflink && errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("%w; the reflink backend needs the store on XFS (reflink=1) or Btrfs — use --backend copy (every workspace then copies the tree) or overlay", err)
	}
	return err
}

// ensureTree makes a missing tree: after a reset (Reset leaves the new
// tree to be made from the new base on first use), or a tree lost with
// the machine's crash before a create finished. One process at a time.
func (p plain) ensureTree(ctx context.Context, rec *Record) error {
	if _, err := os.Lstat(rec.Upper); err == nil {
		return nil
	}
	if err := os.MkdirAll(rec.Work, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(rec.Work, plainLockName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("workspace %q: lock: %w", rec.Name, err)
	}
	if _, err := os.Lstat(rec.Upper); err == nil {
		return nil // made by another process meanwhile
	}
	if _, err := p.makeTree(ctx, rec.Base, rec.Upper, rec.Work); err != nil {
		return fmt.Errorf("workspace %q: making its tree: %w", rec.Name, err)
	}
	return nil
}

// EnsureTree makes workspace rec's tree if it is a plain workspace whose
// tree is missing (after a reset); overlay workspaces have nothing to do.
func (m *Manager) EnsureTree(ctx context.Context, rec *Record) error {
	if !IsPlain(rec.Backend) {
		return nil
	}
	return m.plainBackend(rec.Backend).ensureTree(ctx, rec)
}

// plainTarget is where a plain workspace appears in its keeper's
// namespace: the directory its commit came from when that exists (as an
// overlay is mounted), else the tree itself.
func (m *Manager) plainTarget(rec *Record) (string, []Bind) {
	dir, binds := m.source(rec.Source)
	if dir != "" && filepath.IsAbs(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return filepath.Clean(dir), binds
		}
	}
	return rec.Upper, binds
}

// Start starts a keeper that binds the tree on its target: the
// workspace's namespaces, with no overlay. Where user namespaces are
// denied it fails with nsexec.ErrNoUserNS; Exec then runs the command
// without (execPlain).
func (p plain) Start(ctx context.Context, rec *Record) (*Keeper, error) {
	if err := p.ensureTree(ctx, rec); err != nil {
		return nil, err
	}
	target, binds := p.m.plainTarget(rec)
	vp, err := p.m.viewBinds(os.Environ(), nil)
	if err != nil {
		return nil, err
	}
	return nsexec.StartKeeper(ctx, nsexec.Spec{
		Name: rec.Name, Dir: rec.Dir, Target: target, Plain: rec.Upper,
		Binds: binds, View: vp.Binds, SubIDs: rec.SubIDs,
	})
}

// Read scans the tree against its stat index (its processes stopped, as
// for an overlay) and applies what changed to the tree the index holds:
// the workspace's tree as it is now. An index that is missing, damaged
// or of another device makes the scan take every entry as new: the tree
// is read whole, as an import would.
func (p plain) Read(ctx context.Context, rec *Record, wr *store.Writer, opts ReadOptions) (*Tree, error) {
	st, err := p.m.DB()
	if err != nil {
		return nil, err
	}
	var base *store.Commit
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		base, err = tx.Commit(rec.Base)
		return err
	}); err != nil {
		return nil, err
	}
	out := &Tree{Base: base}
	if _, err := os.Lstat(rec.Upper); errors.Is(err, fs.ErrNotExist) {
		// Reset and not used since: the tree is its base's.
		out.Tree, out.Delta = base.Tree, true
		out.Result = &snapshot.ApplyResult{Tree: base.Tree, Stats: base.Stats}
		return out, nil
	}
	thaw, err := nsexec.Freeze(rec.Dir)
	if err != nil {
		return nil, err
	}
	defer thaw()
	scan, idx, err := p.scan(ctx, st, rec, opts.Warn)
	if err != nil {
		return nil, err
	}
	var stats *store.CommitStats
	if idx.Base == base.Tree {
		stats = &base.Stats
	}
	out.Delta = idx.Base == base.Tree
	if len(scan.Changes) == 0 && stats != nil {
		out.Tree = base.Tree
		out.Result = &snapshot.ApplyResult{Tree: base.Tree, Stats: base.Stats}
	} else {
		res, err := snapshot.ApplyUpper(ctx, st, wr, idx.Base, scan.Changes, snapshot.ApplyOptions{
			Warn:           opts.Warn,
			BaseStats:      stats,
			DeferStatCache: opts.DeferStatCache,
			Previous:       base.Tree, // delta bases: the last commit's versions
		})
		if err != nil {
			return nil, fmt.Errorf("workspace %q: %w", rec.Name, err)
		}
		out.Tree, out.Result = res.Tree, res
	}
	out.plain = scan
	return out, nil
}

// scan compares the tree with its stat index; an unusable index gives an
// empty one (everything is read).
func (p plain) scan(ctx context.Context, st *store.Store, rec *Record, warn func(path, msg string)) (*snapshot.ScanResult, *snapshot.StatIndex, error) {
	idx, err := snapshot.ReadIndex(plainIndex(rec))
	var scan *snapshot.ScanResult
	if err == nil {
		scan, err = snapshot.ScanWorkspace(ctx, st, rec.Upper, idx)
		if err != nil && !errors.Is(err, snapshot.ErrIndexStale) {
			return nil, nil, fmt.Errorf("workspace %q: %w", rec.Name, err)
		}
	}
	if err != nil {
		if warn != nil {
			warn("", fmt.Sprintf("the stat index of the workspace is not usable (%v): reading its whole tree", err))
		}
		if idx, err = snapshot.EmptyIndex(rec.Upper); err != nil {
			return nil, nil, err
		}
		if scan, err = snapshot.ScanWorkspace(ctx, st, rec.Upper, idx); err != nil {
			return nil, nil, fmt.Errorf("workspace %q: %w", rec.Name, err)
		}
	}
	return scan, idx, nil
}

// Committed re-records the stat index from the scan Read made: the tree
// now holds t.Tree, and the next scan reports only what changes since.
func (p plain) Committed(rec *Record, base store.ID, t *Tree) {
	if t == nil || t.plain == nil {
		return
	}
	if _, err := t.plain.Index(t.Tree).Save(plainIndex(rec)); err != nil {
		// The old index still holds; the next commit reads more.
		_ = os.Remove(plainIndex(rec))
	}
}

// Uncommitted scans the tree (without stopping its processes): dirty when
// anything differs from the index's tree, which is the base's after a
// commit; bytes are the sizes of the changed and new regular files.
func (p plain) Uncommitted(rec *Record) (bool, int64) {
	if _, err := os.Lstat(rec.Upper); errors.Is(err, fs.ErrNotExist) {
		return false, 0
	}
	st, err := p.m.DB()
	if err != nil {
		return true, 0
	}
	idx, err := snapshot.ReadIndex(plainIndex(rec))
	if err != nil {
		return true, DirBytes(rec.Upper)
	}
	scan, err := snapshot.ScanWorkspace(context.Background(), st, rec.Upper, idx)
	if err != nil {
		return true, DirBytes(rec.Upper)
	}
	var n int64
	for _, c := range scan.Changes {
		var s unix.Stat_t
		if c.Kind != snapshot.UpperDeleted && unix.Lstat(c.UpperPath, &s) == nil && s.Mode&unix.S_IFMT == unix.S_IFREG {
			n += s.Size
		}
	}
	if len(scan.Changes) > 0 || p.baseDiffers(rec, idx) {
		return true, n
	}
	return false, 0
}

// baseDiffers reports whether the index holds another tree than the
// workspace's base (a rebase's uncommitted part, written into the tree).
func (p plain) baseDiffers(rec *Record, idx *snapshot.StatIndex) bool {
	st, err := p.m.DB()
	if err != nil {
		return true
	}
	differs := true
	_ = st.View(context.Background(), func(tx *store.Tx) error {
		c, err := tx.Commit(rec.Base)
		if err == nil {
			differs = c.Tree != idx.Base
		}
		return err
	})
	return differs
}

// Reset makes the new tree beside the old one. Clean (content zero): the
// tree is left to be made from the new base when the workspace is next
// used (ensureTree) — the new base is a commit by then, recorded by
// Switch.Apply — so a reset costs no clone now. With content (rebase):
// content is a tree no commit holds yet, so it is written now: the old
// base's layer stack with the delta from its tree to content on top
// (snapshot.WriteDelta, in the stack's flavour), cloned as one stack.
func (p plain) Reset(ctx context.Context, rec *Record, baseTree, content store.ID) (*Switch, error) {
	dir := filepath.Dir(rec.Upper)
	nu, nw := layout.FreshUpper(dir, RandomHex(6))
	sw := &Switch{Upper: nu, Work: nw, oldUpper: rec.Upper, oldWork: rec.Work}
	if err := os.Mkdir(nw, 0o700); err != nil {
		return nil, err
	}
	if content.IsZero() {
		return sw, nil
	}
	if err := p.writeContent(ctx, rec, content, nu, nw); err != nil {
		_ = RemoveAll(nw)
		return nil, err
	}
	return sw, nil
}

// writeContent writes tree content into dir (with its index in work)
// from the layer stack of rec's base and a delta layer on top.
func (p plain) writeContent(ctx context.Context, rec *Record, content store.ID, dir, work string) error {
	st, err := p.m.DB()
	if err != nil {
		return err
	}
	lo, err := p.m.layerOptions()
	if err != nil {
		return err
	}
	var oldTree store.ID
	if err := st.View(ctx, func(tx *store.Tx) error {
		c, err := tx.Commit(rec.Base)
		if err == nil {
			oldTree = c.Tree
		}
		return err
	}); err != nil {
		return err
	}
	unlock, err := p.m.LayerLock(false)
	if err != nil {
		return err
	}
	defer unlock()
	lowers, err := p.m.LayerCache().Stack(ctx, st, rec.Base, lo)
	if err != nil {
		return err
	}
	delta := filepath.Join(work, layout.TempPrefix+"delta")
	defer RemoveAll(delta)
	if err := snapshot.WriteDelta(ctx, st, oldTree, content, delta, snapshot.LayerOptions{Flavour: lo.Flavour, Chown: lo.Chown}); err != nil {
		return fmt.Errorf("writing the rebased changes: %w", err)
	}
	_, err = snapshot.CloneStack(ctx, st, content, append([]string{delta}, lowers...), dir, snapshot.CloneOptions{
		Mode: p.mode, Layers: lo, Index: filepath.Join(work, plainIndexName),
	})
	return p.treeError(err)
}

// DropChanges removes the tree and its index, keeping the state
// directory.
func (p plain) DropChanges(rec *Record) error {
	err := RemoveAll(rec.Upper)
	if err2 := RemoveAll(rec.Work); err == nil {
		err = err2
	}
	return err
}

// Remove deletes the tree (a subvolume at once, where Btrfs allows it)
// and the state directory.
func (p plain) Remove(rec *Record) error {
	_ = RemoveAll(rec.Upper)
	return RemoveAll(rec.Dir)
}

// NeedsLayers reports whether the workspace reads its base's layer stack:
// an overlay mounts it; a plain workspace's tree is a clone that shares
// blocks with the layers but does not need them — unless a reset left the
// tree to be made (from the base's stack) on first use.
func (r *Record) NeedsLayers() bool {
	if !IsPlain(r.Backend) {
		return true
	}
	_, err := os.Lstat(r.Upper)
	return err != nil
}

// Dirty reports whether workspace rec holds anything its base does not
// (Uncommitted without the size).
func (m *Manager) Dirty(rec *Record) bool {
	dirty, _ := m.Uncommitted(rec)
	return dirty
}
