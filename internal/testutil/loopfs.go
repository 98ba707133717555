package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Reflink filesystems for the reflink and copy backends' tests: a real XFS
// (mkfs.xfs -m reflink=1) and a real Btrfs, each on a loop device.
//
// Mounting needs root, and the integration tests run twice, as root and as
// an unprivileged user (scripts/integration.sh). So integration.sh, as
// root, makes both filesystems before the first pass, gives each a
// directory the test user owns, names those directories in the
// environment (EnvXFS, EnvBtrfs) and removes everything when it exits;
// both passes use them. A test run without them (go test as root) makes
// its own filesystem and removes it when the test ends; anyone else skips,
// or fails under NoSkip.
const (
	EnvXFS   = "STRATA_TEST_XFS"
	EnvBtrfs = "STRATA_TEST_BTRFS"
)

// ReflinkDir returns a new empty directory, owned by the caller and
// removed after the test, on a real filesystem of type fstype ("xfs" or
// "btrfs") that can clone files (FICLONE).
func ReflinkDir(t testing.TB, fstype string) string {
	t.Helper()
	env := map[string]string{"xfs": EnvXFS, "btrfs": EnvBtrfs}[fstype]
	if env == "" {
		t.Fatalf("ReflinkDir: filesystem %q: want xfs or btrfs", fstype)
	}
	base := os.Getenv(env)
	if base == "" {
		if os.Geteuid() != 0 {
			Skip(t, fmt.Sprintf("no %s filesystem: $%s is not set (scripts/integration.sh makes one as root), and only root can make one", fstype, env))
		}
		base = MakeLoopFS(t, fstype)
	}
	if err := checkFSType(base, fstype); err != nil {
		t.Fatalf("$%s=%s: %v", env, base, err)
	}
	dir, err := os.MkdirTemp(base, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-")
	if err != nil {
		t.Fatalf("ReflinkDir: %v", err)
	}
	t.Cleanup(func() { removeAllWritable(dir) })
	return dir
}

// MakeLoopFS (root only) makes a 4 GiB filesystem of type fstype in a
// sparse image file, mounts it through a loop device and returns the
// mount point; the test's cleanup unmounts it (which frees the loop
// device) and removes the image.
func MakeLoopFS(t testing.TB, fstype string) string {
	t.Helper()
	mkfs := map[string][]string{
		"xfs":   {"mkfs.xfs", "-q", "-m", "reflink=1"},
		"btrfs": {"mkfs.btrfs", "-q"},
	}[fstype]
	if mkfs == nil {
		t.Fatalf("MakeLoopFS: filesystem %q: want xfs or btrfs", fstype)
	}
	LookPath(t, mkfs[0])
	dir := t.TempDir()
	img := filepath.Join(dir, fstype+".img")
	mnt := filepath.Join(dir, fstype)
	// A machine without loop devices (a container) cannot make one: a
	// capability, skipped (failed under NoSkip) with the reason.
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			Skip(t, fmt.Sprintf("cannot make a %s filesystem on a loop device: %s: %v\n%s", fstype, strings.Join(args, " "), err, out))
		}
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(4 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run(append(mkfs, img)...)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// -o loop sets up a loop device with autoclear: umount frees it.
	run("mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	return mnt
}

func checkFSType(dir, fstype string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	want := map[string]int64{"xfs": unix.XFS_SUPER_MAGIC, "btrfs": unix.BTRFS_SUPER_MAGIC}[fstype]
	if int64(st.Type) != want {
		return fmt.Errorf("not a %s filesystem (magic %#x)", fstype, st.Type)
	}
	return nil
}

// removeAllWritable removes dir, making its directories writable first
// (tests leave read-only ones).
func removeAllWritable(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}
