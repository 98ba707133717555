package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
// fsck must report what is lost, not fail or crash. What is lost is found
// independently of fsck: the branches whose file no longer reads back
// intact. fsck must name exactly those, each through a damaged object of
// its own.
func TestFsckDamagedDatabase(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const branches = 8
	names := make([]string, branches)
	contents := make([][]byte, branches)
	owned := map[ID]string{} // object -> the one branch that reaches it
	for i := range branches {
		names[i] = "b/" + string(rune('a'+i))
		contents[i] = randBytes(uint64(100+i), 300<<10)
		c := commitFile(t, s, names[i], ZeroID, names[i][2:], contents[i])
		for _, id := range branchObjects(t, s, c) {
			owned[id] = names[i]
		}
	}
	mustFsckOK(t, s)
	// The data into strata.db, where the garbage goes: a close leaves it
	// in the WAL (wal.go).
	if _, err := s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
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
	var lost []string
	for i, name := range names {
		if got, err := readBranchFile(s, name); err != nil || !bytes.Equal(got, contents[i]) {
			lost = append(lost, name)
		}
	}
	if len(lost) == 0 {
		t.Fatal("the garbage damaged no branch's data: the test no longer checks that fsck names what is lost")
	}
	rep, err := s.Fsck(context.Background(), nil)
	if err != nil {
		t.Fatalf("fsck of a damaged store: %v", err)
	}
	if rep.OK() {
		t.Fatal("fsck found nothing wrong with 64 KiB of garbage in the database")
	}
	var kinds []string
	var affected []string
	named := map[string]bool{} // branches named through a damaged object of their own
	for _, p := range rep.Problems {
		t.Logf("%s %s: %s (affects %v)", p.Kind, p.Object.Short(), p.Detail, p.Affected)
		kinds = append(kinds, p.Kind)
		affected = append(affected, p.Affected...)
		if b, ok := owned[p.Object]; ok && slices.Contains(p.Affected, b) && (p.Kind == ProblemCorrupt || p.Kind == ProblemMissing) {
			named[b] = true
		}
	}
	slices.Sort(affected)
	affected = slices.Compact(affected)
	t.Logf("%d problems of kinds %v; affected %v; lost %v", len(rep.Problems), slices.Compact(kinds), affected, lost)
	if !slices.Contains(kinds, ProblemDatabase) {
		t.Errorf("no database problem reported")
	}
	if !slices.Equal(affected, lost) {
		t.Errorf("fsck names %v as affected; the branches that no longer read back are %v", affected, lost)
	}
	for _, b := range lost {
		if !named[b] {
			t.Errorf("no corrupt or missing object of %s names it", b)
		}
	}
}

// branchObjects lists the objects of a commitFile commit: the commit, its
// tree, and the file's chunk tree down to its chunks.
func branchObjects(tb testing.TB, s *Store, commit ID) []ID {
	tb.Helper()
	ids := []ID{commit}
	err := s.View(context.Background(), func(tx *Tx) error {
		c, err := tx.Commit(commit)
		if err != nil {
			return err
		}
		tr, err := tx.Tree(c.Tree)
		if err != nil {
			return err
		}
		ids = append(ids, c.Tree)
		var walk func(id ID) error
		walk = func(id ID) error {
			ids = append(ids, id)
			k, err := tx.kindOf(id)
			if err != nil || k != KindFile {
				return err
			}
			n, err := tx.FileNode(id)
			if err != nil {
				return err
			}
			for _, r := range n.Refs {
				if err := walk(r.ID); err != nil {
					return err
				}
			}
			return nil
		}
		return walk(tr.Entries[0].Content)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// readBranchFile reads back the one file of a commitFile branch.
func readBranchFile(s *Store, branch string) ([]byte, error) {
	var content ID
	err := s.View(context.Background(), func(tx *Tx) error {
		id, err := tx.Ref(branch)
		if err != nil {
			return err
		}
		c, err := tx.Commit(id)
		if err != nil {
			return err
		}
		tr, err := tx.Tree(c.Tree)
		if err != nil {
			return err
		}
		if len(tr.Entries) != 1 {
			return fmt.Errorf("%s: %d entries", branch, len(tr.Entries))
		}
		content = tr.Entries[0].Content
		return nil
	})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	_, err = s.ReadContentTo(context.Background(), content, &b)
	return b.Bytes(), err
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
