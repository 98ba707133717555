package nsexec

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// hostSetup is what setupNamespace leaves for the view (view.go).
type hostSetup struct {
	// warnings are problems that leave the workspace usable (no private
	// /proc).
	warnings []string
	// extra are the view's requested binds (Spec.View; a one-shot init's
	// Command.Binds too), captured before anything was mounted, and binds
	// names them.
	extra []viewOp
	binds []Bind
	// pristine is a keeper's copy of the host's mounts from before
	// anything was mounted, for binds its commands ask for later; -1.
	pristine int
	// root is an image root's view (root.go): the child's namespace is
	// the root already.
	root *view
}

// wantsView reports whether a child with cfg builds a view: a keeper
// always (its commands may ask for one), a one-shot init when its
// command runs in one.
func (c *childConfig) wantsView() bool { return c.Command == nil || c.Command.View }

// setupNamespace prepares the mount namespace a child was cloned into
// (with a new PID namespace, and a user namespace when rootless): it makes
// every mount private, mounts the workspace's overlay on c.Target, private
// tmpfs on /tmp and /dev/shm, and a fresh /proc — the host view. First it
// captures what the view (view.go) will need of the host before those
// mounts hide it. A mount failure is returned as the
// *overlayfs.MountError itself.
func setupNamespace(c *childConfig) (_ *hostSetup, err error) {
	if c.Root != nil {
		return setupImageRoot(c)
	}
	hs := &hostSetup{pristine: -1}
	defer func() {
		if err != nil {
			closeOps(hs.extra)
			if hs.pristine >= 0 {
				unix.Close(hs.pristine)
			}
		}
	}()
	// Nothing mounted here may propagate back to the host, and nothing
	// the host mounts later appears here (mount --make-rprivate /).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make / private: %w", err)
	}
	target := filepath.Clean(c.Target)
	// Capture the bind sources first: the overlay may hide them.
	trees := make([]int, 0, len(c.Binds))
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	for _, b := range c.Binds {
		fd, err := unix.OpenTree(unix.AT_FDCWD, b.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return nil, fmt.Errorf("bind %s: open_tree: %w", b.Source, err)
		}
		trees = append(trees, fd)
	}
	if c.wantsView() {
		// A keeper's binds are the store's defaults and toolchains: one
		// that vanished since the parent looked is left out (a command
		// asking for it gets a view of its own, and the error); a
		// one-shot run's are what its command asked for.
		for _, b := range c.View {
			got, err := captureBinds([]Bind{b})
			if err != nil {
				hs.warnings = append(hs.warnings, fmt.Sprintf("view: left out: %v", err))
				continue
			}
			hs.extra = append(hs.extra, got...)
			hs.binds = append(hs.binds, b)
		}
		if c.Command != nil {
			got, err := captureBinds(c.Command.Binds)
			if err != nil {
				return nil, err
			}
			hs.extra = append(hs.extra, got...)
			hs.binds = append(hs.binds, c.Command.Binds...)
		}
		if c.Command == nil {
			if hs.pristine, err = pristineNS(); err != nil {
				return nil, err
			}
		}
	}
	if err := mountWorkspace(c, target); err != nil {
		return nil, err
	}
	// Where the overlay really is: a target reached through a symlink
	// into /tmp must be kept visible too.
	real, err := filepath.EvalSymlinks(target)
	if err != nil {
		real = target
	}
	if w, err := privateTmp(real); err != nil {
		return nil, err
	} else if w != "" {
		hs.warnings = append(hs.warnings, w)
	}
	for i, b := range c.Binds {
		if err := os.MkdirAll(b.Target, 0o755); err != nil {
			return nil, fmt.Errorf("bind %s: %w", b.Target, err)
		}
		if err := unix.MountSetattr(trees[i], "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return nil, fmt.Errorf("bind %s read-only: %w", b.Source, err)
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, b.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("bind %s on %s: %w", b.Source, b.Target, err)
		}
	}
	// A private /dev/shm: the host's holds the uppers of --tmpfs
	// workspaces (and other programs' shared memory), which a sandboxed
	// command — granted /dev/shm for POSIX shared memory — must not reach.
	if !within(real, "/dev/shm") {
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			hs.warnings = append(hs.warnings, fmt.Sprintf("no private /dev/shm (%v): other workspaces' tmpfs changes are reachable", err))
		}
	}
	// A fresh /proc for the new PID namespace: ps and /proc/PID show the
	// workspace's processes, /proc/self is the reader. The kernel refuses
	// it in a user namespace when the current /proc is partly hidden (a
	// container runtime's masked paths: fs/namespace.c
	// mount_too_revealing); the host's /proc then stays.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		hs.warnings = append(hs.warnings, fmt.Sprintf("no private /proc (%v): ps inside shows the host's processes", err))
	}
	return hs, nil
}

// buildView builds the view of a child whose host view is set up
// (view.go), handing it hs's captured binds.
func (hs *hostSetup) buildView(c *childConfig) (*view, error) {
	if hs.root != nil {
		v := hs.root
		v.pristine, hs.pristine = hs.pristine, -1
		return v, nil
	}
	extra := hs.extra
	hs.extra = nil
	v, err := buildView(viewSpec{target: filepath.Clean(c.Target), binds: c.Binds, extra: extra}, hs.binds)
	if err != nil {
		return nil, err
	}
	v.pristine, hs.pristine = hs.pristine, -1
	return v, nil
}

// pristineNS returns a descriptor of a copy of the calling process's
// mount namespace, made on a thread that ends with it.
func pristineNS() (int, error) {
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the copy
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			res <- result{-1, fmt.Errorf("copy the host's mounts: unshare(CLONE_NEWNS): %w", err)}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			err = fmt.Errorf("copy the host's mounts: %w", err)
		}
		res <- result{fd, err}
	}()
	r := <-res
	return r.fd, r.err
}

// privateTmp mounts an empty tmpfs on /tmp. When the target is beneath
// /tmp (tests; a project under /tmp) the overlay is moved onto the same
// path inside the new tmpfs, so that the workspace stays where commands
// expect it; the layer directories under /tmp are hidden, which the
// mounted overlay no longer needs.
func privateTmp(target string) (warning string, err error) {
	switch {
	case target == "/tmp":
		return "the workspace is mounted on /tmp: no private /tmp", nil
	case !within(target, "/tmp"):
		if err := mountTmp(); err != nil {
			return "", err
		}
		return "", nil
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, target, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("private /tmp: open_tree %s: %w", target, err)
	}
	defer unix.Close(tree)
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		return "", fmt.Errorf("private /tmp: unmount %s: %w", target, err)
	}
	if err := mountTmp(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", fmt.Errorf("private /tmp: %w", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "", fmt.Errorf("private /tmp: move the workspace to %s: %w", target, err)
	}
	return "", nil
}

func mountTmp() error {
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount a private /tmp: %w", err)
	}
	return nil
}

// within reports whether p is dir or below it; both clean and absolute.
func within(p, dir string) bool {
	return p == dir || len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// procStat reads the state and start time (clock ticks after boot) of a
// process from /proc/PID/stat ("self" for the caller). The start time
// tells a process from a later one that reuses its pid.
func procStat(pid string) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name, which is in parentheses and may
	// itself contain ") ": state is field 3, starttime field 22.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc/" + pid + "/stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("malformed /proc/" + pid + "/stat")
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed /proc/%s/stat: %w", pid, err)
	}
	return f[0][0], start, nil
}
