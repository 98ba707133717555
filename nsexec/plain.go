package nsexec

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/overlayfs"
)

// A workspace of the reflink or copy backend is a plain directory (a
// clone of its base commit): where user namespaces work, its keeper still
// gives it the workspace's namespaces — the mount namespace with private
// /tmp and /dev/shm, the PID namespace, the view for sandboxed commands —
// and binds the directory on the target (the project's own path, so that
// absolute paths in it keep working, or the directory itself) instead of
// mounting an overlay.
// Nothing else differs: the same keeper, the same commands, the same
// sandbox.

// checkPlain rejects a plain Spec the child could only fail on.
func checkPlain(spec *Spec) error {
	switch {
	case !filepath.IsAbs(spec.Plain):
		return fmt.Errorf("nsexec: plain workspace %q is not absolute", spec.Plain)
	case len(spec.Lowers) > 0 || spec.Upper != "" || spec.Work != "":
		return fmt.Errorf("nsexec: a plain workspace has no overlay (lowers, upper, work)")
	case spec.Root != nil:
		return fmt.Errorf("nsexec: a plain workspace on an image root: %w", unix.EOPNOTSUPP)
	}
	spec.Plain = filepath.Clean(spec.Plain)
	if fi, err := os.Stat(spec.Plain); err != nil {
		return fmt.Errorf("nsexec: plain workspace: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("nsexec: plain workspace %s is not a directory", spec.Plain)
	}
	return nil
}

// mountWorkspace puts the workspace on target in the child's mount
// namespace: the overlay of c.Mount, or the plain directory c.Plain bound
// read-write (recursively: a Btrfs snapshot is its own mount-less
// subvolume, but a tree may hold mounts a user made). A plain directory
// that is the target itself is bound on itself: the workspace is a mount
// point either way, which the private /tmp needs of a target beneath
// /tmp (privateTmp moves it).
func mountWorkspace(c *childConfig, target string) error {
	if c.Plain == "" {
		return overlayfs.Mount(target, c.Mount, methodFeatures(c.Method))
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, c.Plain, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("bind %s: open_tree: %w", c.Plain, err)
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind %s on %s: %w", c.Plain, target, err)
	}
	return nil
}
