//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stratafs/strata/internal/lazyfs"
	"github.com/stratafs/strata/internal/testutil"
)

func mountLazy(t *testing.T) (*lazyfs.FS, string) {
	t.Helper()
	testutil.AsRootBecause(t, "fault injection mounts FUSE (/dev/fuse is 0600 here)")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Skip(t, "no /dev/fuse: "+err.Error())
	}
	backing, mnt := t.TempDir(), t.TempDir()
	l, err := lazyfs.Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unmount() })
	return l, mnt
}

// TestFaults: I/O errors injected by lazyfs in the middle of an operation
// — EIO reading an import's source, EROFS and EIO writing the store, EIO
// writing an export — fail the operation with a message that names the
// path and the error; afterwards nothing half-made is visible (the branch
// where it was, no partial export) and fsck is clean.
func TestFaults(t *testing.T) {
	l, mnt := mountLazy(t)

	t.Run("import source EIO", func(t *testing.T) {
		h := newHome(t)
		src := filepath.Join(mnt, "src")
		sh(t, "", "mkdir -p "+src+"/sub && echo a > "+src+"/a.txt && head -c 200000 /dev/urandom > "+src+"/sub/bad.bin")
		l.SetFaults(&lazyfs.Fault{Op: "read", Path: "sub/bad.bin", Errno: syscall.EIO})
		defer l.SetFaults()
		r := h.fails(1, "import", src)
		if !strings.Contains(r.stderr, "sub/bad.bin") || !strings.Contains(r.stderr, "input/output error") {
			t.Errorf("import with EIO on sub/bad.bin: message does not name the file and the error:\n%s", r.stderr)
		}
		if r := h.run("show", "main"); r.code == 0 {
			t.Errorf("the failed import made a branch: %s", r.stdout)
		}
		h.fsckClean()
	})

	for _, tc := range []struct {
		name  string
		errno syscall.Errno
		op    string
		after int
	}{
		{"store EROFS", syscall.EROFS, "write", 2},
		{"store EIO", syscall.EIO, "write", 2},
		{"store EIO on fsync", syscall.EIO, "fsync", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &home{t: t, dir: filepath.Join(mnt, "store-"+strings.ReplaceAll(tc.name, " ", "-"))}
			src := filepath.Join(t.TempDir(), "src")
			writeTree(t, src, 3)
			h.ok("import", src)
			var before struct {
				Commit struct {
					ID string `json:"id"`
				} `json:"commit"`
			}
			h.okJSON(&before, "show", "main")
			sh(t, src, "head -c 300000 /dev/urandom > new.bin && echo more >> a.txt")
			l.SetFaults(&lazyfs.Fault{Op: tc.op, Path: "strata.db", Errno: tc.errno, After: tc.after})
			r := h.run("import", src)
			l.SetFaults()
			if r.code == 0 {
				t.Fatalf("import with %v on the store's writes succeeded", tc.errno)
			}
			// SQLite reports any failed write as SQLITE_IOERR, without the
			// errno: the message names the store and says I/O error.
			msg := strings.ToLower(r.stderr)
			if !strings.Contains(msg, "i/o error") && !strings.Contains(msg, "read-only") || !strings.Contains(r.stderr, h.dir) {
				t.Errorf("import with %v on the store: message does not name the store and the error:\n%s", tc.errno, r.stderr)
			}
			var after struct {
				Commit struct {
					ID string `json:"id"`
				} `json:"commit"`
			}
			h.okJSON(&after, "show", "main")
			if after.Commit.ID != before.Commit.ID {
				t.Errorf("main moved to %s after the failed import", after.Commit.ID)
			}
			h.fsckClean()
			h.ok("import", src) // and it works once the disk does
			h.fsckClean()
		})
	}

	t.Run("layer EIO", func(t *testing.T) {
		// The layer cache is materialized when a workspace is created:
		// an I/O error there fails the create naming the file, leaves no
		// workspace and no half-written layer (fsck verifies the cache).
		h := &home{t: t, dir: filepath.Join(mnt, "store-layer")}
		src := filepath.Join(t.TempDir(), "src")
		writeTree(t, src, 3)
		h.ok("import", src)
		l.SetFaults(&lazyfs.Fault{Op: "write", Path: "big.bin", Errno: syscall.EIO})
		r := h.run("ws", "create", "w", "--tmpfs")
		l.SetFaults()
		if r.code == 0 {
			h.run("ws", "rm", "--force", "w")
			t.Fatalf("ws create with EIO writing the layer succeeded")
		}
		if !strings.Contains(r.stderr, "big.bin") || !strings.Contains(r.stderr, "input/output error") {
			t.Errorf("ws create with EIO on the layer's big.bin: message does not name the file and the error:\n%s", r.stderr)
		}
		if out := h.ok("ws", "list").stdout; strings.Contains(out, "w ") || strings.Contains(out, "w\n") {
			t.Errorf("the failed create left a workspace: %s", out)
		}
		h.fsckClean()
		h.ok("ws", "create", "w", "--tmpfs")
		h.ok("ws", "rm", "--force", "w")
		h.fsckClean()
	})

	t.Run("export EIO", func(t *testing.T) {
		h := newHome(t)
		src := filepath.Join(t.TempDir(), "src")
		writeTree(t, src, 3)
		h.ok("import", src)
		out := filepath.Join(mnt, "export")
		l.SetFaults(&lazyfs.Fault{Op: "write", Path: "export/big.bin", Errno: syscall.EIO})
		defer l.SetFaults()
		r := h.fails(1, "export", "main", out)
		if !strings.Contains(r.stderr, "big.bin") || !strings.Contains(r.stderr, "input/output error") {
			t.Errorf("export with EIO on big.bin: message does not name the file and the error:\n%s", r.stderr)
		}
		if _, err := os.Lstat(out); err == nil {
			ents, _ := os.ReadDir(out)
			t.Errorf("the failed export left %s behind (%d entries)", out, len(ents))
		}
		h.fsckClean()
	})
}
