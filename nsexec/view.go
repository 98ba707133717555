package nsexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The view is the root a sandboxed command sees (Command.View): a fresh
// tmpfs holding read-only binds of the system directories, the workspace
// at its path, the workspace's private /tmp and /dev/shm, a private
// /var/tmp, a minimal /dev with a devpts instance of its own, the PID
// namespace's /proc (read-only), /sys (read-only), the files
// /etc/resolv.conf and /etc/hosts resolve to, and the binds the spec and
// the command ask for — nothing else of the host: no home directory, no
// /run, no store. Landlock and seccomp apply on top.
//
// Three mount namespaces serve a keeper (see docs/nsexec.md, "The view"):
//
//	host view  the keeper's own namespace: the host's mounts, the overlay
//	           at Target, private /tmp and /dev/shm, the PID namespace's
//	           /proc. Commands without View run here, as before.
//	pristine   a copy of the host's mounts taken before anything was
//	           mounted: the source of binds asked for later (Command.Binds),
//	           which the overlay or the private /tmp may hide in the host
//	           view. Held by a descriptor only.
//	view       the assembled root. Held by a descriptor; a command thread
//	           joins it (setns) right before it forks the command.
//
// Mount namespaces are per thread in Linux: a goroutine locked to a fresh
// thread unshares CLONE_FS (setns into a mount namespace needs an fs_struct
// of its own, which Go's threads share) and joins another one; the keeper
// and its other threads stay where they are. The view is built once, on
// such a thread: it unshares a copy of the host view, captures what the
// view shows (open_tree clones, which outlive the namespace they came
// from), mounts the view's tmpfs over /tmp, pivot_roots into it, detaches
// the old root and places the captured trees. A command that needs binds
// the keeper's view lacks gets a view of its own the same way, from a
// copy of the keeper's view (view.enter).

// systemDirs are the host directories every view shows read-only where
// they exist. A symlink among them (a usr-merged host's /bin → usr/bin)
// is recreated as the same symlink.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// viewDevices are the device nodes of the view's /dev, bound from the
// host's (mknod is impossible in a user namespace; a bind of a devtmpfs
// node works).
var viewDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// viewDevLinks are the symlinks of the view's /dev.
var viewDevLinks = [][2]string{
	{"/dev/ptmx", "pts/ptmx"},
	{"/dev/fd", "/proc/self/fd"},
	{"/dev/stdin", "/proc/self/fd/0"},
	{"/dev/stdout", "/proc/self/fd/1"},
	{"/dev/stderr", "/proc/self/fd/2"},
}

// viewFiles are files that must resolve in the view although they may be
// symlinks out of the system directories: /etc/resolv.conf is often one
// into /run/systemd/resolve. The file each resolves to is bound at its
// real path (and the symlinks on the way recreated).
var viewFiles = []string{"/etc/resolv.conf", "/etc/hosts"}

type opKind uint8

const (
	opBind   opKind = iota // the detached tree fd at path: a directory or a file
	opLink                 // a symlink at path to link
	opTmpfs                // a fresh tmpfs at path, with data as its options
	opDevpts               // a devpts instance of its own at path
)

// viewOp is one step of building a view, in the order of the paths.
type viewOp struct {
	kind opKind
	path string // where it goes in the view: a real path (no symlink on the way), but for opLink
	link string // opLink: the symlink's target
	fd   int    // opBind: an open_tree clone, closed once placed
	file bool   // opBind: the tree is a single file (its mount point is a file)
	// host marks a bind of host content at its own path (a system
	// directory, a requested bind): one beneath another such bind shows
	// nothing new and is left out (see trim).
	host bool
	ro   bool
	data string // opTmpfs, opDevpts: mount options
}

func (op *viewOp) close() {
	if op.kind == opBind && op.fd >= 0 {
		unix.Close(op.fd)
		op.fd = -1
	}
}

func closeOps(ops []viewOp) {
	for i := range ops {
		ops[i].close()
	}
}

// lstatCache remembers the lstat of paths: their type, and a symlink's
// target.
type lstatCache map[string]lstatEntry

type lstatEntry struct {
	mode uint32  // S_IFMT bits
	link *string // a symlink's target
}

func (c lstatCache) lstat(p string) (lstatEntry, error) {
	if e, ok := c[p]; ok {
		return e, nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return lstatEntry{}, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	e := lstatEntry{mode: st.Mode & unix.S_IFMT}
	if e.mode == unix.S_IFLNK {
		t, err := os.Readlink(p)
		if err != nil {
			return lstatEntry{}, err
		}
		e.link = &t
	}
	if c != nil {
		c[p] = e
	}
	return e, nil
}

// resolveMode resolves p like filepath.EvalSymlinks, with cache, and
// returns the type (S_IFMT) of what it resolves to and the symlinks met
// on the way as opLink steps, so that the same path resolves the same way
// in a view that holds the real path.
func resolveMode(p string, cache lstatCache) (real string, mode uint32, links []viewOp, err error) {
	if !filepath.IsAbs(p) {
		return "", 0, nil, fmt.Errorf("%q is not absolute", p)
	}
	done, mode := "/", uint32(unix.S_IFDIR)
	rest := splitPath(p)
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case ".":
			continue
		case "..":
			done, mode = filepath.Dir(done), unix.S_IFDIR
			continue
		}
		next := filepath.Join(done, c)
		e, err := cache.lstat(next)
		if err != nil {
			return "", 0, nil, err
		}
		if e.link == nil {
			done, mode = next, e.mode
			continue
		}
		if hops++; hops > 40 {
			return "", 0, nil, &fs.PathError{Op: "resolve", Path: p, Err: unix.ELOOP}
		}
		t := *e.link
		links = append(links, viewOp{kind: opLink, path: next, link: t, fd: -1})
		if filepath.IsAbs(t) {
			done = "/"
		}
		rest = append(splitPath(t), rest...)
	}
	return done, mode, links, nil
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// capture clones the tree at path (a directory with what is mounted below
// it, or a file) in the calling thread's mount namespace, read-only when
// ro, as the steps that place it at its real path in a view: the
// symlinks on the way, then the bind. When skip reports that the real
// path shows in the view anyway, only the symlinks are returned.
func capture(path string, ro, host bool, skip func(real string) bool, cache lstatCache) ([]viewOp, error) {
	real, mode, links, err := resolveMode(filepath.Clean(path), cache)
	if err != nil {
		return nil, err
	}
	if skip != nil && skip(real) {
		return links, nil
	}
	isDir := mode == unix.S_IFDIR
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
	if isDir {
		flags |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, real, uint(flags))
	if err != nil {
		return nil, &fs.PathError{Op: "open_tree", Path: real, Err: err}
	}
	if ro {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "read-only", Path: real, Err: err}
		}
	}
	return append(links, viewOp{kind: opBind, path: real, fd: fd, file: !isDir, host: host, ro: ro}), nil
}

// captureBinds captures the trees binds name (Source, at Target in the
// view), as capture does. A bind's Target is its Source in practice; when
// they differ the tree goes at Target as given.
func captureBinds(binds []Bind) ([]viewOp, error) {
	var ops []viewOp
	for _, b := range binds {
		got, err := capture(b.Source, !b.RW, true, nil, nil)
		if err != nil {
			closeOps(ops)
			return nil, fmt.Errorf("bind %s: %w", b.Source, err)
		}
		if t := filepath.Clean(b.Target); t != filepath.Clean(b.Source) {
			// The tree goes where asked; the source's symlinks do not
			// apply there.
			got = got[len(got)-1:]
			got[0].path = t
		}
		ops = append(ops, got...)
	}
	return ops, nil
}

// viewSpec is what a view is built from besides the host: where the
// workspace is, and the binds captured before the host view hid anything.
type viewSpec struct {
	target string   // the workspace's mount point (Spec.Target)
	binds  []Bind   // the host view's binds (Spec.Binds): shown too
	extra  []viewOp // captured requested binds (Spec.View, Command.Binds)
}

// planView captures, in the calling thread's mount namespace (a copy of
// the host view), what a view shows, and returns it as steps with the
// requested binds (s.extra, which it takes over).
func planView(s viewSpec) (_ []viewOp, err error) {
	// The requested binds first: closed with the rest on an error.
	ops := append([]viewOp(nil), s.extra...)
	defer func() {
		if err != nil {
			closeOps(ops)
		}
	}()
	c := lstatCache{}
	// inSystem reports whether a real path shows in the system
	// directories captured so far (a usr-merged /bin's target; a
	// resolv.conf that is a file of /etc).
	var system []string
	inSystem := func(real string) bool {
		for _, d := range system {
			if within(real, d) {
				return true
			}
		}
		return false
	}
	// add(what)(capture(...)) appends what capture returns;
	// optional(what)(...) skips a missing path.
	add := func(what string) func([]viewOp, error) error {
		return func(got []viewOp, err error) error {
			if err != nil {
				return fmt.Errorf("view: %s: %w", what, err)
			}
			ops = append(ops, got...)
			return nil
		}
	}
	optional := func(what string) func([]viewOp, error) error {
		return func(got []viewOp, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return add(what)(got, err)
		}
	}
	for _, d := range systemDirs {
		got, err := capture(d, true, true, inSystem, c)
		if err := optional(d)(got, err); err != nil {
			return nil, err
		}
		if n := len(got); n > 0 && got[n-1].kind == opBind {
			system = append(system, got[n-1].path)
		}
	}
	// The workspace's private /tmp, with what is mounted in it (the
	// workspace itself when it lies beneath /tmp, git alternates).
	if err := add("/tmp")(capture("/tmp", false, false, nil, c)); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(s.target)
	if err != nil {
		real = s.target
	}
	if !within(real, "/tmp") {
		if err := add("the workspace at " + s.target)(capture(s.target, false, false, nil, c)); err != nil {
			return nil, err
		}
	}
	for _, b := range s.binds {
		if r, err := filepath.EvalSymlinks(b.Target); err == nil && !within(r, "/tmp") {
			if err := add("bind " + b.Target)(capture(b.Target, !b.RW, false, nil, c)); err != nil {
				return nil, err
			}
		}
	}
	ops = append(ops, viewOp{kind: opTmpfs, path: "/var/tmp", data: "mode=1777", fd: -1})
	for _, d := range viewDevices {
		got, err := capture("/dev/"+d, false, false, nil, c)
		if err := optional("/dev/"+d)(got, err); err != nil {
			return nil, err
		}
	}
	for _, l := range viewDevLinks {
		ops = append(ops, viewOp{kind: opLink, path: l[0], link: l[1], fd: -1})
	}
	// ptmxmode: /dev/ptmx (→ pts/ptmx) must open for everyone; mode as a
	// login's ptys.
	ops = append(ops, viewOp{kind: opDevpts, path: "/dev/pts", data: "newinstance,ptmxmode=0666,mode=0620", fd: -1})
	if err := add("/dev/shm")(capture("/dev/shm", false, false, nil, c)); err != nil {
		return nil, err
	}
	// The PID namespace's /proc, read-only (Landlock allows it read-only
	// anyway; mounted read-only, /proc/sys and /proc/sysrq-trigger stay
	// out of reach of a root without Landlock too). Bound, not mounted
	// afresh: a new proc mount is refused once the old root is gone
	// (mount_too_revealing).
	if err := add("/proc")(capture("/proc", true, false, nil, c)); err != nil {
		return nil, err
	}
	got, err := capture("/sys", true, false, nil, c)
	if err := optional("/sys")(got, err); err != nil {
		return nil, err
	}
	for _, f := range viewFiles {
		got, err := capture(f, true, true, inSystem, c)
		if err := optional(f)(got, err); err != nil {
			return nil, err
		}
	}
	return trim(ops), nil
}

// trim sorts the steps by path (parents first) and leaves out what the
// view shows anyway: host binds beneath a host bind at least as writable
// (a symlink's target inside /usr; resolv.conf when it is a file of
// /etc), symlinks inside host binds (the bind holds them), and duplicates.
func trim(ops []viewOp) []viewOp {
	slices.SortStableFunc(ops, func(a, b viewOp) int { return strings.Compare(a.path, b.path) })
	covered := func(i int) bool {
		op := &ops[i]
		for j := range ops {
			o := &ops[j]
			if j == i || o.kind != opBind || !o.host || o.file || !within(op.path, o.path) {
				continue
			}
			if op.path == o.path {
				// The same tree twice: keep the writable one, else the first.
				if op.kind == opBind && op.host && (op.ro && !o.ro || op.ro == o.ro && j < i) {
					return true
				}
				continue
			}
			if op.kind == opLink || op.kind == opBind && op.host && (op.ro || !o.ro) {
				return true
			}
		}
		return false
	}
	seenLink := map[string]bool{}
	out := ops[:0:0]
	for i := range ops {
		op := ops[i]
		if op.kind == opLink {
			if seenLink[op.path] {
				continue
			}
			seenLink[op.path] = true
		}
		if covered(i) {
			op.close()
			continue
		}
		out = append(out, op)
	}
	return out
}

// enterView builds a view from ops on the calling thread, which must be
// locked to it for good and have a mount namespace of its own (a fresh
// unshare): it mounts the view's tmpfs over /tmp (the steps hold what
// /tmp showed already), pivot_roots into it, detaches the old root, and
// places the steps. The thread's root is the view afterwards. The steps'
// descriptors are closed.
func enterView(ops []viewOp) error {
	defer closeOps(ops)
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("view: mount its root: %w", err)
	}
	root, err := unix.Open("/tmp", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	err = unix.Fchdir(root)
	unix.Close(root)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	// pivot_root(".", "."): the old root ends up stacked on the new one,
	// and the unmount takes it away (pivot_root(2), as runc does).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("view: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("view: detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	var rootSt unix.Stat_t
	if err := unix.Stat("/", &rootSt); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	p := placer{devs: map[uint64]bool{rootSt.Dev: true}, dirs: map[string]bool{"/": true}}
	for i := range ops {
		if err := p.place(&ops[i]); err != nil {
			return fmt.Errorf("view: %s: %w", ops[i].path, err)
		}
	}
	// The view's own directories are fixed: read-only.
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("view: read-only root: %w", err)
	}
	return nil
}

// placer puts steps into a view being built.
type placer struct {
	// devs are the filesystems mount points may be created on: the view's
	// own tmpfs root, and the private /tmp and /var/tmp once placed. Not
	// the workspace (a directory made there would be a change), not a
	// read-only bind.
	devs map[uint64]bool
	// dirs are directories known to exist on one of devs.
	dirs map[string]bool
}

func (p *placer) place(op *viewOp) error {
	switch op.kind {
	case opLink:
		err := unix.Symlinkat(op.link, unix.AT_FDCWD, op.path)
		if err == unix.ENOENT {
			if err = p.mkdirAll(filepath.Dir(op.path)); err == nil {
				err = unix.Symlinkat(op.link, unix.AT_FDCWD, op.path)
			}
		}
		if err != nil && err != unix.EEXIST {
			return &fs.PathError{Op: "symlink", Path: op.path, Err: err}
		}
		return nil
	case opBind:
		if op.file {
			if err := p.mkfile(op.path); err != nil {
				return err
			}
		} else if err := p.mkdirAll(op.path); err != nil {
			return err
		}
		if err := unix.MoveMount(op.fd, "", unix.AT_FDCWD, op.path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount: %w", err)
		}
		op.close()
	case opTmpfs, opDevpts:
		if err := p.mkdirAll(op.path); err != nil {
			return err
		}
		fstype, flags := "tmpfs", uintptr(unix.MS_NOSUID|unix.MS_NODEV)
		if op.kind == opDevpts {
			fstype, flags = "devpts", unix.MS_NOSUID|unix.MS_NOEXEC
		}
		if err := unix.Mount(fstype, op.path, fstype, flags, op.data); err != nil {
			return fmt.Errorf("mount %s: %w", fstype, err)
		}
	default:
		return fmt.Errorf("unknown step %d", op.kind)
	}
	// A mount hides the directory it is on: what is known below it is not.
	delete(p.dirs, op.path)
	if op.path == "/tmp" || op.path == "/var/tmp" {
		var st unix.Stat_t
		if err := unix.Stat(op.path, &st); err == nil {
			p.devs[st.Dev] = true
			p.dirs[op.path] = true
		}
	}
	return nil
}

// mkdirAll makes dir and its missing parents, each on a filesystem where
// mount points may be made; an existing dir may be anywhere.
func (p *placer) mkdirAll(dir string) error {
	if p.dirs[dir] {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: unix.ENOTDIR}
		}
		if p.devs[st.Dev] {
			p.dirs[dir] = true
		}
		return nil
	} else if err != unix.ENOENT {
		return &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	parent := filepath.Dir(dir)
	if err := p.mkdirAll(parent); err != nil {
		return err
	}
	if err := p.mayCreate(parent); err != nil {
		return err
	}
	if err := unix.Mkdir(dir, 0o755); err != nil && err != unix.EEXIST {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	p.dirs[dir] = true
	return nil
}

// mkfile makes an empty file at path, a mount point for a file, unless
// something is there.
func (p *placer) mkfile(path string) error {
	dir := filepath.Dir(path)
	if err := p.mkdirAll(dir); err != nil {
		return err
	}
	if err := p.mayCreate(dir); err != nil {
		return err
	}
	if err := unix.Mknod(path, unix.S_IFREG|0o644, 0); err != nil && err != unix.EEXIST {
		return &fs.PathError{Op: "create", Path: path, Err: err}
	}
	return nil
}

func (p *placer) mayCreate(dir string) error {
	if p.dirs[dir] {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	if !p.devs[st.Dev] {
		return fmt.Errorf("no mount point can be made in %s (the workspace or a read-only directory): %w", dir, unix.EROFS)
	}
	p.dirs[dir] = true
	return nil
}

// view is a built view: its mount namespace, and what made it, for a
// command that needs more binds than it holds (view.enter).
type view struct {
	ns    int           // the view's mount namespace (an nsfd)
	plan  []viewOp      // its steps, without descriptors
	binds map[Bind]bool // the requested binds it holds (Spec.View)
	// pristine is the namespace later binds are captured in (keepers: a
	// copy of the host's mounts from before the overlay and the private
	// /tmp hid anything); -1: none (a one-shot init has all its binds
	// from the start).
	pristine int
	// err, when set, is why the workspace has no view: enter fails with it.
	err error
	// root marks an image root's view (root.go): the process's own
	// namespace, binds placed on the image.
	root bool
}

// buildView builds a view on a fresh thread that ends with it: a copy of
// the calling process's mount namespace (the host view) with the steps of
// planView, pivoted into. binds are the requested binds s.extra holds.
func buildView(s viewSpec, binds []Bind) (*view, error) {
	type result struct {
		v   *view
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the view
		v, err := buildViewHere(s, binds)
		res <- result{v, err}
	}()
	r := <-res
	return r.v, r.err
}

func buildViewHere(s viewSpec, binds []Bind) (*view, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		closeOps(s.extra)
		return nil, fmt.Errorf("view: unshare(CLONE_NEWNS): %w", err)
	}
	ops, err := planView(s)
	if err != nil {
		return nil, err
	}
	plan := describe(ops)
	if err := enterView(ops); err != nil {
		return nil, err
	}
	ns, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("view: its namespace: %w", err)
	}
	v := &view{ns: ns, plan: plan, binds: map[Bind]bool{}, pristine: -1}
	for _, b := range binds {
		v.binds[b] = true
	}
	return v, nil
}

// describe copies steps without their descriptors.
func describe(ops []viewOp) []viewOp {
	out := make([]viewOp, len(ops))
	for i, op := range ops {
		op.fd = -1
		out[i] = op
	}
	return out
}

// missing returns the binds of want the view does not hold.
func (v *view) missing(want []Bind) []Bind {
	var out []Bind
	for _, b := range want {
		if !v.binds[b] {
			out = append(out, b)
		}
	}
	return out
}

// enter moves the calling thread, which must be locked to it for good,
// into the view, or, when it lacks some of binds, into a view of its own:
// a copy of this one with those binds added (captured in the pristine
// namespace). The thread's root is the view's afterwards.
func (v *view) enter(binds []Bind) error {
	if v.err != nil {
		return fmt.Errorf("the workspace has no view for sandboxed commands: %w", v.err)
	}
	if v.root {
		return v.enterRoot(binds)
	}
	// setns into a mount namespace needs an fs_struct of the thread's own
	// (Linux: fs/namespace.c mntns_install); Go's threads share one.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("view: unshare(CLONE_FS): %w", err)
	}
	more := v.missing(binds)
	if len(more) > 0 {
		if v.pristine < 0 {
			return fmt.Errorf("view: binds %v were not captured when the workspace started", more)
		}
		if err := unix.Setns(v.pristine, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("view: enter the host's namespace: %w", err)
		}
		extra, err := captureBinds(more)
		if err != nil {
			return err
		}
		if err := unix.Setns(v.ns, unix.CLONE_NEWNS); err != nil {
			closeOps(extra)
			return fmt.Errorf("view: enter: %w", err)
		}
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			closeOps(extra)
			return fmt.Errorf("view: unshare(CLONE_NEWNS): %w", err)
		}
		ops, err := v.reclone()
		if err != nil {
			closeOps(extra)
			return err
		}
		return enterView(trim(append(ops, extra...)))
	}
	if err := unix.Setns(v.ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("view: enter: %w", err)
	}
	return nil
}

// reclone turns the view's plan into steps that rebuild it, in a copy of
// its namespace: each mount that is not beneath another is cloned with
// what is below it (so the copy shares the view's /tmp, /var/tmp, devpts
// and workspace), and the symlinks are made again.
func (v *view) reclone() ([]viewOp, error) {
	var ops []viewOp
	var mounts []string
	for _, op := range v.plan {
		beneath := false
		for _, m := range mounts {
			if within(op.path, m) {
				beneath = true
				break
			}
		}
		if beneath {
			continue
		}
		if op.kind == opLink {
			ops = append(ops, op)
			continue
		}
		flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
		if !op.file {
			flags |= unix.AT_RECURSIVE
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, op.path, uint(flags))
		if err != nil {
			closeOps(ops)
			return nil, fmt.Errorf("view: clone %s: %w", op.path, err)
		}
		ops = append(ops, viewOp{kind: opBind, path: op.path, fd: fd, file: op.file, host: op.kind == opBind && op.host, ro: op.ro})
		mounts = append(mounts, op.path)
	}
	return ops, nil
}
