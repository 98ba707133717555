package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// LayerCache is a directory of layers (the store's layers/), one
// subdirectory per flavour:
//
//	<dir>/<flavour>/<commit hex>        the commit's delta from its first parent
//	                                    (a root commit's: its full tree)
//	<dir>/<flavour>/<commit hex>.full   the commit's full tree (a flattened stack)
//	<dir>/<flavour>/.tmp-*              layers being written or removed
//
// Layers are derived from the store and can be removed at any time when no
// mount uses them; Stack builds what is missing. A layer appears under its
// name complete or not at all, so several processes may share a cache: two
// that build the same layer race harmlessly. A LayerCache is safe for
// concurrent use; in one process, one build of each layer runs at a time.
type LayerCache struct {
	dir string
	cfg matConfig // tests turn knobs here

	mu       sync.Mutex
	building map[string]chan struct{} // layer path → closed when its build ends
}

// NewLayerCache returns the cache rooted at dir. Nothing is created until a
// layer is built.
func NewLayerCache(dir string) *LayerCache {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return &LayerCache{dir: dir, building: map[string]chan struct{}{}}
}

// Dir returns the cache's directory (absolute).
func (c *LayerCache) Dir() string { return c.dir }

func (c *LayerCache) path(flavour string, id store.ID, full bool) string {
	name := id.String()
	if full {
		name += fullSuffix
	}
	return filepath.Join(c.dir, flavour, name)
}

// layerRef is one layer of a stack.
type layerRef struct {
	commit       store.ID
	full         bool     // <commit>.full
	parent, tree store.ID // the delta parent → tree; parent ZeroID for a full layer
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// chain walks the first-parent chain from commit the way Stack counts it:
// visit is called for each commit, with whether it has a layer of its own
// (a commit whose tree equals its first parent's adds nothing to a stack)
// and whether it is a root commit; the walk goes on while visit returns
// true and ends after a root commit.
func chain(tx *store.Tx, commit store.ID, visit func(id store.ID, c *store.Commit, parentTree store.ID, hasLayer, root bool) bool) error {
	id := commit
	cm, err := tx.Commit(id)
	if err != nil {
		return fmt.Errorf("commit %s: %w", id.Short(), err)
	}
	for {
		if len(cm.Parents) == 0 {
			visit(id, cm, store.ZeroID, true, true)
			return nil
		}
		pid := cm.Parents[0]
		pc, err := tx.Commit(pid)
		if err != nil {
			return fmt.Errorf("commit %s, parent of %s: %w", pid.Short(), id.Short(), err)
		}
		if !visit(id, cm, pc.Tree, pc.Tree != cm.Tree, false) {
			return nil
		}
		id, cm = pid, pc
	}
}

// plan lists the layers of commit's stack, topmost first: its own layer,
// its first parent's, … down to a full layer (a root commit's, or the
// nearest existing <X>.full). Commits whose tree equals their first
// parent's are left out. When that would take more than maxDepth layers,
// the stack is commit's flattened layer alone.
func (c *LayerCache) plan(tx *store.Tx, flavour string, commit store.ID, maxDepth int) ([]layerRef, error) {
	var refs []layerRef
	flatten := false
	err := chain(tx, commit, func(id store.ID, cm *store.Commit, parentTree store.ID, hasLayer, root bool) bool {
		if len(refs) == maxDepth {
			flatten = true // at least one more layer is needed
			return false
		}
		if isDir(c.path(flavour, id, true)) {
			refs = append(refs, layerRef{commit: id, full: true, tree: cm.Tree})
			return false
		}
		if !hasLayer {
			return true
		}
		refs = append(refs, layerRef{commit: id, parent: parentTree, tree: cm.Tree})
		return !root
	})
	if err != nil {
		return nil, err
	}
	if flatten {
		return []layerRef{{commit: commit, full: true, tree: refs[0].tree}}, nil
	}
	return refs, nil
}

// Stack returns the layer directories of commit for opts.Flavour, topmost
// first, as overlayfs takes them as lowerdirs, building the layers that are
// missing: [layer(C), layer(P), …] down to a full layer; deeper than
// opts.MaxDepth, C's flattened layer <C>.full alone (later stacks end at the
// nearest <X>.full). Commits whose tree equals their first parent's add no
// layer.
//
// A returned layer stays until Evict removes it: the caller keeps Evict
// from running between Stack and the mount (Evict's Keep and OlderThan),
// and must not change a layer while it is mounted.
func (c *LayerCache) Stack(ctx context.Context, s *store.Store, commit store.ID, opts LayerOptions) ([]string, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	var refs []layerRef
	err := s.View(ctx, func(tx *store.Tx) error {
		var err error
		refs, err = c.plan(tx, opts.cacheDir(), commit, opts.MaxDepth)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("layer stack of %s: %w", commit.Short(), err)
	}
	paths := make([]string, len(refs))
	for i, r := range refs {
		paths[i] = c.path(opts.cacheDir(), r.commit, r.full)
		if err := c.ensure(ctx, s, r, paths[i], opts); err != nil {
			return nil, fmt.Errorf("layer stack of %s: %w", commit.Short(), err)
		}
	}
	return paths, nil
}

// Layer returns commit's own layer for opts.Flavour, building it if
// missing: its delta from its first parent, or its full tree if it has no
// parent. MaxDepth is not used.
func (c *LayerCache) Layer(ctx context.Context, s *store.Store, commit store.ID, opts LayerOptions) (string, error) {
	if err := opts.check(); err != nil {
		return "", err
	}
	r := layerRef{commit: commit}
	err := s.View(ctx, func(tx *store.Tx) error {
		cm, err := tx.Commit(commit)
		if err != nil {
			return fmt.Errorf("commit %s: %w", commit.Short(), err)
		}
		r.tree = cm.Tree
		if len(cm.Parents) > 0 {
			pc, err := tx.Commit(cm.Parents[0])
			if err != nil {
				return fmt.Errorf("commit %s, parent of %s: %w", cm.Parents[0].Short(), commit.Short(), err)
			}
			r.parent = pc.Tree
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	p := c.path(opts.cacheDir(), commit, false)
	return p, c.ensure(ctx, s, r, p, opts)
}

// ensure builds the layer r at p unless it exists. In this process one
// build of a layer runs at a time, the others wait for it; across
// processes, builders race and the losers discard their copies.
func (c *LayerCache) ensure(ctx context.Context, s *store.Store, r layerRef, p string, opts LayerOptions) error {
	for {
		if fi, err := os.Lstat(p); err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("layer %s: not a directory (%v)", p, fi.Mode().Type())
			}
			return nil
		}
		c.mu.Lock()
		done, busy := c.building[p]
		if !busy {
			done = make(chan struct{})
			c.building[p] = done
		}
		c.mu.Unlock()
		if busy {
			select {
			case <-done:
				continue // built, or failed: look again, and build if still missing
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := c.build(ctx, s, r, p, opts)
		c.mu.Lock()
		delete(c.building, p)
		c.mu.Unlock()
		close(done)
		return err
	}
}

func (c *LayerCache) build(ctx context.Context, s *store.Store, r layerRef, p string, opts LayerOptions) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	err := writeLayer(ctx, storeReader{s}, r.parent, r.tree, p, opts, c.cfg)
	if errLayerExists(err) {
		return nil // another process built it first
	}
	return err
}

// EvictOptions tune Evict.
type EvictOptions struct {
	// Keep lists the commits whose stacks must stay: branch heads,
	// workspace bases. Every layer of a commit within MaxDepth layers below
	// a kept commit is kept (delta and flattened), whichever of them its
	// stack uses now or used when it was mounted.
	Keep []store.ID
	// MaxDepth is the MaxDepth Stack is called with (DefaultMaxDepth when
	// zero).
	MaxDepth int
	// OlderThan spares layers and temporary directories changed more
	// recently (by ctime: when a layer was renamed into place): a layer
	// that Stack just built for a workspace that is not yet registered.
	OlderThan time.Duration
	// RemoveAll, if set, removes what Evict's own removal leaves of a
	// layer: an owner-mapped layer's files of subordinate ids (see
	// LayerOptions.Owners), which only their namespace may remove.
	RemoveAll func(path string) error
}

// EvictResult says what Evict removed.
type EvictResult struct {
	// Removed lists the layers and temporary directories removed, relative
	// to the cache directory ("user/<hex>", "trusted/<hex>.full",
	// "user/.tmp-…"), sorted.
	Removed []string
	// Kept counts the layers kept.
	Kept int
	// Bytes is the disk space freed.
	Bytes int64
}

// Evict removes the layers no kept stack needs, and the temporary
// directories of builds whose process is gone (each is locked while it is
// written), of every flavour. A layer is first renamed to a temporary name,
// so it disappears whole. The keep set is computed before anything is
// removed; if a kept commit or its ancestors cannot be read, nothing is
// removed. Entries with other names are left alone (Verify reports them).
func (c *LayerCache) Evict(ctx context.Context, s *store.Store, opts EvictOptions) (*EvictResult, error) {
	depth := opts.MaxDepth
	if depth == 0 {
		depth = DefaultMaxDepth
	}
	keep := map[store.ID]bool{}
	err := s.View(ctx, func(tx *store.Tx) error {
		for _, k := range opts.Keep {
			n := 0
			err := chain(tx, k, func(id store.ID, _ *store.Commit, _ store.ID, hasLayer, _ bool) bool {
				keep[id] = true
				if hasLayer {
					n++
				}
				return n < depth
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("evict layers: %w", err)
	}
	res := &EvictResult{}
	flavours, err := os.ReadDir(c.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return nil, fmt.Errorf("evict layers: %w", err)
	}
	now := time.Now()
	for _, f := range flavours {
		if !f.IsDir() || !isFlavourDir(f.Name()) {
			continue
		}
		if err := c.evictFlavour(ctx, f.Name(), keep, now.Add(-opts.OlderThan), res, opts.RemoveAll); err != nil {
			return res, fmt.Errorf("evict layers: %w", err)
		}
	}
	sort.Strings(res.Removed)
	return res, nil
}

func (c *LayerCache) evictFlavour(ctx context.Context, flavour string, keep map[store.ID]bool, before time.Time, res *EvictResult, removeAll func(string) error) error {
	dir := filepath.Join(c.dir, flavour)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	names, err := readDirNames(dfd, make([]byte, 8192))
	if err != nil {
		return &fs.PathError{Op: "readdir", Path: dir, Err: err}
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue // gone meanwhile, or not ours (Verify reports it)
		}
		old := !time.Unix(st.Ctim.Sec, st.Ctim.Nsec).After(before)
		if strings.HasPrefix(name, tmpPrefix) {
			if old {
				if n, ok := removeLockedOr(dfd, dir, name, removeAll); ok {
					res.Removed = append(res.Removed, flavour+"/"+name)
					res.Bytes += n
				}
			}
			continue
		}
		id, _, ok := parseLayerName(name)
		if !ok {
			continue
		}
		if keep[id] || !old {
			res.Kept++
			continue
		}
		// Out of sight first: a concurrent Stack sees the layer whole or
		// not at all.
		gone := tmpPrefix + "evict-" + name + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := unix.Renameat2(dfd, name, dfd, gone, unix.RENAME_NOREPLACE); err != nil {
			if err == unix.ENOENT {
				continue // another Evict took it
			}
			return &fs.PathError{Op: "rename", Path: filepath.Join(dir, name), Err: err}
		}
		n, _ := removeLockedOr(dfd, dir, gone, removeAll)
		res.Removed = append(res.Removed, flavour+"/"+name)
		res.Bytes += n
	}
	return nil
}

// removeLockedOr is removeLocked, and, for what that leaves (files of
// subordinate ids in an owner-mapped flavour, which the caller may not
// remove outside their namespace), removeAll when set.
func removeLockedOr(dfd int, dir, name string, removeAll func(string) error) (int64, bool) {
	n, ok := removeLocked(dfd, name)
	if ok || removeAll == nil {
		return n, ok
	}
	var st unix.Stat_t
	if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return n, true
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return n, false
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return n, false // a live writer
	}
	return n, removeAll(filepath.Join(dir, name)) == nil
}

// removeLocked removes the directory name in dfd if it can take its lock
// (a writer holds it while it writes; it is released when the writer's
// process dies), and returns the bytes freed.
func removeLocked(dfd int, name string) (int64, bool) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return 0, false // a live writer
	}
	var st unix.Stat_t
	unix.Fstat(fd, &st)
	unix.Fchmod(fd, 0o700)
	n := removeContents(fd, 0)
	if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil {
		return n, false
	}
	return n + st.Blocks*512, true
}

// LayerProblem is something wrong in a layer cache, found by Verify.
type LayerProblem struct {
	// Path is relative to the cache directory.
	Path string `json:"path"`
	// Kind is one of the LayerProblem* constants.
	Kind    string `json:"kind"`
	Problem string `json:"problem"`
}

// Kinds of LayerProblem.
const (
	// LayerOrphan: a layer whose commit is not in the store (collected);
	// Evict removes it.
	LayerOrphan = "orphan"
	// LayerStaleTemp: a temporary directory left by a build or an Evict
	// that did not finish; Evict removes it.
	LayerStaleTemp = "stale-temp"
	// LayerBadEntry: an entry that is not a layer directory (another
	// type, a bad mode, an unknown name); nothing removes it.
	LayerBadEntry = "bad-entry"
)

// Verify checks the shape of the cache, for fsck: every entry of a flavour
// directory is a layer directory (mode 0755, not a symlink) named after a
// commit that is in the store, or a temporary directory of a live build.
// It does not read the layers' contents.
func (c *LayerCache) Verify(ctx context.Context, s *store.Store) ([]LayerProblem, error) {
	top, err := os.ReadDir(c.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("verify layers: %w", err)
	}
	var probs []LayerProblem
	add := func(p, kind, format string, args ...any) {
		probs = append(probs, LayerProblem{Path: p, Kind: kind, Problem: fmt.Sprintf(format, args...)})
	}
	type layer struct {
		rel string
		id  store.ID
	}
	var layers []layer
	for _, f := range top {
		name := f.Name()
		if !isFlavourDir(name) || f.Type() != fs.ModeDir {
			add(name, LayerBadEntry, "not a flavour directory (%q or %q)", FlavourUser, FlavourTrusted)
			continue
		}
		dir := filepath.Join(c.dir, name)
		dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("verify layers: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
		}
		names, err := readDirNames(dfd, make([]byte, 8192))
		if err != nil {
			unix.Close(dfd)
			return nil, fmt.Errorf("verify layers: %w", &fs.PathError{Op: "readdir", Path: dir, Err: err})
		}
		sort.Strings(names)
		for _, n := range names {
			rel := name + "/" + n
			var st unix.Stat_t
			if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // removed meanwhile
			}
			isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
			if strings.HasPrefix(n, tmpPrefix) {
				if isDir && !lockedDir(dfd, n) {
					add(rel, LayerStaleTemp, "left by an interrupted build or eviction; Evict removes it")
				} else if !isDir {
					add(rel, LayerBadEntry, "temporary name but not a directory")
				}
				continue
			}
			id, _, ok := parseLayerName(n)
			switch {
			case !ok:
				add(rel, LayerBadEntry, "not a layer name (<commit hex> or <commit hex>.full)")
			case !isDir:
				add(rel, LayerBadEntry, "not a directory (mode %#o)", st.Mode)
			case st.Mode&0o7777 != 0o755:
				add(rel, LayerBadEntry, "layer root has mode %#o, want 0755", st.Mode&0o7777)
				layers = append(layers, layer{rel, id})
			default:
				layers = append(layers, layer{rel, id})
			}
		}
		unix.Close(dfd)
	}
	err = s.View(ctx, func(tx *store.Tx) error {
		for _, l := range layers {
			_, err := tx.Commit(l.id)
			switch {
			case errors.Is(err, store.ErrNotFound):
				add(l.rel, LayerOrphan, "commit %s is not in the store; Evict removes it", l.id.Short())
			case errors.Is(err, store.ErrCorrupt):
				add(l.rel, LayerBadEntry, "commit %s cannot be read: %v", l.id.Short(), err)
			case err != nil:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify layers: %w", err)
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Path < probs[j].Path })
	return probs, nil
}

// lockedDir reports whether a writer holds the lock of directory name in
// dfd.
func lockedDir(dfd int, name string) bool {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true
	}
	unix.Flock(fd, unix.LOCK_UN)
	return false
}
