//go:build integration

package integration

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// smallFS is a store on a small tmpfs of its own, so that a test can fill
// it to the last byte. Mounting one needs real root: the rootless pass
// cannot (a tmpfs mounted in a user namespace of the test is invisible to
// the strata processes it starts), so these tests run in the root pass.
type smallFS struct {
	t      testing.TB
	dir    string
	filler string
}

func newSmallFS(t testing.TB, size string) *smallFS {
	t.Helper()
	testutil.AsRoot(t)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		testutil.Skip(t, "mount tmpfs: "+strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return &smallFS{t: t, dir: dir, filler: filepath.Join(dir, "filler")}
}

// fill leaves keep bytes free (0: none, to the last byte).
func (s *smallFS) fill(keep int64) {
	s.t.Helper()
	f, err := os.OpenFile(s.filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		s.t.Fatal(err)
	}
	if free := int64(st.Bavail) * st.Bsize; free > keep {
		fi, _ := f.Stat()
		if err := unix.Fallocate(int(f.Fd()), 0, fi.Size(), free-keep); err != nil {
			s.t.Fatalf("fallocate: %v", err)
		}
	}
	if keep == 0 {
		// Whatever is left, byte by byte.
		buf := make([]byte, 4096)
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
		for {
			if _, err := f.Write(buf[:1]); err != nil {
				break
			}
		}
	}
}

// full reports whether less than a page is left.
func (s *smallFS) full() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		s.t.Fatal(err)
	}
	return int64(st.Bavail)*st.Bsize < 4096
}

func (s *smallFS) free() {
	s.t.Helper()
	if err := os.Remove(s.filler); err != nil {
		s.t.Fatal(err)
	}
}

// TestCreateNoSpaceRegistersNothing pins issue 12's defect 5: a ws create
// that failed for lack of space for its layers left the workspace and its
// branch registered as "stopped" (exec then failed with 125). It must
// fail saying so and leave nothing registered: once space is freed, the
// same create succeeds.
func TestCreateNoSpaceRegistersNothing(t *testing.T) {
	fs := newSmallFS(t, "24m")
	h := &home{t: t, dir: filepath.Join(fs.dir, "store")}
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	big := make([]byte, 6<<20)
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(src, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src)
	_ = os.RemoveAll(filepath.Join(h.dir, "layers")) // the create must write them
	fs.fill(1 << 20)
	r := h.run("ws", "create", "x")
	if r.code == 0 {
		t.Fatalf("ws create on a full store succeeded:\n%s", r)
	}
	if !strings.Contains(r.stderr, "no space left on "+fs.dir) {
		t.Errorf("ws create on a full store does not say no space left:\n%s", r)
	}
	fs.free()
	if out := h.ok("ws", "list").stdout; strings.Contains(out, "x ") {
		t.Errorf("a failed ws create left the workspace registered:\n%s", out)
	}
	if out := h.ok("branch", "list").stdout; strings.Contains(out, "ws/x") {
		t.Errorf("a failed ws create left its branch:\n%s", out)
	}
	h.ok("ws", "create", "x")
	defer h.run("ws", "rm", "--force", "x")
	h.ok("exec", "x", "--", "test", "-f", "big.bin")
	h.fsckClean()
}

// TestFullDisk pins issue 12's defect 4: with the store's filesystem at
// 100 %, every command failed with "open store …: disk I/O error" —
// fsck, show, ws list, ws rm -f, gc, the ones needed to free space — and a
// file deleted inside a workspace freed nothing while the workspace held
// it. Read-only commands must work on the full store, writing ones fail
// saying "no space left on <fs>" and what to remove, and ws stop, ws rm -f
// and gc free space.
func TestFullDisk(t *testing.T) {
	fs := newSmallFS(t, "32m")
	h := &home{t: t, dir: filepath.Join(fs.dir, "store")}
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	h.ok("exec", "w", "--", "sh", "-c", "echo x > x && head -c 1000000 /dev/urandom > y")
	h.ok("commit", "w")
	h.ok("exec", "w", "--", "sh", "-c", "echo u > u")
	// A file deleted inside while a process of the workspace holds it.
	h.ok("exec", "w", "--", "sh", "-c", "head -c 4000000 /dev/urandom > held && setsid sleep 1000 < held > /dev/null 2>&1 & sleep 0.2; rm -f held")
	fs.fill(0)
	if !fs.full() {
		t.Fatalf("%s is not full after filling it", fs.dir)
	}
	for _, args := range [][]string{{"fsck"}, {"show", "main"}, {"log"}, {"ws", "list"}, {"diff", "main"}, {"branch", "list"}} {
		h.ok(args...)
	}
	// A workspace's diff reads its upper directory and stores nothing
	// (issue 19): it works on the full store, uncommitted changes and all.
	if out := h.ok("diff", "w").stdout; !strings.Contains(out, "diff --git a/u b/u") || !strings.Contains(out, "+u\n") {
		t.Errorf("diff w on a full store lacks the uncommitted u:\n%s", out)
	}
	if out := h.ok("diff", "--name-status", "w").stdout; !strings.Contains(out, "A\tu\n") {
		t.Errorf("diff --name-status w on a full store:\n%s", out)
	}
	for _, args := range [][]string{{"commit", "w"}, {"import", src}} {
		r := h.run(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "no space left on "+fs.dir) || !strings.Contains(r.stderr, "ws rm -f") {
			t.Errorf("strata %s on a full store: want a failure naming %s and what to remove, got %s", strings.Join(args, " "), fs.dir, r)
		}
	}
	h.ok("ws", "stop", "w")
	if fs.full() {
		t.Errorf("ws stop did not release the file deleted inside the workspace")
	}
	fs.fill(0)
	h.ok("ws", "rm", "-f", "w")
	if out := h.ok("ws", "list").stdout; strings.Contains(out, "w ") {
		t.Errorf("ws rm -f on a full store left the workspace:\n%s", out)
	}
	h.ok("gc", "--prune", "0s")
	fs.free()
	h.fsckClean()
}
