package snapshot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// MaterializeOptions tune Materialize.
type MaterializeOptions struct {
	// Chown applies the recorded uid/gid (needs privilege). Otherwise
	// everything is owned by the caller.
	Chown bool
	// Owners, with Chown, maps a recorded owner to the one written: an
	// image's ids as a subordinate-id namespace holds them (LayerOptions).
	Owners func(uid, gid uint32) (uint32, uint32)
	// Warn, if set, receives one call per entry not written as recorded.
	// path is relative to the target. Calls are serialized.
	Warn func(path, msg string)
	// Progress, if set, is called often (serialized); it must be cheap.
	Progress func(p Progress)
}

// ErrNotEmpty is returned by Materialize when the target directory has
// entries.
var ErrNotEmpty = errors.New("directory not empty")

// matConfig holds knobs that tests and benchmarks turn.
type matConfig struct {
	workers int // 2*GOMAXPROCS when zero
	// beforeCreate and beforeFinish, if set, run before a file is created
	// and before a directory's metadata is applied (tests plant symlinks
	// there).
	beforeCreate func(dirfd int, rel string)
	beforeFinish func(rel string)
}

// writeBuffer is the size of each worker's write buffer: content arrives in
// chunks; writing it in large pieces saves system calls.
const writeBuffer = 1 << 20

// maxDepth bounds the nesting of trees. Content addressing makes a cycle
// impossible unless the store is corrupt; this turns that case into an error
// instead of a crash.
const maxDepth = 1 << 14

type materializer struct {
	ctx    context.Context
	cancel context.CancelFunc
	r      objectReader
	opts   MaterializeOptions
	cfg    matConfig
	trees  map[store.ID]*store.Tree
	rootFD int
	prog   progress

	warnMu      sync.Mutex
	xattrWarned bool

	errOnce  sync.Once
	firstErr error

	// layer, when set, makes the writer produce an overlay layer (see
	// layer.go): whiteouts, opaque directories, no overlay xattrs.
	layer *layerSpec
	// fill, when set, fills files from elsewhere than the store (clone.go:
	// FICLONE or copy from a layer stack); it reports false to leave a
	// file to the store.
	fill func(rel string, e *store.TreeEntry, fd int) (bool, error)
	// fsync makes every file durable as it is written, for a layer on a
	// filesystem whose syncfs does not (see writeLayer).
	fsync bool

	jobs   chan fileJob
	groups map[string]linkSource // LinkGroup → its first member
	links  []linkJob             // later members, linked after all files exist
	dirs   []dirJob              // every directory in walk order
}

type fileJob struct {
	dir *dirHandle
	rel string
	e   *store.TreeEntry
}

type linkSource struct {
	rel     string
	content store.ID
	size    int64
}

type linkJob struct{ rel, src string }

type dirJob struct {
	rel    string
	e      *store.TreeEntry
	opaque bool // a layer's opaque directory
}

// dirHandle is an open directory shared by the walk and the file workers;
// the last user closes it.
type dirHandle struct {
	fd   int
	refs atomic.Int32
}

func newDirHandle(fd int) *dirHandle {
	h := &dirHandle{fd: fd}
	h.refs.Store(1)
	return h
}

func (h *dirHandle) acquire() { h.refs.Add(1) }

func (h *dirHandle) release() {
	if h.refs.Add(-1) == 0 {
		unix.Close(h.fd)
	}
}

func materialize(ctx context.Context, r objectReader, tree store.ID, dir string, opts MaterializeOptions, cfg matConfig) (err error) {
	rootFD, created, err := openTarget(dir)
	if err != nil {
		return fmt.Errorf("materialize: %w", err)
	}
	defer func() {
		if err != nil {
			cleanTarget(rootFD, dir, created)
			err = fmt.Errorf("materialize %s into %s: %w", tree.Short(), dir, err)
		}
		unix.Close(rootFD)
	}()
	m := newMaterializer(r, opts, cfg, rootFD)
	err = m.run(ctx, tree, func(tg treeGetter) error { return m.load(tg, tree, "", 0) })
	if err != nil {
		return err
	}
	if created {
		// The root's own metadata is not recorded: a new target gets 0755.
		if err := unix.Fchmod(rootFD, 0o755); err != nil {
			return &fs.PathError{Op: "chmod", Path: dir, Err: err}
		}
	}
	return nil
}

func newMaterializer(r objectReader, opts MaterializeOptions, cfg matConfig, rootFD int) *materializer {
	if cfg.workers == 0 {
		cfg.workers = 2 * runtime.GOMAXPROCS(0)
	}
	return &materializer{
		r: r, opts: opts, cfg: cfg,
		trees:  map[store.ID]*store.Tree{},
		rootFD: rootFD,
		prog:   progress{fn: opts.Progress},
		groups: map[string]linkSource{},
	}
}

// run loads the trees to write with load (in one read view of the store;
// load fills m.trees), then writes tree, whose entries and subtrees must
// all be in m.trees, into the directory open at m.rootFD.
func (m *materializer) run(ctx context.Context, tree store.ID, load func(tg treeGetter) error) error {
	m.ctx, m.cancel = context.WithCancel(ctx)
	defer m.cancel()
	m.prog.phase(PhaseWalk, 0, 0)
	if err := m.r.view(m.ctx, load); err != nil {
		return err
	}
	entries, bytes := m.totals(tree)
	m.prog.phase(PhaseWrite, entries, bytes)
	if err := m.write(tree); err != nil {
		return err
	}
	m.prog.flush()
	return nil
}

// openTarget opens dir, creating it when missing, and checks that it is an
// empty directory and not a symlink.
func openTarget(dir string) (fd int, created bool, err error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err = unix.Open(dir, flags, 0)
	if err == unix.ENOENT {
		if err := unix.Mkdir(dir, 0o700); err != nil {
			return -1, false, &fs.PathError{Op: "mkdir", Path: dir, Err: err}
		}
		created = true
		fd, err = unix.Open(dir, flags, 0)
		if err != nil {
			unix.Rmdir(dir)
		}
	}
	if err == unix.ENOTDIR { // O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR
		var st unix.Stat_t
		if unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = unix.ELOOP
		}
	}
	switch {
	case err == unix.ELOOP:
		return -1, false, fmt.Errorf("%s: is a symlink; want a new or empty directory", dir)
	case err == unix.ENOTDIR:
		return -1, false, fmt.Errorf("%s: not a directory", dir)
	case err != nil:
		return -1, false, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	names, err := readDirNames(fd, make([]byte, 4096))
	if err != nil {
		unix.Close(fd)
		return -1, false, &fs.PathError{Op: "readdir", Path: dir, Err: err}
	}
	if len(names) > 0 {
		unix.Close(fd)
		return -1, false, fmt.Errorf("%s: %w", dir, ErrNotEmpty)
	}
	return fd, created, nil
}

// cleanTarget removes what a failed Materialize wrote (best effort),
// through the target's descriptor so that nothing outside it is touched
// even if its path now leads elsewhere, and then the target itself if
// Materialize created it.
func cleanTarget(rootFD int, dir string, created bool) {
	removeContents(rootFD, 0)
	if created {
		unix.Rmdir(dir) // fails, harmlessly, if dir is no longer our directory
	}
}

// removeContents empties the directory open at fd, giving directories
// owner permissions first (they may be read-only), and returns the bytes
// of disk space freed: the blocks of every directory removed and of every
// other inode whose last link was removed.
func removeContents(fd int, depth int) (freed int64) {
	if depth > maxDepth {
		return 0
	}
	names, err := readDirNames(fd, make([]byte, 8192))
	if err != nil {
		return 0
	}
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			chmodNoFollow(fd, name, 0o700)
			if sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				freed += removeContents(sub, depth+1)
				unix.Close(sub)
			}
			if unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) == nil {
				freed += st.Blocks * 512
			}
			continue
		}
		if unix.Unlinkat(fd, name, 0) == nil && st.Nlink == 1 {
			freed += st.Blocks * 512
		}
	}
	return freed
}

func (m *materializer) fail(err error) {
	m.errOnce.Do(func() {
		m.firstErr = err
		m.cancel()
	})
}

func (m *materializer) warn(rel, msg string) {
	m.warnMu.Lock()
	defer m.warnMu.Unlock()
	if m.opts.Warn != nil {
		m.opts.Warn(rel, msg)
	}
}

// load reads the tree id and everything under it into m.trees, checking
// every name (DESIGN invariant 6: names from the store are untrusted here).
func (m *materializer) load(tg treeGetter, id store.ID, rel string, depth int) error {
	if _, ok := m.trees[id]; ok {
		return nil
	}
	if depth > maxDepth {
		return fmt.Errorf("%q: trees nested deeper than %d: %w", rel, maxDepth, store.ErrCorrupt)
	}
	if err := m.ctx.Err(); err != nil {
		return err
	}
	t := &store.Tree{}
	if !id.IsZero() { // ZeroID is the empty tree
		var err error
		if t, err = tg.Tree(id); err != nil {
			return fmt.Errorf("tree %s at %q: %w", id.Short(), rel, err)
		}
	}
	if err := checkTree(t, id, rel); err != nil {
		return err
	}
	m.trees[id] = t
	for i := range t.Entries {
		e := &t.Entries[i]
		m.prog.add(1, 0)
		if e.Type == store.TypeDir {
			if err := m.load(tg, e.Content, joinRel(rel, e.Name), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkTree checks that every name of t (tree id, at rel) is one clean
// path element and that the names are sorted and unique (DESIGN invariant
// 6: names from the store are untrusted here).
func checkTree(t *store.Tree, id store.ID, rel string) error {
	for i := range t.Entries {
		e := &t.Entries[i]
		if !validName(e.Name) {
			return fmt.Errorf("tree %s at %q: entry name %q: %w", id.Short(), rel, e.Name, store.ErrCorrupt)
		}
		if i > 0 && t.Entries[i-1].Name >= e.Name {
			return fmt.Errorf("tree %s at %q: entries not sorted or not unique at %q: %w", id.Short(), rel, e.Name, store.ErrCorrupt)
		}
	}
	return nil
}

// totals counts the entries and file bytes under id, each occurrence of a
// shared subtree counted.
func (m *materializer) totals(id store.ID) (entries, bytes int64) {
	type tot struct{ e, b int64 }
	memo := map[store.ID]tot{}
	var count func(id store.ID) tot
	count = func(id store.ID) tot {
		if t, ok := memo[id]; ok {
			return t
		}
		var r tot
		for _, e := range m.trees[id].Entries {
			r.e++
			switch e.Type {
			case store.TypeDir:
				c := count(e.Content)
				r.e += c.e
				r.b += c.b
			case store.TypeFile:
				r.b += e.Size
			}
		}
		memo[id] = r
		return r
	}
	t := count(id)
	return t.e, t.b
}

// write creates every entry: directories, symlinks and special files on
// this goroutine in walk order, files on workers; then hardlinks; then the
// directories' own metadata, deepest first, so that writing into a
// directory neither needs permission its final mode denies nor changes its
// final mtime.
func (m *materializer) write(tree store.ID) error {
	m.jobs = make(chan fileJob, 4*m.cfg.workers)
	var wg sync.WaitGroup
	for i := 0; i < m.cfg.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &fdWriter{prog: &m.prog}
			bw := bufio.NewWriterSize(w, writeBuffer)
			for j := range m.jobs {
				if m.ctx.Err() == nil {
					if err := m.writeFile(j, w, bw); err != nil {
						m.fail(err)
					}
				}
				j.dir.release()
			}
		}()
	}
	dupFD, err := unix.FcntlInt(uintptr(m.rootFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		close(m.jobs)
		wg.Wait()
		return err
	}
	root := newDirHandle(dupFD)
	if err := m.createDir(root, "", tree); err != nil {
		m.fail(err)
	}
	root.release()
	close(m.jobs)
	wg.Wait()
	if m.firstErr != nil {
		return m.firstErr
	}
	if err := m.ctx.Err(); err != nil {
		return err
	}
	if err := m.linkAll(); err != nil {
		return err
	}
	return m.finishDirs()
}

func (m *materializer) createDir(h *dirHandle, rel string, id store.ID) error {
	if m.layer != nil {
		for _, name := range m.layer.whiteouts[id] {
			if err := m.whiteout(h.fd, joinRel(rel, name)); err != nil {
				return err
			}
		}
	}
	t := m.trees[id]
	for i := range t.Entries {
		if err := m.ctx.Err(); err != nil {
			return err
		}
		e := &t.Entries[i]
		crel := joinRel(rel, e.Name)
		switch e.Type {
		case store.TypeDir:
			if err := m.mkdir(h, crel, e); err != nil {
				return err
			}
		case store.TypeFile:
			if e.LinkGroup != "" {
				src, ok := m.groups[e.LinkGroup]
				switch {
				case !ok:
					m.groups[e.LinkGroup] = linkSource{rel: crel, content: e.Content, size: e.Size}
				case src.content == e.Content && src.size == e.Size:
					m.links = append(m.links, linkJob{rel: crel, src: src.rel})
					continue
				default:
					m.warn(crel, "hardlink group "+e.LinkGroup+" has members with different content; written as a separate file")
				}
			}
			h.acquire()
			select {
			case m.jobs <- fileJob{dir: h, rel: crel, e: e}:
			case <-m.ctx.Done():
				h.release()
				return m.ctx.Err()
			}
		case store.TypeSymlink:
			if err := m.symlink(h, crel, e); err != nil {
				return err
			}
			m.prog.add(1, 0)
		case store.TypeFIFO, store.TypeCharDev, store.TypeBlockDev:
			if err := m.special(h, crel, e); err != nil {
				return err
			}
			m.prog.add(1, 0)
		case store.TypeSocket:
			m.warn(crel, "socket; not created")
			if err := m.shadowWhiteout(h.fd, crel); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%q: entry type %v: %w", crel, e.Type, store.ErrCorrupt)
		}
	}
	return nil
}

func (m *materializer) mkdir(h *dirHandle, rel string, e *store.TreeEntry) error {
	// 0700 until finishDirs: the final mode may deny us writing children.
	if err := unix.Mkdirat(h.fd, e.Name, 0o700); err != nil {
		return m.pathErr("mkdir", rel, err)
	}
	fd, err := unix.Openat(h.fd, e.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return m.pathErr("open", rel, err)
	}
	m.dirs = append(m.dirs, dirJob{rel: rel, e: e, opaque: m.layer != nil && m.layer.opaque[rel]})
	m.prog.add(1, 0)
	child := newDirHandle(fd)
	err = m.createDir(child, rel, e.Content)
	child.release()
	return err
}

// pathErr names the entry in the target that an operation failed on.
func (m *materializer) pathErr(op, rel string, err error) error {
	return &fs.PathError{Op: op, Path: rel, Err: err}
}

// writeFile creates and fills one file. O_EXCL|O_NOFOLLOW: an existing name,
// symlink or not, is never opened.
func (m *materializer) writeFile(j fileJob, w *fdWriter, bw *bufio.Writer) error {
	e := j.e
	if m.cfg.beforeCreate != nil {
		m.cfg.beforeCreate(j.dir.fd, j.rel)
	}
	fd, err := unix.Openat(j.dir.fd, e.Name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return m.pathErr("create", j.rel, err)
	}
	defer unix.Close(fd)
	w.fd = fd
	bw.Reset(w)
	var n int64
	filled := false
	if m.fill != nil && !e.Content.IsZero() {
		if filled, err = m.fill(j.rel, e, fd); err != nil {
			return err
		}
		if filled {
			n = e.Size
		}
	}
	if !filled && !e.Content.IsZero() {
		sw := &sparseWriter{fd: fd, bw: bw}
		n, err = m.r.ReadContentTo(m.ctx, e.Content, sw)
		if err == nil {
			err = sw.finish(n)
		}
		if err != nil {
			var we *writeError
			if errors.As(err, &we) {
				return m.pathErr("write", j.rel, we.err)
			}
			return fmt.Errorf("%q: content %s: %w", j.rel, e.Content.Short(), err)
		}
	}
	if n != e.Size {
		return fmt.Errorf("%q: content %s has %d bytes, entry says %d: %w", j.rel, e.Content.Short(), n, e.Size, store.ErrCorrupt)
	}
	if err := m.applyFD(fd, j.rel, e, false); err != nil {
		return err
	}
	if m.fsync {
		if err := unix.Fsync(fd); err != nil {
			return m.pathErr("fsync", j.rel, err)
		}
	}
	m.prog.add(1, 0)
	return nil
}

// applyFD sets the metadata of the open file or directory fd: xattrs (and
// a layer's opaque marker), then owner, then mode (chown clears setuid and
// setgid), then times.
func (m *materializer) applyFD(fd int, rel string, e *store.TreeEntry, opaque bool) error {
	for _, x := range e.Xattrs {
		if !strings.HasPrefix(x.Name, xattrNamespace) {
			m.warn(rel, "xattr "+x.Name+" is outside user.*; not set")
			continue
		}
		if m.layer != nil && strings.HasPrefix(x.Name, overlayXattrUser) {
			m.warn(rel, "xattr "+x.Name+" not written into a layer: overlayfs would interpret it")
			continue
		}
		if err := unix.Fsetxattr(fd, x.Name, x.Value, 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				m.warnXattrs(rel)
				break
			}
			return m.pathErr("setxattr "+x.Name, rel, err)
		}
	}
	if opaque {
		name := m.layer.prefix + "overlay.opaque"
		if err := unix.Fsetxattr(fd, name, []byte("y"), 0); err != nil {
			return m.pathErr("setxattr "+name, rel, err)
		}
	}
	if m.opts.Chown {
		uid, gid := m.owner(e)
		if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
			return m.pathErr("chown", rel, err)
		}
	}
	if err := unix.Fchmod(fd, e.Mode&0o7777); err != nil {
		return m.pathErr("chmod", rel, err)
	}
	ts := [2]unix.Timespec{nsTimespec(e.MtimeNs), nsTimespec(e.MtimeNs)}
	if err := futimens(fd, &ts); err != nil {
		return m.pathErr("utimes", rel, err)
	}
	return nil
}

func (m *materializer) warnXattrs(rel string) {
	m.warnMu.Lock()
	first := !m.xattrWarned
	m.xattrWarned = true
	m.warnMu.Unlock()
	if first {
		m.warn(rel, "the target file system does not support user.* xattrs; xattrs not set (warned once)")
	}
}

// futimens is utimensat(fd, NULL, ts, 0); x/sys/unix has no wrapper.
func futimens(fd int, ts *[2]unix.Timespec) error {
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// symlink creates a symlink with its target verbatim; the target is never
// resolved. Owner and times are set on the link itself.
func (m *materializer) symlink(h *dirHandle, rel string, e *store.TreeEntry) error {
	if strings.IndexByte(e.Target, 0) >= 0 || e.Target == "" {
		return fmt.Errorf("%q: symlink target %q: %w", rel, e.Target, store.ErrCorrupt)
	}
	if err := unix.Symlinkat(e.Target, h.fd, e.Name); err != nil {
		return m.pathErr("symlink", rel, err)
	}
	if len(e.Xattrs) > 0 {
		m.warn(rel, "user.* xattrs cannot be set on a symlink; not set")
	}
	return m.nameMeta(h.fd, rel, e, false)
}

// special creates a FIFO or device node. Creating a device needs
// CAP_MKNOD in the initial user namespace; without it the device is
// skipped with a warning.
func (m *materializer) special(h *dirHandle, rel string, e *store.TreeEntry) error {
	if m.layer != nil && e.Type == store.TypeCharDev && e.Rdev == 0 {
		// In a layer, a character device 0/0 is a whiteout: the merged
		// view cannot show it.
		m.warn(rel, "character device 0/0 is an overlay whiteout; not created in a layer")
		return m.shadowWhiteout(h.fd, rel)
	}
	var err error
	switch e.Type {
	case store.TypeFIFO:
		err = unix.Mkfifoat(h.fd, e.Name, 0o600)
	case store.TypeCharDev:
		err = unix.Mknodat(h.fd, e.Name, unix.S_IFCHR|0o600, int(e.Rdev))
	case store.TypeBlockDev:
		err = unix.Mknodat(h.fd, e.Name, unix.S_IFBLK|0o600, int(e.Rdev))
	}
	if err != nil {
		if e.Type != store.TypeFIFO && isPermission(err) {
			m.warn(rel, fmt.Sprintf("%v %d:%d not created: needs privilege (%v)", e.Type, unix.Major(e.Rdev), unix.Minor(e.Rdev), err))
			return m.shadowWhiteout(h.fd, rel)
		}
		return m.pathErr("mknod", rel, err)
	}
	if len(e.Xattrs) > 0 {
		m.warn(rel, "user.* xattrs cannot be set on a "+e.Type.String()+"; not set")
	}
	return m.nameMeta(h.fd, rel, e, true)
}

// owner is the owner written for e (MaterializeOptions.Owners).
func (m *materializer) owner(e *store.TreeEntry) (uint32, uint32) {
	if m.opts.Owners != nil {
		return m.opts.Owners(e.UID, e.GID)
	}
	return e.UID, e.GID
}

// nameMeta sets owner, mode (unless a symlink) and times of the entry just
// created at name in dirfd, without following a symlink. Special files are
// not opened: opening a device can have effects.
func (m *materializer) nameMeta(dirfd int, rel string, e *store.TreeEntry, chmod bool) error {
	name := path.Base(rel)
	if m.opts.Chown {
		uid, gid := m.owner(e)
		if err := unix.Fchownat(dirfd, name, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return m.pathErr("chown", rel, err)
		}
	}
	if chmod {
		if err := chmodNoFollow(dirfd, name, e.Mode&0o7777); err != nil {
			return m.pathErr("chmod", rel, err)
		}
	}
	ts := []unix.Timespec{nsTimespec(e.MtimeNs), nsTimespec(e.MtimeNs)}
	if err := unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return m.pathErr("utimes", rel, err)
	}
	return nil
}

// chmodNoFollow changes the mode of name in dirfd, which is not a symlink:
// a node this package just created or saw. Without fchmodat2 (before Linux
// 6.6) plain fchmodat, which follows symlinks, is used: the name is in a
// directory only we can write (mode 0700 until finishDirs).
func chmodNoFollow(dirfd int, name string, mode uint32) error {
	err := unix.Fchmodat(dirfd, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		err = unix.Fchmodat(dirfd, name, mode, 0)
	}
	return err
}

// linkAll creates the second and later members of link groups as hardlinks
// of the first. Both directories are opened beneath the target without
// following symlinks; linkat itself does not follow one.
func (m *materializer) linkAll() error {
	var cache [2]struct {
		rel string
		fd  int
	}
	for i := range cache {
		cache[i].fd = -1
	}
	defer func() {
		for _, c := range cache {
			if c.fd >= 0 {
				unix.Close(c.fd)
			}
		}
	}()
	open := func(slot int, rel string) (int, error) {
		c := &cache[slot]
		if c.fd >= 0 && c.rel == rel {
			return c.fd, nil
		}
		if c.fd >= 0 {
			unix.Close(c.fd)
			c.fd = -1
		}
		fd, err := openBeneath(m.rootFD, rel, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return -1, m.pathErr("open", rel, err)
		}
		c.rel, c.fd = rel, fd
		return fd, nil
	}
	for _, l := range m.links {
		if err := m.ctx.Err(); err != nil {
			return err
		}
		sdir, sname := splitRel(l.src)
		ddir, dname := splitRel(l.rel)
		sfd, err := open(0, sdir)
		if err != nil {
			return err
		}
		dfd, err := open(1, ddir)
		if err != nil {
			return err
		}
		if err := unix.Linkat(sfd, sname, dfd, dname, 0); err != nil {
			return m.pathErr("link "+l.src, l.rel, err)
		}
		m.prog.add(1, 0)
	}
	return nil
}

func splitRel(rel string) (dir, name string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}

// finishDirs applies each directory's metadata, in reverse walk order: a
// directory after everything under it, and before its parent, so the path
// to it is still searchable.
func (m *materializer) finishDirs() error {
	for i := len(m.dirs) - 1; i >= 0; i-- {
		if err := m.ctx.Err(); err != nil {
			return err
		}
		d := m.dirs[i]
		if m.cfg.beforeFinish != nil {
			m.cfg.beforeFinish(d.rel)
		}
		fd, err := openBeneath(m.rootFD, d.rel, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return m.pathErr("open", d.rel, err)
		}
		err = m.applyFD(fd, d.rel, d.e, d.opaque)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// fdWriter writes to a file descriptor, counting bytes for progress.
type fdWriter struct {
	fd   int
	prog *progress
}

// writeError marks an error of the target, as opposed to the store.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

func (w *fdWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Write(w.fd, p[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, &writeError{err}
		}
		done += n
	}
	w.prog.addBytes(int64(done))
	return done, nil
}
