package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// Clone writes a commit's full tree into a plain directory — a workspace of
// the reflink or copy backend — taking file contents from the layer cache
// instead of the store: each file is a FICLONE of the file that the
// commit's layer stack shows at its path (the topmost layer holding it),
// so that the new directory shares every block with the cache and costs
// what creating its inodes costs. Where the filesystem cannot clone, the
// data is copied (copy_file_range, holes kept). Everything else is
// Materialize's: directories, symlinks, FIFOs, devices where allowed,
// hardlinks, modes, owners (Chown), mtimes, user.* xattrs, and its safety
// rules. See docs/snapshot.md, "Clone".

// CloneMode chooses how Clone fills files.
type CloneMode string

const (
	// CloneAuto clones where the filesystem can and copies otherwise.
	CloneAuto CloneMode = "auto"
	// CloneReflink clones or fails (errors.ErrUnsupported) before
	// anything is written when the cache and the target are on different
	// filesystems or the filesystem cannot clone.
	CloneReflink CloneMode = "reflink"
	// CloneCopy copies with copy_file_range(2). On XFS and Btrfs the
	// kernel may share blocks for it anyway (it reflinks within one
	// filesystem when it can); elsewhere the data is copied.
	CloneCopy CloneMode = "copy"
)

// CloneOptions tune Clone.
type CloneOptions struct {
	// Mode is CloneAuto when empty.
	Mode CloneMode
	// Layers selects the stack the files come from (its flavour, depth,
	// Chown); Stack builds the layers that are missing. Layers.Chown also
	// applies the recorded owners to the new directory (needs privilege).
	Layers LayerOptions
	// Index, when set, is where the stat index of the new directory is
	// written (WriteIndex), before the directory appears under its name.
	Index string
	// Warn receives one call per entry not written as recorded (as in
	// Materialize); calls are serialized.
	Warn func(path, msg string)
	// Progress, if set, is called often (serialized); it must be cheap.
	Progress func(p Progress)
	// InPlace writes the tree into dir, which must exist and be empty (a
	// new Btrfs subvolume), instead of building it beside dir and
	// renaming it into place: the caller makes the result appear
	// atomically (CloneCache renames the directory holding it). On error
	// what was written is removed and dir is left empty.
	InPlace bool
}

// CloneResult says what Clone did.
type CloneResult struct {
	// Tree is the commit's tree, now in the directory.
	Tree store.ID `json:"tree"`
	// Method is "reflink" when any file was cloned, "copy" when files were
	// only copied, "" when the tree holds no file content.
	Method string `json:"method"`
	// SameFS: the layer cache and the directory are on one filesystem
	// (FICLONE needs it).
	SameFS bool `json:"same_fs"`
	// Layers is the depth of the stack the files came from.
	Layers int `json:"layers"`
	// Files counts the regular files whose content was filled (a link
	// group once).
	Files int64 `json:"files"`
	// Cloned is the size of the files shared by FICLONE (no data is
	// written for them); Copied the data copied (holes not counted);
	// FromStore the bytes written from the store, for files the cache
	// could not give (a layer file unreadable by this user, mode 0).
	Cloned    int64 `json:"cloned_bytes"`
	Copied    int64 `json:"copied_bytes"`
	FromStore int64 `json:"from_store_bytes"`
	// Why says why files were copied rather than cloned ("" when none
	// was): another filesystem, or what FICLONE answered.
	Why string `json:"why,omitempty"`
	// Index is what WriteIndex recorded, when CloneOptions.Index is set.
	Index *IndexInfo `json:"index,omitempty"`
}

// cloneConfig holds knobs that tests and measurements turn.
type cloneConfig struct {
	mat matConfig
	// full takes the files from the commit's flattened layer (<C>.full,
	// built when missing) instead of resolving its stack.
	full bool
	// lowers, when set, is the stack to clone from (measurements pin
	// one: Stack prefers a <C>.full once it exists).
	lowers []string
}

// Clone writes the full tree of commit into dir, which must not exist (its
// parent must), by cloning or copying the files of the commit's layer
// stack (cache.Stack with opts.Layers). The directory is built under a
// temporary name beside dir (".tmp-<name>-<random>") and renamed into
// place when complete; on error nothing is left but what the caller gave.
// A killed Clone leaves its temporary directory, which the caller's sweep
// removes.
func Clone(ctx context.Context, s *store.Store, cache *LayerCache, commit store.ID, dir string, opts CloneOptions) (*CloneResult, error) {
	return clone(ctx, s, cache, commit, dir, opts, cloneConfig{})
}

func clone(ctx context.Context, s *store.Store, cache *LayerCache, commit store.ID, dir string, opts CloneOptions, cfg cloneConfig) (*CloneResult, error) {
	if err := opts.Layers.check(); err != nil {
		return nil, err
	}
	var tree store.ID
	err := s.View(ctx, func(tx *store.Tx) error {
		c, err := tx.Commit(commit)
		if err == nil {
			tree = c.Tree
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("clone %s: commit: %w", commit.Short(), err)
	}
	var lowers []string
	switch {
	case cfg.lowers != nil:
		lowers = cfg.lowers
	case cfg.full:
		p := cache.path(opts.Layers.Flavour, commit, true)
		err = cache.ensure(ctx, s, layerRef{commit: commit, full: true, tree: tree}, p, opts.Layers)
		lowers = []string{p}
	default:
		lowers, err = cache.Stack(ctx, s, commit, opts.Layers)
	}
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", commit.Short(), err)
	}
	return cloneInto(ctx, storeReader{s}, tree, lowers, dir, opts, cfg)
}

// CloneStack is Clone of a tree that no commit's stack holds as such:
// lowers (topmost first, in opts.Layers' flavour) must show it the way
// overlayfs would merge them — a commit's stack with a delta written by
// WriteDelta on top (a rebased workspace's new tree).
func CloneStack(ctx context.Context, s *store.Store, tree store.ID, lowers []string, dir string, opts CloneOptions) (*CloneResult, error) {
	if err := opts.Layers.check(); err != nil {
		return nil, err
	}
	return cloneInto(ctx, storeReader{s}, tree, lowers, dir, opts, cloneConfig{})
}

// cloneInto writes tree into dir from the layers lowers (topmost first),
// which must hold tree (a stack as LayerCache builds it).
func cloneInto(ctx context.Context, r objectReader, tree store.ID, lowers []string, dir string, opts CloneOptions, cfg cloneConfig) (res *CloneResult, err error) {
	mode := opts.Mode
	switch mode {
	case "":
		mode = CloneAuto
	case CloneAuto, CloneReflink, CloneCopy:
	default:
		return nil, fmt.Errorf("clone: mode %q: want auto, reflink or copy", mode)
	}
	dir = filepath.Clean(dir)
	if opts.InPlace {
		if fi, err := os.Lstat(dir); err != nil {
			return nil, &fs.PathError{Op: "clone", Path: dir, Err: err}
		} else if !fi.IsDir() || !dirIsEmpty(dir) {
			return nil, &fs.PathError{Op: "clone", Path: dir, Err: unix.ENOTEMPTY}
		}
	} else if _, err := os.Lstat(dir); err == nil {
		return nil, &fs.PathError{Op: "clone", Path: dir, Err: fs.ErrExist}
	}
	parent, name := filepath.Split(dir)
	var pst unix.Stat_t
	if err := unix.Stat(parent, &pst); err != nil {
		return nil, &fs.PathError{Op: "clone: stat", Path: parent, Err: err}
	}
	src, err := openCloneSource(lowers, opts.Layers.Flavour, mode, pst.Dev, isBtrfs(parent))
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", tree.Short(), err)
	}
	defer src.close()
	res = &CloneResult{Tree: tree, SameFS: src.sameFS, Layers: len(lowers)}
	if !src.sameFS && !src.sameBtrfs {
		why := fmt.Sprintf("the layer cache (%s) and %s are on different filesystems; FICLONE needs one", fsName(lowers[0]), fsName(parent))
		if mode == CloneReflink {
			return nil, fmt.Errorf("clone into %s: %s: %w", dir, why, errors.ErrUnsupported)
		}
		src.setWhy(why)
	}

	tmp := dir
	if !opts.InPlace {
		if tmp, err = os.MkdirTemp(parent, tmpPrefix+name+"-"); err != nil {
			return nil, fmt.Errorf("clone: %w", err)
		}
	}
	fd, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if !opts.InPlace {
			os.Remove(tmp)
		}
		return nil, &fs.PathError{Op: "open", Path: tmp, Err: err}
	}
	defer func() {
		if err != nil {
			unix.Fchmod(fd, 0o700)
			removeContents(fd, 0)
			if !opts.InPlace {
				unix.Rmdir(tmp) // fails, harmlessly, if tmp is no longer ours
			}
			err = fmt.Errorf("clone %s into %s: %w", tree.Short(), dir, err)
		}
		unix.Close(fd)
	}()
	m := newMaterializer(r, MaterializeOptions{Chown: opts.Layers.Chown, Warn: opts.Warn, Progress: opts.Progress}, cfg.mat, fd)
	m.fill = func(rel string, e *store.TreeEntry, dst int) (bool, error) {
		ok, err := src.fill(rel, e, dst)
		if ok {
			m.prog.addBytes(e.Size)
		}
		return ok, err
	}
	if err = m.run(ctx, tree, func(tg treeGetter) error { return m.load(tg, tree, "", 0) }); err != nil {
		return nil, err
	}
	// The root's own metadata is not recorded: a workspace's root is 0755.
	if err = unix.Fchmod(fd, 0o755); err != nil {
		return nil, &fs.PathError{Op: "chmod", Path: tmp, Err: err}
	}
	if opts.Index != "" {
		if res.Index, err = writeIndexFD(fd, opts.Index, tree); err != nil {
			return nil, err
		}
	}
	if opts.InPlace {
		// The caller makes it appear.
	} else if err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE); err != nil {
		if err == unix.ENOTEMPTY {
			err = unix.EEXIST
		}
		if opts.Index != "" {
			os.Remove(opts.Index) // it describes what is being removed
		}
		return nil, &fs.PathError{Op: "rename", Path: dir, Err: err}
	}
	res.Files = src.files.Load()
	res.Cloned, res.Copied, res.FromStore = src.cloned.Load(), src.copied.Load(), src.fromStore.Load()
	switch {
	case res.Cloned > 0:
		res.Method = string(CloneReflink)
	case res.Copied > 0:
		res.Method = string(CloneCopy)
	}
	if res.Copied > 0 {
		res.Why = src.why()
	}
	return res, nil
}

// fsName names the filesystem p is on, for messages: its type and
// mount point ("xfs at /srv").
func fsName(p string) string {
	var sfs unix.Statfs_t
	if unix.Statfs(p, &sfs) != nil {
		return p
	}
	t := fmt.Sprintf("type %#x", sfs.Type)
	switch sfs.Type {
	case unix.XFS_SUPER_MAGIC:
		t = "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		t = "btrfs"
	case unix.EXT4_SUPER_MAGIC:
		t = "ext4"
	case unix.TMPFS_MAGIC:
		t = "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		t = "overlayfs"
	case unix.NFS_SUPER_MAGIC:
		t = "nfs"
	}
	return t + " (" + p + ")"
}

func isBtrfs(p string) bool {
	var sfs unix.Statfs_t
	return unix.Statfs(p, &sfs) == nil && sfs.Type == unix.BTRFS_SUPER_MAGIC
}

// cloneSource finds each file of the tree in the layer stack and clones
// or copies it. It is used by the materializer's file workers at once.
type cloneSource struct {
	roots  []int // O_PATH descriptors of the layers, topmost first
	all    []int // 0..len(roots)-1
	opaque string
	mode   CloneMode
	sameFS bool
	// sameBtrfs: another device but both on Btrfs (two subvolumes of
	// one filesystem, maybe): FICLONE is tried.
	sameBtrfs bool
	reflink   atomic.Int32 // reflinkUntried, reflinkWorks or reflinkNo

	mu     sync.Mutex
	dirs   map[string][]int // directory → the layers that show it, topmost first
	whyMsg string

	files, cloned, copied, fromStore atomic.Int64
	bufs                             sync.Pool
}

const (
	reflinkUntried int32 = iota
	reflinkWorks
	reflinkNo
)

// openCloneSource opens the layers lowers. dev is the target's device;
// btrfs says the target is on Btrfs, whose subvolumes have devices of
// their own although FICLONE works between them.
func openCloneSource(lowers []string, flavour string, mode CloneMode, dev uint64, btrfs bool) (*cloneSource, error) {
	if len(lowers) == 0 {
		return nil, errors.New("no layer")
	}
	c := &cloneSource{
		opaque: flavour + ".overlay.opaque",
		mode:   mode,
		sameFS: true,
		dirs:   map[string][]int{},
		bufs:   sync.Pool{New: func() any { b := make([]byte, writeBuffer); return &b }},
	}
	for i, l := range lowers {
		fd, err := unix.Open(l, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			c.close()
			return nil, &fs.PathError{Op: "open layer", Path: l, Err: err}
		}
		c.roots = append(c.roots, fd)
		c.all = append(c.all, i)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			c.close()
			return nil, &fs.PathError{Op: "stat layer", Path: l, Err: err}
		}
		if st.Dev != dev {
			c.sameFS = false
		}
	}
	c.sameBtrfs = !c.sameFS && btrfs && isBtrfs(lowers[0])
	if mode == CloneCopy || (!c.sameFS && !c.sameBtrfs) {
		c.reflink.Store(reflinkNo)
	}
	return c, nil
}

func (c *cloneSource) close() {
	for _, fd := range c.roots {
		unix.Close(fd)
	}
}

func (c *cloneSource) setWhy(s string) {
	c.mu.Lock()
	if c.whyMsg == "" {
		c.whyMsg = s
	}
	c.mu.Unlock()
}

func (c *cloneSource) why() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.whyMsg == "" && c.mode == CloneCopy {
		return "copy asked for"
	}
	return c.whyMsg
}

// layersOf returns the layers, topmost first, whose directory at dir the
// merged view shows: those that hold it as a directory, down to the first
// where it is opaque or a non-directory hides what is beneath.
func (c *cloneSource) layersOf(dir string) ([]int, error) {
	if len(c.roots) == 1 || dir == "" {
		return c.all, nil
	}
	c.mu.Lock()
	l, ok := c.dirs[dir]
	c.mu.Unlock()
	if ok {
		return l, nil
	}
	pdir, _ := splitRel(dir)
	parent, err := c.layersOf(pdir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, i := range parent {
		var st unix.Stat_t
		err := unix.Fstatat(c.roots[i], dir, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "stat", Path: dir, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			break // a whiteout or another type hides what is beneath
		}
		out = append(out, i)
		if i < len(c.roots)-1 && c.isOpaque(i, dir) {
			break
		}
	}
	c.mu.Lock()
	c.dirs[dir] = out
	c.mu.Unlock()
	return out, nil
}

func (c *cloneSource) isOpaque(layer int, dir string) bool {
	fd, err := openBeneath(c.roots[layer], dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var b [2]byte
	n, err := unix.Fgetxattr(fd, c.opaque, b[:])
	return err == nil && n == 1 && b[0] == 'y'
}

// fill fills the new file dst (open for writing, empty) with the content
// of entry e at rel, from the topmost layer that holds it. It returns
// false, to leave the file to the store, when no layer gives a regular
// file of e's size that this user can read.
func (c *cloneSource) fill(rel string, e *store.TreeEntry, dst int) (bool, error) {
	dir, _ := splitRel(rel)
	layers, err := c.layersOf(dir)
	if err != nil {
		return false, err
	}
	for _, i := range layers {
		// Only a regular file is opened: in a damaged cache a lower
		// layer may hold a FIFO (an open would wait for a writer) or a
		// device (an open can have effects) at this path. O_NONBLOCK
		// covers one that appears between the two calls.
		var st unix.Stat_t
		err := unix.Fstatat(c.roots[i], rel, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			continue
		}
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return c.toStore(e), nil
		}
		fd, err := openBeneath(c.roots[i], rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			// EACCES: a file of mode 0 or write-only, rootless.
			return c.toStore(e), nil
		}
		ok, err := c.transfer(rel, fd, e, dst)
		unix.Close(fd)
		return ok, err
	}
	return c.toStore(e), nil
}

func (c *cloneSource) toStore(e *store.TreeEntry) bool {
	c.files.Add(1)
	c.fromStore.Add(e.Size)
	return false
}

// transfer clones or copies the open layer file src into dst.
func (c *cloneSource) transfer(rel string, src int, e *store.TreeEntry, dst int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.Size {
		return c.toStore(e), nil // not what the tree says: a damaged cache
	}
	c.files.Add(1)
	if e.Size == 0 {
		return true, nil
	}
	if c.reflink.Load() != reflinkNo {
		err := unix.IoctlFileClone(dst, src)
		if err == nil {
			c.reflink.CompareAndSwap(reflinkUntried, reflinkWorks)
			c.cloned.Add(e.Size)
			return true, nil
		}
		if !cannotClone(err) {
			return false, &fs.PathError{Op: "clone", Path: rel, Err: err}
		}
		if c.mode == CloneReflink {
			return false, fmt.Errorf("%s: FICLONE: %v (%s): %w", rel, err, fsName("/proc/self/fd/"+fmt.Sprint(dst)), errors.ErrUnsupported)
		}
		// The filesystem cannot clone at all (the first clone failed):
		// copy everything. A file that cannot be cloned where others
		// could (another file's peculiarity) is copied alone.
		c.reflink.CompareAndSwap(reflinkUntried, reflinkNo)
		c.setWhy(fmt.Sprintf("FICLONE: %v", err))
	}
	n, err := copyData(src, &st, dst, &c.bufs)
	c.copied.Add(n)
	if err != nil {
		return false, &fs.PathError{Op: "copy", Path: rel, Err: err}
	}
	return true, nil
}

// cannotClone reports whether FICLONE's error means this filesystem (or
// pair of files) cannot share blocks, as opposed to an I/O error.
func cannotClone(err error) bool {
	switch err {
	case unix.EOPNOTSUPP, unix.ENOTTY, unix.EXDEV, unix.EINVAL, unix.ENOSYS, unix.EPERM, unix.ETXTBSY:
		return true
	}
	return false
}

// copyData copies the regular file src (stat st) into the empty file dst:
// its data extents only, so holes stay holes, by copy_file_range(2), or by
// read and write where the kernel cannot copy between the two. It returns
// the bytes copied.
func copyData(src int, st *unix.Stat_t, dst int, bufs *sync.Pool) (int64, error) {
	ext, sparse := dataExtents(src, st)
	if !sparse {
		ext = []store.Extent{{Off: 0, Len: st.Size}}
	}
	var total int64
	for _, x := range ext {
		n, err := copyRange(src, dst, x.Off, x.Len, bufs)
		total += n
		if err != nil {
			return total, err
		}
	}
	if sparse {
		if err := unix.Ftruncate(dst, st.Size); err != nil {
			return total, err
		}
	}
	return total, nil
}

// copyFileRangeOK is cleared once copy_file_range has failed in a way that
// says it never works here (an old kernel, a seccomp filter).
var copyFileRangeOK atomic.Bool

func init() { copyFileRangeOK.Store(true) }

func copyRange(src, dst int, off, length int64, bufs *sync.Pool) (int64, error) {
	var done int64
	for done < length && copyFileRangeOK.Load() {
		roff, woff := off+done, off+done
		n, err := unix.CopyFileRange(src, &roff, dst, &woff, int(min(length-done, 1<<30)), 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOSYS || err == unix.EPERM:
			copyFileRangeOK.Store(false)
		case err == unix.EXDEV || err == unix.EINVAL || err == unix.EOPNOTSUPP:
			// Not between these two files (another filesystem before
			// Linux 5.19's rules): read and write.
			return copyRW(src, dst, off+done, length-done, bufs, done)
		case err != nil:
			return done, err
		case n == 0:
			return done, fmt.Errorf("source ended at %d of %d bytes: %w", off+done, off+length, store.ErrCorrupt)
		}
		if err == nil {
			done += int64(n)
		}
	}
	if done < length {
		return copyRW(src, dst, off+done, length-done, bufs, done)
	}
	return done, nil
}

func copyRW(src, dst int, off, length int64, bufs *sync.Pool, done int64) (int64, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := *bp
	for length > 0 {
		n, err := unix.Pread(src, buf[:min(int64(len(buf)), length)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, fmt.Errorf("source ended at %d: %w", off, store.ErrCorrupt)
		}
		for w := 0; w < n; {
			k, err := unix.Pwrite(dst, buf[w:n], off+int64(w))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return done, err
			}
			w += k
		}
		off += int64(n)
		length -= int64(n)
		done += int64(n)
	}
	return done, nil
}
