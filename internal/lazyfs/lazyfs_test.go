package lazyfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

func mountT(t *testing.T, backing, mnt string) *FS {
	t.Helper()
	testutil.AsRootBecause(t, "mounting FUSE needs /dev/fuse (0600 here) and CAP_SYS_ADMIN")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Skip(t, "no /dev/fuse: "+err.Error())
	}
	l, err := Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPowerLoss: fsynced data survives, unsynced data, sizes and new
// files' contents do not; metadata operations do (the LazyFS model).
func TestPowerLoss(t *testing.T) {
	backing, mnt := t.TempDir(), t.TempDir()
	l := mountT(t, backing, mnt)
	a := filepath.Join(mnt, "a")
	fa, err := os.Create(a)
	if err != nil {
		t.Fatal(err)
	}
	synced := bytes.Repeat([]byte("durable "), 2000)
	fa.Write(synced)
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	fa.WriteAt([]byte("LOST"), 100) // overwrite inside
	fa.Write(bytes.Repeat([]byte("lost "), 3000))
	fa.Close()
	if err := os.WriteFile(filepath.Join(mnt, "b"), []byte("never synced"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(mnt, "d"), 0o755)
	if err := os.Rename(filepath.Join(mnt, "b"), filepath.Join(mnt, "d", "b")); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(mnt, "c")
	os.WriteFile(c, []byte("cut by a truncate"), 0o644)
	fc, _ := os.OpenFile(c, os.O_RDWR, 0)
	fc.Sync()
	fc.Truncate(3)
	fc.Close()
	if got, _ := os.ReadFile(a); bytes.Equal(got, synced) {
		t.Fatal("the unsynced writes are not visible before the power loss")
	}
	n, err := l.PowerLoss()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "e"), nil, 0o644); !errorIs(err, syscall.EIO) {
		t.Errorf("a write after the power loss: %v, want EIO", err)
	}
	if err := l.Unmount(); err != nil {
		t.Fatal(err)
	}
	l = mountT(t, backing, mnt)
	defer l.Unmount()
	if n != 3 {
		t.Errorf("rolled back %d files, want 3", n)
	}
	if got, _ := os.ReadFile(a); !bytes.Equal(got, synced) {
		t.Errorf("a after the power loss: %d bytes, want the %d synced ones", len(got), len(synced))
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "d", "b")); err != nil || len(got) != 0 {
		t.Errorf("d/b after the power loss: %q, %v; want the renamed file, empty", got, err)
	}
	if got, _ := os.ReadFile(c); string(got) != "cut by a truncate" {
		t.Errorf("c after the power loss: %q", got)
	}
}

// TestCrashAtAndFaults: the Nth mutation and later fail with EIO; a
// fault returns its errno on its path only.
func TestCrashAtAndFaults(t *testing.T) {
	backing, mnt := t.TempDir(), t.TempDir()
	l := mountT(t, backing, mnt)
	defer l.Unmount()
	l.SetFaults(&Fault{Op: "write", Path: "bad", Errno: syscall.EROFS})
	if err := os.WriteFile(filepath.Join(mnt, "bad"), []byte("x"), 0o644); !errorIs(err, syscall.EROFS) {
		t.Errorf("write to bad: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "good"), []byte("x"), 0o644); err != nil {
		t.Errorf("write to good: %v", err)
	}
	l.SetFaults()
	l.CrashAt(3)
	if err := os.Mkdir(filepath.Join(mnt, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "3"), 0o755); !errorIs(err, syscall.EIO) || !l.Crashed() {
		t.Errorf("third mutation: %v, crashed %v; want EIO", err, l.Crashed())
	}
}

func errorIs(err error, e syscall.Errno) bool {
	for err != nil {
		if x, ok := err.(syscall.Errno); ok {
			return x == e
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// TestUnmountWithCopyElsewhere: a mount namespace created while the
// filesystem is mounted holds a copy of the mount (another test's keeper,
// a run of the harness): unmounting ours then does not end the FUSE
// connection, and go-fuse waited for its end for good (a power-loss run
// hung in its first trial). Unmount aborts the connection instead.
func TestUnmountWithCopyElsewhere(t *testing.T) {
	backing, mnt := t.TempDir(), t.TempDir()
	l := mountT(t, backing, mnt)
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", `exec 3<"$1" && exec sleep 120`, "sh", filepath.Join(mnt, "f"))
	if err := holder.Start(); err != nil {
		testutil.Skip(t, "unshare: "+err.Error())
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	// The copy exists, a file of it open, once the holder runs sleep.
	for i := 0; ; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", holder.Process.Pid))
		if bytes.HasPrefix(b, []byte("sleep\x00")) {
			break
		}
		if i == 100 {
			t.Fatal("the holder's namespace shows no copy of the mount")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := l.Unmount(); err != nil {
		t.Fatal(err)
	}
	t.Logf("unmounted in %s (the connection aborted)", time.Since(start).Round(time.Millisecond))
	if _, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s/f", holder.Process.Pid, mnt)); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("a read through the holder's copy after Unmount: %v, want ENOTCONN (the connection aborted)", err)
	}
}
