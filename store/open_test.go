package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

func TestOpenCreatesDurableStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "store")
	// Several openers at once, as several CLI calls on a fresh home.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(dir, Options{})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Dir() != dir {
		t.Errorf("Dir = %s", s.Dir())
	}
	for pragma, want := range map[string]string{
		"user_version": fmt.Sprint(schemaVersion),
		"journal_mode": "wal",
		"auto_vacuum":  "2",
		"page_size":    fmt.Sprint(createPageSize),
		"synchronous":  "2",
		"foreign_keys": "1",
		"busy_timeout": "60000",
	} {
		var got string
		if err := s.db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil || got != want {
			t.Errorf("PRAGMA %s = %q, %v; want %q", pragma, got, err, want)
		}
	}
	// The NORMAL pool is what its name says.
	fast, _ := s.fastDB()
	var syncMode string
	fast.QueryRow("PRAGMA synchronous").Scan(&syncMode)
	if syncMode != "1" {
		t.Errorf("fast pool synchronous = %s", syncMode)
	}
	// Write transactions are IMMEDIATE: a second process's write waits
	// for the lock rather than failing at commit. Checked indirectly: two
	// concurrent Updates that read then write never fail with BUSY.
	var wg2 sync.WaitGroup
	for i := range 4 {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			s2, err := Open(dir, Options{})
			if err != nil {
				t.Error(err)
				return
			}
			defer s2.Close()
			for j := range 5 {
				err := s2.Update(context.Background(), func(tx *Tx) error {
					tx.Refs("")
					return tx.AppendOp(Op{Kind: "test", Detail: fmt.Sprint(i, j)})
				})
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg2.Wait()
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion+1))
	s.Close()
	for _, ro := range []bool{false, true} {
		_, err := Open(dir, Options{ReadOnly: ro})
		if err == nil || !strings.Contains(err.Error(), "newer") {
			t.Errorf("Open(ro=%v) of a newer store = %v", ro, err)
		}
	}
}

func TestReadOnlyOpen(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing"), Options{ReadOnly: true}); !errors.Is(err, ErrNotFound) {
		t.Errorf("read-only Open of a missing store = %v, want ErrNotFound", err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(5, 200000)
	c := commitFile(t, s, "main", ZeroID, "f", data)
	s.Close()

	ro, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	checkReadOnlyStore(t, ro, c, data)
}

func checkReadOnlyStore(t testing.TB, ro *Store, c ID, data []byte) {
	t.Helper()
	ctx := context.Background()
	if got := readContent(t, ro, fileOf(t, ro, c)); !bytes.Equal(got, data) {
		t.Error("content differs")
	}
	mustFsckOK(t, ro)
	ro.View(ctx, func(tx *Tx) error {
		if refs, err := tx.Refs(""); err != nil || len(refs) != 1 {
			t.Errorf("Refs = %v, %v", refs, err)
		}
		if ops, err := tx.Ops("", 0); err != nil || len(ops) != 1 {
			t.Errorf("Ops = %v, %v", ops, err)
		}
		return nil
	})
	if err := ro.Update(ctx, func(tx *Tx) error { return nil }); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Update = %v", err)
	}
	if _, err := ro.NewWriter(ctx, "x"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("NewWriter = %v", err)
	}
	if _, err := ro.GC(ctx, GCOptions{}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("GC = %v", err)
	}
	if err := ro.SaveStatCache(ctx, "/x", nil, 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("SaveStatCache = %v", err)
	}
	// Even a write slipped into a View fails as read-only.
	err := ro.View(ctx, func(tx *Tx) error {
		_, err := tx.tx.ExecContext(ctx, `INSERT INTO ops (time_ns, kind) VALUES (1, 'x')`)
		return mapErr(err)
	})
	if !errors.Is(err, ErrReadOnly) {
		t.Errorf("write through a read-only connection = %v", err)
	}
}

// requireMount skips unless the test can mount filesystems.
func requireMount(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root to mount")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		testutil.Skip(t, "no mount command")
	}
}

func mount(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		testutil.Skip(t, fmt.Sprintf("mount %v: %v: %s", args, err, out))
	}
}

func unmountAtCleanup(t testing.TB, target string) {
	t.Cleanup(func() {
		if out, err := exec.Command("umount", target).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", target, err, out)
		}
	})
}

// TestReadOnlyFilesystem opens a store on a read-only bind mount: with the
// -wal and -shm files a close leaves (wal.go) SQLite reads them read-only;
// without them it cannot create the WAL index and the open falls back to
// immutable=1. Either way fsck, show and log must work, and opening it for
// writing must fail as ErrReadOnly.
func TestReadOnlyFilesystem(t *testing.T) {
	requireMount(t)
	src, dst := t.TempDir(), t.TempDir()
	s, err := Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(6, 100000)
	c := commitFile(t, s, "main", ZeroID, "f", data)
	s.Close()
	mount(t, "--bind", src, dst)
	unmountAtCleanup(t, dst)
	mount(t, "-o", "remount,bind,ro", dst)

	ro, err := Open(dst, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open on a read-only filesystem: %v", err)
	}
	if ro.immutable {
		t.Errorf("the immutable=1 fallback with the WAL index present")
	}
	checkReadOnlyStore(t, ro, c, data)
	ro.Close()

	// No WAL index: checkpointed, and the (empty) -wal and -shm removed.
	s, err = Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, f := range []string{"-wal", "-shm"} {
		if err := os.Remove(filepath.Join(src, DBName+f)); err != nil {
			t.Fatal(err)
		}
	}
	ro, err = Open(dst, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open on a read-only filesystem, no WAL index: %v", err)
	}
	if !ro.immutable {
		t.Errorf("expected the immutable=1 fallback (no -shm file)")
	}
	checkReadOnlyStore(t, ro, c, data)
	ro.Close()

	rw, err := Open(dst, Options{})
	if err == nil {
		err = rw.Update(context.Background(), func(tx *Tx) error { return tx.AppendOp(Op{Kind: "x"}) })
		rw.Close()
	}
	if !errors.Is(err, ErrReadOnly) {
		t.Errorf("writing a store on a read-only filesystem = %v, want ErrReadOnly", err)
	}
}

// TestNoSpace fills a tiny tmpfs: the error must be ErrNoSpace, and the
// store must stay consistent.
func TestNoSpace(t *testing.T) {
	requireMount(t)
	dir := t.TempDir()
	mount(t, "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir)
	unmountAtCleanup(t, dir)
	s, err := Open(dir, Options{BusyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	small := commitFile(t, s, "main", ZeroID, "f", []byte("fits"))
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "too big")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = w.WriteContent(bytes.NewReader(randBytes(7, 8<<20)))
	if err == nil {
		err = w.Finish(nil)
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("writing 8 MiB into 2 MiB = %v, want ErrNoSpace", err)
	}
	t.Logf("error: %v", err)
	w.Abort()
	if _, err := s.GC(ctx, GCOptions{}); err != nil {
		t.Logf("gc on a full disk: %v", err)
	}
	mustFsckOK(t, s)
	if got := readContent(t, s, fileOf(t, s, small)); string(got) != "fits" {
		t.Errorf("content = %q", got)
	}
}
