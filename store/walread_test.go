package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// crashImage copies the store's database files as they are while the
// store is open after a commit: what a process killed at that instant
// leaves, a WAL holding the commit that strata.db does not.
func crashImage(tb testing.TB, s *Store) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, suf := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(s.path + suf)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, DBName+suf), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

func fileSums(tb testing.TB, dir string) map[string][32]byte {
	tb.Helper()
	m := map[string][32]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		m[e.Name()] = sha256.Sum256(b)
	}
	return m
}

// TestOpenWALReadOnly: a store whose WAL holds a commit not yet in
// strata.db, with its -shm index as an interrupted recovery leaves it
// (truncated) or gone, is read — the commit in the WAL included — by the
// read-only open a full filesystem needs, which writes nothing (an empty
// -shm created where there was none aside). immutable=1, what a full store
// opens with when its WAL is empty, would not see the commit.
func TestOpenWALReadOnly(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	first := commitFile(t, s, "main", ZeroID, "a", []byte("one"))
	second := commitFile(t, s, "main", first, "a", []byte("two"))
	for _, shm := range []string{"truncated", "absent", "intact"} {
		t.Run(shm, func(t *testing.T) {
			dir := crashImage(t, s)
			if !walPending(filepath.Join(dir, DBName)) {
				t.Fatal("the crash image has no pending WAL")
			}
			switch shm {
			case "truncated": // SQLite truncates -shm to 3 bytes before rebuilding it
				if err := os.Truncate(filepath.Join(dir, DBName+"-shm"), 3); err != nil {
					t.Fatal(err)
				}
			case "absent":
				if err := os.Remove(filepath.Join(dir, DBName+"-shm")); err != nil {
					t.Fatal(err)
				}
			}
			before := fileSums(t, dir)

			imm := &Store{dir: dir, path: filepath.Join(dir, DBName), ro: true, busy: DefaultBusyTimeout}
			if _, err := imm.openPool(true); err != nil {
				t.Fatal(err)
			}
			var head ID
			err := imm.View(ctx, func(tx *Tx) (err error) { head, err = tx.Ref("main"); return err })
			imm.Close()
			if err == nil && head == second {
				t.Fatalf("immutable=1 read the WAL's commit: the test shows nothing")
			}

			ro := &Store{dir: dir, path: filepath.Join(dir, DBName), ro: true, busy: DefaultBusyTimeout}
			v, err := ro.openWALReadOnly()
			if err != nil {
				t.Fatal(err)
			}
			if v != schemaVersion {
				t.Errorf("schema version %d", v)
			}
			err = ro.View(ctx, func(tx *Tx) error {
				var err error
				if head, err = tx.Ref("main"); err != nil {
					return err
				}
				_, err = tx.Commit(head)
				return err
			})
			if err != nil || head != second {
				t.Errorf("main read as %s (%v), want the WAL's commit %s", head.Short(), err, second.Short())
			}
			if got := readContent(t, ro, fileOf(t, ro, second)); !bytes.Equal(got, []byte("two")) {
				t.Errorf("content of the WAL's commit: %q", got)
			}
			if _, err := ro.NewWriter(ctx, "x"); !errors.Is(err, ErrReadOnly) {
				t.Errorf("NewWriter: %v", err)
			}
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
			after := fileSums(t, dir)
			if shm == "absent" {
				if after[DBName+"-shm"] != sha256.Sum256(nil) {
					t.Errorf("the -shm created is not empty")
				}
				delete(after, DBName+"-shm")
			}
			if len(after) != len(before) {
				t.Errorf("files %v → %v", before, after)
			}
			for name, sum := range before {
				if after[name] != sum {
					t.Errorf("%s changed", name)
				}
			}
		})
	}
}
