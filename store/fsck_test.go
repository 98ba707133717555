package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// damagedStore holds two branches sharing nothing but the history below
// them, and a workspace on the first.
func damagedStore(t testing.TB) (s *Store, chunkA ID) {
	t.Helper()
	s = newStore(t)
	ctx := context.Background()
	a := commitFile(t, s, "main", ZeroID, "a", randBytes(21, 20000))
	commitFile(t, s, "other", ZeroID, "b", randBytes(22, 20000))
	err := s.Update(ctx, func(tx *Tx) error {
		return tx.PutWorkspace(&Workspace{Name: "w", Branch: "main", Base: a, Dir: "/w"})
	})
	if err != nil {
		t.Fatal(err)
	}
	// main moves on; its new commit keeps a as parent, so still reaches it.
	commitFile(t, s, "main", a, "c", []byte("c"))
	mustFsckOK(t, s)
	return s, fileOf(t, s, a)
}

func findProblem(rep *FsckReport, kind string, id ID) *Problem {
	for i := range rep.Problems {
		if p := &rep.Problems[i]; p.Kind == kind && p.Object == id {
			return p
		}
	}
	return nil
}

func TestFsckFlippedByte(t *testing.T) {
	s, chunk := damagedStore(t)
	var data []byte
	if err := s.db.QueryRow(`SELECT data FROM objects WHERE id = ?`, chunk[:]).Scan(&data); err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if _, err := s.db.Exec(`UPDATE objects SET data = ? WHERE id = ?`, data, chunk[:]); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Fsck(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := findProblem(rep, ProblemCorrupt, chunk)
	if p == nil || len(rep.Problems) != 1 {
		t.Fatalf("problems = %+v; want one corrupt %s", rep.Problems, chunk.Short())
	}
	if want := []string{"main", "workspace:w"}; !slices.Equal(p.Affected, want) {
		t.Errorf("Affected = %v, want %v", p.Affected, want)
	}
	// Reading it says so too.
	if _, err := s.ReadContentTo(context.Background(), chunk, new(strings.Builder)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("reading the damaged chunk = %v, want ErrCorrupt", err)
	}
	// A chunk references nothing, so gc proceeds and keeps it.
	if _, err := s.GC(context.Background(), GCOptions{}); err != nil {
		t.Errorf("gc with a corrupt chunk: %v", err)
	}
}

func TestFsckMissingObject(t *testing.T) {
	s, chunk := damagedStore(t)
	if _, err := s.db.Exec(`DELETE FROM objects WHERE id = ?`, chunk[:]); err != nil {
		t.Fatal(err)
	}
	// And a branch pointing nowhere.
	ghost := ID{0xee}
	if _, err := s.db.Exec(`INSERT INTO refs (name, commit_id) VALUES ('broken', ?)`, ghost[:]); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Fsck(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := findProblem(rep, ProblemMissing, chunk)
	if p == nil {
		t.Fatalf("problems = %+v; want missing %s", rep.Problems, chunk.Short())
	}
	if want := []string{"main", "workspace:w"}; !slices.Equal(p.Affected, want) {
		t.Errorf("Affected = %v, want %v", p.Affected, want)
	}
	b := findProblem(rep, ProblemBadRef, ghost)
	if b == nil || !slices.Equal(b.Affected, []string{"broken"}) {
		t.Errorf("bad-ref problem = %+v", b)
	}
	if len(rep.Problems) != 2 {
		t.Errorf("problems = %+v", rep.Problems)
	}
}

// TestFsckDamagedDatabase writes garbage into the middle of strata.db:
// fsck must report what is lost, not fail or crash.
func TestFsckDamagedDatabase(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		name := string(rune('a' + i))
		commitFile(t, s, "b/"+name, ZeroID, name, randBytes(uint64(100+i), 300<<10))
	}
	mustFsckOK(t, s)
	s.Close()
	path := filepath.Join(dir, DBName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Logf("WAL left after close")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(randBytes(7, 64<<10), fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("open damaged store: %v", err)
	}
	defer s.Close()
	rep, err := s.Fsck(context.Background(), nil)
	if err != nil {
		t.Fatalf("fsck of a damaged store: %v", err)
	}
	if rep.OK() {
		t.Fatal("fsck found nothing wrong with 64 KiB of garbage in the database")
	}
	var kinds []string
	var affected []string
	for _, p := range rep.Problems {
		kinds = append(kinds, p.Kind)
		affected = append(affected, p.Affected...)
	}
	slices.Sort(affected)
	for _, p := range rep.Problems {
		t.Logf("%s %s: %s (affects %v)", p.Kind, p.Object.Short(), p.Detail, p.Affected)
	}
	t.Logf("%d problems of kinds %v; affected %v", len(rep.Problems), slices.Compact(kinds), slices.Compact(affected))
	if !slices.Contains(kinds, ProblemDatabase) {
		t.Errorf("no database problem reported")
	}
}

func TestOpenGarbageHeader(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, DBName), randBytes(1, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(dir, Options{ReadOnly: ro})
		if err == nil || !errors.Is(err, ErrCorrupt) {
			t.Errorf("Open(garbage, ro=%v) = %v, want ErrCorrupt", ro, err)
		}
	}
}
