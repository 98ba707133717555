package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// UpperKind says how an entry of a workspace's upper directory relates to
// the tree beneath it (overlayfs.Kind, converted by the caller).
type UpperKind uint8

const (
	// UpperAdded: nothing was beneath the path.
	UpperAdded UpperKind = iota + 1
	// UpperModified: an entry of the same type was beneath; a directory
	// keeps the entries beneath it that are not changes themselves.
	UpperModified
	// UpperDeleted: a whiteout hides the entry beneath and its subtree.
	UpperDeleted
	// UpperReplaced: something was beneath but this entry does not
	// continue it (type change, opaque directory, renamed directory).
	UpperReplaced
)

// String returns "added", "modified", "deleted" or "replaced".
func (k UpperKind) String() string {
	switch k {
	case UpperAdded:
		return "added"
	case UpperModified:
		return "modified"
	case UpperDeleted:
		return "deleted"
	case UpperReplaced:
		return "replaced"
	}
	return fmt.Sprintf("UpperKind(%d)", uint8(k))
}

// UpperChange is one entry of a workspace's delta, as overlayfs.Changes
// reports it (converted by the caller: package snapshot does not import
// overlayfs).
type UpperChange struct {
	// Path is slash-separated, relative to the root ("." is the root
	// itself), raw bytes. Every element must be a valid entry name.
	Path string
	Kind UpperKind
	// Opaque: a directory that hides everything beneath it.
	Opaque bool
	// RedirectFrom: for a directory renamed with redirect_dir (root), the
	// path in the BASE tree whose content it continues.
	RedirectFrom string
	// UpperPath is the entry on disk (for Deleted, the whiteout): its
	// metadata, content, user.* xattrs and symlink target are read from
	// it. When it is the upper directory + "/" + Path, as Changes reports
	// it, reads are confined to the upper directory (no symlink
	// followed); any other path is opened as given, only its last
	// element not followed.
	UpperPath string
	// ContentEqual, when set on a Modified regular file, reports whether
	// its bytes equal those of the entry beneath, so that the base
	// content id is reused without reading the file (overlayfs'
	// Change.ContentEqual compares sizes first).
	ContentEqual func() (bool, error)
	// Entry, when set, is the entry itself (an image layer's tar member,
	// package image) and UpperPath is not read: its content, if a file,
	// is already written through the Writer; Name is taken from Path. A
	// LinkGroup on it names a group of this change set only (any key no
	// tree holds, e.g. with a NUL in it): the members are re-keyed to
	// their first path, as hardlinks read from an upper are.
	Entry *store.TreeEntry
}

// ApplyOptions tune ApplyUpper.
type ApplyOptions struct {
	// StatCacheRoot keys the store's stat cache for the upper directory
	// (its absolute path): a later commit of the same workspace takes the
	// content of upper files whose stat is unchanged from the cache,
	// without reading them. Empty: no stat cache.
	StatCacheRoot string
	// Warn, if set, receives one call per entry not recorded as it is
	// (sockets skipped, user.overlay.* xattrs dropped, ...); path is
	// relative to the root. Calls are serialized.
	Warn func(path, msg string)
	// BaseStats, when set, are the statistics of the base tree (the base
	// commit's Stats): ApplyUpper then counts the new tree from them and
	// the change. Without them it reads every tree of the result to
	// count it, which costs what a walk of the whole tree costs.
	BaseStats *store.CommitStats
	// DeferStatCache leaves the stat cache's update to the caller:
	// ApplyResult.SaveStatCache, to be run in the Writer's Finish, so
	// that a commit is one transaction. Otherwise ApplyUpper saves it in
	// a transaction of its own.
	DeferStatCache bool
	// Previous, when set, is the tree of the last commit made from this
	// upper directory (the base stays where the upper was mounted): a
	// changed file's version there is its delta base.
	Previous store.ID
	// Owners, if set, maps the owner an upper entry has on disk to the
	// one recorded: an image root's upper holds the caller's ids where
	// the image sees root (and, with subordinate ids, their namespace's
	// ids where it sees its users).
	Owners func(uid, gid uint32) (uint32, uint32)
}

// ApplyResult describes a finished ApplyUpper.
type ApplyResult struct {
	// Tree is the new root tree; the caller commits it with the Writer.
	Tree store.ID
	// Stats summarize the new tree (Dirs excludes the root).
	Stats store.CommitStats
	// FilesRead counts upper files whose content was read (a hardlinked
	// inode once); CacheHits those taken from the stat cache. Files whose
	// content equals the base (ContentEqual) are neither.
	FilesRead, CacheHits int64
	// Changed counts the changes that altered the tree: the root's own
	// metadata (not recorded), skipped sockets over nothing, and
	// deletions of what the base did not hold are not counted.
	Changed int
	// SaveStatCache, with ApplyOptions.DeferStatCache, records the stat
	// cache in tx; nil when it has not changed.
	SaveStatCache func(tx *store.Tx) error
}

// ApplyUpper applies a workspace's delta (the changes overlayfs.Changes
// reports for its upper directory) to the tree base and returns the new
// tree, writing new content and trees through w; the caller commits it
// with w.Finish.
//
// Deleted removes the entry and its subtree. Added, Modified and Replaced
// non-directories become entries built from lstat of UpperPath: regular
// files with their content (read, or from the stat cache, or the base
// content when ContentEqual says equal), symlinks with their target,
// FIFOs and devices with their metadata; sockets are skipped with a
// warning. An Added or Replaced directory starts empty, with the upper's
// metadata, and holds only the changes below it; a Modified one keeps its
// entries; a directory with RedirectFrom starts from the base tree's
// subtree at RedirectFrom. Upper files that share an inode are one link
// group; base link groups that lose or move a member are re-grouped.
// Only the directories on the way to a change are read and written:
// untouched subtrees keep their ids. See docs/snapshot.md, "ApplyUpper".
//
// Every name is validated (store.ValidateName); upper entries are read
// relative to the upper directory without following symlinks, and an
// entry that cannot be read fails with an error naming it.
//
// With a scratch Writer (store.Store.NewScratchWriter: a diff, which must
// not write the store) the stat cache is read but not saved, and every
// file read is named to the Writer as its content's source.
func ApplyUpper(ctx context.Context, s *store.Store, w *store.Writer, base store.ID, changes []UpperChange, opts ApplyOptions) (*ApplyResult, error) {
	var ss statCacheStore = s
	if w.Scratch() {
		ss = loadOnlyStatCache{s}
	}
	return applyUpper(ctx, storeReader{s}, w, ss, base, changes, opts, applyConfig{})
}

// loadOnlyStatCache reads a store's stat caches and saves nothing: the
// content ids a scratch Writer computed are not in the store.
type loadOnlyStatCache struct{ s *store.Store }

func (c loadOnlyStatCache) LoadStatCache(ctx context.Context, root string) (map[string]store.StatEntry, error) {
	return c.s.LoadStatCache(ctx, root)
}

func (loadOnlyStatCache) SaveStatCache(context.Context, string, map[string]store.StatEntry, int64) error {
	return nil
}

// sourceNoter is the part of a scratch store.Writer that learns which
// file a content was read from, to read it again rather than keep it in
// memory.
type sourceNoter interface {
	NoteSource(id store.ID, path string)
}

// applyConfig holds knobs that tests turn; the zero value is production.
type applyConfig struct {
	margin  time.Duration // racyMargin when zero
	workers int           // GOMAXPROCS when zero
	now     func() int64  // time.Now().UnixNano when nil
	// wholeDirs turns off loading large directories run by run
	// (runs.go), so tests can compare the two.
	wholeDirs bool
	// counted, when set, receives the trees read and the runs of large
	// directories loaded (tests).
	counted func(trees, runs int)
}

// upFile is a regular file of the upper directory that becomes an entry.
type upFile struct {
	path  string // relative to the root
	src   string // the upper file's path, as the change gave it
	e     *store.TreeEntry
	st    unix.Stat_t
	open  func(flags int) (int, error) // opens the file, not following symlinks
	equal func() (bool, error)         // ContentEqual, or nil
	// base is the content beneath, for equal.
	base    *store.TreeEntry
	prev    store.ID // the content of the same path beneath, or ZeroID
	planned int64    // the size counted in the statistics
	removed bool     // replaced by a later change
	cached  *store.StatEntry
	rest    []*upFile     // the other changed names of a hardlinked inode
	extra   []*linkedName // its names that are not changes
	isRest  bool          // one of another file's rest
}

// linkedName is an unchanged entry that shares an upper file's inode.
type linkedName struct {
	path    string
	e       *store.TreeEntry
	planned int64 // its size before it took the inode's
}

type applyUpperState struct {
	ctx  context.Context
	tc   *treeCache
	w    objectWriter
	ss   statCacheStore
	opts ApplyOptions
	cfg  applyConfig
	base store.ID
	root *edir

	uppers  map[string]int // upper root → O_PATH descriptor
	parents parentCache

	files     []*upFile
	fromUpper map[string]*upFile // result path → the upper file now there
	touched   map[string]bool    // base link groups that lost, moved or re-keyed a member
	delta     store.CommitStats
	changed   int

	startNs   int64
	cache     map[string]store.StatEntry
	filesRead atomic.Int64
	cacheHits atomic.Int64

	warnMu sync.Mutex
}

func applyUpper(ctx context.Context, r objectReader, w objectWriter, ss statCacheStore, base store.ID, changes []UpperChange, opts ApplyOptions, cfg applyConfig) (res *ApplyResult, err error) {
	if cfg.margin == 0 {
		cfg.margin = racyMargin
	}
	if cfg.workers == 0 {
		cfg.workers = runtime.GOMAXPROCS(0)
	}
	if cfg.now == nil {
		cfg.now = func() int64 { return time.Now().UnixNano() }
	}
	a := &applyUpperState{
		ctx: ctx, tc: newTreeCache(ctx, r), w: w, ss: ss, opts: opts, cfg: cfg, base: base,
		uppers:    map[string]int{},
		fromUpper: map[string]*upFile{},
		touched:   map[string]bool{},
	}
	defer a.close()
	if _, ok := w.(treeSplicer); ok && !cfg.wholeDirs {
		a.tc.runs = true
	}
	res, err = a.run(changes)
	if cfg.counted != nil {
		cfg.counted(a.tc.reads, a.tc.runsLoaded)
	}
	if err != nil {
		return nil, fmt.Errorf("apply upper to %s: %w", base.Short(), err)
	}
	return res, nil
}

func (a *applyUpperState) close() {
	a.parents.closeAll()
	for _, fd := range a.uppers {
		unix.Close(fd)
	}
}

func (a *applyUpperState) warn(p, msg string) {
	a.warnMu.Lock()
	defer a.warnMu.Unlock()
	if a.opts.Warn != nil {
		a.opts.Warn(p, msg)
	}
}

// checkedChanges validates the paths of cs and returns them sorted in
// walk order (parents first).
func checkedChanges(cs []UpperChange) ([]*UpperChange, error) {
	out := make([]*UpperChange, 0, len(cs))
	for i := range cs {
		c := &cs[i]
		if err := checkRelPath(c.Path, true); err != nil {
			return nil, err
		}
		if c.Kind < UpperAdded || c.Kind > UpperReplaced {
			return nil, fmt.Errorf("%q: unknown change kind %d", c.Path, c.Kind)
		}
		if c.RedirectFrom != "" {
			if err := checkRelPath(c.RedirectFrom, false); err != nil {
				return nil, fmt.Errorf("%q: redirect: %w", c.Path, err)
			}
		}
		out = append(out, c)
	}
	key := func(c *UpperChange) string {
		if c.Path == "." {
			return ""
		}
		return c.Path
	}
	slices.SortStableFunc(out, func(x, y *UpperChange) int { return cmpWalk(key(x), key(y)) })
	for i := 1; i < len(out); i++ {
		if key(out[i-1]) == key(out[i]) {
			return nil, fmt.Errorf("%q: two changes for one path", out[i].Path)
		}
	}
	return out, nil
}

// checkRelPath checks that p is a slash-separated relative path of valid
// entry names ("." alone, the root, only if root).
func checkRelPath(p string, root bool) error {
	if p == "." && root {
		return nil
	}
	for _, name := range strings.Split(p, "/") {
		if err := store.ValidateName(name); err != nil {
			return fmt.Errorf("path %q: %w", p, err)
		}
	}
	return nil
}

func (a *applyUpperState) run(changes []UpperChange) (*ApplyResult, error) {
	cs, err := checkedChanges(changes)
	if err != nil {
		return nil, err
	}
	a.startNs = a.cfg.now()
	err = a.tc.inView(func() error {
		var err error
		if a.root, err = a.tc.loadDir(a.base, "", ""); err != nil {
			return err
		}
		for _, c := range cs {
			if err := a.apply(c); err != nil {
				return err
			}
		}
		if err := a.upperGroups(cs); err != nil {
			return err
		}
		return a.tc.canonGroups(a.root, a.touched, func(p string) bool { return a.fromUpper[p] != nil }, a.warn)
	})
	if err != nil {
		return nil, err
	}
	a.parents.closeAll()
	if a.opts.StatCacheRoot != "" {
		if a.cache, err = a.ss.LoadStatCache(a.ctx, a.opts.StatCacheRoot); err != nil {
			return nil, fmt.Errorf("load stat cache: %w", err)
		}
	}
	if err := a.readContent(); err != nil {
		return nil, err
	}

	var stats store.CommitStats
	if a.opts.BaseStats != nil {
		stats = *a.opts.BaseStats
		addStats(&stats, a.delta, 1)
		// Sizes as read, which may differ from the stat ApplyUpper
		// counted first (a file that grew meanwhile).
		for _, f := range a.files {
			if f.removed {
				continue
			}
			stats.Bytes += f.e.Size - f.planned
			for _, x := range f.extra {
				stats.Bytes += x.e.Size - x.planned
			}
		}
	} else {
		err := a.tc.inView(func() error {
			in, err := a.tc.countDir(a.root, "", 0)
			if err == nil {
				stats = in.stats
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("count the new tree: %w", err)
		}
	}

	x := newTreeWriter(a.ctx, a.w)
	for _, f := range a.files {
		if !f.removed {
			x.own[f.e.Content] = true
		}
	}
	tree, changed, err := x.write(a.root, "", 0)
	if err != nil {
		return nil, err
	}
	if !changed {
		tree = a.base
		if err := x.retainOne(tree, "base tree"); err != nil {
			return nil, err
		}
	}
	if err := x.retainReused(); err != nil {
		return nil, err
	}
	// No Flush: a caller that commits writes the rest in Finish's
	// transaction (for a small change, the only one); a caller that reads
	// the new tree back flushes first.
	save, err := a.saveStatCache()
	if err != nil {
		return nil, err
	}
	return &ApplyResult{
		Tree:          tree,
		Stats:         stats,
		FilesRead:     a.filesRead.Load(),
		CacheHits:     a.cacheHits.Load(),
		Changed:       a.changed,
		SaveStatCache: save,
	}, nil
}

// apply makes the change c in the tree being built.
func (a *applyUpperState) apply(c *UpperChange) error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	if c.Path == "." {
		return a.applyRoot(c)
	}
	dir, name := splitRel(c.Path)
	parent, err := a.tc.resolve(a.root, dir)
	if err != nil {
		return fmt.Errorf("%q: parent: %w (changes do not match the base tree)", c.Path, err)
	}
	if err := a.tc.need(parent, name, dir); err != nil {
		return err
	}
	old := parent.entries[name]
	if c.Kind == UpperDeleted {
		if old == nil {
			return nil // nothing beneath in the tree: nothing to delete
		}
		a.changed++
		return a.remove(parent, name, c.Path)
	}
	if c.Entry != nil {
		return a.applyEntry(c, parent, name, old)
	}
	e, st, open, err := a.upperEntry(c, name)
	if err != nil {
		return err
	}
	if e == nil { // skipped (a socket): what was beneath is gone
		if old != nil {
			a.changed++
			return a.remove(parent, name, c.Path)
		}
		return nil
	}
	a.changed++
	if e.Type == store.TypeDir {
		return a.applyDir(c, parent, name, old, e)
	}
	f := &upFile{path: c.Path, src: c.UpperPath, e: e, st: *st, open: open}
	if old != nil && old.Type == store.TypeFile {
		f.prev = old.Content // its previous version: a delta base
	}
	if e.Type == store.TypeFile && c.Kind == UpperModified && c.ContentEqual != nil &&
		old != nil && old.Type == store.TypeFile {
		f.equal = c.ContentEqual
		b := *old
		f.base = &b
	}
	if old != nil {
		if err := a.remove(parent, name, c.Path); err != nil {
			return err
		}
	}
	parent.entries[name] = e
	parent.dirty = true
	addStats(&a.delta, entryStats(e), 1)
	if e.Type == store.TypeFile {
		f.planned = e.Size
		a.files = append(a.files, f)
		a.fromUpper[c.Path] = f
	}
	return nil
}

// applyEntry puts c.Entry at name in parent (old is what was there).
func (a *applyUpperState) applyEntry(c *UpperChange, parent *edir, name string, old *store.TreeEntry) error {
	e := *c.Entry
	e.Name = name
	if e.Type == 0 || e.Type == store.TypeSocket {
		return fmt.Errorf("%q: entry of type %v cannot be recorded", c.Path, e.Type)
	}
	a.changed++
	if e.Type == store.TypeDir {
		e.Content = store.ZeroID
		return a.applyDir(c, parent, name, old, &e)
	}
	if old != nil {
		if err := a.remove(parent, name, c.Path); err != nil {
			return err
		}
	}
	if e.LinkGroup != "" {
		a.touched[e.LinkGroup] = true
	}
	parent.entries[name] = &e
	parent.dirty = true
	addStats(&a.delta, entryStats(&e), 1)
	return nil
}

// applyRoot applies a change of the root itself. Its own metadata is not
// recorded; an opaque or replaced root starts empty.
func (a *applyUpperState) applyRoot(c *UpperChange) error {
	switch {
	case c.Kind == UpperDeleted:
		return fmt.Errorf("%q: the root cannot be deleted", c.Path)
	case c.RedirectFrom != "" && !c.Opaque:
		src, err := a.baseDir(c.RedirectFrom)
		if err != nil {
			return err
		}
		if err := a.removeAll(a.root, ""); err != nil {
			return err
		}
		in, err := a.tc.count(src.Content, c.RedirectFrom, 0)
		if err != nil {
			return err
		}
		if a.root, err = a.tc.loadDir(src.Content, c.RedirectFrom, ""); err != nil {
			return err
		}
		a.root.dirty = true
		addStats(&a.delta, in.stats, 1)
		a.touch(in.groups)
		a.changed++
	case c.Kind == UpperAdded || c.Kind == UpperReplaced || c.Opaque:
		if err := a.removeAll(a.root, ""); err != nil {
			return err
		}
		a.root = newFreshDir()
		a.changed++
	}
	return nil
}

// applyDir puts the upper directory e at name in parent.
func (a *applyUpperState) applyDir(c *UpperChange, parent *edir, name string, old, e *store.TreeEntry) error {
	keep := c.Kind == UpperModified && !c.Opaque && c.RedirectFrom == "" && old != nil && old.Type == store.TypeDir
	parent.dirty = true
	switch {
	case keep:
		e.Content = old.Content
		parent.entries[name] = e
	case c.RedirectFrom != "" && !c.Opaque:
		// The renamed directory continues the base tree's directory at
		// RedirectFrom (not what earlier changes made of it); the changes
		// below it apply on top.
		src, err := a.baseDir(c.RedirectFrom)
		if err != nil {
			return fmt.Errorf("%q: %w", c.Path, err)
		}
		if old != nil {
			if err := a.remove(parent, name, c.Path); err != nil {
				return err
			}
		}
		in, err := a.tc.count(src.Content, c.RedirectFrom, 0)
		if err != nil {
			return err
		}
		e.Content = src.Content
		parent.entries[name] = e
		parent.setOrigin(name, c.RedirectFrom)
		addStats(&a.delta, entryStats(e), 1)
		addStats(&a.delta, in.stats, 1)
		// Members moved: their group keys may no longer be their first
		// member.
		a.touch(in.groups)
	default:
		if old != nil {
			if err := a.remove(parent, name, c.Path); err != nil {
				return err
			}
		}
		parent.entries[name] = e
		parent.subs[name] = newFreshDir()
		addStats(&a.delta, entryStats(e), 1)
	}
	return nil
}

// baseDir returns the directory entry at p in the base tree.
func (a *applyUpperState) baseDir(p string) (*store.TreeEntry, error) {
	cur := &store.TreeEntry{Type: store.TypeDir, Content: a.base}
	rel := ""
	for _, name := range strings.Split(p, "/") {
		rel = joinRel(rel, name)
		t, err := a.tc.get(cur.Content, rel)
		if err != nil {
			return nil, err
		}
		i, ok := slices.BinarySearchFunc(t.Entries, name, func(e store.TreeEntry, n string) int { return strings.Compare(e.Name, n) })
		if !ok || t.Entries[i].Type != store.TypeDir {
			return nil, fmt.Errorf("redirect source %q is not a directory in the base tree: %w", p, store.ErrNotFound)
		}
		cur = &t.Entries[i]
	}
	return cur, nil
}

// remove deletes the entry name of parent (at p) and notes what goes with
// it: its statistics and the link groups it and its subtree belong to.
func (a *applyUpperState) remove(parent *edir, name, p string) error {
	old := parent.entries[name]
	addStats(&a.delta, entryStats(old), -1)
	if old.LinkGroup != "" {
		a.touched[old.LinkGroup] = true
	}
	if f := a.fromUpper[p]; f != nil && f.path == p {
		f.removed = true
		delete(a.fromUpper, p)
	}
	if old.Type == store.TypeDir {
		var in *subInfo
		var err error
		if s, ok := parent.subs[name]; ok {
			in, err = a.tc.countDir(s, p, 0)
		} else {
			in, err = a.tc.count(old.Content, p, 0)
		}
		if err != nil {
			return err
		}
		addStats(&a.delta, in.stats, -1)
		a.touch(in.groups)
	}
	parent.forget(name)
	return nil
}

// removeAll removes every entry of d (at p).
func (a *applyUpperState) removeAll(d *edir, p string) error {
	if err := a.tc.full(d, p); err != nil {
		return err
	}
	for _, name := range d.sortedNames() {
		if err := a.remove(d, name, joinRel(p, name)); err != nil {
			return err
		}
	}
	return nil
}

func (a *applyUpperState) touch(groups []string) {
	for _, g := range groups {
		a.touched[g] = true
	}
}

// --- reading the upper directory ---------------------------------------------

// parentCache keeps a few directories of the upper open (O_PATH): changes
// come in walk order, so siblings share their parent's descriptor.
type parentCache struct {
	fds  map[string]int
	keys []string
}

const parentCacheSize = 64

func (pc *parentCache) get(key string, open func() (int, error)) (int, error) {
	if fd, ok := pc.fds[key]; ok {
		return fd, nil
	}
	fd, err := open()
	if err != nil {
		return -1, err
	}
	if pc.fds == nil {
		pc.fds = map[string]int{}
	}
	if len(pc.keys) >= parentCacheSize {
		old := pc.keys[0]
		pc.keys = pc.keys[1:]
		unix.Close(pc.fds[old])
		delete(pc.fds, old)
	}
	pc.fds[key] = fd
	pc.keys = append(pc.keys, key)
	return fd, nil
}

func (pc *parentCache) closeAll() {
	for _, fd := range pc.fds {
		unix.Close(fd)
	}
	pc.fds, pc.keys = nil, nil
}

// upperRoot returns the upper directory c.UpperPath belongs to: UpperPath
// without "/" + Path. ok is false when UpperPath does not end in Path.
func upperRoot(c *UpperChange) (string, bool) {
	up := filepath.Clean(c.UpperPath)
	if c.Path == "." {
		return up, true
	}
	if !strings.HasSuffix(up, "/"+c.Path) || len(up) == len(c.Path)+1 {
		return "", false
	}
	return up[:len(up)-len(c.Path)-1], true
}

// parentOf opens the directory holding c's upper entry and returns it
// with the entry's name in it. When UpperPath is UpperRoot/Path, the
// directory is opened beneath the upper root without following any
// symlink (the sandboxed command can write the upper directory); else
// it is UpperPath's parent, opened as given.
func (a *applyUpperState) parentOf(c *UpperChange) (int, string, error) {
	root, ok := upperRoot(c)
	if !ok {
		dir, name := filepath.Split(filepath.Clean(c.UpperPath))
		fd, err := a.parents.get("\x00"+dir, func() (int, error) {
			return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		})
		if err != nil {
			return -1, "", &fs.PathError{Op: "open", Path: dir, Err: err}
		}
		return fd, name, nil
	}
	rootFD, ok := a.uppers[root]
	if !ok {
		fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, "", &fs.PathError{Op: "open", Path: root, Err: err}
		}
		a.uppers[root] = fd
		rootFD = fd
	}
	dir, name := splitRel(c.Path)
	fd, err := a.parents.get(root+"\x00"+dir, func() (int, error) {
		return openBeneath(rootFD, dir, unix.O_PATH|unix.O_DIRECTORY)
	})
	if err != nil {
		return -1, "", &fs.PathError{Op: "open", Path: filepath.Join(root, dir), Err: err}
	}
	return fd, name, nil
}

// kernelMarkers are the names overlayfs keeps in its xattr namespace
// (Linux: fs/overlayfs/overlayfs.h OVL_XATTR_*): dropped silently. Any
// other user.overlay.* xattr is data a user set (escaped by the kernel as
// user.overlay.overlay.*, 6.7+, or a plain one on a trusted mount) that a
// tree cannot carry into a layer: dropped with a warning.
var kernelMarkers = map[string]bool{
	"opaque": true, "redirect": true, "origin": true, "impure": true, "nlink": true,
	"upper": true, "uuid": true, "metacopy": true, "protattr": true, "whiteout": true,
	"whiteouts": true,
}

// upperEntry builds the entry for c from its upper entry on disk: nil (and
// a warning) for a socket or an unknown type. open opens the entry (for a
// regular file) without following symlinks.
func (a *applyUpperState) upperEntry(c *UpperChange, name string) (*store.TreeEntry, *unix.Stat_t, func(int) (int, error), error) {
	pfd, fname, err := a.parentOf(c)
	if err != nil {
		return nil, nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, fname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, nil, nil, &fs.PathError{Op: "lstat", Path: c.UpperPath, Err: err}
	}
	e := &store.TreeEntry{
		Name: name, Type: entryType(st.Mode), Mode: st.Mode & 0o7777,
		UID: st.Uid, GID: st.Gid, MtimeNs: timespecNs(st.Mtim),
	}
	if a.opts.Owners != nil {
		e.UID, e.GID = a.opts.Owners(e.UID, e.GID)
	}
	switch e.Type {
	case store.TypeSocket:
		a.warn(c.Path, "socket; not recorded")
		return nil, nil, nil, nil
	case 0:
		a.warn(c.Path, fmt.Sprintf("unknown file type %#o; not recorded", st.Mode&unix.S_IFMT))
		return nil, nil, nil, nil
	case store.TypeSymlink:
		t, err := readlinkat(pfd, fname, st.Size)
		if err != nil {
			return nil, nil, nil, &fs.PathError{Op: "readlink", Path: c.UpperPath, Err: err}
		}
		if t == "" || strings.IndexByte(t, 0) >= 0 {
			return nil, nil, nil, fmt.Errorf("%s: symlink target %q: %w", c.UpperPath, t, store.ErrInvalidName)
		}
		e.Target, e.Size = t, int64(len(t))
	case store.TypeCharDev, store.TypeBlockDev:
		e.Rdev = st.Rdev
	case store.TypeFile, store.TypeDir:
		if e.Type == store.TypeFile {
			e.Size = st.Size
		}
		xs, err := listUserXattrs(xattrsAt(pfd, fname, c.UpperPath))
		if err != nil {
			return nil, nil, nil, &fs.PathError{Op: "listxattr", Path: c.UpperPath, Err: err}
		}
		e.Xattrs = a.dropOverlayXattrs(c.Path, xs)
	}
	open := func(flags int) (int, error) {
		// Reopened when the content is read: the parent cache may have
		// closed pfd by then.
		if root, ok := upperRoot(c); ok {
			if fd, ok := a.uppers[root]; ok {
				return openBeneath(fd, c.Path, flags)
			}
		}
		return unix.Open(c.UpperPath, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return e, &st, open, nil
}

var (
	procFDOnce sync.Once
	procFDOK   bool
)

// xattrsAt names the entry name of the directory open at dirfd for the
// path-based xattr calls (which do not follow a final symlink): through
// /proc/self/fd, so that no other element of the path is resolved again,
// or by its absolute path abs where /proc is not mounted.
func xattrsAt(dirfd int, name, abs string) xattrSource {
	procFDOnce.Do(func() {
		var st unix.Stat_t
		procFDOK = unix.Stat("/proc/self/fd", &st) == nil
	})
	if procFDOK {
		return xattrSource{path: "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name}
	}
	return xattrSource{path: abs}
}

// dropOverlayXattrs removes the overlay namespace from xs (see
// kernelMarkers).
func (a *applyUpperState) dropOverlayXattrs(p string, xs []store.Xattr) []store.Xattr {
	out := xs[:0]
	for _, x := range xs {
		if rest, ok := strings.CutPrefix(x.Name, overlayXattrUser); ok {
			if !kernelMarkers[rest] {
				a.warn(p, "xattr "+x.Name+" is in the overlay namespace; not recorded")
			}
			continue
		}
		out = append(out, x)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// --- hardlinks -----------------------------------------------------------------

type devIno struct{ dev, ino uint64 }

// upperGroups makes upper files that share an inode one link group, keyed
// by the first name in walk order. When an inode has more names than the
// changes list (a name whose metadata and content equal the entry beneath
// is not reported, e.g. a lower file copied up and linked to), the upper
// directory is walked to find them.
func (a *applyUpperState) upperGroups(cs []*UpperChange) error {
	inodes := map[devIno][]*upFile{}
	for _, f := range a.files {
		if !f.removed && f.st.Nlink > 1 {
			k := devIno{f.st.Dev, f.st.Ino}
			inodes[k] = append(inodes[k], f)
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	missing := map[devIno]bool{}
	for k, fs := range inodes {
		if uint64(len(fs)) < uint64(fs[0].st.Nlink) {
			missing[k] = true
		}
	}
	found := map[devIno][]string{}
	if len(missing) > 0 {
		var err error
		if found, err = a.findNames(cs, missing); err != nil {
			return err
		}
	}
	for k, fs := range inodes {
		first := fs[0] // a.files is in walk order
		first.rest = fs[1:]
		for _, m := range first.rest {
			m.isRest = true
		}
		names := make([]string, 0, len(fs))
		for _, f := range fs {
			names = append(names, f.path)
		}
		for _, p := range found[k] {
			if a.fromUpper[p] != nil {
				continue
			}
			dir, name := splitRel(p)
			d, err := a.tc.resolve(a.root, dir)
			if err != nil {
				a.warn(p, "a hardlink of "+first.path+" in the upper directory is not in the tree; not linked")
				continue
			}
			if err := a.tc.need(d, name, dir); err != nil {
				return err
			}
			e := d.entries[name]
			if e == nil || e.Type != store.TypeFile {
				a.warn(p, "a hardlink of "+first.path+" in the upper directory is not a file in the tree; not linked")
				continue
			}
			if e.LinkGroup != "" {
				a.touched[e.LinkGroup] = true
			}
			d.dirty = true
			first.extra = append(first.extra, &linkedName{path: p, e: e, planned: e.Size})
			a.fromUpper[p] = first
			names = append(names, p)
		}
		slices.SortFunc(names, cmpWalk)
		key := ""
		if len(names) > 1 {
			key = names[0]
		}
		for _, f := range fs {
			f.e.LinkGroup = key
		}
		for _, x := range first.extra {
			x.e.LinkGroup = key
		}
	}
	return nil
}

// findNames walks the upper directories of cs for the regular files of
// the inodes in want and returns their paths, relative to the root.
func (a *applyUpperState) findNames(cs []*UpperChange, want map[devIno]bool) (map[devIno][]string, error) {
	roots := map[string]bool{}
	for _, c := range cs {
		if r, ok := upperRoot(c); ok {
			roots[r] = true
		}
	}
	found := map[devIno][]string{}
	for root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok {
				return nil
			}
			k := devIno{uint64(st.Dev), st.Ino}
			if want[k] {
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				found[k] = append(found[k], filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("find hardlinks in %s: %w", root, err)
		}
	}
	return found, nil
}

// --- content -----------------------------------------------------------------

// readContent obtains the content of every upper file: from the stat
// cache (retained, on many goroutines: the Writer batches concurrent
// Retains), from the base when ContentEqual says it is the same, or by
// reading it (on cfg.workers goroutines).
// previousAt returns the content of the file at the slash-separated path
// rel in tree, or ZeroID (no such file, or a tree that cannot be read: a
// delta base is only a hint).
func (a *applyUpperState) previousAt(tree store.ID, rel string) store.ID {
	id := tree
	for rest := rel; ; {
		name, more, _ := strings.Cut(rest, "/")
		t, err := a.tc.get(id, rel)
		if err != nil {
			return store.ZeroID
		}
		i, ok := slices.BinarySearchFunc(t.Entries, name, func(e store.TreeEntry, n string) int { return strings.Compare(e.Name, n) })
		if !ok {
			return store.ZeroID
		}
		e := &t.Entries[i]
		if more == "" {
			if e.Type == store.TypeFile {
				return e.Content
			}
			return store.ZeroID
		}
		if e.Type != store.TypeDir {
			return store.ZeroID
		}
		id, rest = e.Content, more
	}
}

func (a *applyUpperState) readContent() error {
	var jobs []*upFile
	for _, f := range a.files {
		// Later names of an inode are filled from the first.
		if !f.removed && !f.isRest {
			jobs = append(jobs, f)
		}
	}
	if len(jobs) == 0 {
		return nil
	}

	var hits, misses []*upFile
	for _, f := range jobs {
		if _, ok := a.cacheMatch(f); ok {
			hits = append(hits, f)
		} else {
			misses = append(misses, f)
		}
	}
	if p := a.opts.Previous; !p.IsZero() && p != a.base {
		// The files' versions in the last commit of this upper directory
		// are closer to them than the ones beneath: better delta bases.
		err := a.tc.inView(func() error {
			for _, f := range misses {
				if id := a.previousAt(p, f.path); !id.IsZero() {
					f.prev = id
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	confirm := func(f *upFile) (bool, error) {
		ce, _ := a.cacheMatch(f)
		ok, err := a.w.Retain(ce.Content)
		if err != nil {
			return false, fmt.Errorf("%s: retain cached content: %w", f.path, err)
		}
		if ok {
			f.e.Content, f.e.Size = ce.Content, ce.Size
			f.cached = &ce
			a.cacheHits.Add(1)
			a.finish(f)
		}
		return ok, nil // not ok: gone from the store (gc), read the file
	}
	return cachedReads(a.ctx, a.cfg.workers, hits, misses, confirm, a.obtain)
}

// cacheMatch returns f's stat cache entry if f's stat is unchanged.
func (a *applyUpperState) cacheMatch(f *upFile) (store.StatEntry, bool) {
	ce, ok := a.cache[f.path]
	st := &f.st
	return ce, ok && ce.Dev == st.Dev && ce.Ino == st.Ino && ce.Mode == st.Mode &&
		ce.Size == st.Size && ce.MtimeNs == timespecNs(st.Mtim) && ce.CtimeNs == timespecNs(st.Ctim)
}

// obtain sets f's content: the base's when ContentEqual says so, else by
// reading the file.
func (a *applyUpperState) obtain(f *upFile, buf *[]byte) error {
	if f.equal != nil && f.base != nil && f.base.Size == f.st.Size {
		same, err := f.equal()
		if err != nil {
			return fmt.Errorf("%s: compare with the base: %w", f.path, err)
		}
		if same {
			ok, err := a.w.Retain(f.base.Content)
			if err != nil {
				return fmt.Errorf("%s: retain base content: %w", f.path, err)
			}
			if ok {
				f.e.Content, f.e.Size = f.base.Content, f.base.Size
				st := &f.st
				f.cached = &store.StatEntry{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size,
					MtimeNs: timespecNs(st.Mtim), CtimeNs: timespecNs(st.Ctim), Content: f.base.Content}
				a.finish(f)
				return nil
			}
		}
	}
	if err := a.readFile(f, buf); err != nil {
		return err
	}
	a.filesRead.Add(1)
	a.finish(f)
	return nil
}

// finish copies the content and metadata of the first name of an inode to
// its other names.
func (a *applyUpperState) finish(f *upFile) {
	copyTo := func(e *store.TreeEntry) {
		e.Content, e.Size, e.Mode = f.e.Content, f.e.Size, f.e.Mode
		e.UID, e.GID, e.MtimeNs, e.Xattrs = f.e.UID, f.e.GID, f.e.MtimeNs, f.e.Xattrs
	}
	for _, m := range f.rest {
		copyTo(m.e)
		if f.cached != nil {
			c := *f.cached
			m.cached = &c
		}
	}
	for _, x := range f.extra {
		copyTo(x.e)
	}
}

// readFile reads f and stores its content, like Import: a file that
// changes while it is read is read once more, and then stored as last
// read, with a warning, and kept out of the stat cache.
func (a *applyUpperState) readFile(f *upFile, buf *[]byte) error {
	for attempt := 1; ; attempt++ {
		stable, err := a.readOnce(f, buf)
		if err != nil {
			return err
		}
		if stable {
			st := &f.st
			f.cached = &store.StatEntry{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size,
				MtimeNs: timespecNs(st.Mtim), CtimeNs: timespecNs(st.Ctim), Content: f.e.Content}
			return nil
		}
		if attempt == 2 {
			a.warn(f.path, "changed while being read (twice); stored the last read")
			return nil
		}
	}
}

func (a *applyUpperState) readOnce(f *upFile, buf *[]byte) (bool, error) {
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := f.open(flags | unix.O_NOATIME)
	if err == unix.EPERM { // O_NOATIME needs ownership or CAP_FOWNER
		fd, err = f.open(flags)
	}
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: f.path, Err: err}
	}
	defer unix.Close(fd)
	var before, after unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: f.path, Err: err}
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, &fs.PathError{Op: "open", Path: f.path, Err: errors.New("replaced by another type while the commit ran")}
	}
	xs, err := listUserXattrs(xattrSource{fd: fd})
	if err != nil {
		return false, &fs.PathError{Op: "listxattr", Path: f.path, Err: err}
	}
	r := &fdReader{fd: fd, prog: &progress{}}
	var id store.ID
	var size int64
	if ext, sparse := dataExtents(fd, &before); sparse {
		if id, size, err = writeSparse(a.w, fd, before.Size, ext, r); err != nil {
			return false, a.readErr(f, err)
		}
	} else if before.Size <= smallFileMax {
		b, full, err := r.readSmall(buf, smallFileMax)
		if err != nil {
			return false, a.readErr(f, err)
		}
		size = int64(len(b))
		switch {
		case full:
			if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
				return false, a.readErr(f, err)
			}
			if id, size, err = a.w.WriteContentLike(r, f.prev); err != nil {
				return false, a.readErr(f, err)
			}
		case size > 0:
			if id, err = a.w.WriteBytesLike(b, f.prev); err != nil {
				return false, fmt.Errorf("%s: %w", f.path, err)
			}
		}
	} else if id, size, err = a.w.WriteContentLike(r, f.prev); err != nil {
		return false, a.readErr(f, err)
	}
	if err := unix.Fstat(fd, &after); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: f.path, Err: err}
	}
	if ns, ok := a.w.(sourceNoter); ok {
		ns.NoteSource(id, f.src)
	}
	f.st = after
	e := f.e
	e.Content, e.Size = id, size
	e.Mode, e.UID, e.GID, e.MtimeNs = after.Mode&0o7777, after.Uid, after.Gid, timespecNs(after.Mtim)
	if a.opts.Owners != nil {
		e.UID, e.GID = a.opts.Owners(e.UID, e.GID)
	}
	e.Xattrs = a.dropOverlayXattrs(f.path, xs)
	return size == after.Size && before.Size == after.Size &&
		before.Mtim == after.Mtim && before.Ctim == after.Ctim, nil
}

func (a *applyUpperState) readErr(f *upFile, err error) error {
	var re *readError
	if errors.As(err, &re) {
		return &fs.PathError{Op: "read", Path: f.path, Err: re.err}
	}
	return fmt.Errorf("%s: %w", f.path, err)
}

// saveStatCache remembers the stat and content of every upper file for the
// next commit of the same upper directory, under the racy rule of Import:
// only files whose mtime and ctime are older than the start minus
// racyMargin. Not rewritten when nothing would change.
func (a *applyUpperState) saveStatCache() (deferred func(tx *store.Tx) error, err error) {
	if a.opts.StatCacheRoot == "" {
		return nil, nil
	}
	if !filepath.IsAbs(a.opts.StatCacheRoot) {
		return nil, fmt.Errorf("stat cache root %q is not absolute", a.opts.StatCacheRoot)
	}
	limit := a.startNs - int64(a.cfg.margin)
	entries := map[string]store.StatEntry{}
	add := func(f *upFile) {
		if f.removed || f.cached == nil || f.cached.MtimeNs >= limit || f.cached.CtimeNs >= limit {
			return
		}
		entries[f.path] = *f.cached
	}
	for _, f := range a.files {
		add(f)
	}
	if sameStatCache(a.cache, entries) {
		return nil, nil
	}
	root := a.opts.StatCacheRoot
	if a.opts.DeferStatCache {
		return func(tx *store.Tx) error {
			if err := tx.SaveStatCache(root, entries, limit); err != nil {
				return fmt.Errorf("save stat cache: %w", err)
			}
			return nil
		}, nil
	}
	if err := a.ss.SaveStatCache(a.ctx, root, entries, limit); err != nil {
		return nil, fmt.Errorf("save stat cache: %w", err)
	}
	return nil, nil
}
