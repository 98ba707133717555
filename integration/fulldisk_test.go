//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/store"
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

// TestHelperHoldStore is not a test of its own: TestFullDiskPendingWAL
// runs the test binary with STRATA_TEST_HOLD_STORE=DIR as a process that
// holds the store open in a read transaction (so what is committed
// meanwhile stays in the WAL), says "holding" and waits to be killed. Run
// without it, it does nothing.
func TestHelperHoldStore(t *testing.T) {
	dir := os.Getenv("STRATA_TEST_HOLD_STORE")
	if dir == "" {
		return
	}
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A read transaction held until the process is killed: a close
	// elsewhere checkpoints the WAL when it has grown (store/wal.go), and
	// cannot copy past this reader's snapshot, so what is written
	// meanwhile stays in the WAL, not yet in strata.db.
	if err := s.View(context.Background(), func(tx *store.Tx) error {
		if _, err := tx.Ref("main"); err != nil {
			return err
		}
		fmt.Println("holding")
		time.Sleep(10 * time.Minute)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestFullDiskPendingWAL pins issue 12's last full-disk item: a store whose
// write-ahead log still holds transactions (a process that held the store
// was killed before they were checkpointed) was refused by the read-only
// open a full filesystem needs ("its write-ahead log holds transactions
// not yet in strata.db"), once SQLite could not rebuild the WAL's index
// (-shm) for lack of space — which is what an ordinary open does first:
// it truncates -shm and grows it again, and on a full disk another writer
// takes the freed pages (left: the truncated -shm), or -shm is gone.
// Read-only commands must work, the WAL's commit included, writing
// nothing; once space is freed, everything works and fsck is clean.
func TestFullDiskPendingWAL(t *testing.T) {
	for _, shm := range []string{"truncated", "absent", "intact"} {
		t.Run(shm, func(t *testing.T) {
			// Above the store's low-space mark (64 MiB), so that closes
			// keep the WAL (store/wal.go) until the disk is filled.
			fs := newSmallFS(t, "96m")
			h := &home{t: t, dir: filepath.Join(fs.dir, "store")}
			src := filepath.Join(t.TempDir(), "proj")
			baseTree(t, src)
			h.ok("import", src)
			h.ok("ws", "create", "w")
			defer h.run("ws", "rm", "--force", "w")
			h.ok("exec", "w", "--", "sh", "-c", "echo committed > c")

			holder := exec.Command(os.Args[0], "-test.run=^TestHelperHoldStore$")
			holder.Env = append(os.Environ(), "STRATA_TEST_HOLD_STORE="+h.dir)
			out, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "holding\n" {
				holder.Process.Kill()
				t.Fatalf("the holder process said %q, %v", line, err)
			}
			var c struct {
				Commit string `json:"commit"`
			}
			h.okJSON(&c, "commit", "w")
			h.ok("exec", "w", "--", "sh", "-c", "echo uncommitted > u")
			holder.Process.Signal(syscall.SIGKILL)
			holder.Wait()
			db := filepath.Join(h.dir, "strata.db")
			if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() == 0 {
				t.Fatalf("no pending WAL after the holder was killed: %v", err)
			}
			switch shm {
			case "truncated":
				if err := os.Truncate(db+"-shm", 3); err != nil {
					t.Fatal(err)
				}
			case "absent":
				if err := os.Remove(db + "-shm"); err != nil {
					t.Fatal(err)
				}
			}
			wal, _ := os.ReadFile(db + "-wal")
			fs.fill(0)
			if !fs.full() {
				t.Fatalf("%s is not full after filling it", fs.dir)
			}
			if out := h.ok("log", "ws/w").stdout; !strings.Contains(out, c.Commit[:12]) {
				t.Errorf("log of ws/w on the full store lacks the commit in the WAL %s:\n%s", c.Commit[:12], out)
			}
			for _, args := range [][]string{{"fsck"}, {"show", c.Commit}, {"ws", "list"}, {"branch", "list"}, {"diff", "main..ws/w"}} {
				h.ok(args...)
			}
			if out := h.ok("diff", "--name-status", "w").stdout; out != "A\tu\n" {
				t.Errorf("diff --name-status w on the full store: %q, want the uncommitted u", out)
			}
			// With its index intact SQLite opens the store as usual (it
			// rebuilds the index in the pages it has) and may checkpoint
			// the WAL on close; otherwise the store is open read-only and
			// the WAL stays as it was.
			if now, _ := os.ReadFile(db + "-wal"); shm != "intact" && !bytes.Equal(now, wal) {
				t.Errorf("the read-only commands changed the WAL")
			}
			r := h.run("commit", "w")
			if r.code == 0 || !strings.Contains(r.stderr, "no space left on") {
				t.Errorf("commit on the full store: want a failure saying no space left, got %s", r)
			}
			fs.free()
			h.ok("commit", "w")
			if out := h.ok("log", "ws/w").stdout; !strings.Contains(out, c.Commit[:12]) {
				t.Errorf("log of ws/w after freeing space lacks %s:\n%s", c.Commit[:12], out)
			}
			h.fsckClean()
		})
	}
}
