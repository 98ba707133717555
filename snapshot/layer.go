package snapshot

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// Layer flavours: the xattr namespace of the overlay markers a layer is
// written for. A layer written for one flavour is not read correctly by
// mounts of the other (docs/overlayfs.md).
const (
	// FlavourUser is for rootless mounts (userxattr): user.overlay.*.
	FlavourUser = "user"
	// FlavourTrusted is for mounts by real root: trusted.overlay.*.
	FlavourTrusted = "trusted"
)

// DefaultMaxDepth is the deepest layer stack Stack builds unless told
// otherwise; deeper stacks are flattened.
const DefaultMaxDepth = 64

// maxLowerLayers bounds LayerOptions.MaxDepth. Linux: fs/overlayfs/params.h
// OVL_MAX_STACK.
const maxLowerLayers = 500

// overlayXattrUser is the overlay namespace of rootless mounts. Recorded
// xattrs in it are never written into a layer: the kernel would take them
// for its own markers (an opaque flag, a redirect, ...).
const overlayXattrUser = "user.overlay."

// tmpPrefix starts the names of directories being written (and of layers
// being removed) in a layer cache; Evict removes those of dead writers.
const tmpPrefix = ".tmp-"

// fullSuffix ends the name of a flattened layer: a commit's full tree.
const fullSuffix = ".full"

// LayerOptions tune the writing of layers.
type LayerOptions struct {
	// Flavour is FlavourUser or FlavourTrusted: the xattr namespace of the
	// opaque markers. Writing a trusted layer needs real root.
	Flavour string
	// MaxDepth is the deepest stack Stack returns (DefaultMaxDepth when
	// zero, at most 500, the kernel's limit); a deeper one is flattened.
	MaxDepth int
	// Chown applies the recorded uid/gid (needs privilege). Otherwise
	// everything is owned by the caller, which rootless mounts need:
	// a user namespace cannot copy up files of unmapped owners.
	Chown bool
	// Owners, with Chown, writes each recorded owner as another: an
	// image's ids as the subordinate-id namespace of a rootless image
	// root holds them (its uid 1000 is a subordinate id of the caller
	// on disk). Such layers are a flavour of their own: they live in
	// <Flavour>-<Owners.Key>/ of a LayerCache.
	Owners *OwnerMap
	// Warn, if set, receives one call per entry not written as recorded;
	// path is relative to the layer. Calls are serialized.
	Warn func(path, msg string)
	// Progress, if set, is called while a layer is written, with the
	// phases of Materialize, once more for each layer built.
	Progress func(Progress)
}

// OwnerMap maps recorded owners to the owners written (LayerOptions).
type OwnerMap struct {
	// Key names the map (a hash of it): layers written with it live in
	// the cache directory <flavour>-<Key>.
	Key string
	Map func(uid, gid uint32) (uint32, uint32)
}

// cacheDir is the directory of a LayerCache these options' layers live
// in: the flavour's, or the flavour's with an owner map's key.
func (o *LayerOptions) cacheDir() string {
	if o.Owners != nil {
		return o.Flavour + "-" + o.Owners.Key
	}
	return o.Flavour
}

// isFlavourDir reports whether name is a flavour directory of a
// LayerCache: a flavour, or a flavour with an owner map's key.
func isFlavourDir(name string) bool {
	if name == FlavourUser || name == FlavourTrusted {
		return true
	}
	f, key, ok := strings.Cut(name, "-")
	return ok && (f == FlavourUser || f == FlavourTrusted) && validOwnerKey(key)
}

func validOwnerKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for _, c := range k {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func (o *LayerOptions) check() error {
	switch o.Flavour {
	case FlavourUser, FlavourTrusted:
	default:
		return fmt.Errorf("layer flavour %q: want %q or %q", o.Flavour, FlavourUser, FlavourTrusted)
	}
	if o.Owners != nil && (!o.Chown || o.Owners.Map == nil || !validOwnerKey(o.Owners.Key)) {
		return fmt.Errorf("layer owner map %q: needs Chown, a map and a key of [a-z0-9]", o.Owners.Key)
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxDepth < 1 || o.MaxDepth > maxLowerLayers {
		return fmt.Errorf("layer stack depth %d: want 1 to %d", o.MaxDepth, maxLowerLayers)
	}
	return nil
}

// layerSpec is what a materializer needs, beyond the trees, to write a
// layer instead of a plain directory.
type layerSpec struct {
	prefix string // "user." or "trusted."
	// opaque holds the directories to mark opaque.
	opaque map[string]bool
	// shadow holds the entries with something beneath them in the lower
	// layers: one that cannot be created (a device without privilege, a
	// socket) is replaced by a whiteout, so that what is beneath does not
	// show through.
	shadow map[string]bool
	// whiteouts holds, per plan tree, the names to white out in it.
	whiteouts map[store.ID][]string
}

// whiteout creates a whiteout (character device 0/0; unprivileged since
// Linux 5.8) at rel, in the directory open at dirfd.
func (m *materializer) whiteout(dirfd int, rel string) error {
	if err := unix.Mknodat(dirfd, pathBase(rel), unix.S_IFCHR, 0); err != nil {
		return m.pathErr("mknod whiteout", rel, err)
	}
	m.prog.add(1, 0)
	return nil
}

// shadowWhiteout writes a whiteout at rel, an entry that could not be
// created, when a layer is written and something is beneath it.
func (m *materializer) shadowWhiteout(dirfd int, rel string) error {
	if m.layer == nil || !m.layer.shadow[rel] {
		return nil
	}
	return m.whiteout(dirfd, rel)
}

func pathBase(rel string) string {
	_, name := splitRel(rel)
	return name
}

// planTreeID names a tree of a layer plan: a directory of the layer that
// holds only some of the commit's entries. It is in no store; a real id
// equal to it would be a SHA-256 collision.
func planTreeID(rel string) store.ID {
	return store.ID(sha256.Sum256([]byte("strata layer plan\x00" + rel)))
}

// planner decides what a layer holds: the delta from the parent tree to
// the tree, in overlay format. See docs/snapshot.md, "Layers".
type planner struct {
	m     *materializer
	tg    treeGetter
	cache map[store.ID]*store.Tree // trees read for comparing; checked
	// touched holds the link groups that have a member written into the
	// layer, deleted or replaced: all their members go into the layer.
	touched map[string]bool
	keysIn  map[store.ID]bool // subtrees whose link groups are in touched
}

// pdir is a directory of the layer that holds only some entries of the
// commit's directory (a "partial" directory), merged by the kernel with
// the same directory beneath.
type pdir struct{ entries map[string]*pnode }

// pnode is a name in a pdir: a whiteout (e == nil), a partial directory
// (sub != nil), or an entry written whole (a directory with everything
// under it).
type pnode struct {
	e      *store.TreeEntry
	sub    *pdir
	opaque bool
	shadow bool
}

func newPdir() *pdir { return &pdir{entries: map[string]*pnode{}} }

// tree reads and checks a tree for comparing.
func (p *planner) tree(id store.ID, rel string) (*store.Tree, error) {
	if t, ok := p.cache[id]; ok {
		return t, nil
	}
	if t, ok := p.m.trees[id]; ok {
		return t, nil
	}
	t, err := getTree(p.tg, id)
	if err != nil {
		return nil, fmt.Errorf("at %q: %w", rel, err)
	}
	if err := checkTree(t, id, rel); err != nil {
		return nil, err
	}
	p.cache[id] = t
	return t, nil
}

// plan loads what the layer for parent → tree holds into p.m.trees and
// p.m.layer, under the plan tree planTreeID(""), and returns the root
// mtime.
func (p *planner) plan(parent, tree store.ID) (int64, error) {
	root, err := p.diffDir(parent, tree, "", 0)
	if err != nil {
		return 0, err
	}
	if len(p.touched) > 0 {
		if root, err = p.members(tree, root, "", 0); err != nil {
			return 0, err
		}
	}
	if root == nil {
		root = newPdir()
	}
	p.emit(root, "")
	t, err := p.tree(tree, "")
	if err != nil {
		return 0, err
	}
	return rootMtime(t), nil
}

// rootMtime is the mtime of a layer's root. The tree does not record its
// root's metadata, and a workspace's upper directory copies the root
// attributes of the topmost layer; a layer rebuilt after eviction must
// therefore get the same root attributes: the newest mtime of the root's
// entries (0 for the empty tree).
func rootMtime(t *store.Tree) int64 {
	var n int64
	for i := range t.Entries {
		n = max(n, t.Entries[i].MtimeNs)
	}
	return n
}

// diffDir compares the directories a (parent) and b at rel and returns the
// partial directory that turns a into b over a, or nil when they are
// equal.
func (p *planner) diffDir(a, b store.ID, rel string, depth int) (*pdir, error) {
	if a == b {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	if err := p.m.ctx.Err(); err != nil {
		return nil, err
	}
	ta, err := p.tree(a, rel)
	if err != nil {
		return nil, err
	}
	tb, err := p.tree(b, rel)
	if err != nil {
		return nil, err
	}
	d := newPdir()
	if err := zipEntries(ta.Entries, tb.Entries, func(ea, eb *store.TreeEntry) error {
		switch {
		case eb == nil: // deleted: a whiteout hides it and all under it
			d.entries[ea.Name] = &pnode{}
			if err := p.removed(ea, joinRel(rel, ea.Name)); err != nil {
				return err
			}
		case ea == nil: // added
			d.entries[eb.Name] = &pnode{e: eb}
			if err := p.written(eb, joinRel(rel, eb.Name), depth+1); err != nil {
				return err
			}
		case ea.Content == eb.Content && sameMeta(ea, eb):
			// unchanged
		case ea.Type == store.TypeDir && eb.Type == store.TypeDir:
			// Merged with the directory beneath: only what changed, and
			// whiteouts for what was deleted.
			sub, err := p.diffDir(ea.Content, eb.Content, joinRel(rel, eb.Name), depth+1)
			if err != nil {
				return err
			}
			if sub == nil {
				sub = newPdir() // only the directory's own metadata changed
			}
			d.entries[eb.Name] = &pnode{e: eb, sub: sub}
		default:
			// Modified, or a change of type. A directory that replaces a
			// non-directory is opaque: nothing beneath it may show.
			d.entries[eb.Name] = &pnode{e: eb, shadow: true, opaque: eb.Type == store.TypeDir}
			crel := joinRel(rel, eb.Name)
			if err := p.removed(ea, crel); err != nil {
				return err
			}
			if err := p.written(eb, crel, depth+1); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(d.entries) == 0 {
		return nil, nil
	}
	return d, nil
}

// removed notes the link groups of e, which the layer deletes or
// replaces, and of everything under it: the remaining members of those
// groups are written again, so that their link count is right.
func (p *planner) removed(e *store.TreeEntry, rel string) error {
	if e.LinkGroup != "" {
		p.touched[e.LinkGroup] = true
	}
	if e.Type != store.TypeDir {
		return nil
	}
	return walkRec(p.m.ctx, p.tg, e.Content, rel, func(_ string, c *store.TreeEntry) error {
		if c.LinkGroup != "" {
			p.touched[c.LinkGroup] = true
		}
		return nil
	})
}

// written loads e, which the layer holds whole, with everything under it
// (checking every name), and notes the link groups of its files.
func (p *planner) written(e *store.TreeEntry, rel string, depth int) error {
	if e.LinkGroup != "" {
		p.touched[e.LinkGroup] = true
	}
	if e.Type != store.TypeDir {
		return nil
	}
	if err := p.m.load(p.tg, e.Content, rel, depth); err != nil {
		return err
	}
	p.noteKeys(e.Content)
	return nil
}

// noteKeys adds the link groups under the loaded tree id to p.touched.
func (p *planner) noteKeys(id store.ID) {
	if p.keysIn[id] {
		return
	}
	p.keysIn[id] = true
	for _, c := range p.m.trees[id].Entries {
		switch {
		case c.LinkGroup != "":
			p.touched[c.LinkGroup] = true
		case c.Type == store.TypeDir:
			p.noteKeys(c.Content)
		}
	}
}

// members adds to the partial directory d (nil: not in the layer) of tree
// id at rel the members of touched link groups that the layer does not
// hold yet, with their parent directories, and returns d (nil if still
// empty). It reads every directory of the tree that is not written whole:
// a group's members can be anywhere.
func (p *planner) members(id store.ID, d *pdir, rel string, depth int) (*pdir, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	if err := p.m.ctx.Err(); err != nil {
		return nil, err
	}
	t, err := p.tree(id, rel)
	if err != nil {
		return nil, err
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		var n *pnode
		if d != nil {
			n = d.entries[e.Name]
		}
		if n != nil && n.sub == nil {
			continue // written whole
		}
		switch {
		case e.Type == store.TypeFile && e.LinkGroup != "" && p.touched[e.LinkGroup]:
			if d == nil {
				d = newPdir()
			}
			d.entries[e.Name] = &pnode{e: e, shadow: true}
		case e.Type == store.TypeDir:
			var sub *pdir
			if n != nil {
				sub = n.sub
			}
			sub, err = p.members(e.Content, sub, joinRel(rel, e.Name), depth+1)
			if err != nil {
				return nil, err
			}
			if sub != nil && n == nil {
				if d == nil {
					d = newPdir()
				}
				d.entries[e.Name] = &pnode{e: e, sub: sub}
			}
		}
	}
	return d, nil
}

// emit turns the partial directory d at rel into the plan tree
// planTreeID(rel), in p.m.trees, and its markers into p.m.layer.
func (p *planner) emit(d *pdir, rel string) store.ID {
	id := planTreeID(rel)
	names := make([]string, 0, len(d.entries))
	for name := range d.entries {
		names = append(names, name)
	}
	sort.Strings(names) // bytewise, the order of trees
	t := &store.Tree{Entries: make([]store.TreeEntry, 0, len(names))}
	for _, name := range names {
		n := d.entries[name]
		crel := joinRel(rel, name)
		if n.e == nil {
			p.m.layer.whiteouts[id] = append(p.m.layer.whiteouts[id], name)
			continue
		}
		e := *n.e
		if n.sub != nil {
			e.Content = p.emit(n.sub, crel)
		}
		if n.opaque {
			p.m.layer.opaque[crel] = true
		}
		if n.shadow {
			p.m.layer.shadow[crel] = true
		}
		t.Entries = append(t.Entries, e)
	}
	p.m.trees[id] = t
	return id
}

// writeLayer writes the layer parent → tree (parent ZeroID: the full
// tree) into final, which must not exist: into a temporary sibling, locked
// while it is written (Evict removes those of dead writers), synced, then
// renamed into place without replacing anything. If final appeared
// meanwhile, the error wraps fs.ErrExist and nothing is left behind.
func writeLayer(ctx context.Context, r objectReader, parent, tree store.ID, final string, opts LayerOptions, cfg matConfig) (err error) {
	dir, base := filepath.Split(final)
	tmp, err := os.MkdirTemp(dir, tmpPrefix+base+"-")
	if err != nil {
		return err
	}
	fd, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(tmp)
		return &fs.PathError{Op: "open", Path: tmp, Err: err}
	}
	defer func() {
		if err != nil {
			removeContents(fd, 0)
			unix.Rmdir(tmp) // fails, harmlessly, if tmp is no longer ours
		}
		unix.Close(fd) // drops the lock
	}()
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return &fs.PathError{Op: "flock", Path: tmp, Err: err}
	}
	mo := MaterializeOptions{Chown: opts.Chown, Warn: opts.Warn, Progress: opts.Progress}
	if opts.Owners != nil {
		mo.Owners = opts.Owners.Map
	}
	m := newMaterializer(r, mo, cfg, fd)
	m.fsync = syncfsNotDurable(fd)
	m.layer = &layerSpec{
		prefix:    opts.Flavour + ".",
		opaque:    map[string]bool{},
		shadow:    map[string]bool{},
		whiteouts: map[store.ID][]string{},
	}
	var mtime int64
	err = m.run(ctx, planTreeID(""), func(tg treeGetter) error {
		p := &planner{m: m, tg: tg, cache: map[store.ID]*store.Tree{}, touched: map[string]bool{}, keysIn: map[store.ID]bool{}}
		var err error
		mtime, err = p.plan(parent, tree)
		return err
	})
	if err != nil {
		return fmt.Errorf("layer %s → %s: %w", parent.Short(), tree.Short(), err)
	}
	if err := unix.Fchmod(fd, 0o755); err != nil {
		return &fs.PathError{Op: "chmod", Path: tmp, Err: err}
	}
	ts := [2]unix.Timespec{nsTimespec(mtime), nsTimespec(mtime)}
	if err := futimens(fd, &ts); err != nil {
		return &fs.PathError{Op: "utimes", Path: tmp, Err: err}
	}
	// A layer under its final name must be complete even after a power
	// loss: a torn one would show wrong content in every workspace
	// stacked on it, and nothing would notice. (On FUSE each file was
	// fsynced as it was written: syncfsNotDurable.)
	if err := unix.Syncfs(fd); err != nil {
		return &fs.PathError{Op: "syncfs", Path: tmp, Err: err}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE); err != nil {
		if err == unix.ENOTEMPTY {
			err = unix.EEXIST
		}
		return &fs.PathError{Op: "rename", Path: final, Err: err}
	}
	return nil
}

// fuseSuperMagic is FUSE's f_type (Linux: include/uapi/linux/magic.h).
const fuseSuperMagic = 0x65735546

// syncfsNotDurable reports whether syncfs of the filesystem holding fd
// leaves file data not durable: on FUSE, syncfs writes dirty pages back to
// the server but asks it for nothing (the kernel sends FUSE_SYNCFS only
// to virtiofs), so the server may still hold them in its cache — only
// fsync of each file reaches it (FUSE_FSYNC). A store on sshfs, a
// network filesystem's FUSE client, or the power-loss tests' lazyfs.
func syncfsNotDurable(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && st.Type == fuseSuperMagic
}

// WriteDelta writes the layer that turns parentTree into tree, for the
// overlay flavour opts.Flavour, into dir, which must not exist (its parent
// must): added and modified entries with tree's metadata and content,
// whiteouts for deleted ones, opaque directories where a directory
// replaces a non-directory, every directory on the way to a change with
// tree's metadata, and whole hardlink groups (see docs/snapshot.md,
// "Layers"). parentTree ZeroID gives the full tree. The layer is written
// into a temporary sibling and renamed into place; if dir exists, or
// appears meanwhile, the error wraps fs.ErrExist. MaxDepth is not used.
func WriteDelta(ctx context.Context, s *store.Store, parentTree, tree store.ID, dir string, opts LayerOptions) error {
	if err := opts.check(); err != nil {
		return err
	}
	if _, err := os.Lstat(dir); err == nil {
		return &fs.PathError{Op: "write layer", Path: dir, Err: fs.ErrExist}
	}
	return writeLayer(ctx, storeReader{s}, parentTree, tree, filepath.Clean(dir), opts, matConfig{})
}

// errLayerExists reports whether err is writeLayer's "the layer appeared
// meanwhile".
func errLayerExists(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Op == "rename" && errors.Is(err, fs.ErrExist)
}

// parseLayerName reports whether name is a layer's name in a cache: the hex
// id of a commit, with fullSuffix for a flattened layer.
func parseLayerName(name string) (id store.ID, full bool, ok bool) {
	if strings.HasSuffix(name, fullSuffix) {
		name, full = strings.TrimSuffix(name, fullSuffix), true
	}
	id, err := store.ParseID(name)
	if err != nil || id.String() != name { // lower-case hex only
		return store.ZeroID, false, false
	}
	return id, full, true
}
