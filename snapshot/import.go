package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// ImportOptions tune Import. The zero value imports everything and fails on
// the first unreadable entry.
type ImportOptions struct {
	// Exclude are globs on slash-separated paths relative to the source
	// root; a glob without a slash matches a name at any depth, "**"
	// matches any number of path elements, a trailing slash matches only
	// directories, and a match on a directory skips it whole. See
	// docs/snapshot.md.
	Exclude []string
	// SkipUnreadable skips entries that cannot be read for lack of
	// permission, with a warning, instead of failing.
	SkipUnreadable bool
	// Warn, if set, receives one call per skipped or suspicious entry. path
	// is the entry's path relative to the source root. Calls are
	// serialized.
	Warn func(path, msg string)
	// Progress, if set, is called with the advance of each phase:
	// serialized, at most every 50 ms and at the end of each phase.
	Progress func(p Progress)
	// NoStatCache reads every file instead of trusting the stat cache. The
	// cache is still rewritten afterwards.
	NoStatCache bool
}

// Progress phases. Import goes through walk, read and write; Materialize
// through walk (loading trees) and write.
const (
	PhaseWalk  = "walk"  // Entries: entries seen so far; no totals
	PhaseRead  = "read"  // Entries/EntriesTotal: files; Bytes/BytesTotal: their sizes
	PhaseWrite = "write" // Import: directories stored. Materialize: entries and bytes written
)

// Progress is a snapshot of a long operation's advance, for a progress bar.
// A total of zero means unknown.
type Progress struct {
	Phase        string
	Entries      int64
	EntriesTotal int64
	Bytes        int64
	BytesTotal   int64
}

// ImportResult describes a finished Import.
type ImportResult struct {
	// Tree is the root tree; the caller commits it with the Writer.
	Tree store.ID
	// Stats summarize the tree (Dirs excludes the root).
	Stats store.CommitStats
	// FilesRead counts files whose content was read (a hardlink group is
	// read once).
	FilesRead int64
	// CacheHits counts files whose content was reused from the stat cache.
	CacheHits int64
	// Skipped lists the paths, relative to the source root, that exist but
	// were not recorded: unreadable (with SkipUnreadable), vanished during
	// the import, sockets, and unknown file types. Excluded paths are not
	// listed.
	Skipped []string
	// Writer is the Writer's statistics after the import.
	Writer store.WriterStats
}

// racyMargin is how much older than the start of an import a file's ctime
// must be for its stat to be saved in the stat cache (git's "racily clean"
// rule). A write that lands after we stat a file can leave its mtime and
// ctime unchanged only if the file system's timestamps are too coarse to
// tell the two apart: the kernel stamps inodes with a coarse clock that lags
// real time by up to a jiffy (≤ 10 ms), and some file systems keep whole
// seconds (ext4 with 128-byte inodes, ext3, many FUSE and network file
// systems) or two seconds (FAT). 3 s covers all of them; the price is that
// a file changed in the last 3 s before an import is read again by the next
// one.
const racyMargin = 3 * time.Second

// smallFileMax is the largest file read whole into memory and stored with
// WriteBytes; larger files are streamed through WriteContent. It matches
// store.SmallFileMax, the largest content stored as one chunk.
const smallFileMax = 64 << 10

// importConfig holds knobs that tests turn; the zero value is production.
type importConfig struct {
	margin  time.Duration // racyMargin when zero
	workers int           // GOMAXPROCS when zero
	now     func() int64  // time.Now().UnixNano when nil
	// afterRead, if set, runs after a file's content was read and before
	// its stat is taken again (tests change the file there).
	afterRead func(rel string, attempt int)
}

// node is one entry seen by the walk.
type node struct {
	name     string
	rel      string
	typ      store.EntryType
	mode     uint32 // st_mode, type bits included
	uid, gid uint32
	mtimeNs  int64
	ctimeNs  int64
	size     int64
	dev, ino uint64
	nlink    uint64
	rdev     uint64
	target   string
	xattrs   []store.Xattr
	children []*node // directories: sorted by name

	linkGroup string
	linkRest  []*node // the first member of a link group: the others

	content store.ID
	cached  *store.StatEntry // what to save in the stat cache, if anything
	dropped bool             // skipped after the walk (vanished, unreadable)
}

func (n *node) setStat(st *unix.Stat_t) {
	n.typ = entryType(st.Mode)
	n.mode = st.Mode
	n.uid, n.gid = st.Uid, st.Gid
	n.mtimeNs = timespecNs(st.Mtim)
	n.ctimeNs = timespecNs(st.Ctim)
	n.size = st.Size
	n.dev, n.ino = st.Dev, st.Ino
	n.nlink = uint64(st.Nlink)
	if n.typ == store.TypeCharDev || n.typ == store.TypeBlockDev {
		n.rdev = st.Rdev
	}
}

// importer is the state of one Import.
type importer struct {
	ctx    context.Context
	ss     statCacheStore
	w      objectWriter
	opts   ImportOptions
	cfg    importConfig
	ex     *excluder
	root   string // absolute, symlinks resolved: the stat cache key
	rootFD int
	procFD bool // /proc/self/fd works (for paths longer than PATH_MAX)

	cache   map[string]store.StatEntry
	startNs int64

	warnMu  sync.Mutex
	skipped []string

	prog progress

	dirs      int64 // directories recorded, for progress
	filesRead atomic.Int64
	cacheHits atomic.Int64
	stats     store.CommitStats
}

func importDir(ctx context.Context, ss statCacheStore, w objectWriter, dir string, opts ImportOptions, cfg importConfig) (*ImportResult, error) {
	if cfg.margin == 0 {
		cfg.margin = racyMargin
	}
	if cfg.workers == 0 {
		cfg.workers = runtime.GOMAXPROCS(0)
	}
	if cfg.now == nil {
		cfg.now = func() int64 { return time.Now().UnixNano() }
	}
	ex, err := newExcluder(opts.Exclude)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err) // *fs.PathError names the path
	}
	rootFD, err := unix.Open(real, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("import %s: not a directory", dir)
		}
		return nil, fmt.Errorf("import: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(rootFD)

	im := &importer{
		ctx: ctx, ss: ss, w: w, opts: opts, cfg: cfg, ex: ex,
		root: real, rootFD: rootFD,
		prog: progress{fn: opts.Progress},
	}
	var st unix.Stat_t
	im.procFD = unix.Lstat("/proc/self/fd/"+strconv.Itoa(rootFD), &st) == nil

	res, err := im.run()
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	return res, nil
}

func (im *importer) run() (*ImportResult, error) {
	// The walk's start is the stat cache's recording time: every stat this
	// import trusts later is taken after it.
	im.startNs = im.cfg.now()
	if !im.opts.NoStatCache {
		c, err := im.ss.LoadStatCache(im.ctx, im.root)
		if err != nil {
			return nil, fmt.Errorf("load stat cache: %w", err)
		}
		im.cache = c
	}

	root := &node{typ: store.TypeDir}
	im.prog.phase(PhaseWalk, 0, 0)
	if err := im.walk(root); err != nil {
		return nil, err
	}
	im.prog.flush()

	files := im.linkGroups(root)
	if err := im.readFiles(files); err != nil {
		return nil, err
	}

	im.prog.phase(PhaseWrite, im.dirs+1, 0)
	id, err := im.buildTree(root)
	if err != nil {
		return nil, err
	}
	im.prog.flush()

	// Write what the Writer buffered, so that its statistics are complete;
	// Finish would do it anyway.
	if err := im.w.Flush(); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	if err := im.saveStatCache(root); err != nil {
		return nil, err
	}
	sort.Strings(im.skipped) // goroutines append in any order
	return &ImportResult{
		Tree:      id,
		Stats:     im.stats,
		FilesRead: im.filesRead.Load(),
		CacheHits: im.cacheHits.Load(),
		Skipped:   im.skipped,
		Writer:    im.w.Stats(),
	}, nil
}

// warn reports an entry to the caller.
func (im *importer) warn(rel, msg string) {
	im.warnMu.Lock()
	defer im.warnMu.Unlock()
	if im.opts.Warn != nil {
		im.opts.Warn(rel, msg)
	}
}

// skip records that rel exists and is not recorded.
func (im *importer) skip(rel, msg string) {
	im.warnMu.Lock()
	im.skipped = append(im.skipped, rel)
	im.warnMu.Unlock()
	im.warn(rel, msg)
}

// problem decides what an error at rel means: nil when the entry is skipped
// (vanished during the import, or unreadable with SkipUnreadable), else the
// error to fail with, naming the path.
func (im *importer) problem(rel, op string, err error) error {
	switch {
	case isVanished(err):
		im.skip(rel, "vanished or replaced during import; not recorded")
		return nil
	case isPermission(err) && im.opts.SkipUnreadable:
		im.skip(rel, "unreadable ("+err.Error()+"); not recorded")
		return nil
	}
	return &fs.PathError{Op: op, Path: filepath.Join(im.root, rel), Err: err}
}

// walkState coordinates the goroutines of one walk.
type walkState struct {
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{} // a token per extra goroutine
	wg     sync.WaitGroup

	errOnce sync.Once
	err     error
}

func (ws *walkState) fail(err error) {
	ws.errOnce.Do(func() {
		ws.err = err
		ws.cancel()
	})
}

// direntBufs are getdents buffers, one per directory being listed.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// walk records the tree under the root into root. Subdirectories are
// walked on up to cfg.workers extra goroutines: the walk is system calls
// (getdents, fstatat, openat), which run in parallel.
func (im *importer) walk(root *node) error {
	ws := &walkState{sem: make(chan struct{}, im.cfg.workers)}
	ws.ctx, ws.cancel = context.WithCancel(im.ctx)
	defer ws.cancel()
	if err := im.walkDir(ws, im.rootFD, root); err != nil {
		ws.fail(err)
	}
	ws.wg.Wait()
	if ws.err != nil {
		return ws.err
	}
	return im.ctx.Err()
}

// walkDir records the entries of the directory open at dirfd into dir.
func (im *importer) walkDir(ws *walkState, dirfd int, dir *node) error {
	if err := ws.ctx.Err(); err != nil {
		return err
	}
	bp := direntBufs.Get().(*[]byte)
	names, err := readDirNames(dirfd, *bp)
	direntBufs.Put(bp)
	if err != nil {
		if dir.rel == "" { // the root is never skipped
			return &fs.PathError{Op: "readdir", Path: im.root, Err: err}
		}
		dir.dropped = true
		return im.problem(dir.rel, "readdir", err)
	}
	sort.Strings(names)
	dir.children = make([]*node, 0, len(names))
	for _, name := range names {
		rel := joinRel(dir.rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err := im.problem(rel, "lstat", err); err != nil {
				return err
			}
			continue
		}
		n := &node{name: name, rel: rel}
		n.setStat(&st)
		if im.ex.match(rel, n.typ == store.TypeDir) {
			continue
		}
		im.prog.add(1, 0)
		switch n.typ {
		case store.TypeSocket:
			im.skip(rel, "socket; not recorded")
			continue
		case 0:
			im.skip(rel, fmt.Sprintf("unknown file type %#o; not recorded", st.Mode&unix.S_IFMT))
			continue
		case store.TypeSymlink:
			t, err := readlinkat(dirfd, name, st.Size)
			if err != nil {
				if err := im.problem(rel, "readlink", err); err != nil {
					return err
				}
				continue
			}
			n.target = t
			n.size = int64(len(t))
		case store.TypeFile:
			// Content and xattrs are read after the walk, in parallel.
		case store.TypeDir:
			fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if err := im.problem(rel, "open", err); err != nil {
					return err
				}
				continue
			}
			if err := im.enterDir(ws, fd, n, &st); err != nil {
				return err
			}
			if n.dropped {
				continue
			}
		default: // FIFOs and devices: metadata only; never opened.
			n.size = 0
		}
		dir.children = append(dir.children, n)
	}
	return nil
}

// enterDir records the directory n, open at fd (which it closes), after
// checking that it is still the one lstat saw, and walks it: on another
// goroutine if one is free, else on this one.
func (im *importer) enterDir(ws *walkState, fd int, n *node, seen *unix.Stat_t) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &fs.PathError{Op: "fstat", Path: filepath.Join(im.root, n.rel), Err: err}
	}
	if st.Dev != seen.Dev || st.Ino != seen.Ino {
		unix.Close(fd)
		n.dropped = true
		return im.problem(n.rel, "open", unix.ENOENT)
	}
	n.setStat(&st)
	n.size = 0
	xs, err := listUserXattrs(xattrSource{fd: fd})
	if err != nil {
		unix.Close(fd)
		n.dropped = true
		return im.problem(n.rel, "listxattr", err)
	}
	n.xattrs = xs
	select {
	case ws.sem <- struct{}{}:
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			err := im.walkDir(ws, fd, n)
			unix.Close(fd)
			<-ws.sem
			if err != nil {
				ws.fail(err)
			}
		}()
		return nil
	default:
		err := im.walkDir(ws, fd, n)
		unix.Close(fd)
		return err
	}
}

// readDirNames returns the names in the directory open at fd, without "."
// and "..". buf is scratch space.
func readDirNames(fd int, buf []byte) ([]string, error) {
	// From the start: the descriptor may have been read before.
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return nil, err
	}
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// linkGroups assigns link groups in walk order and returns the files whose
// content must be obtained: every regular file except the second and later
// members of a link group.
func (im *importer) linkGroups(root *node) []*node {
	type inode struct{ dev, ino uint64 }
	firsts := map[inode]*node{}
	var files []*node
	var visit func(d *node)
	visit = func(d *node) {
		for _, c := range d.children {
			if c.dropped {
				continue
			}
			switch c.typ {
			case store.TypeDir:
				im.dirs++
				visit(c)
			case store.TypeFile:
				if c.nlink > 1 {
					k := inode{c.dev, c.ino}
					if f, ok := firsts[k]; ok {
						f.linkRest = append(f.linkRest, c)
						continue
					}
					firsts[k] = c
				}
				files = append(files, c)
			}
		}
	}
	visit(root)
	for _, f := range firsts {
		if len(f.linkRest) > 0 {
			f.linkGroup = f.rel
			for _, m := range f.linkRest {
				m.linkGroup = f.rel
			}
		}
	}
	return files
}

// readFiles obtains the content of files: those whose stat matches the
// stat cache are retained (on retainers goroutines), the others, and those
// whose cached content is gone, are read (on cfg.workers goroutines).
func (im *importer) readFiles(files []*node) error {
	var total int64
	var hits, misses []*node
	for _, f := range files {
		total += f.size
		if _, ok := im.cacheMatch(f); ok {
			hits = append(hits, f)
		} else {
			misses = append(misses, f)
		}
	}
	im.prog.phase(PhaseRead, int64(len(files)), total)

	confirm := func(n *node) (bool, error) {
		if err := im.fileXattrs(n); err != nil {
			return false, err
		}
		if n.dropped {
			im.finishFile(n)
			im.prog.add(1, 0)
			return true, nil
		}
		ce, _ := im.cacheMatch(n)
		ok, err := im.w.Retain(ce.Content) // ZeroID (empty) is always there
		if err != nil {
			return false, fmt.Errorf("%s: retain cached content: %w", n.rel, err)
		}
		if ok {
			im.useCache(n, ce)
		}
		return ok, nil // not ok: gone from the store (gc), read the file
	}
	if err := cachedReads(im.ctx, im.cfg.workers, hits, misses, confirm, im.read); err != nil {
		return err
	}
	im.prog.flush()
	return nil
}

// fileXattrs lists the xattrs of the file n by path (for files whose
// content comes from the stat cache: they are not opened).
func (im *importer) fileXattrs(n *node) error {
	var xs []store.Xattr
	var err error
	if p := im.root + "/" + n.rel; len(p) < unix.PathMax {
		xs, err = listUserXattrs(xattrSource{path: p})
	} else {
		xs, err = im.longPathXattrs(n.rel)
	}
	if err != nil {
		n.dropped = true
		return im.problem(n.rel, "listxattr", err)
	}
	n.xattrs = xs
	return nil
}

// longPathXattrs lists the xattrs of a file whose absolute path is longer
// than PATH_MAX, through its directory's descriptor.
func (im *importer) longPathXattrs(rel string) ([]store.Xattr, error) {
	if !im.procFD {
		return nil, unix.ENAMETOOLONG
	}
	dir, name := splitRel(rel)
	fd, err := openBeneath(im.rootFD, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return listUserXattrs(xattrSource{path: "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name})
}

// cacheMatch returns the stat cache entry of f if f's stat is unchanged.
func (im *importer) cacheMatch(f *node) (store.StatEntry, bool) {
	ce, ok := im.cache[f.rel]
	return ce, ok && ce.Dev == f.dev && ce.Ino == f.ino && ce.Mode == f.mode &&
		ce.Size == f.size && ce.MtimeNs == f.mtimeNs && ce.CtimeNs == f.ctimeNs
}

// useCache takes f's content from the stat cache entry ce.
func (im *importer) useCache(f *node, ce store.StatEntry) {
	f.content = ce.Content
	f.cached = &ce
	im.cacheHits.Add(1)
	im.finishFile(f)
	im.prog.add(1, f.size) // not read: count its bytes now
}

// read reads the file n (and so its link group).
func (im *importer) read(n *node, buf *[]byte) error {
	if err := im.readFile(n, buf); err != nil {
		return err
	}
	if !n.dropped {
		im.filesRead.Add(1)
	}
	im.finishFile(n)
	im.prog.add(1, 0) // its bytes were counted as they were read
	return nil
}

// finishFile copies the first member's content and metadata to the rest of
// its link group: they are one inode.
func (im *importer) finishFile(n *node) {
	for _, m := range n.linkRest {
		if n.dropped {
			m.dropped = true
			im.skip(m.rel, "hardlink of "+n.rel+", which was not recorded; not recorded")
			continue
		}
		m.content, m.size, m.mode = n.content, n.size, n.mode
		m.uid, m.gid, m.mtimeNs, m.ctimeNs = n.uid, n.gid, n.mtimeNs, n.ctimeNs
		m.xattrs = n.xattrs
		if n.cached != nil {
			c := *n.cached
			m.cached = &c
		}
	}
}

// readFile reads the file n and stores its content. A file whose size,
// mtime or ctime changes while it is read is read once more; if it changes
// again, what the second read saw is stored with a warning, and the file is
// kept out of the stat cache so that the next import reads it again.
func (im *importer) readFile(n *node, buf *[]byte) error {
	for attempt := 1; ; attempt++ {
		stable, err := im.readOnce(n, buf, attempt)
		if err != nil || n.dropped {
			return err
		}
		if stable {
			c := store.StatEntry{Dev: n.dev, Ino: n.ino, Mode: n.mode, Size: n.size,
				MtimeNs: n.mtimeNs, CtimeNs: n.ctimeNs, Content: n.content}
			n.cached = &c
			return nil
		}
		if attempt == 2 {
			im.warn(n.rel, "changed while being read (twice); stored the last read")
			return nil
		}
	}
}

// readOnce opens, reads and stores the file n once, updating n's metadata
// from the open file. stable reports whether the file did not change while
// it was read.
func (im *importer) readOnce(n *node, buf *[]byte, attempt int) (stable bool, err error) {
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := openBeneath(im.rootFD, n.rel, flags|unix.O_NOATIME)
	if err == unix.EPERM { // O_NOATIME needs ownership or CAP_FOWNER
		fd, err = openBeneath(im.rootFD, n.rel, flags)
	}
	if err != nil {
		n.dropped = true
		return false, im.problem(n.rel, "open", err)
	}
	defer unix.Close(fd)
	var before, after unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: filepath.Join(im.root, n.rel), Err: err}
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG ||
		(len(n.linkRest) > 0 && (before.Dev != n.dev || before.Ino != n.ino)) {
		// Replaced since the walk: by another type, or, for the first
		// member of a link group, by another inode (the group's other
		// names still hold the old one).
		n.dropped = true
		return false, im.problem(n.rel, "open", unix.ENOENT)
	}
	// Xattrs before content, stat after both: a change to either moves
	// the ctime, and the read is repeated.
	xs, err := listUserXattrs(xattrSource{fd: fd})
	if err != nil {
		return false, &fs.PathError{Op: "listxattr", Path: filepath.Join(im.root, n.rel), Err: err}
	}
	n.xattrs = xs
	r := &fdReader{fd: fd, prog: &im.prog}
	// The content this path had at the last import: a delta base.
	prev := im.cache[n.rel].Content
	var id store.ID
	var size int64
	if ext, sparse := dataExtents(fd, &before); sparse {
		if id, size, err = writeSparse(im.w, fd, before.Size, ext, r); err != nil {
			return false, im.readErr(n, err)
		}
	} else if before.Size <= smallFileMax {
		b, full, err := r.readSmall(buf, smallFileMax)
		if err != nil {
			return false, im.readErr(n, err)
		}
		size = int64(len(b))
		if full { // grew past smallFileMax while we read: stream it all
			if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
				return false, im.readErr(n, err)
			}
			id, size, err = im.w.WriteContentLike(r, prev)
			if err != nil {
				return false, im.readErr(n, err)
			}
		} else if size > 0 {
			id, err = im.w.WriteBytesLike(b, prev)
			if err != nil {
				return false, fmt.Errorf("%s: %w", n.rel, err)
			}
		}
	} else {
		id, size, err = im.w.WriteContentLike(r, prev)
		if err != nil {
			return false, im.readErr(n, err)
		}
	}
	if im.cfg.afterRead != nil {
		im.cfg.afterRead(n.rel, attempt)
	}
	if err := unix.Fstat(fd, &after); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: filepath.Join(im.root, n.rel), Err: err}
	}
	n.setStat(&after)
	n.size = size
	n.content = id
	stable = size == after.Size && before.Size == after.Size &&
		before.Mtim == after.Mtim && before.Ctim == after.Ctim
	return stable, nil
}

// readErr wraps an error from reading n: a read error names the path; a
// store error is passed on with the path as context.
func (im *importer) readErr(n *node, err error) error {
	var re *readError
	if errors.As(err, &re) {
		if isPermission(re.err) && im.opts.SkipUnreadable {
			n.dropped = true
			im.skip(n.rel, "unreadable ("+re.err.Error()+"); not recorded")
			return nil
		}
		return &fs.PathError{Op: "read", Path: filepath.Join(im.root, n.rel), Err: re.err}
	}
	return fmt.Errorf("%s: %w", n.rel, err)
}

// readError marks an error of the source file, as opposed to the store.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// fdReader reads a file descriptor, counting bytes for progress.
type fdReader struct {
	fd   int
	prog *progress
}

func (r *fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(r.fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &readError{err}
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		r.prog.addBytes(int64(n))
		return n, nil
	}
}

// readSmall reads the whole file into *buf (reused across calls) if it has
// at most max bytes; full reports that it has more, and b is then partial.
func (r *fdReader) readSmall(buf *[]byte, max int) ([]byte, bool, error) {
	b := (*buf)[:0]
	defer func() { *buf = b[:0] }()
	for {
		if len(b) == cap(b) {
			if len(b) > max {
				return b, true, nil
			}
			nb := make([]byte, len(b), min(2*cap(b)+4096, max+1))
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, len(b) > max, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
}

// buildTree stores the trees under d bottom-up and returns d's tree id.
func (im *importer) buildTree(d *node) (store.ID, error) {
	if err := im.ctx.Err(); err != nil {
		return store.ZeroID, err
	}
	t := &store.Tree{Entries: make([]store.TreeEntry, 0, len(d.children))}
	for _, c := range d.children {
		if c.dropped {
			continue
		}
		e := store.TreeEntry{
			Name: c.name, Type: c.typ, Mode: c.mode & 0o7777,
			UID: c.uid, GID: c.gid, MtimeNs: c.mtimeNs,
			Xattrs: c.xattrs, LinkGroup: c.linkGroup,
		}
		switch c.typ {
		case store.TypeDir:
			id, err := im.buildTree(c)
			if err != nil {
				return store.ZeroID, err
			}
			e.Content = id
			im.stats.Dirs++
		case store.TypeFile:
			e.Size = c.size
			e.Content = c.content
			im.stats.Files++
			im.stats.Bytes += c.size
		case store.TypeSymlink:
			e.Target = c.target
			e.Size = int64(len(c.target))
			im.stats.Other++
		case store.TypeCharDev, store.TypeBlockDev:
			e.Rdev = c.rdev
			im.stats.Other++
		default:
			im.stats.Other++
		}
		t.Entries = append(t.Entries, e)
	}
	id, err := im.w.PutTree(t)
	if err != nil {
		return store.ZeroID, fmt.Errorf("store tree %q: %w", d.rel, err)
	}
	im.prog.add(1, 0)
	return id, nil
}

// saveStatCache writes the stat cache for the next import: every file read
// or reused whose mtime and ctime are older than the walk's start by
// racyMargin. A younger file could still change without its stat changing
// (see racyMargin), so it is left out and read again next time; the store
// applies the same rule when loading, with the recording time we pass. The
// cache is not rewritten when nothing in it would change.
func (im *importer) saveStatCache(root *node) error {
	limit := im.startNs - int64(im.cfg.margin)
	entries := map[string]store.StatEntry{}
	var visit func(d *node)
	visit = func(d *node) {
		for _, c := range d.children {
			if c.dropped {
				continue
			}
			switch {
			case c.typ == store.TypeDir:
				visit(c)
			case c.typ == store.TypeFile && c.cached != nil && c.cached.CtimeNs < limit && c.cached.MtimeNs < limit:
				entries[c.rel] = *c.cached
			}
		}
	}
	visit(root)
	if !im.opts.NoStatCache && sameStatCache(im.cache, entries) {
		return nil
	}
	if err := im.ss.SaveStatCache(im.ctx, im.root, entries, limit); err != nil {
		return fmt.Errorf("save stat cache: %w", err)
	}
	return nil
}

func sameStatCache(a, b map[string]store.StatEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// progress serializes and throttles calls to a Progress callback.
type progress struct {
	fn func(Progress)

	mu      sync.Mutex
	cur     Progress
	last    time.Time
	entries atomic.Int64
	bytes   atomic.Int64
}

const progressEvery = 50 * time.Millisecond

func (p *progress) phase(name string, entriesTotal, bytesTotal int64) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.entries.Store(0)
	p.bytes.Store(0)
	p.cur = Progress{Phase: name, EntriesTotal: entriesTotal, BytesTotal: bytesTotal}
	p.last = time.Now()
	p.fn(p.cur)
}

func (p *progress) add(entries, bytes int64) {
	if p.fn == nil {
		return
	}
	p.entries.Add(entries)
	p.bytes.Add(bytes)
	p.maybe()
}

// addBytes counts bytes as they are read or written.
func (p *progress) addBytes(n int64) {
	if p.fn == nil || n == 0 {
		return
	}
	p.bytes.Add(n)
	p.maybe()
}

func (p *progress) maybe() {
	if !p.mu.TryLock() {
		return
	}
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		p.report()
	}
}

func (p *progress) flush() {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.report()
}

func (p *progress) report() {
	p.cur.Entries = p.entries.Load()
	p.cur.Bytes = p.bytes.Load()
	if p.cur.BytesTotal > 0 && p.cur.Bytes > p.cur.BytesTotal {
		p.cur.Bytes = p.cur.BytesTotal // files grew while read
	}
	p.fn(p.cur)
}
