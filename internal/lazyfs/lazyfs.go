// Package lazyfs is a FUSE filesystem for tests of durability: a loopback
// of a backing directory that can "lose power". It follows the model of
// LazyFS (Ramos et al., "When amnesia strikes", VLDB 2024): metadata
// operations (create, mkdir, rename, unlink, link, xattrs) are durable at
// once, file data and sizes only once fsync or fdatasync of the file
// returns. PowerLoss drops every write to a file since that file's last
// fsync, restoring the bytes and size it had then.
//
// syncfs(2) makes nothing durable here, as on any FUSE filesystem but
// virtiofs: the kernel writes dirty pages back to the server but sends it
// no FUSE_SYNCFS, so only fsync of each file reaches it (what snapshot's
// layer writer does on FUSE; the rebase trials of the power-loss harness
// found the upper it writes torn when it relied on syncfs).
//
// Writes go through to the backing file (so reads, stats and mmap behave
// as on a real filesystem); before the first write since the last fsync to
// a block of a file, the block's old bytes are saved in memory, with the
// file's old size. fsync forgets them; PowerLoss writes them back.
//
// The filesystem can also stop at the Nth mutating operation (CrashAt:
// that and every later mutation fail with EIO, as if the machine had
// stopped) and return errors on chosen operations (Fault), for tests of
// error handling.
//
// Mounting needs /dev/fuse and CAP_SYS_ADMIN (the tests run it as root);
// package integration uses it. It is test code: nothing in the product
// imports it.
package lazyfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

const blockSize = 4096

// Fault makes operations fail: the Nth and later matching operations (or
// only the Nth, with Once) return Errno.
type Fault struct {
	// Op is the operation: write, fsync, create, mkdir, rename, unlink,
	// setattr, link, symlink, mknod, setxattr, or "" for any mutation;
	// or read (only when named).
	Op string
	// Path matches operations on a path (relative to the mount) that
	// contains it; "" matches every path.
	Path  string
	Errno syscall.Errno
	// After is how many matching operations succeed first.
	After int
	// Once fails only one operation.
	Once bool

	seen int
}

// FS is one mount.
type FS struct {
	backing string
	mnt     string
	server  *fuse.Server
	conn    uint64 // the connection's number in /sys/fs/fuse/connections

	mu      sync.Mutex
	undo    map[fileKey]*undoLog
	ops     int64
	crashAt int64
	dead    bool
	crashOp string
	faults  []*Fault
	lies    bool
	// Stats
	savedBlocks, syncs int64
}

type fileKey struct{ dev, ino uint64 }

// undoLog is what a file held at its last fsync: its size and the old
// bytes of the blocks written since.
type undoLog struct {
	fd     int // a dup of a descriptor of the backing file, to restore it
	size   int64
	blocks map[int64][]byte // block index → old bytes (short at the old end of file)
}

// Mount mounts a lazyfs of backing at mnt.
func Mount(backing, mnt string) (*FS, error) {
	l := &FS{backing: backing, mnt: mnt, undo: map[fileKey]*undoLog{}}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	lr := root.(*fs.LoopbackNode).RootData
	lr.NewNode = func(r *fs.LoopbackRoot, parent *fs.Inode, name string, st *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, l: l}
	}
	rootNode := &node{LoopbackNode: fs.LoopbackNode{RootData: lr}, l: l}
	lr.RootNode = rootNode
	sec := time.Second
	srv, err := fs.Mount(mnt, rootNode, &fs.Options{
		EntryTimeout: &sec, AttrTimeout: &sec,
		MountOptions: fuse.MountOptions{
			AllowOther: true, DirectMountStrict: true, FsName: "lazyfs", Name: "lazyfs",
			DisableXAttrs: false,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("mount lazyfs at %s: %w", mnt, err)
	}
	l.server = srv
	closeFuseOnExec()
	// The connection's name under /sys/fs/fuse/connections: the kernel's
	// dev_t of the superblock (MKDEV: major << 20 | minor).
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err == nil {
		l.conn = uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev))
	}
	return l, nil
}

// closeFuseOnExec marks this process's /dev/fuse descriptors close-on-exec.
// go-fuse's direct mount opens /dev/fuse without O_CLOEXEC, so every
// program the test starts (strata, its keepers) would inherit the FUSE
// connection: when the test process dies, a surviving keeper keeps the
// connection open, the kernel never aborts it, and everything touching
// the mount — any stat of it, by any process — hangs for good.
func closeFuseOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && t == "/dev/fuse" {
			syscall.CloseOnExec(fd)
		}
	}
}

// Unmount unmounts the filesystem. Unsynced writes stay in the backing
// directory (a clean shutdown that never synced is not modelled: call
// PowerLoss first for that).
//
// go-fuse's Unmount waits for its request loops, which end only when the
// kernel ends the connection — and the kernel keeps it, though the mount
// is gone, while any process still holds something of the filesystem (an
// open file, a directory, a stat in flight from another program). Such a
// holder once kept a power-loss run waiting for good. After a while the
// connection is aborted, as `echo 1 > /sys/fs/fuse/connections/N/abort`
// does: the holder's requests fail with ENOTCONN and the loops end.
func (l *FS) Unmount() error {
	done := make(chan error, 1)
	go func() {
		var err error
		for range 50 {
			if err = l.server.Unmount(); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		done <- err
	}()
	wait := func(d time.Duration) (error, bool) {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("unmount lazyfs %s: %w", l.mnt, err), true
			}
			return nil, true
		case <-time.After(d):
			return nil, false
		}
	}
	if err, ok := wait(10 * time.Second); ok {
		return err
	}
	conn := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", l.conn)
	if _, err := os.Stat(conn); os.IsNotExist(err) {
		// fusectl is not mounted here (systemd mounts it; a container
		// may not): mount it, as the root this package runs as.
		_ = unix.Mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, "")
	}
	if err := os.WriteFile(conn, []byte("1"), 0); err != nil {
		return fmt.Errorf("unmount lazyfs %s: the connection did not end, and aborting it failed: %w", l.mnt, err)
	}
	if err, ok := wait(10 * time.Second); ok {
		return err
	}
	return fmt.Errorf("unmount lazyfs %s: the connection did not end, even aborted", l.mnt)
}

// CrashAt makes the nth mutating operation from now and all later ones
// fail with EIO (0: never).
func (l *FS) CrashAt(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > 0 {
		l.crashAt = l.ops + n
	} else {
		l.crashAt = 0
	}
}

// Crashed reports whether the crash point was reached.
func (l *FS) Crashed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// CrashedOp names the operation the crash point stopped ("write
// store/strata.db-wal"), or "".
func (l *FS) CrashedOp() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.crashOp
}

// Ops is the number of mutating operations so far.
func (l *FS) Ops() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops
}

// SetFaults replaces the injected faults.
func (l *FS) SetFaults(f ...*Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = f
}

// PowerLoss stops the filesystem (every later mutation fails with EIO)
// and drops every write not made durable: each file gets back the bytes
// and size it had at its last fsync. It returns how many files it
// rolled back. Call it once the processes using the mount are gone, then
// Unmount and Mount again.
func (l *FS) PowerLoss() (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dead = true
	n := 0
	var first error
	for k, u := range l.undo {
		for i, b := range u.blocks {
			if _, err := unix.Pwrite(u.fd, b, i*blockSize); err != nil && first == nil {
				first = fmt.Errorf("lazyfs: restore block %d of inode %d: %w", i, k.ino, err)
			}
		}
		if err := unix.Ftruncate(u.fd, u.size); err != nil && first == nil {
			first = fmt.Errorf("lazyfs: restore size of inode %d: %w", k.ino, err)
		}
		unix.Close(u.fd)
		delete(l.undo, k)
		n++
	}
	return n, first
}

// fault returns the errno of a fault matching a non-mutating operation
// (read), or 0.
func (l *FS) fault(op, path string) syscall.Errno {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.faults {
		if f.Op == op && strings.Contains(path, f.Path) {
			f.seen++
			if f.seen > f.After && (!f.Once || f.seen == f.After+1) {
				return f.Errno
			}
		}
	}
	return 0
}

// gate counts a mutating operation and decides whether it may run.
func (l *FS) gate(op, path string) syscall.Errno {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return syscall.EIO
	}
	l.ops++
	if l.crashAt > 0 && l.ops >= l.crashAt {
		l.dead = true
		l.crashOp = op + " " + path
		return syscall.EIO
	}
	for _, f := range l.faults {
		if (f.Op == "" || f.Op == op) && strings.Contains(path, f.Path) {
			f.seen++
			if f.seen > f.After && (!f.Once || f.seen == f.After+1) {
				return f.Errno
			}
		}
	}
	return 0
}

// before saves what fd's file holds in [off, end) (block-aligned) and its
// size, unless saved since its last fsync. newSize is the size the
// operation may leave (a truncate below the old size saves the cut bytes).
func (l *FS) before(fd int, off, end int64) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	k := fileKey{st.Dev, st.Ino}
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.undo[k]
	if u == nil {
		dfd, err := unix.Dup(fd)
		if err != nil {
			return fs.ToErrno(err)
		}
		// The descriptor may be read-only: reopen for writing if needed.
		if fl, err := unix.FcntlInt(uintptr(dfd), unix.F_GETFL, 0); err == nil && fl&unix.O_ACCMODE == unix.O_RDONLY {
			unix.Close(dfd)
			if dfd, err = unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
				return fs.ToErrno(err)
			}
		}
		u = &undoLog{fd: dfd, size: st.Size, blocks: map[int64][]byte{}}
		l.undo[k] = u
	}
	end = min(end, u.size) // bytes past the old end are cut by the size
	for i := off / blockSize; i*blockSize < end; i++ {
		if _, ok := u.blocks[i]; ok {
			continue
		}
		b := make([]byte, blockSize)
		n, err := unix.Pread(fd, b, i*blockSize)
		if err != nil {
			return fs.ToErrno(err)
		}
		u.blocks[i] = b[:n]
		l.savedBlocks++
	}
	return 0
}

// LieAboutSync makes fsync return success without making anything
// durable (a disk that acknowledges its cache): for tests that the
// harness's checks can fail.
func (l *FS) LieAboutSync(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lies = on
}

// synced forgets the undo log of fd's file: it is durable.
func (l *FS) synced(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	k := fileKey{st.Dev, st.Ino}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lies {
		return
	}
	if u := l.undo[k]; u != nil {
		unix.Close(u.fd)
		delete(l.undo, k)
		l.syncs++
	}
}

type node struct {
	fs.LoopbackNode
	l *FS
}

func (n *node) rel(name string) string {
	p := n.Path(nil)
	if name != "" {
		p = filepath.Join(p, name)
	}
	return p
}

func (n *node) wrap(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return &file{LoopbackFile: lf, n: n}
	}
	return fh
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if e := n.l.gate("setattr", n.rel("")); e != 0 {
			return nil, 0, e
		}
		if e := n.truncating(0); e != 0 {
			return nil, 0, e
		}
	}
	fh, fl, e := n.LoopbackNode.Open(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	return n.wrap(fh), fl, 0
}

// truncating saves what a truncate of n to size cuts.
func (n *node) truncating(size int64) syscall.Errno {
	fd, err := unix.Open(filepath.Join(n.l.backing, n.rel("")), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer unix.Close(fd)
	return n.l.before(fd, size, 1<<62)
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.l.gate("create", n.rel(name)); e != 0 {
		return nil, nil, 0, e
	}
	ch, fh, fl, e := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	f := n.wrap(fh)
	if lf, ok := f.(*file); ok {
		// A new file's data is not durable: it comes back empty.
		n.l.before(lf.fd(), 0, 0)
		if cn, ok := ch.Operations().(*node); ok {
			lf.n = cn
		}
	}
	return ch, f, fl, 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.l.gate("setattr", n.rel("")); e != 0 {
		return e
	}
	if sz, ok := in.GetSize(); ok {
		if _, mine := f.(*file); !mine {
			if e := n.truncating(int64(sz)); e != 0 {
				return e
			}
		}
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.l.gate("mkdir", n.rel(name)); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.l.gate("mknod", n.rel(name)); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := n.l.gate("rmdir", n.rel(name)); e != 0 {
		return e
	}
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if e := n.l.gate("unlink", n.rel(name)); e != 0 {
		return e
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if e := n.l.gate("rename", n.rel(name)); e != 0 {
		return e
	}
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.l.gate("symlink", n.rel(name)); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.l.gate("link", n.rel(name)); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Link(ctx, target, name, out)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if e := n.l.gate("setxattr", n.rel("")); e != 0 {
		return e
	}
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if e := n.l.gate("setxattr", n.rel("")); e != 0 {
		return e
	}
	return n.LoopbackNode.Removexattr(ctx, attr)
}

// file is an open file whose writes are recorded.
type file struct {
	*fs.LoopbackFile
	n *node
}

// PassthroughFd hides the LoopbackFile's method of that name: with it,
// go-fuse would hand the backing descriptor to the kernel (FUSE
// passthrough, Linux 6.9+) and reads and writes would bypass lazyfs.
func (f *file) PassthroughFd(struct{ noPassthrough bool }) {}

func (f *file) fd() int {
	fd, _ := f.LoopbackFile.PassthroughFd()
	return fd
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if e := f.n.l.fault("read", f.n.rel("")); e != 0 {
		return nil, e
	}
	return f.LoopbackFile.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if e := f.n.l.gate("write", f.n.rel("")); e != 0 {
		return 0, e
	}
	fd := f.fd()
	if e := f.n.l.before(fd, off, off+int64(len(data))); e != 0 {
		return 0, e
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if e := f.n.l.gate("fsync", f.n.rel("")); e != 0 {
		return e
	}
	if e := f.LoopbackFile.Fsync(ctx, flags); e != 0 {
		return e
	}
	fd := f.fd()
	f.n.l.synced(fd)
	return 0
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		fd := f.fd()
		if e := f.n.l.before(fd, int64(sz), 1<<62); e != 0 {
			return e
		}
	}
	return f.LoopbackFile.Setattr(ctx, in, out)
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if e := f.n.l.gate("write", f.n.rel("")); e != 0 {
		return e
	}
	fd := f.fd()
	if e := f.n.l.before(fd, int64(off), int64(off+size)); e != 0 {
		return e
	}
	return f.LoopbackFile.Allocate(ctx, off, size, mode)
}
