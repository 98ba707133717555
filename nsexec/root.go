package nsexec

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/overlayfs"
)

// Image roots (Spec.Root): the other kind of root a command may see. The
// host view (view.go) is assembled from the host's system directories; an
// image root is a container image's layer stack with an upper of its own,
// mounted as /. A child with one builds it in its own mount namespace,
// before anything runs:
//
//	capture   open_tree clones of what comes from the host: /dev's nodes,
//	          /sys, the files /etc/resolv.conf and /etc/hosts resolve to
//	          (HostNet), the binds; a keeper also keeps a copy of the
//	          host's mounts (pristine) for binds its commands ask for later
//	init      a tmpfs on Dir/rootfs-init holding an empty directory or
//	          file for every mount point below, the root's bottom layer
//	mount     the image's overlay (its lowers, the init layer, the root's
//	          upper and work) on Dir/rootfs; the workspace's overlay at
//	          Target inside it, when there is one
//	place     parents first, each mount point resolved inside the root
//	          (symlinks of the image stay in it: RESOLVE_IN_ROOT): /dev a
//	          tmpfs with the nodes, links, a devpts and /dev/shm; /proc
//	          of the PID namespace, its sys, sysrq-trigger, irq, bus and
//	          fs read-only (as Docker does); /sys read-only; /tmp and
//	          /var/tmp tmpfs; resolv.conf, hosts and the binds
//	pivot     pivot_root into it and detach the old root: the keeper's
//	          own namespace is the root, so every command sees it,
//	          sandboxed or not
//
// The init layer lies beneath the image's layers, so the image's own
// directories and files win (their modes and owners stay the image's), and
// it lives on a tmpfs made for each start, so no mount point ever lands in
// the upper and a commit never records one.

// Names in Spec.Dir of an image root's mount point and init layer.
const (
	rootfsName   = "rootfs"
	rootInitName = "rootfs-init"
)

// opProc is a fresh proc mount (a root's /proc).
const opProc opKind = 100

// procReadOnly are the parts of a root's /proc made read-only, as Docker
// does (its readonlyPaths): kernel settings and triggers that a root
// holding ContainerCaps could otherwise write.
var procReadOnly = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// wireRoot is Root as a child gets it.
type wireRoot struct {
	Mount   overlayfs.Config // the image's overlay: lowers, upper, work, options
	HostNet bool
	Binds   []Bind
	User    string
}

func newWireRoot(spec *Spec) *wireRoot {
	r := spec.Root
	if r == nil {
		return nil
	}
	cfg := overlayfs.DefaultConfig(r.Lowers, r.Upper, r.Work, spec.Features)
	cfg.Volatile = spec.Volatile
	return &wireRoot{Mount: cfg, HostNet: r.HostNet, Binds: r.Binds, User: r.User}
}

// root encodes wireRoot: every field, the overlay's as config does
// (TestWireFields guards overlayfs.Config for both; TestRootCodec guards
// wireRoot).
func (e *encoder) root(r *wireRoot) {
	e.bool(r != nil)
	if r == nil {
		return
	}
	m := &r.Mount
	e.strs(m.Lowers)
	e.str(m.Upper)
	e.str(m.Work)
	e.bool(m.UserXattr)
	e.bool(m.RedirectDir)
	e.bool(m.Volatile)
	e.bool(r.HostNet)
	e.binds(r.Binds)
	e.str(r.User)
}

func (d *decoder) root() *wireRoot {
	if !d.bool() {
		return nil
	}
	r := &wireRoot{}
	r.Mount.Lowers = d.strs()
	r.Mount.Upper = d.str()
	r.Mount.Work = d.str()
	r.Mount.UserXattr = d.bool()
	r.Mount.RedirectDir = d.bool()
	r.Mount.Volatile = d.bool()
	r.HostNet = d.bool()
	r.Binds = d.binds()
	r.User = d.str()
	return r
}

// checkRoot rejects an image-root Spec the child could only fail on and
// makes the directories the child mounts on.
func checkRoot(spec *Spec) error {
	r := spec.Root
	abs := func(what, p string) error {
		if p == "" || !filepath.IsAbs(p) {
			return fmt.Errorf("nsexec: image root: %s %q is not absolute", what, p)
		}
		return nil
	}
	if err := abs("state directory", spec.Dir); err != nil {
		return err
	}
	if len(r.Lowers) == 0 {
		return errors.New("nsexec: image root: no layer")
	}
	for _, p := range append([]string{r.Upper, r.Work}, r.Lowers...) {
		if err := abs("layer directory", p); err != nil {
			return err
		}
	}
	if len(spec.Lowers) > 0 && filepath.Clean(spec.Target) == "/" {
		return errors.New("nsexec: image root: a workspace overlay cannot be mounted on / (Target): the image is /")
	}
	for _, b := range r.Binds {
		if err := abs("bind source", b.Source); err != nil {
			return err
		}
		if err := abs("bind target", b.Target); err != nil {
			return err
		}
	}
	if _, _, err := parseUser(r.User); err != nil {
		return fmt.Errorf("nsexec: image root: %w", err)
	}
	for _, d := range []string{rootfsName, rootInitName} {
		if err := os.Mkdir(filepath.Join(spec.Dir, d), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("nsexec: image root: %w", err)
		}
	}
	if spec.userNS() && spec.SubIDs && inSubIDNS {
		m, err := nestedRootMaps()
		if err != nil {
			return fmt.Errorf("nsexec: image root: %w", err)
		}
		spec.rootMaps = m
	}
	return nil
}

// setRootUserNS gives a child with an image root its user namespace:
// uid and gid 0 inside are the caller's (only they are mapped, so
// setgroups is denied), or, from a subordinate-id namespace, maps (0 the
// caller, the namespace's other ids from 1 up: the image's other users).
func setRootUserNS(attr *syscall.SysProcAttr, maps *IDMaps) {
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.AmbientCaps = allCaps()
	if maps != nil {
		conv := func(rs []IDRange) []syscall.SysProcIDMap {
			out := make([]syscall.SysProcIDMap, len(rs))
			for i, r := range rs {
				out[i] = syscall.SysProcIDMap{ContainerID: int(r.Inner), HostID: int(r.Host), Size: int(r.Size)}
			}
			return out
		}
		attr.UidMappings, attr.GidMappings = conv(maps.UIDs), conv(maps.GIDs)
		// The writer (this process) holds CAP_SETGID in its namespace:
		// setgroups may stay allowed, for commands changing user.
		attr.GidMappingsEnableSetgroups = true
		return
	}
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	attr.GidMappingsEnableSetgroups = false
}

// nestedRootMaps returns the maps of an image root's user namespace made
// from inside a subordinate-id namespace (EnterSubIDs), which maps the
// caller to itself and its subordinate ids around it (mapAround): the
// caller's ids become 0, every other id of this namespace follows from 1
// up, in order — podman's rootless map, one level down.
func nestedRootMaps() (*IDMaps, error) {
	var m IDMaps
	for _, x := range []struct {
		file string
		own  int
		out  *[]IDRange
	}{{"/proc/self/uid_map", os.Getuid(), &m.UIDs}, {"/proc/self/gid_map", os.Getgid(), &m.GIDs}} {
		b, err := os.ReadFile(x.file)
		if err != nil {
			return nil, err
		}
		ranges, err := parseIDMap(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.file, err)
		}
		*x.out = zeroFirst(uint32(x.own), ranges)
	}
	return &m, nil
}

// RootIDMaps returns how the ids of an image root map to this process's
// ids (Inner: the image's id, Host: this process's), as a child started
// with an image root would map them: nil as real root (the same ids);
// rootless, 0 to the caller's uid and gid alone, or — with subIDs, from
// the subordinate-id namespace (EnterSubIDs) — nestedRootMaps' maps, so
// that the image's uid 1000 is the namespace's id its files must be
// owned by. The workspace layer writes a rootless image's layers with
// these owners and reads its uppers' owners back through them.
func RootIDMaps(subIDs bool) (*IDMaps, error) {
	if RealRoot() {
		return nil, nil
	}
	if subIDs {
		if !inSubIDNS {
			return nil, fmt.Errorf("nsexec: image root with subordinate ids: %w", ErrNeedSubIDNS)
		}
		return nestedRootMaps()
	}
	return &IDMaps{
		UIDs: []IDRange{{Inner: 0, Host: uint32(os.Getuid()), Size: 1}},
		GIDs: []IDRange{{Inner: 0, Host: uint32(os.Getgid()), Size: 1}},
	}, nil
}

// parseIDMap reads /proc/PID/uid_map's lines "INNER OUTER SIZE" as ranges
// of this namespace's ids (Host: INNER, which is what a child's map
// names).
func parseIDMap(s string) ([]IDRange, error) {
	var out []IDRange
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		inner, err1 := strconv.ParseUint(f[0], 10, 32)
		size, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || size == 0 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		out = append(out, IDRange{Host: uint32(inner), Size: uint32(size)})
	}
	return out, nil
}

// zeroFirst maps own to 0 and lays the other ids of ranges (Host, Size)
// on 1, 2, ... in order, at most the kernel's 340 lines.
func zeroFirst(own uint32, ranges []IDRange) []IDRange {
	slices.SortFunc(ranges, func(a, b IDRange) int { return int(int64(a.Host) - int64(b.Host)) })
	out := []IDRange{{Inner: 0, Host: own, Size: 1}}
	next := uint32(1)
	add := func(h, n uint32) {
		if n == 0 || len(out) >= maxMapLines || next > ^uint32(0)-n {
			return
		}
		out = append(out, IDRange{Inner: next, Host: h, Size: n})
		next += n
	}
	for _, r := range ranges {
		if own >= r.Host && own-r.Host < r.Size {
			add(r.Host, own-r.Host)
			add(own+1, r.Size-(own-r.Host)-1)
			continue
		}
		add(r.Host, r.Size)
	}
	return out
}

// setupImageRoot builds the image root of a child with c.Root (see the
// top of this file) and pivots into it. The returned hostSetup holds the
// root's view: its namespace, and the pristine copy of the host's mounts
// (keepers) for binds commands ask for later.
func setupImageRoot(c *childConfig) (_ *hostSetup, err error) {
	hs := &hostSetup{pristine: -1}
	var ops []viewOp
	defer func() {
		closeOps(ops)
		if err != nil && hs.pristine >= 0 {
			unix.Close(hs.pristine)
		}
	}()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make / private: %w", err)
	}
	if c.Command == nil {
		if hs.pristine, err = pristineNS(); err != nil {
			return nil, err
		}
	}
	// What comes from the host, captured before anything hides it.
	var binds []Bind
	bind := func(b Bind, optional bool) error {
		op, err := captureAt(b.Source, b.Target, !b.RW)
		if err != nil {
			if optional {
				hs.warnings = append(hs.warnings, fmt.Sprintf("image root: left out: bind %s: %v", b.Source, err))
				return nil
			}
			return fmt.Errorf("image root: bind %s: %w", b.Source, err)
		}
		ops = append(ops, op)
		binds = append(binds, b)
		return nil
	}
	for _, b := range c.Binds {
		if err := bind(Bind{Source: b.Source, Target: b.Target}, false); err != nil {
			return nil, err
		}
	}
	for _, b := range c.View {
		if err := bind(b, true); err != nil {
			return nil, err
		}
	}
	for _, b := range c.Root.Binds {
		if err := bind(b, false); err != nil {
			return nil, err
		}
	}
	if c.Command != nil {
		for _, b := range c.Command.Binds {
			if err := bind(b, false); err != nil {
				return nil, err
			}
		}
	}
	if c.Root.HostNet {
		for _, f := range viewFiles {
			op, err := captureAt(f, f, true)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("image root: %s: %w", f, err)
			}
			ops = append(ops, op)
		}
	}
	for _, d := range viewDevices {
		op, err := captureAt("/dev/"+d, "/dev/"+d, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("image root: /dev/%s: %w", d, err)
		}
		ops = append(ops, op)
	}
	if op, err := captureAt("/sys", "/sys", true); err == nil {
		ops = append(ops, op)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image root: /sys: %w", err)
	}
	// What the root makes of its own.
	ops = append(ops,
		viewOp{kind: opTmpfs, path: "/dev", data: "mode=0755", fd: -1},
		viewOp{kind: opDevpts, path: "/dev/pts", data: "newinstance,ptmxmode=0666,mode=0620", fd: -1},
		viewOp{kind: opTmpfs, path: "/dev/shm", data: "mode=1777", fd: -1},
		viewOp{kind: opProc, path: "/proc", fd: -1},
		viewOp{kind: opTmpfs, path: "/tmp", data: "mode=1777", fd: -1},
		viewOp{kind: opTmpfs, path: "/var/tmp", data: "mode=1777", fd: -1},
	)
	for _, l := range viewDevLinks {
		ops = append(ops, viewOp{kind: opLink, path: l[0], link: l[1], fd: -1})
	}
	slices.SortStableFunc(ops, func(a, b viewOp) int { return strings.Compare(a.path, b.path) })

	// The init layer: a mount point for everything placed on the image
	// (not on a tmpfs placed before it), and for the workspace.
	project := len(c.Mount.Lowers) > 0
	target := filepath.Clean(c.Target)
	initDir := filepath.Join(c.Dir, rootInitName)
	if err := unix.Mount("tmpfs", initDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return nil, fmt.Errorf("image root: mount its init layer on %s: %w", initDir, err)
	}
	points := map[string]bool{} // path → is a file
	if project {
		points[target] = false
	}
	for _, op := range ops {
		if onFresh(op.path, ops) || project && within(op.path, target) || op.kind == opLink {
			continue
		}
		points[op.path] = op.kind == opBind && op.file
	}
	for p, file := range points {
		if err := makeInit(initDir, p, file); err != nil {
			return nil, fmt.Errorf("image root: init layer: %w", err)
		}
	}

	rootDir := filepath.Join(c.Dir, rootfsName)
	mount := c.Root.Mount
	mount.Lowers = append(slices.Clip(mount.Lowers), initDir)
	if err := overlayfs.Mount(rootDir, mount, methodFeatures(c.Method)); err != nil {
		return nil, err
	}
	rootfd, err := unix.Open(rootDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("image root: %w", err)
	}
	defer unix.Close(rootfd)
	pl := rootPlacer{rootfd: rootfd, prefix: rootDir, create: true, fresh: func(p string) bool { return onFresh(p, ops) }}
	if project {
		real, warn, err := pl.mountPoint(target, false)
		if err != nil {
			return nil, fmt.Errorf("image root: the workspace at %s: %w", target, err)
		}
		hs.warn(warn)
		if err := overlayfs.Mount(real, c.Mount, methodFeatures(c.Method)); err != nil {
			return nil, err
		}
	}
	for i := range ops {
		warns, err := pl.place(&ops[i])
		if err != nil {
			return nil, fmt.Errorf("image root: %s: %w", ops[i].path, err)
		}
		for _, w := range warns {
			hs.warn(w)
		}
	}
	if err := unix.Fchdir(rootfd); err != nil {
		return nil, fmt.Errorf("image root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return nil, fmt.Errorf("image root: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return nil, fmt.Errorf("image root: detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return nil, fmt.Errorf("image root: %w", err)
	}
	ns, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("image root: its namespace: %w", err)
	}
	v := &view{ns: ns, root: true, binds: map[Bind]bool{}, pristine: -1}
	for _, b := range binds {
		v.binds[b] = true
	}
	hs.root = v
	return hs, nil
}

func (hs *hostSetup) warn(w string) {
	if w != "" {
		hs.warnings = append(hs.warnings, w)
	}
}

// onFresh reports whether p lies beneath a filesystem the root gets
// fresh (a tmpfs, devpts, proc placed by ops): its mount point is made
// there when it is placed.
func onFresh(p string, ops []viewOp) bool {
	for _, op := range ops {
		if (op.kind == opTmpfs || op.kind == opDevpts || op.kind == opProc) && p != op.path && within(p, op.path) {
			return true
		}
	}
	return false
}

// makeInit makes an empty directory (or file) at p in the init layer
// dir, with its parents.
func makeInit(dir, p string, file bool) error {
	full := filepath.Join(dir, p)
	parent := full
	if file {
		parent = filepath.Dir(full)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	if file {
		f, err := os.OpenFile(full, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}
	return nil
}

// captureAt clones the tree at the host path src (a directory with what
// is mounted below it, or a file, symlinks resolved), read-only when ro,
// as a step that places it at target inside a root.
func captureAt(src, target string, ro bool) (viewOp, error) {
	real, mode, _, err := resolveMode(filepath.Clean(src), nil)
	if err != nil {
		return viewOp{}, err
	}
	isDir := mode == unix.S_IFDIR
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
	if isDir {
		flags |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, real, uint(flags))
	if err != nil {
		return viewOp{}, &fs.PathError{Op: "open_tree", Path: real, Err: err}
	}
	if ro {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			unix.Close(fd)
			return viewOp{}, &fs.PathError{Op: "read-only", Path: real, Err: err}
		}
	}
	return viewOp{kind: opBind, path: filepath.Clean(target), fd: fd, file: !isDir, ro: ro}, nil
}

// rootPlacer places steps into a root whose / is the directory rootfd
// (at prefix in the caller's namespace): every path is resolved inside
// the root, so that a symlink of the image leads where it leads there,
// never out of it.
type rootPlacer struct {
	rootfd int
	prefix string
	// create lets a missing mount point be made in the root itself (the
	// image hid the init layer's): in its upper, with a warning.
	create bool
	// fresh reports whether a path lies on a filesystem placed fresh
	// (a tmpfs): a mount point made there is no change, and no warning.
	fresh func(p string) bool
}

// resolveIn opens p (absolute, inside the root) as O_PATH, resolved
// within the root.
func (pl *rootPlacer) resolveIn(p string) (int, error) {
	rel := strings.TrimPrefix(filepath.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(pl.rootfd, rel, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// mountPoint returns the path in the caller's namespace of p's mount
// point in the root, a directory or a file, making it (with its parents)
// when it is missing and pl.create allows; warning says so.
func (pl *rootPlacer) mountPoint(p string, file bool) (real, warning string, err error) {
	fd, err := pl.resolveIn(p)
	if err == unix.ENOENT {
		if !pl.create {
			return "", "", &fs.PathError{Op: "mount point", Path: p, Err: unix.ENOENT}
		}
		if err := pl.makeIn(p, file); err != nil {
			return "", "", err
		}
		if pl.fresh == nil || !pl.fresh(p) {
			warning = fmt.Sprintf("image root: the image hides the mount point %s: made it in the root (it shows as a change)", p)
		}
		fd, err = pl.resolveIn(p)
	}
	if err != nil {
		return "", "", &fs.PathError{Op: "resolve", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", "", &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	if isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR; isDir == file {
		what := "a directory"
		if isDir {
			what = "not a directory"
		}
		return "", "", fmt.Errorf("mount point %s in the image is %s", p, what)
	}
	real, err = os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", "", err
	}
	if pl.prefix != "/" && !within(real, pl.prefix) {
		return "", "", fmt.Errorf("mount point %s resolved outside the root, to %s", p, real)
	}
	return real, warning, nil
}

// makeIn makes p in the root: its missing parents as directories, p a
// directory or an empty file; each step resolved inside the root. A
// dangling symlink of the image on the way (an /etc/resolv.conf that
// leads to systemd-resolved's file) is followed: what it names is made,
// as runc does for a mount point.
func (pl *rootPlacer) makeIn(p string, file bool) error {
	return pl.makeInHops(p, file, 0)
}

func (pl *rootPlacer) makeInHops(p string, file bool, hops int) error {
	parts := splitPath(p)
	for i := range parts {
		cur := "/" + strings.Join(parts[:i+1], "/")
		fd, err := pl.resolveIn(cur)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return &fs.PathError{Op: "resolve", Path: cur, Err: err}
		}
		parent := filepath.Dir(cur)
		pfd, err := pl.resolveIn(parent)
		if err != nil {
			return &fs.PathError{Op: "resolve", Path: parent, Err: err}
		}
		buf := make([]byte, unix.PathMax)
		if n, lerr := unix.Readlinkat(pfd, parts[i], buf); lerr == nil {
			unix.Close(pfd)
			if hops++; hops > 40 {
				return &fs.PathError{Op: "resolve", Path: p, Err: unix.ELOOP}
			}
			target := string(buf[:n])
			if !filepath.IsAbs(target) {
				target = filepath.Join(parent, target) // Join keeps ".." within /
			}
			return pl.makeInHops(filepath.Join(append([]string{target}, parts[i+1:]...)...), file, hops)
		}
		if i == len(parts)-1 && file {
			err = unix.Mknodat(pfd, parts[i], unix.S_IFREG|0o644, 0)
		} else {
			err = unix.Mkdirat(pfd, parts[i], 0o755)
		}
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return &fs.PathError{Op: "create", Path: cur, Err: err}
		}
	}
	return nil
}

// place puts one step into the root. Warnings are problems that leave
// the root usable.
func (pl *rootPlacer) place(op *viewOp) (warnings []string, err error) {
	if op.kind == opLink {
		dir, _, err := pl.mountPoint(filepath.Dir(op.path), false)
		if err != nil {
			return nil, err
		}
		if err := unix.Symlinkat(op.link, unix.AT_FDCWD, filepath.Join(dir, filepath.Base(op.path))); err != nil && err != unix.EEXIST {
			return nil, &fs.PathError{Op: "symlink", Path: op.path, Err: err}
		}
		return nil, nil
	}
	real, warn, err := pl.mountPoint(op.path, op.kind == opBind && op.file)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		warnings = append(warnings, warn)
	}
	switch op.kind {
	case opBind:
		if err := unix.MoveMount(op.fd, "", unix.AT_FDCWD, real, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("move_mount: %w", err)
		}
		op.close()
	case opTmpfs, opDevpts:
		fstype, flags := "tmpfs", uintptr(unix.MS_NOSUID|unix.MS_NODEV)
		if op.kind == opDevpts {
			fstype, flags = "devpts", unix.MS_NOSUID|unix.MS_NOEXEC
		}
		if err := unix.Mount(fstype, real, fstype, flags, op.data); err != nil {
			return nil, fmt.Errorf("mount %s: %w", fstype, err)
		}
	case opProc:
		// A proc of the child's PID namespace; mount_too_revealing
		// checks the namespace still holds a fully visible one (the
		// host's, not yet detached). Inside a container that masks
		// parts of /proc the kernel refuses: bind the host's then.
		if err := unix.Mount("proc", real, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			warnings = append(warnings, fmt.Sprintf("no private /proc (%v): ps inside shows the host's processes", err))
			fd, err := unix.OpenTree(unix.AT_FDCWD, "/proc", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
			if err != nil {
				return nil, fmt.Errorf("open_tree /proc: %w", err)
			}
			err = unix.MoveMount(fd, "", unix.AT_FDCWD, real, unix.MOVE_MOUNT_F_EMPTY_PATH)
			unix.Close(fd)
			if err != nil {
				return nil, fmt.Errorf("bind /proc: %w", err)
			}
		}
		for _, p := range procReadOnly {
			sub := filepath.Join(real, strings.TrimPrefix(p, "/proc"))
			fd, err := unix.OpenTree(unix.AT_FDCWD, sub, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
			if err == unix.ENOENT {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("open_tree %s: %w", p, err)
			}
			err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
			if err == nil {
				err = unix.MoveMount(fd, "", unix.AT_FDCWD, sub, unix.MOVE_MOUNT_F_EMPTY_PATH)
			}
			unix.Close(fd)
			if err != nil {
				return nil, fmt.Errorf("%s read-only: %w", p, err)
			}
		}
	default:
		return nil, fmt.Errorf("unknown step %d", op.kind)
	}
	return warnings, nil
}

// enterRoot gives the calling thread, which must be locked to it for
// good, the binds of want that the root lacks: in a namespace of its own,
// a copy of the root's with them placed (captured in the pristine copy of
// the host's mounts). A root's commands otherwise run in the process's
// own namespace, the root: nothing to do.
func (v *view) enterRoot(want []Bind) error {
	more := v.missing(want)
	if len(more) == 0 {
		return nil
	}
	if v.pristine < 0 {
		return fmt.Errorf("image root: binds %v were not captured when the workspace started", more)
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("image root: unshare(CLONE_FS): %w", err)
	}
	if err := unix.Setns(v.pristine, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("image root: enter the host's namespace: %w", err)
	}
	var ops []viewOp
	defer func() { closeOps(ops) }()
	for _, b := range more {
		op, err := captureAt(b.Source, b.Target, !b.RW)
		if err != nil {
			return fmt.Errorf("bind %s: %w", b.Source, err)
		}
		ops = append(ops, op)
	}
	if err := unix.Setns(v.ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("image root: enter: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("image root: unshare(CLONE_NEWNS): %w", err)
	}
	rootfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("image root: %w", err)
	}
	defer unix.Close(rootfd)
	// A mount point made now would be a change of the workspace's:
	// a command's binds go where the image has a place for them.
	pl := rootPlacer{rootfd: rootfd, prefix: "/"}
	slices.SortStableFunc(ops, func(a, b viewOp) int { return strings.Compare(a.path, b.path) })
	for i := range ops {
		if _, err := pl.place(&ops[i]); errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("bind at %s: the image has no such path (%v): binds at paths the image lacks are given when the workspace starts", ops[i].path, err)
		} else if err != nil {
			return fmt.Errorf("bind at %s: %w", ops[i].path, err)
		}
	}
	return nil
}

// identity is who a command of an image root runs as.
type identity struct {
	uid, gid uint32
	groups   []uint32
}

// parseUser splits an image config's User ("", "root", "UID", "NAME",
// "UID:GID", "NAME:GROUP", ...) into its user and group parts.
func parseUser(s string) (user, group string, err error) {
	user, group, _ = strings.Cut(s, ":")
	if strings.ContainsAny(s, " \t\n") || strings.Count(s, ":") > 1 || strings.HasPrefix(s, ":") {
		return "", "", fmt.Errorf("user %q: want NAME or UID, optionally :GROUP or :GID", s)
	}
	if user == "" {
		user = "root"
	}
	return user, group, nil
}

// lookupUser resolves an image config's User in the root the calling
// thread sees (its /etc/passwd and /etc/group), as container runtimes do:
// a name must exist; a number need not (its group is then 0, or the
// passwd entry's); supplementary groups are those /etc/group lists the
// user's name in.
func lookupUser(spec string) (*identity, error) {
	user, group, err := parseUser(spec)
	if err != nil {
		return nil, err
	}
	id := &identity{}
	name := ""
	if n, err := strconv.ParseUint(user, 10, 32); err == nil {
		id.uid = uint32(n)
		if e := findEntry("/etc/passwd", func(f []string) bool { return len(f) > 3 && f[2] == user }); e != nil {
			name = e[0]
			if g, err := strconv.ParseUint(e[3], 10, 32); err == nil {
				id.gid = uint32(g)
			}
		}
	} else {
		e := findEntry("/etc/passwd", func(f []string) bool { return len(f) > 3 && f[0] == user })
		if e == nil {
			return nil, fmt.Errorf("user %q: no such user in the image's /etc/passwd", user)
		}
		u, err1 := strconv.ParseUint(e[2], 10, 32)
		g, err2 := strconv.ParseUint(e[3], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("user %q: malformed entry in the image's /etc/passwd", user)
		}
		id.uid, id.gid, name = uint32(u), uint32(g), user
	}
	if group != "" {
		if n, err := strconv.ParseUint(group, 10, 32); err == nil {
			id.gid = uint32(n)
		} else {
			e := findEntry("/etc/group", func(f []string) bool { return len(f) > 2 && f[0] == group })
			if e == nil {
				return nil, fmt.Errorf("group %q: no such group in the image's /etc/group", group)
			}
			g, err := strconv.ParseUint(e[2], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("group %q: malformed entry in the image's /etc/group", group)
			}
			id.gid = uint32(g)
		}
	}
	id.groups = []uint32{id.gid}
	if name != "" {
		forEntry("/etc/group", func(f []string) {
			if len(f) < 4 || !slices.Contains(strings.Split(f[3], ","), name) {
				return
			}
			if g, err := strconv.ParseUint(f[2], 10, 32); err == nil && !slices.Contains(id.groups, uint32(g)) {
				id.groups = append(id.groups, uint32(g))
			}
		})
	}
	return id, nil
}

func findEntry(file string, match func([]string) bool) []string {
	var found []string
	forEntry(file, func(f []string) {
		if found == nil && match(f) {
			found = f
		}
	})
	return found
}

// forEntry calls fn with the colon-separated fields of each line of an
// /etc/passwd-like file; a missing file has none.
func forEntry(file string, fn func([]string)) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		fn(strings.Split(line, ":"))
	}
}

// setgroupsAllowed reports whether this process's user namespace lets it
// set supplementary groups: not in a namespace that maps only the caller
// (its setgroups file says deny).
var setgroupsAllowed = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/proc/self/setgroups")
	return err != nil || strings.TrimSpace(string(b)) != "deny"
})

// credential is the credential a command of an image root is started
// with (syscall.ForkExec sets it in the child, before exec). Its ids must
// be mapped in this user namespace.
func (id *identity) credential() (*syscall.Credential, error) {
	for _, x := range []struct {
		file, what string
		id         uint32
	}{{"/proc/self/uid_map", "uid", id.uid}, {"/proc/self/gid_map", "gid", id.gid}} {
		if !idMapped(x.file, x.id) {
			return nil, fmt.Errorf("%s %d is not mapped in the workspace's user namespace: users of the image other than root need subordinate ids (--subids)", x.what, x.id)
		}
	}
	c := &syscall.Credential{Uid: id.uid, Gid: id.gid}
	if setgroupsAllowed() {
		for _, g := range id.groups {
			if idMapped("/proc/self/gid_map", g) {
				c.Groups = append(c.Groups, g)
			}
		}
	} else {
		c.NoSetGroups = true
	}
	return c, nil
}

// idMapped reports whether id is mapped in this process's user namespace
// (the map file's first column).
func idMapped(file string, id uint32) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return true // no user namespaces: every id is
	}
	ranges, err := parseIDMap(string(b))
	if err != nil {
		return true
	}
	for _, r := range ranges {
		if id >= r.Host && id-r.Host < r.Size {
			return true
		}
	}
	return false
}
