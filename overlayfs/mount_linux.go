package overlayfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrVolatileDirty reports a workdir still marked by a volatile mount from
// an earlier boot (or by another tool): writes to the upper directory may
// have been lost in a crash, and the kernel refuses to mount it until the
// marker is removed. ClearVolatile removes it.
var ErrVolatileDirty = errors.New("upper directory was mounted volatile before the last boot")

// MountError is a failed mount or unmount, with what was passed to the
// kernel and what it said.
type MountError struct {
	// Target is the mount point.
	Target string
	// Op is the step that failed: "plan", "prepare", "mount(2)", "fsopen",
	// "fsconfig <param>", "fsconfig create", "fsmount", "move_mount",
	// "umount".
	Op string
	// Options is the option string (mount(2)) or the fsconfig calls.
	Options string
	// Log holds the messages the kernel queued on the filesystem context,
	// e.g. "e overlay: Unknown parameter 'x'". overlayfs itself (6.18)
	// logs most of its reasons to the kernel log (dmesg) instead.
	Log []string
	Err error
}

func (e *MountError) Error() string {
	var b strings.Builder
	if e.Op == "umount" {
		fmt.Fprintf(&b, "overlayfs: umount %s: %v", e.Target, e.Err)
	} else {
		fmt.Fprintf(&b, "overlayfs: mount %s: %s: %v", e.Target, e.Op, e.Err)
	}
	if len(e.Log) > 0 {
		fmt.Fprintf(&b, " (kernel: %s)", strings.Join(e.Log, "; "))
	}
	if h := e.hint(); h != "" {
		b.WriteString(": ")
		b.WriteString(h)
	}
	if e.Options != "" {
		fmt.Fprintf(&b, " [%s]", e.Options)
	}
	return b.String()
}

func (e *MountError) Unwrap() error { return e.Err }

// hint says what to do about the common failures.
func (e *MountError) hint() string {
	var errno unix.Errno
	var pathErr *fs.PathError
	if !errors.As(e.Err, &errno) || errors.As(e.Err, &pathErr) || e.Op == "umount" {
		// A path error names its file; the hints are about the kernel.
		return ""
	}
	switch errno {
	case unix.EPERM, unix.EACCES:
		return "the kernel refuses this mount here: unprivileged overlay needs Linux 5.11+, userxattr, and a user namespace that owns the mount namespace (see `strata doctor`)"
	case unix.EINVAL:
		if len(e.Log) > 0 {
			return ""
		}
		return "overlayfs logs the reason to the kernel log (dmesg); common causes: upper and work on different filesystems, an upper filesystem without xattr or d_type support, an option this kernel lacks"
	case unix.EBUSY:
		return "upper or work directory is in use by another overlay mount"
	case unix.ELOOP:
		return "layers overlap: upper, work and lower directories must not contain one another"
	case unix.ENODEV:
		return "this kernel has no overlay filesystem"
	}
	return ""
}

// Mount mounts the overlay described by cfg on target, the only place in
// strata that calls mount(2), fsmount(2) or move_mount(2). It hands the
// options over the best way feat allows (Features.Method): layer file
// descriptors, fsconfig lowerdir+ strings, or one mount(2) option string
// with short relative paths when the absolute ones exceed a page.
//
// Before mounting it checks that every directory exists and clears the
// marker a volatile mount leaves in work ($work/work/incompat/volatile),
// without which the kernel refuses the mount. It clears it only when that
// mount happened since the last boot, so no crash can have lost upper
// writes; otherwise it fails with ErrVolatileDirty.
//
// Mount never changes the process's working directory: relative paths are
// resolved on a locked OS thread that unshared it. Errors are *MountError.
func Mount(target string, cfg Config, feat Features) error {
	plan, err := NewPlan(cfg, feat.Method())
	if err != nil {
		return &MountError{Target: target, Op: "plan", Err: err}
	}
	return mountPlan(target, cfg, plan, true)
}

func mountPlan(target string, cfg Config, plan Plan, prepare bool) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return &MountError{Target: target, Op: "prepare", Options: plan.String(), Err: err}
	}
	target = abs
	if prepare {
		if err := prepareDirs(cfg); err != nil {
			return &MountError{Target: target, Op: "prepare", Options: plan.String(), Err: err}
		}
	}
	return inDir(plan.Dir, func() error {
		if plan.Method == Legacy {
			if err := unix.Mount("overlay", target, "overlay", 0, plan.Data); err != nil {
				return &MountError{Target: target, Op: "mount(2)", Options: plan.String(), Err: err}
			}
			return nil
		}
		return fsconfigMount(target, plan)
	})
}

// prepareDirs checks the layer directories and clears a volatile marker.
func prepareDirs(cfg Config) error {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return &fs.PathError{Op: "mount", Path: p, Err: unix.ENOTDIR}
		}
		return nil
	}
	for _, l := range cfg.Lowers {
		if err := check(l); err != nil {
			return err
		}
	}
	if cfg.Upper == "" {
		return nil
	}
	if err := check(cfg.Upper); err != nil {
		return err
	}
	if err := check(cfg.Work); err != nil {
		return err
	}
	if err := clearVolatileIfSafe(cfg.Work); err != nil {
		return err
	}
	if cfg.Volatile {
		return recordVolatileBoot(cfg.Work)
	}
	return nil
}

// Linux: fs/overlayfs/super.c: the workdir's "work" directory, and
// ovl_create_volatile_dirty's "incompat/volatile" below it.
func volatileMarker(work string) string {
	return filepath.Join(work, "work", "incompat", "volatile")
}

// volatileBootFile records the boot a volatile mount happened in. The
// kernel only uses the "work" and "index" entries of workdir.
func volatileBootFile(work string) string {
	return filepath.Join(work, "strata-volatile-boot-id")
}

func bootID() ([]byte, error) {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return bytes.TrimSpace(id), err
}

func recordVolatileBoot(work string) error {
	id, err := bootID()
	if err != nil {
		return err
	}
	return os.WriteFile(volatileBootFile(work), append(id, '\n'), 0o600)
}

func clearVolatileIfSafe(work string) error {
	marker := volatileMarker(work)
	if _, err := os.Lstat(marker); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	recorded, err := os.ReadFile(volatileBootFile(work))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	id, err := bootID()
	if err != nil {
		return err
	}
	if len(id) == 0 || !bytes.Equal(bytes.TrimSpace(recorded), id) {
		return fmt.Errorf("%w: %s exists: discard the upper and work directories, or remove it (overlayfs.ClearVolatile) to keep the upper as it is", ErrVolatileDirty, marker)
	}
	return ClearVolatile(work)
}

// ClearVolatile removes the marker a volatile mount left in work, accepting
// the upper directory as it is. Mount does this itself when the volatile
// mount happened since the last boot.
func ClearVolatile(work string) error {
	if err := removeAll(volatileMarker(work)); err != nil {
		return fmt.Errorf("clear volatile marker: %w", err)
	}
	if err := os.Remove(volatileBootFile(work)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clear volatile marker: %w", err)
	}
	return nil
}

// removeAll is os.RemoveAll for trees the kernel created with mode 0
// (overlay's work directories): on EACCES it makes every directory
// accessible, top down, and retries.
func removeAll(p string) error {
	err := os.RemoveAll(p)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	var open func(dir string)
	open = func(dir string) {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			return
		}
		_ = os.Chmod(dir, 0o700)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				open(filepath.Join(dir, e.Name()))
			}
		}
	}
	open(p)
	return os.RemoveAll(p)
}

// inDir runs fn with relative paths resolved against dir, on an OS thread
// with its own working directory, so that no other goroutine sees it
// change. The thread is never unlocked: the runtime ends it when the
// goroutine returns, instead of reusing a thread whose fs_struct differs.
func inDir(dir string, fn func() error) error {
	if dir == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_FS): %w", err)
			return
		}
		if err := unix.Chdir(dir); err != nil {
			errc <- &fs.PathError{Op: "chdir", Path: dir, Err: err}
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// fsconfigMount creates the overlay with the new mount API and attaches it
// on target.
func fsconfigMount(target string, plan Plan) error {
	opts := plan.String()
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return &MountError{Target: target, Op: "fsopen", Options: opts, Err: err}
	}
	defer unix.Close(fsfd)
	fail := func(op string, err error) error {
		return &MountError{Target: target, Op: op, Options: opts, Log: contextLog(fsfd), Err: err}
	}
	for _, p := range plan.Params {
		if err := setParam(fsfd, p); err != nil {
			return fail("fsconfig "+p.String(), err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fail("fsconfig create", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fail("fsmount", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail("move_mount", err)
	}
	return nil
}

func setParam(fsfd int, p Param) error {
	switch p.Kind {
	case ParamFlag:
		return unix.FsconfigSetFlag(fsfd, p.Key)
	case ParamString:
		return unix.FsconfigSetString(fsfd, p.Key, p.Value)
	case ParamDir:
		// O_RDONLY rather than O_PATH: 6.13 rejected O_PATH descriptors
		// (fget with FMODE_PATH), later kernels take both.
		dfd, err := unix.Open(p.Value, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: p.Value, Err: err}
		}
		defer unix.Close(dfd) // the kernel holds its own reference
		return unix.FsconfigSetFd(fsfd, p.Key, dfd)
	}
	return fmt.Errorf("unknown fsconfig parameter kind %d", int(p.Kind))
}

// contextLog drains the messages the kernel queued on a filesystem
// context: one "e|w|i <source>: <text>" message per read, ENODATA at the
// end. Linux: fs/fsopen.c fscontext_read
func contextLog(fsfd int) []string {
	var msgs []string
	buf := make([]byte, 4096)
	for range 32 {
		n, err := unix.Read(fsfd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimRight(string(buf[:n]), "\n"))
	}
	return msgs
}

// Unmount unmounts target. With detach it uses MNT_DETACH: the mount
// disappears from the namespace at once and is freed when no process uses
// it any more.
func Unmount(target string, detach bool) error {
	flags := 0
	if detach {
		flags = unix.MNT_DETACH
	}
	if err := unix.Unmount(target, flags); err != nil {
		return &MountError{Target: target, Op: "umount", Err: err}
	}
	return nil
}
