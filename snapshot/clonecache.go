package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// CloneCache keeps, on Btrfs, a commit's full tree in a subvolume with
// its stat index, so that a reflink workspace of that commit is a
// snapshot of the subvolume: O(1), whatever the tree's size, where a
// Clone costs what creating every inode costs (about 0.9 s for 23,000
// entries). The first workspace of a commit pays one Clone into the
// cache (from the layer cache, so it shares every block with it); every
// later one a snapshot. See docs/snapshot.md, "The clone cache".
//
// Layout, under the cache directory (the store's clones/):
//
//	<flavour>/<commit>/tree    the subvolume: the commit's tree, as Clone writes it
//	<flavour>/<commit>/index   its stat index (WriteIndex)
//	<flavour>/.tmp-*           entries being built, renamed into place when complete
//
// An entry is derived and evictable like a layer: a snapshot made from
// it does not depend on it (Btrfs counts the shared blocks), so evicting
// an entry never breaks a workspace.
type CloneCache struct {
	dir string
}

// NewCloneCache returns the clone cache in dir (created when first used).
func NewCloneCache(dir string) *CloneCache { return &CloneCache{dir: dir} }

// Dir is the cache's directory.
func (c *CloneCache) Dir() string { return c.dir }

const (
	cloneTree  = "tree"
	cloneIndex = "index"
)

// Usable reports whether a workspace at dir can be a snapshot of this
// cache's entries: dir's parent and the cache are on one Btrfs
// filesystem (a snapshot cannot cross filesystems). The cache directory
// is created if missing.
func (c *CloneCache) Usable(dir string) bool {
	parent := filepath.Dir(filepath.Clean(dir))
	if !isBtrfs(parent) {
		return false
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil || !isBtrfs(c.dir) {
		return false
	}
	// Subvolumes have device numbers of their own; the filesystem's id
	// tells whether the two are on one filesystem.
	var a, b unix.Statfs_t
	if unix.Statfs(parent, &a) != nil || unix.Statfs(c.dir, &b) != nil {
		return false
	}
	return a.Fsid == b.Fsid
}

// SnapshotResult says what Snapshot did.
type SnapshotResult struct {
	// Built: the cache had no entry for the commit; Clone is what
	// building it did.
	Built bool         `json:"built"`
	Clone *CloneResult `json:"clone,omitempty"`
	// Index is the entry's stat index, as written for the snapshot.
	Index *IndexInfo `json:"index,omitempty"`
}

// Snapshot makes dir (which must not exist) a Btrfs snapshot of commit's
// tree and writes its stat index to index: from the cache's entry,
// building the entry first when it is missing (Clone of the commit's
// layer stack, opts as for Clone; opts.Index and opts.InPlace are the
// cache's own). The snapshot holds exactly what Clone would have written
// — the same inodes with the same metadata, on a device of its own — so
// the entry's index, with that device, is the snapshot's.
func (c *CloneCache) Snapshot(ctx context.Context, s *store.Store, layers *LayerCache, commit store.ID, dir, index string, opts CloneOptions) (*SnapshotResult, error) {
	if !c.Usable(dir) {
		return nil, fmt.Errorf("snapshot into %s: %w", dir, errNotBtrfs)
	}
	if _, err := os.Lstat(dir); err == nil {
		return nil, &fs.PathError{Op: "snapshot", Path: dir, Err: fs.ErrExist}
	}
	res := &SnapshotResult{}
	entry := c.entry(opts.Layers.Flavour, commit)
	for try := 0; ; try++ {
		if _, err := os.Stat(filepath.Join(entry, cloneIndex)); err != nil {
			cr, err := c.build(ctx, s, layers, commit, opts)
			if err != nil {
				return nil, err
			}
			res.Built, res.Clone = cr != nil, cr
		}
		// Used now: eviction takes the least recently used first, and
		// only entries unused for a while.
		now := time.Now()
		_ = os.Chtimes(entry, now, now)
		err := SnapshotSubvolume(filepath.Join(entry, cloneTree), dir)
		if err == nil {
			break
		}
		if try > 0 || !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		// Evicted between the two steps: build it again.
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		_ = RemoveSubvolume(dir)
		return nil, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	in, err := CopyIndex(filepath.Join(entry, cloneIndex), index, st.Dev)
	if err != nil {
		_ = RemoveSubvolume(dir)
		return nil, fmt.Errorf("snapshot into %s: %w", dir, err)
	}
	res.Index = in
	return res, nil
}

// entry is the directory of commit's entry.
func (c *CloneCache) entry(flavour string, commit store.ID) string {
	return filepath.Join(c.dir, flavour, commit.String())
}

// build makes commit's entry: a new subvolume under a temporary name,
// the tree cloned into it with its index, and the entry renamed into
// place. Two processes building one entry race harmlessly: the loser
// removes its own and uses the winner's (nil result).
func (c *CloneCache) build(ctx context.Context, s *store.Store, layers *LayerCache, commit store.ID, opts CloneOptions) (*CloneResult, error) {
	parent := filepath.Join(c.dir, opts.Layers.Flavour)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, tmpPrefix+commit.Short()+"-")
	if err != nil {
		return nil, err
	}
	tree := filepath.Join(tmp, cloneTree)
	if err := CreateSubvolume(tree); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	opts.InPlace = true
	opts.Index = filepath.Join(tmp, cloneIndex)
	res, err := Clone(ctx, s, layers, commit, tree, opts)
	if err == nil {
		// A snapshot's inodes start with no ctime read (multigrain
		// timestamps mark an inode once stat reads its ctime): a change
		// within the coarse clock tick of the recording could keep a
		// ctime the index holds. Past that tick, every change of a
		// snapshot's inode gets a later one.
		waitCoarsePast(time.Now())
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, c.entry(opts.Layers.Flavour, commit), unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			res, err = nil, nil // another process built it first
			c.removeEntry(tmp)
		}
	}
	if err != nil {
		c.removeEntry(tmp)
		return nil, fmt.Errorf("clone cache: %s: %w", commit.Short(), err)
	}
	return res, nil
}

// removeEntry removes an entry (or a temporary one) with its subvolume.
func (c *CloneCache) removeEntry(dir string) error {
	tree := filepath.Join(dir, cloneTree)
	if IsSubvolume(tree) {
		if err := RemoveSubvolume(tree); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}

// waitCoarsePast waits until the coarse clock (what file timestamps
// come from) is past t: at most one tick (1–4 ms).
func waitCoarsePast(t time.Time) {
	for i := 0; i < 1000; i++ {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil || time.Unix(ts.Unix()).After(t) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// CloneEvictOptions tune Evict.
type CloneEvictOptions struct {
	// Keep are commits whose entries stay (branch heads, workspaces'
	// bases: the next workspace is likely one of them).
	Keep []store.ID
	// OlderThan: only entries not used (snapshotted) for this long go,
	// and temporary ones only this old.
	OlderThan time.Duration
	// MaxKept bounds the entries kept even when Keep names them, least
	// recently used going first (0: no bound).
	MaxKept int
}

// CloneEvictResult says what Evict removed.
type CloneEvictResult struct {
	Removed []string
}

// Evict removes the entries nothing keeps, and temporary ones a killed
// build left. Workspaces made from an entry keep working: a snapshot
// shares blocks, not the entry.
func (c *CloneCache) Evict(opts CloneEvictOptions) (*CloneEvictResult, error) {
	keep := map[string]bool{}
	for _, id := range opts.Keep {
		keep[id.String()] = true
	}
	res := &CloneEvictResult{}
	flavours, err := os.ReadDir(c.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	} else if err != nil {
		return nil, err
	}
	now := time.Now()
	type kept struct {
		path string
		used time.Time
	}
	var keptList []kept
	for _, f := range flavours {
		if !f.IsDir() {
			continue
		}
		fdir := filepath.Join(c.dir, f.Name())
		ents, err := os.ReadDir(fdir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			p := filepath.Join(fdir, e.Name())
			fi, err := os.Lstat(p)
			if err != nil {
				continue
			}
			old := now.Sub(fi.ModTime()) > opts.OlderThan
			switch {
			case strings.HasPrefix(e.Name(), tmpPrefix):
				if !old {
					continue
				}
			case keep[e.Name()]:
				keptList = append(keptList, kept{p, fi.ModTime()})
				continue
			case !old:
				continue
			}
			if c.removeEntry(p) == nil {
				res.Removed = append(res.Removed, p)
			}
		}
	}
	if opts.MaxKept > 0 && len(keptList) > opts.MaxKept {
		// Least recently used first.
		for i := 0; i < len(keptList); i++ {
			for j := i + 1; j < len(keptList); j++ {
				if keptList[j].used.Before(keptList[i].used) {
					keptList[i], keptList[j] = keptList[j], keptList[i]
				}
			}
		}
		for _, k := range keptList[:len(keptList)-opts.MaxKept] {
			if now.Sub(k.used) > opts.OlderThan && c.removeEntry(k.path) == nil {
				res.Removed = append(res.Removed, k.path)
			}
		}
	}
	return res, nil
}
