package snapshot

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// ApplyToOptions tune ApplyTo.
type ApplyToOptions struct {
	// Force writes the change over paths whose state in the target
	// differs from the base (they are still listed in Refused). It never
	// follows a symlink, writes below a non-directory, or removes a
	// directory holding entries the change does not delete.
	Force bool
	// DryRun plans and checks, and writes nothing: Written lists what
	// would be written.
	DryRun bool
	// Warn, if set, receives one call per entry not written as recorded
	// (a device without privilege, a directory left because it holds
	// other entries, ...); path is relative to the target.
	Warn func(path, msg string)
}

// Written is one path ApplyTo wrote.
type Written struct {
	Path string `json:"path"`
	// Op is "created", "modified" (content, type or symlink target),
	// "deleted" or "mode" (permission bits or mtime only).
	Op string `json:"op"`
}

// ApplyToResult reports an ApplyTo.
type ApplyToResult struct {
	// Written lists the paths written (or, with DryRun, to be written),
	// in path order. Directories whose mtime alone was set are not
	// listed.
	Written []Written `json:"written"`
	// Refused lists the paths whose state in the target is not the base's
	// (nor already the new one), with why. Unless Force, nothing was
	// written.
	Refused []Conflict `json:"refused,omitempty"`
}

// ErrRefused is wrapped by ApplyTo's error when it wrote nothing because
// some paths of the target differ from the base (ApplyToResult.Refused),
// or because a path cannot be written safely, which Force does not
// override.
var ErrRefused = errors.New("the target differs from the base")

// Reasons ApplyTo refuses a path.
const (
	RefusedModified   = "modified in the target"
	RefusedMissing    = "missing in the target"
	RefusedExists     = "exists in the target"
	RefusedType       = "type differs in the target"
	RefusedMode       = "mode changed in the target"
	RefusedUnreadable = "unreadable in the target"
	RefusedSymlink    = "a parent is a symlink in the target; not followed"
	RefusedNotDir     = "a parent is not a directory in the target"
	RefusedDirEntries = "directory in the target holds entries the change does not delete"
)

// ApplyTo writes the change from baseTree to newTree into dir (a user's
// directory, which must exist): every path the change touches must hold
// in dir what baseTree holds there (type, content, symlink target; the
// permission bits too when the change alters them), or be absent where
// baseTree has nothing, or already hold what newTree holds (then it is
// left alone, so a second ApplyTo after a partial one completes it);
// otherwise the path is Refused, and nothing at all is written unless
// Force. Files, symlinks and special files are replaced atomically (a
// temporary name in the same directory, then rename); missing parent
// directories are created; deleted files go, and deleted directories when
// nothing else is left in them; modes (unless only the target's mode
// differs and the change keeps the mode) and mtimes come from newTree.
// Owners and hardlinks are not applied (each name is its own file).
//
// No symlink is followed: parents are opened beneath dir with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a change below a symlink in dir
// is refused; a symlink in newTree is written as a symlink. dir itself may
// be a symlink to a directory (resolved once). See docs/snapshot.md,
// "ApplyTo".
func ApplyTo(ctx context.Context, s *store.Store, baseTree, newTree store.ID, dir string, opts ApplyToOptions) (*ApplyToResult, error) {
	return applyTo(ctx, storeReader{s}, baseTree, newTree, dir, opts)
}

// toOp is one path of the change, planned.
type toOp struct {
	path     string
	old, new *store.TreeEntry
	cur      *unix.Stat_t // the target's entry when planned; nil: absent
	skip     bool         // the target already holds new
	op       string       // Written.Op; "" for directory mtimes only
	mode     uint32       // permission bits to give the written entry
	gone     bool         // cur was removed
	made     bool         // a directory created as a parent of another path
}

type applier struct {
	ctx    context.Context
	r      objectReader
	tc     *treeCache
	opts   ApplyToOptions
	newT   store.ID
	rootFD int
	dir    string

	ops     []*toOp
	byPath  map[string]*toOp
	deleted map[string]bool // paths the change deletes
	// freshDirs are the directories the change makes where the target has
	// none: what is below them is absent in the target.
	freshDirs map[string]bool
	refused   []Conflict
	unsafe    bool                     // a refusal Force does not override
	made      []string                 // directories created, in creation order
	dirTimes  map[string]unix.Timespec // mtimes of existing directories written into
	dirOrder  []string
	warnedX   bool
}

func applyTo(ctx context.Context, r objectReader, baseTree, newTree store.ID, dir string, opts ApplyToOptions) (*ApplyToResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("apply to %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("apply to: %w", err)
	}
	rootFD, err := unix.Open(real, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("apply to: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(rootFD)
	a := &applier{
		ctx: ctx, r: r, tc: newTreeCache(ctx, r), opts: opts, newT: newTree, rootFD: rootFD, dir: dir,
		byPath: map[string]*toOp{}, deleted: map[string]bool{}, dirTimes: map[string]unix.Timespec{},
		freshDirs: map[string]bool{},
	}
	res, err := a.run(baseTree, newTree)
	if err != nil {
		return res, fmt.Errorf("apply %s → %s to %s: %w", baseTree.Short(), newTree.Short(), dir, err)
	}
	return res, nil
}

func (a *applier) warn(p, msg string) {
	if a.opts.Warn != nil {
		a.opts.Warn(p, msg)
	}
}

func (a *applier) run(baseTree, newTree store.ID) (*ApplyToResult, error) {
	var changes []Change
	err := a.r.view(a.ctx, func(tg treeGetter) error {
		var err error
		changes, err = diffTrees(a.ctx, tg, baseTree, newTree)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		for _, name := range strings.Split(c.Path, "/") {
			if !validName(name) {
				return nil, fmt.Errorf("path %q: entry name %q: %w", c.Path, name, store.ErrCorrupt)
			}
		}
		if c.Op == Deleted || (c.Op == Modified && c.Old.Type != c.New.Type) {
			a.deleted[c.Path] = true
		}
	}
	for _, c := range changes {
		if err := a.plan(c); err != nil {
			return nil, err
		}
	}
	res := &ApplyToResult{Refused: a.refused}
	written := func() {
		res.Written = nil
		for _, o := range a.ops {
			if !o.skip && o.op != "" {
				res.Written = append(res.Written, Written{Path: o.path, Op: o.op})
			}
		}
	}
	if a.unsafe || (len(a.refused) > 0 && !a.opts.Force) {
		return res, fmt.Errorf("%d path(s) refused, nothing written: %w", len(a.refused), ErrRefused)
	}
	if a.opts.DryRun {
		written()
		return res, nil
	}
	err = a.execute()
	written()
	return res, err
}

// --- planning ------------------------------------------------------------------

// refuse records a refusal of p; hard ones are not overridden by Force.
func (a *applier) refuse(p, reason string, hard bool) {
	a.refused = append(a.refused, Conflict{Path: p, Reason: reason})
	if hard {
		a.unsafe = true
	}
}

// Where the parent of a path stands in the target.
const (
	parentOK      = iota // a directory (its descriptor returned)
	parentAbsent         // missing, or made fresh by the change
	parentSymlink        // a symlink on the way
	parentNotDir         // another non-directory on the way
)

// openParent opens the directory holding p beneath the target without
// following symlinks (O_PATH) and says what stands in the way when it
// cannot: a parent the change itself creates anew (a directory that
// replaces a non-directory, or where nothing is) counts as absent.
func (a *applier) openParent(p string) (int, int, error) {
	dir, _ := splitRel(p)
	for d := dir; d != ""; d, _ = splitRel(d) {
		if a.freshDirs[d] {
			return -1, parentAbsent, nil
		}
	}
	fd, err := openBeneath(a.rootFD, dir, unix.O_PATH|unix.O_DIRECTORY)
	switch {
	case err == nil:
		return fd, parentOK, nil
	case err == unix.ENOENT:
		return -1, parentAbsent, nil
	case err != unix.ELOOP && err != unix.ENOTDIR && err != unix.EXDEV:
		return -1, 0, &fs.PathError{Op: "open", Path: filepath.Join(a.dir, dir), Err: err}
	}
	// Find what is in the way, one element at a time.
	cur, err := unix.FcntlInt(uintptr(a.rootFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	defer func() { unix.Close(cur) }()
	for _, name := range strings.Split(dir, "/") {
		var st unix.Stat_t
		if err := unix.Fstatat(cur, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				return -1, parentAbsent, nil
			}
			return -1, 0, &fs.PathError{Op: "lstat", Path: filepath.Join(a.dir, dir), Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return -1, parentSymlink, nil
		case unix.S_IFDIR:
		default:
			return -1, parentNotDir, nil
		}
		fd, err := unix.Openat(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, 0, &fs.PathError{Op: "open", Path: filepath.Join(a.dir, dir), Err: err}
		}
		unix.Close(cur)
		cur = fd
	}
	// Changed meanwhile: a directory now.
	return -1, 0, &fs.PathError{Op: "open", Path: filepath.Join(a.dir, dir), Err: unix.EAGAIN}
}

// plan checks one change against the target.
func (a *applier) plan(c Change) error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	o := &toOp{path: c.Path, old: c.Old, new: c.New}
	a.ops = append(a.ops, o)
	a.byPath[o.path] = o
	_, name := splitRel(o.path)
	pfd, where, err := a.openParent(o.path)
	switch {
	case err != nil:
		return err
	case where == parentSymlink:
		a.refuse(o.path, RefusedSymlink, true)
		return nil
	case where == parentNotDir && o.new == nil:
		o.skip = true // cannot exist, so it is deleted already
		return nil
	case where == parentNotDir:
		a.refuse(o.path, RefusedNotDir, true)
		return nil
	}
	if pfd >= 0 {
		defer unix.Close(pfd)
		var st unix.Stat_t
		err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == nil:
			o.cur = &st
		case err != unix.ENOENT:
			return &fs.PathError{Op: "lstat", Path: filepath.Join(a.dir, o.path), Err: err}
		}
	}
	if o.new != nil && o.new.Type == store.TypeDir && (o.cur == nil || o.cur.Mode&unix.S_IFMT != unix.S_IFDIR) {
		a.freshDirs[o.path] = true
	}

	modeChange := o.old != nil && o.new != nil && o.old.Type == o.new.Type && o.old.Mode != o.new.Mode
	isOld, why, err := a.matches(pfd, name, o.cur, o.old, modeChange)
	if err != nil {
		return err
	}
	curDir := o.cur != nil && o.cur.Mode&unix.S_IFMT == unix.S_IFDIR
	newDir := o.new != nil && o.new.Type == store.TypeDir
	oldDir := o.old != nil && o.old.Type == store.TypeDir
	if isOld {
		why = ""
	} else {
		isNew, _, err := a.matches(pfd, name, o.cur, o.new, true)
		if err != nil {
			return err
		}
		switch {
		case isNew && !newDir:
			o.skip = true
			return nil
		case isNew || (curDir && newDir && !oldDir):
			// A directory as the new tree has it, or where the base had
			// none and the new tree has one (the user made it too): used
			// as it is; its mtime is set at the end.
			o.mode = a.modeFor(o, modeChange)
			return nil
		}
	}
	// Removing a directory: only one the base has, and only if the change
	// deletes everything in it (its entries come as Deleted changes of
	// their own). Force does not override these.
	if curDir && !newDir {
		if !oldDir {
			a.refuse(o.path, RefusedType+": a directory in the target", true)
			return nil
		}
		extra, err := a.extraEntries(pfd, name, o.path)
		if err != nil {
			return err
		}
		switch {
		case extra != "" && o.new != nil:
			a.refuse(o.path, RefusedDirEntries+": "+extra, true)
			return nil
		case extra != "":
			a.warn(o.path, "directory holds entries the change does not delete ("+extra+"); left in place")
			if why == "" {
				o.skip = true
				return nil
			}
		}
	}
	if why != "" {
		a.refuse(o.path, why, false)
	}
	o.mode = a.modeFor(o, modeChange)
	o.op = a.opName(o, modeChange)
	return nil
}

// extraEntries returns the name of an entry of the directory name (in
// pfd, at p) that the change does not delete, or "".
func (a *applier) extraEntries(pfd int, name, p string) (string, error) {
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: filepath.Join(a.dir, p), Err: err}
	}
	defer unix.Close(fd)
	names, err := readDirNames(fd, make([]byte, 8192))
	if err != nil {
		return "", &fs.PathError{Op: "readdir", Path: filepath.Join(a.dir, p), Err: err}
	}
	for _, n := range names {
		if !a.deleted[joinRel(p, n)] {
			return n, nil
		}
	}
	return "", nil
}

// modeFor returns the permission bits to give the written entry: the new
// tree's, except that a file whose mode the change keeps keeps the mode
// it has in the target (a user's chmod survives a content change).
func (a *applier) modeFor(o *toOp, modeChange bool) uint32 {
	if o.new == nil {
		return 0
	}
	if !modeChange && o.cur != nil && o.old != nil && o.old.Type == o.new.Type &&
		entryType(o.cur.Mode) == o.new.Type && o.new.Type != store.TypeSymlink {
		return o.cur.Mode & 0o7777
	}
	return o.new.Mode & 0o7777
}

func (a *applier) opName(o *toOp, modeChange bool) string {
	switch {
	case o.new == nil:
		return "deleted"
	case o.cur == nil:
		return "created"
	case o.new.Type == store.TypeDir && o.old == nil && entryType(o.cur.Mode) == store.TypeDir:
		return "" // already there: its metadata is set at the end
	case o.old == nil || o.old.Type != o.new.Type || entryType(o.cur.Mode) != o.new.Type:
		return "modified"
	case o.new.Type == store.TypeDir:
		if modeChange {
			return "mode"
		}
		return "" // an mtime, set at the end; not listed
	case o.old.Content != o.new.Content || o.old.Size != o.new.Size || o.old.Target != o.new.Target ||
		o.old.Rdev != o.new.Rdev || !sameXattrs(o.old.Xattrs, o.new.Xattrs):
		return "modified"
	}
	return "mode"
}

// matches reports whether the target's entry (cur, nil if absent; name in
// pfd) is e (nil: absent), and if not, why. Permission bits count when
// checkMode.
func (a *applier) matches(pfd int, name string, cur *unix.Stat_t, e *store.TreeEntry, checkMode bool) (bool, string, error) {
	switch {
	case cur == nil && e == nil:
		return true, "", nil
	case cur == nil:
		return false, RefusedMissing, nil
	case e == nil:
		return false, RefusedExists, nil
	}
	if t := entryType(cur.Mode); t != e.Type {
		return false, fmt.Sprintf("%s (%v in the target, %v in the base)", RefusedType, t, e.Type), nil
	}
	if checkMode && e.Type != store.TypeSymlink && cur.Mode&0o7777 != e.Mode&0o7777 {
		return false, RefusedMode, nil
	}
	switch e.Type {
	case store.TypeFile:
		if cur.Size != e.Size {
			return false, RefusedModified, nil
		}
		same, err := a.sameContent(pfd, name, cur, e)
		if err != nil {
			if isPermission(err) {
				return false, RefusedUnreadable, nil
			}
			return false, "", err
		}
		if !same {
			return false, RefusedModified, nil
		}
	case store.TypeSymlink:
		t, err := readlinkat(pfd, name, cur.Size)
		if err != nil {
			return false, "", &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		if t != e.Target {
			return false, RefusedModified, nil
		}
	case store.TypeCharDev, store.TypeBlockDev:
		if cur.Rdev != e.Rdev {
			return false, RefusedModified, nil
		}
	}
	return true, "", nil
}

var errDiffers = errors.New("content differs")

// sameContent compares the regular file name in pfd with e's content.
func (a *applier) sameContent(pfd int, name string, cur *unix.Stat_t, e *store.TreeEntry) (bool, error) {
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	if st.Dev != cur.Dev || st.Ino != cur.Ino {
		return false, nil // replaced meanwhile
	}
	cw := &cmpWriter{r: &fdReader{fd: fd, prog: &progress{}}}
	if _, err := a.r.ReadContentTo(a.ctx, e.Content, cw); err != nil {
		if errors.Is(err, errDiffers) {
			return false, nil
		}
		var re *readError
		if errors.As(err, &re) {
			return false, re.err
		}
		return false, fmt.Errorf("read content %s: %w", e.Content.Short(), err)
	}
	var one [1]byte
	n, err := cw.r.Read(one[:])
	if err != nil && err != io.EOF {
		var re *readError
		if errors.As(err, &re) {
			return false, re.err
		}
		return false, err
	}
	return n == 0, nil
}

// cmpWriter compares what is written to it with what r reads.
type cmpWriter struct {
	r   io.Reader
	buf []byte
}

func (c *cmpWriter) Write(p []byte) (int, error) {
	if cap(c.buf) < len(p) {
		c.buf = make([]byte, len(p))
	}
	b := c.buf[:len(p)]
	n, err := io.ReadFull(c.r, b)
	if n < len(p) || string(b[:n]) != string(p) {
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return 0, err
		}
		return 0, errDiffers
	}
	return len(p), nil
}

// --- writing -------------------------------------------------------------------

func (a *applier) execute() error {
	// Removals, deepest first: deleted entries, and directories that a
	// non-directory replaces.
	for i := len(a.ops) - 1; i >= 0; i-- {
		o := a.ops[i]
		if o.skip || o.cur == nil {
			continue
		}
		curDir := o.cur.Mode&unix.S_IFMT == unix.S_IFDIR
		if o.new == nil || (curDir && o.new.Type != store.TypeDir) {
			if err := a.remove(o); err != nil {
				return err
			}
		}
	}
	// Creations and replacements, parents first.
	for _, o := range a.ops {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		if o.skip || o.new == nil {
			continue
		}
		if err := a.write(o); err != nil {
			return err
		}
	}
	return a.finishDirs()
}

// parent opens the directory holding p for writing into it, creating
// missing directories with the new tree's metadata, and remembers the
// mtime of an existing one (restored at the end unless the change sets
// it).
func (a *applier) parent(p string) (int, error) {
	dir, _ := splitRel(p)
	fd, err := openBeneath(a.rootFD, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err == unix.ENOENT {
		if err := a.mkdirs(dir); err != nil {
			return -1, err
		}
		fd, err = openBeneath(a.rootFD, dir, unix.O_PATH|unix.O_DIRECTORY)
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: filepath.Join(a.dir, dir), Err: err}
	}
	if _, ok := a.dirTimes[dir]; !ok {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, &fs.PathError{Op: "fstat", Path: filepath.Join(a.dir, dir), Err: err}
		}
		a.dirTimes[dir] = st.Mtim
		a.dirOrder = append(a.dirOrder, dir)
	}
	return fd, nil
}

// mkdirs creates the missing directories of dir, one element at a time
// below the deepest existing one, each relative to its parent's
// descriptor (O_NOFOLLOW: a symlink planted meanwhile is not followed).
func (a *applier) mkdirs(dir string) error {
	cur, err := unix.FcntlInt(uintptr(a.rootFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { unix.Close(cur) }()
	rel := ""
	for _, name := range strings.Split(dir, "/") {
		rel = joinRel(rel, name)
		err := unix.Mkdirat(cur, name, 0o700)
		switch {
		case err == nil:
			a.made = append(a.made, rel)
			if o := a.byPath[rel]; o != nil {
				o.made = true // its metadata is set with the others
			}
		case err != unix.EEXIST:
			return &fs.PathError{Op: "mkdir", Path: filepath.Join(a.dir, rel), Err: err}
		}
		fd, err := unix.Openat(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: filepath.Join(a.dir, rel), Err: err}
		}
		unix.Close(cur)
		cur = fd
	}
	return nil
}

// unchanged checks that name in pfd is still what planning saw.
func (a *applier) unchanged(pfd int, name string, o *toOp) error {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case o.cur == nil || o.gone:
		if err == unix.ENOENT {
			return nil
		}
	case err != nil || st.Dev != o.cur.Dev || st.Ino != o.cur.Ino || st.Mode != o.cur.Mode:
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return nil // its entries are the change's own business
	case st.Size == o.cur.Size && st.Mtim == o.cur.Mtim && st.Ctim == o.cur.Ctim:
		return nil
	}
	return fmt.Errorf("%s: changed while the change was applied: %w", filepath.Join(a.dir, o.path), ErrRefused)
}

// remove deletes the target's entry of o.
func (a *applier) remove(o *toOp) error {
	pfd, err := a.parent(o.path)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	_, name := splitRel(o.path)
	if err := a.unchanged(pfd, name, o); err != nil {
		return err
	}
	flags := 0
	if o.cur.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, name, flags); err != nil {
		if err == unix.ENOTEMPTY && o.new == nil {
			// Entries the change does not know are left, and so is
			// their directory (warned when planned).
			o.op = ""
			return nil
		}
		return &fs.PathError{Op: "remove", Path: filepath.Join(a.dir, o.path), Err: err}
	}
	o.gone = true
	return nil
}

func (a *applier) tmpName() string {
	var b [8]byte
	rand.Read(b[:])
	return ".strata-apply-" + hex.EncodeToString(b[:])
}

// write creates or replaces the target's entry of o with o.new.
func (a *applier) write(o *toOp) error {
	pfd, err := a.parent(o.path)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	_, name := splitRel(o.path)
	e := o.new
	if e.Type == store.TypeDir {
		switch {
		case o.made:
			return nil // made as a parent of an earlier path
		case o.cur != nil && !o.gone && o.cur.Mode&unix.S_IFMT == unix.S_IFDIR:
			return nil // exists; its metadata is set at the end
		case o.cur != nil && !o.gone: // a non-directory in the way
			if err := a.unchanged(pfd, name, o); err != nil {
				return err
			}
			if err := unix.Unlinkat(pfd, name, 0); err != nil {
				return &fs.PathError{Op: "remove", Path: filepath.Join(a.dir, o.path), Err: err}
			}
			o.gone = true
		}
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			return &fs.PathError{Op: "mkdir", Path: filepath.Join(a.dir, o.path), Err: err}
		}
		a.made = append(a.made, o.path)
		return nil
	}
	if o.op == "mode" && o.cur != nil && !o.gone {
		// Metadata only: set on the entry in place (not a symlink, not
		// followed).
		if err := a.unchanged(pfd, name, o); err != nil {
			return err
		}
		if e.Type != store.TypeSymlink {
			if err := chmodNoFollow(pfd, name, o.mode); err != nil {
				return &fs.PathError{Op: "chmod", Path: filepath.Join(a.dir, o.path), Err: err}
			}
		}
		ts := []unix.Timespec{nsTimespec(e.MtimeNs), nsTimespec(e.MtimeNs)}
		if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "utimes", Path: filepath.Join(a.dir, o.path), Err: err}
		}
		return nil
	}
	tmp := a.tmpName()
	ok := false
	defer func() {
		if !ok {
			unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	switch e.Type {
	case store.TypeFile:
		if err := a.writeFile(pfd, tmp, o); err != nil {
			return err
		}
	case store.TypeSymlink:
		if e.Target == "" || strings.IndexByte(e.Target, 0) >= 0 {
			return fmt.Errorf("%q: symlink target %q: %w", o.path, e.Target, store.ErrCorrupt)
		}
		if err := unix.Symlinkat(e.Target, pfd, tmp); err != nil {
			return &fs.PathError{Op: "symlink", Path: filepath.Join(a.dir, o.path), Err: err}
		}
	case store.TypeFIFO, store.TypeCharDev, store.TypeBlockDev:
		mode := uint32(unix.S_IFIFO)
		switch e.Type {
		case store.TypeCharDev:
			mode = unix.S_IFCHR
		case store.TypeBlockDev:
			mode = unix.S_IFBLK
		}
		if err := unix.Mknodat(pfd, tmp, mode|0o600, int(e.Rdev)); err != nil {
			if e.Type != store.TypeFIFO && isPermission(err) {
				a.warn(o.path, fmt.Sprintf("%v not created: needs privilege (%v)", e.Type, err))
				o.op = ""
				return nil
			}
			return &fs.PathError{Op: "mknod", Path: filepath.Join(a.dir, o.path), Err: err}
		}
		if err := chmodNoFollow(pfd, tmp, o.mode); err != nil {
			return &fs.PathError{Op: "chmod", Path: filepath.Join(a.dir, o.path), Err: err}
		}
	default:
		a.warn(o.path, e.Type.String()+"; not created")
		o.op = ""
		return nil
	}
	if e.Type != store.TypeFile {
		ts := []unix.Timespec{nsTimespec(e.MtimeNs), nsTimespec(e.MtimeNs)}
		if err := unix.UtimesNanoAt(pfd, tmp, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "utimes", Path: filepath.Join(a.dir, o.path), Err: err}
		}
	}
	// Replace what planning saw, or create without replacing anything.
	if err := a.unchanged(pfd, name, o); err != nil {
		return err
	}
	flags := uint(0)
	if o.cur == nil || o.gone {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(pfd, tmp, pfd, name, flags); err != nil {
		return &fs.PathError{Op: "rename", Path: filepath.Join(a.dir, o.path), Err: err}
	}
	ok = true
	return nil
}

// writeFile writes o.new's content into a new file tmp in pfd, with its
// xattrs, mode and mtime.
func (a *applier) writeFile(pfd int, tmp string, o *toOp) error {
	e := o.new
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "create", Path: filepath.Join(a.dir, o.path), Err: err}
	}
	defer unix.Close(fd)
	w := &fdWriter{fd: fd, prog: &progress{}}
	bw := bufio.NewWriterSize(w, 256<<10)
	var n int64
	if !e.Content.IsZero() {
		sw := &sparseWriter{fd: fd, bw: bw}
		n, err = a.r.ReadContentTo(a.ctx, e.Content, sw)
		if err == nil {
			err = sw.finish(n)
		}
		if err != nil {
			var we *writeError
			if errors.As(err, &we) {
				return &fs.PathError{Op: "write", Path: filepath.Join(a.dir, o.path), Err: we.err}
			}
			return fmt.Errorf("%q: content %s: %w", o.path, e.Content.Short(), err)
		}
	}
	if n != e.Size {
		return fmt.Errorf("%q: content %s has %d bytes, entry says %d: %w", o.path, e.Content.Short(), n, e.Size, store.ErrCorrupt)
	}
	for _, x := range e.Xattrs {
		if !strings.HasPrefix(x.Name, xattrNamespace) {
			continue
		}
		if err := unix.Fsetxattr(fd, x.Name, x.Value, 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				if !a.warnedX {
					a.warnedX = true
					a.warn(o.path, "the target file system does not support user.* xattrs; xattrs not set (warned once)")
				}
				break
			}
			return &fs.PathError{Op: "setxattr " + x.Name, Path: filepath.Join(a.dir, o.path), Err: err}
		}
	}
	if err := unix.Fchmod(fd, o.mode); err != nil {
		return &fs.PathError{Op: "chmod", Path: filepath.Join(a.dir, o.path), Err: err}
	}
	ts := [2]unix.Timespec{nsTimespec(e.MtimeNs), nsTimespec(e.MtimeNs)}
	if err := futimens(fd, &ts); err != nil {
		return &fs.PathError{Op: "utimes", Path: filepath.Join(a.dir, o.path), Err: err}
	}
	return nil
}

// finishDirs sets the metadata of the directories the change creates or
// changes, deepest first (writing into one changes its mtime), and
// restores the mtime of the other directories written into.
func (a *applier) finishDirs() error {
	type fin struct {
		rel     string
		mode    uint32
		ts      unix.Timespec
		xs      []store.Xattr
		restore bool // an mtime put back; the directory may be gone
	}
	var fins []fin
	set := map[string]bool{}
	for _, o := range a.ops {
		if !o.skip && o.new != nil && o.new.Type == store.TypeDir && !set[o.path] {
			set[o.path] = true
			fins = append(fins, fin{rel: o.path, mode: o.mode, ts: nsTimespec(o.new.MtimeNs), xs: o.new.Xattrs})
		}
	}
	for _, rel := range a.made {
		if set[rel] {
			continue
		}
		// A parent the change does not list: an unchanged directory of
		// the new tree missing from the target.
		e, err := a.newEntry(rel)
		if err != nil {
			return err
		}
		set[rel] = true
		fins = append(fins, fin{rel: rel, mode: e.Mode & 0o7777, ts: nsTimespec(e.MtimeNs), xs: e.Xattrs})
	}
	for _, rel := range a.dirOrder {
		if !set[rel] {
			fins = append(fins, fin{rel: rel, mode: ^uint32(0), ts: a.dirTimes[rel], restore: true})
		}
	}
	// Deepest first; for equal depth any order.
	depth := func(p string) int {
		if p == "" {
			return -1
		}
		return strings.Count(p, "/")
	}
	sort.SliceStable(fins, func(i, j int) bool { return depth(fins[i].rel) > depth(fins[j].rel) })
	for _, f := range fins {
		fd, err := openBeneath(a.rootFD, f.rel, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			if f.restore && (err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP) {
				continue // removed or replaced by the change
			}
			return &fs.PathError{Op: "open", Path: filepath.Join(a.dir, f.rel), Err: err}
		}
		err = a.finishDir(fd, f.rel, f.mode, f.ts, f.xs)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) finishDir(fd int, rel string, mode uint32, ts unix.Timespec, xs []store.Xattr) error {
	for _, x := range xs {
		if !strings.HasPrefix(x.Name, xattrNamespace) {
			continue
		}
		if err := unix.Fsetxattr(fd, x.Name, x.Value, 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return &fs.PathError{Op: "setxattr " + x.Name, Path: filepath.Join(a.dir, rel), Err: err}
		}
	}
	if mode != ^uint32(0) {
		if err := unix.Fchmod(fd, mode); err != nil {
			return &fs.PathError{Op: "chmod", Path: filepath.Join(a.dir, rel), Err: err}
		}
	}
	t := [2]unix.Timespec{ts, ts}
	if err := futimens(fd, &t); err != nil {
		return &fs.PathError{Op: "utimes", Path: filepath.Join(a.dir, rel), Err: err}
	}
	return nil
}

// newEntry looks up the directory rel in the new tree.
func (a *applier) newEntry(rel string) (*store.TreeEntry, error) {
	var e *store.TreeEntry
	err := a.tc.inView(func() error {
		var err error
		e, err = lookup(a.tc.tg, a.newT, rel)
		return err
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}
