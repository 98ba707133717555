package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// wideEntries returns a directory of n empty files (no content to store),
// named so that they sort as generated.
func wideEntries(n int) []TreeEntry {
	es := make([]TreeEntry, n)
	for i := range es {
		es[i] = TreeEntry{Name: fmt.Sprintf("file-%06d.txt", i), Type: TypeFile, Mode: 0o644, MtimeNs: int64(i) * 1e9}
	}
	return es
}

// putDir stores a directory through a fresh Writer (as a new version of
// prev when prev is not zero, retained first when retain is set) and a
// commit on branch, and returns the directory's id and the Writer's stats.
func putDir(t *testing.T, s *Store, branch string, old ID, entries []TreeEntry, prev ID, retain bool) (dir, commit ID, st WriterStats) {
	t.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if retain {
		if ok, err := w.Retain(prev); err != nil || !ok {
			t.Fatalf("retain %s: %v %v", prev.Short(), ok, err)
		}
	}
	if dir, err = w.PutTreeLike(&Tree{Entries: slices.Clone(entries)}, prev); err != nil {
		t.Fatal(err)
	}
	err = w.Finish(func(tx *Tx) error {
		var parents []ID
		if !old.IsZero() {
			parents = []ID{old}
		}
		var err error
		if commit, err = tx.PutCommit(&Commit{Tree: dir, Parents: parents, Message: "wide", TimeNs: 1}); err != nil {
			return err
		}
		return tx.SetRef(branch, old, commit)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir, commit, w.Stats()
}

func kindOf(t *testing.T, s *Store, id ID) Kind {
	t.Helper()
	var k Kind
	if err := s.View(context.Background(), func(tx *Tx) (err error) { k, err = tx.kindOf(id); return err }); err != nil {
		t.Fatal(err)
	}
	return k
}

func readDir(t *testing.T, s *Store, id ID) []TreeEntry {
	t.Helper()
	var tr *Tree
	if err := s.View(context.Background(), func(tx *Tx) (err error) { tr, err = tx.Tree(id); return err }); err != nil {
		t.Fatal(err)
	}
	return tr.Entries
}

func equalEntries(a, b []TreeEntry) bool {
	return slices.EqualFunc(a, b, func(x, y TreeEntry) bool {
		return x.Name == y.Name && x.Type == y.Type && x.Mode == y.Mode && x.MtimeNs == y.MtimeNs && x.Content == y.Content && x.Size == y.Size
	})
}

// TestLargeDirectory: a directory over treeSplitMin is stored as an index
// over runs, one id whichever way it is written, and reads back whole; a
// small one is one tree, as before.
func TestLargeDirectory(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	wide := wideEntries(6000)
	if treeSize(wide) <= treeSplitMin {
		t.Fatalf("setup: %d bytes is not over the split size", treeSize(wide))
	}
	dir, _, _ := putDir(t, s, "main", ZeroID, wide, ZeroID, false)
	if k := kindOf(t, s, dir); k != KindRunIndex {
		t.Fatalf("a directory of %d bytes is a %v, want a run index", treeSize(wide), k)
	}
	if got := readDir(t, s, dir); !equalEntries(got, wide) {
		t.Fatalf("read back %d entries, not the %d written", len(got), len(wide))
	}
	// The same directory through Tx.PutTree: the same id.
	var viaTx ID
	if err := s.Update(ctx, func(tx *Tx) (err error) { viaTx, err = tx.PutTree(&Tree{Entries: wide}); return err }); err != nil {
		t.Fatal(err)
	}
	if viaTx != dir {
		t.Errorf("Tx.PutTree gave %s, Writer.PutTree %s", viaTx.Short(), dir.Short())
	}
	// Its runs are ordinary trees within the run limits, whose first
	// names and sizes the index names.
	var runs []TreeRun
	s.View(ctx, func(tx *Tx) error {
		_, p, err := tx.Get(dir)
		if err == nil {
			runs, _, err = decodeRunIndex(p)
		}
		return err
	})
	if len(runs) < 2 {
		t.Fatalf("%d runs", len(runs))
	}
	for i, r := range runs {
		es := readDir(t, s, r.Tree)
		if kindOf(t, s, r.Tree) != KindTree || len(es) != r.Entries || treeSize(es) > treeRunMaxBytes+entrySize(&es[len(es)-1]) {
			t.Errorf("run %d: %d entries, %d bytes", i, len(es), treeSize(es))
		}
		if err := r.Check(&Tree{Entries: es}); err != nil || r.Size != treeSize(es)-uvarintLen(uint64(len(es))) {
			t.Errorf("run %d: %v", i, err)
		}
	}

	small := wideEntries(100)
	sdir, _, _ := putDir(t, s, "small", ZeroID, small, ZeroID, false)
	p, _ := EncodeTree(&Tree{Entries: small})
	if kindOf(t, s, sdir) != KindTree || sdir != HashObject(KindTree, p) {
		t.Errorf("a small directory is not one tree of the old form")
	}
	mustFsckOK(t, s)
}

// TestLargeDirectoryEdit: a new version of a large directory that changes
// one entry stores one run and the index — the other runs are covered by
// the previous version, retained or not.
func TestLargeDirectoryEdit(t *testing.T) {
	for _, retain := range []bool{true, false} {
		t.Run(fmt.Sprintf("retain=%t", retain), func(t *testing.T) {
			s := newStore(t)
			wide := wideEntries(6000)
			v1, c1, _ := putDir(t, s, "main", ZeroID, wide, ZeroID, false)
			edited := slices.Clone(wide)
			edited[3000].MtimeNs++
			edited[3000].Size = 0
			v2, _, st := putDir(t, s, "main", c1, edited, v1, retain)
			if v2 == v1 {
				t.Fatal("the edit did not change the directory")
			}
			if st.NewObjects != 2 {
				t.Errorf("the edit stored %d objects, want 2 (one run and the index)", st.NewObjects)
			}
			if st.NewBytes > treeRunMaxBytes {
				t.Errorf("the edit stored %d bytes", st.NewBytes)
			}
			if got := readDir(t, s, v2); !equalEntries(got, edited) {
				t.Fatal("the edited directory does not read back")
			}
			mustFsckOK(t, s)
		})
	}
}

// TestSplitEntriesLocal: the cuts depend on names only, so editing an
// entry changes one run and inserting or removing one changes at most
// two; every run but the last ends at a cut.
func TestSplitEntriesLocal(t *testing.T) {
	wide := wideEntries(20000)
	ids := func(es []TreeEntry) []ID {
		et, err := encodeDirectory(&Tree{Entries: es})
		if err != nil {
			t.Fatal(err)
		}
		var ids []ID
		for _, r := range et.info {
			ids = append(ids, r.Tree)
		}
		return ids
	}
	diff := func(a, b []ID) int {
		n := 0
		for _, id := range b {
			if !slices.Contains(a, id) {
				n++
			}
		}
		return n
	}
	base := ids(wide)
	if len(base) < 4 {
		t.Fatalf("%d runs", len(base))
	}
	for _, runs := range splitEntries(wide)[:len(base)-1] {
		last := runs[len(runs)-1]
		if !cutAfter(last.Name) && treeSize(runs) < treeRunMaxBytes {
			t.Errorf("a run ends at %q, not at a cut", last.Name)
		}
		if len(runs) < treeRunMin && treeSize(runs) < treeRunMaxBytes {
			t.Errorf("a run of %d entries", len(runs))
		}
	}
	edited := slices.Clone(wide)
	edited[12345].Mode = 0o600
	if n := diff(base, ids(edited)); n != 1 {
		t.Errorf("editing an entry changed %d runs", n)
	}
	for _, at := range []int{0, 777, 12345, 19999} {
		ins := slices.Insert(slices.Clone(wide), at+1, TreeEntry{Name: wide[at].Name + "x", Type: TypeFile, Mode: 0o644})
		if n := diff(base, ids(ins)); n > 2 {
			t.Errorf("inserting after %d changed %d runs", at, n)
		}
		del := slices.Delete(slices.Clone(wide), at, at+1)
		if n := diff(base, ids(del)); n > 2 {
			t.Errorf("removing %d changed %d runs", at, n)
		}
	}
}

// TestLargeDirectoryGC: gc keeps an index and its runs while a branch
// reaches them, and removes them all with the branch.
func TestLargeDirectoryGC(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	before := countObjects(t, s)
	_, c1, _ := putDir(t, s, "wide", ZeroID, wideEntries(6000), ZeroID, false)
	objs := countObjects(t, s)
	if r := gc(t, s, GCOptions{}); r.Removed != 0 {
		t.Fatalf("gc removed %d objects of a live directory", r.Removed)
	}
	mustFsckOK(t, s)
	if err := s.Update(ctx, func(tx *Tx) error { return tx.SetRef("wide", c1, ZeroID) }); err != nil {
		t.Fatal(err)
	}
	if r := gc(t, s, GCOptions{}); r.Removed != objs-before {
		t.Fatalf("gc removed %d objects, want the %d of the directory and its commit", r.Removed, objs-before)
	}
	if n := countObjects(t, s); n != before {
		t.Fatalf("%d objects left", n)
	}
}

// TestFsckTreeIndex: fsck reports an index, of either form, cut where the
// format does not cut (one directory would have two ids), one whose counts
// do not match its runs, and a run index whose first names or sizes are
// not its runs'.
func TestFsckTreeIndex(t *testing.T) {
	ctx := context.Background()
	wide := wideEntries(6000)
	// mis-cut stores wide cut after its tenth entry.
	miscut := func(tx *Tx) ([]TreeRun, error) {
		var runs []TreeRun
		for _, part := range [][]TreeEntry{wide[:10], wide[10:]} {
			p, r, err := encodeRun(part)
			if err != nil {
				return nil, err
			}
			if _, err := tx.Put(KindTree, p); err != nil {
				return nil, err
			}
			runs = append(runs, r)
		}
		return runs, nil
	}
	// canonical stores wide's runs, for the case to spoil.
	canonical := func(spoil func([]TreeRun)) func(tx *Tx) ([]TreeRun, error) {
		return func(tx *Tx) ([]TreeRun, error) {
			et, err := encodeDirectory(&Tree{Entries: wide})
			if err != nil {
				return nil, err
			}
			for _, p := range et.runs {
				if _, err := tx.Put(KindTree, p); err != nil {
					return nil, err
				}
			}
			runs := slices.Clone(et.info)
			spoil(runs)
			return runs, nil
		}
	}
	for _, c := range []struct {
		name, want string
		kind       Kind
		runs       func(tx *Tx) ([]TreeRun, error)
	}{
		{"cut elsewhere", "non-canonical", KindTreeIndex, miscut},
		{"cut elsewhere", "non-canonical", KindRunIndex, miscut},
		{"wrong count", "the index says", KindTreeIndex, canonical(func(r []TreeRun) { r[0].Entries--; r[1].Entries++ })},
		{"wrong count", "the index says", KindRunIndex, canonical(func(r []TreeRun) { r[0].Entries--; r[1].Entries++ })},
		{"wrong first", `the index says "file-000000.txtx"`, KindRunIndex, canonical(func(r []TreeRun) { r[1].First = r[0].First + "x" })},
		{"wrong size", "bytes of entries, the index says", KindRunIndex, canonical(func(r []TreeRun) { r[1].Size++ })},
	} {
		t.Run(c.kind.String()+"/"+c.name, func(t *testing.T) {
			s := newStore(t)
			var idx ID
			err := s.Update(ctx, func(tx *Tx) error {
				runs, err := c.runs(tx)
				if err != nil {
					return err
				}
				p := encodeRunIndex(runs)
				if c.kind == KindTreeIndex {
					p = encodeTreeIndex(oldRuns(runs))
				}
				if idx, err = tx.Put(c.kind, p); err != nil {
					return err
				}
				commit, err := tx.PutCommit(&Commit{Tree: idx, Message: "bad", TimeNs: 1})
				if err != nil {
					return err
				}
				return tx.SetRef("main", ZeroID, commit)
			})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := s.Fsck(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := findProblem(rep, ProblemCorrupt, idx)
			if p == nil || !strings.Contains(p.Detail, c.want) || !slices.Equal(p.Affected, []string{"main"}) {
				t.Fatalf("problems = %+v; want the index %s corrupt (%s), affecting main", rep.Problems, idx.Short(), c.want)
			}
		})
	}
}

// encodeTreeIndex encodes a tree index (kind 5) as strata wrote them up
// to schema version 3: the total entry count, the run count, then each
// run's entry count and tree id. Tests build stores that hold them.
func encodeTreeIndex(runs []treeRun) []byte {
	total := 0
	for _, r := range runs {
		total += r.Entries
	}
	b := binary.AppendUvarint(nil, uint64(total))
	b = binary.AppendUvarint(b, uint64(len(runs)))
	for _, r := range runs {
		b = binary.AppendUvarint(b, uint64(r.Entries))
		b = append(b, r.Tree[:]...)
	}
	return b
}

// oldRuns returns runs as a tree index names them.
func oldRuns(runs []TreeRun) []treeRun {
	old := make([]treeRun, len(runs))
	for i, r := range runs {
		old[i] = treeRun{Entries: r.Entries, Tree: r.Tree}
	}
	return old
}

// putTreeIndex stores a large directory as a tree index (kind 5), the way
// strata stored it up to schema version 3, in tx.
func putTreeIndex(tb testing.TB, tx *Tx, entries []TreeEntry) ID {
	tb.Helper()
	et, err := encodeDirectory(&Tree{Entries: entries})
	if err != nil || et.index == nil {
		tb.Fatalf("encode %d entries: split %t, %v", len(entries), et != nil && et.index != nil, err)
	}
	for _, p := range et.runs {
		if _, err := tx.Put(KindTree, p); err != nil {
			tb.Fatal(err)
		}
	}
	id, err := tx.Put(KindTreeIndex, encodeTreeIndex(oldRuns(et.info)))
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// TestDecodeTreeIndex: what encodeTreeIndex does not produce for a split
// directory is refused.
func TestDecodeTreeIndex(t *testing.T) {
	a, b := ID{1}, ID{2}
	good := encodeTreeIndex([]treeRun{{3, a}, {4, b}})
	if runs, total, err := decodeTreeIndex(good); err != nil || total != 7 || len(runs) != 2 || runs[1] != (treeRun{4, b}) {
		t.Fatalf("good index: %v %d %v", runs, total, err)
	}
	for name, p := range map[string][]byte{
		"one run":         encodeTreeIndex([]treeRun{{3, a}}),
		"empty run":       encodeTreeIndex([]treeRun{{0, a}, {4, b}}),
		"zero id":         encodeTreeIndex([]treeRun{{3, a}, {4, ZeroID}}),
		"truncated":       good[:len(good)-1],
		"trailing bytes":  append(slices.Clone(good), 0),
		"total too big":   append([]byte{8}, good[1:]...),
		"total too small": append([]byte{6}, good[1:]...),
		"huge count":      {7, 0xff, 0xff, 0xff, 0x7f},
	} {
		if _, _, err := decodeTreeIndex(p); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestEntrySize: entrySize and treeSize are the sizes EncodeTree gives.
func TestEntrySize(t *testing.T) {
	es := []TreeEntry{
		{Name: "a", Type: TypeFile},
		{Name: "b", Type: TypeSymlink, Mode: 0o7777, UID: 1 << 31, GID: 65534, MtimeNs: -1, Size: 1 << 40, Rdev: 1 << 63, Target: strings.Repeat("t", 200), LinkGroup: "g", Content: ID{9}},
		{Name: "c", Type: TypeFile, MtimeNs: -1 << 62, Xattrs: []Xattr{{Name: "user.x", Value: make([]byte, 300)}, {Name: "user.y"}}},
		{Name: strings.Repeat("d", 255), Type: TypeDir, MtimeNs: 1<<63 - 1},
	}
	for i := range es {
		p, err := EncodeTree(&Tree{Entries: es[i : i+1]})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := treeSize(es[i:i+1]), len(p); got != want {
			t.Errorf("entry %q: size %d, EncodeTree %d", es[i].Name[:1], got, want)
		}
	}
	p, _ := EncodeTree(&Tree{Entries: es})
	if treeSize(es) != len(p) {
		t.Errorf("tree: size %d, EncodeTree %d", treeSize(es), len(p))
	}
}

// TestLargeDirectoryUnsorted: a large directory's entries out of order are
// refused, within a run and across runs.
func TestLargeDirectoryUnsorted(t *testing.T) {
	wide := wideEntries(6000)
	runs := splitEntries(wide)
	cross := slices.Clone(wide)
	n := len(runs[0]) // the first entry of the second run
	cross[n-1], cross[n] = cross[n], cross[n-1]
	within := slices.Clone(wide)
	within[1], within[2] = within[2], within[1]
	for name, es := range map[string][]TreeEntry{"across runs": cross, "within a run": within} {
		if _, err := encodeDirectory(&Tree{Entries: es}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%s: %v, want ErrInvalidName", name, err)
		}
	}
}

// TestTreeIndexStillRead: a store written before run indexes holds tree
// indexes (kind 5); they read whole, pass fsck, stay under gc, and serve
// as PutTreeLike's prev: a new version shares their runs and is a run
// index, and the same directory written again is a run index too — its
// second id, which costs only that directory's dedupe across the change.
func TestTreeIndexStillRead(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	wide := wideEntries(6000)
	var old, c1 ID
	err := s.Update(ctx, func(tx *Tx) (err error) {
		old = putTreeIndex(t, tx, wide)
		if c1, err = tx.PutCommit(&Commit{Tree: old, Message: "v3", TimeNs: 1}); err != nil {
			return err
		}
		return tx.SetRef("main", ZeroID, c1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if k := kindOf(t, s, old); k != KindTreeIndex {
		t.Fatalf("setup: a %v", k)
	}
	if got := readDir(t, s, old); !reflect.DeepEqual(got, wide) {
		t.Fatal("a tree index does not read back")
	}
	mustFsckOK(t, s)

	edited := slices.Clone(wide)
	edited[3000].MtimeNs++
	v2, _, st := putDir(t, s, "main", c1, edited, old, true)
	if want, kind := putID(t, edited); v2 != want || kind != KindRunIndex {
		t.Fatalf("PutTreeLike over a tree index: %s, want PutTree's %s (a %v)", v2.Short(), want.Short(), kind)
	}
	if st.NewObjects != 2 {
		t.Errorf("the edit stored %d objects, want 2 (one run and the run index)", st.NewObjects)
	}
	same, _, st := putDir(t, s, "same", ZeroID, wide, old, true)
	if same == old || kindOf(t, s, same) != KindRunIndex || st.NewObjects != 1 {
		t.Errorf("the same directory again: %s (%v), %d new objects; want a run index over the same runs (1 object)", same.Short(), kindOf(t, s, same), st.NewObjects)
	}
	if got := readDir(t, s, v2); !reflect.DeepEqual(got, edited) {
		t.Fatal("the edit does not read back")
	}
	if r := gc(t, s, GCOptions{}); r.Removed != 0 {
		t.Fatalf("gc removed %d objects of live directories", r.Removed)
	}
	mustFsckOK(t, s)
}

// TestMigrateToRunIndexes: a store of schema version 3 (which may hold
// tree indexes, kind 5) opens read-only only after an upgrade, and a
// read-write open migrates it to version 4 — the version that may hold
// run indexes (kind 6), which a strata of version 3 refuses — and reads
// its tree indexes as before.
func TestMigrateToRunIndexes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wide := wideEntries(6000)
	var old ID
	err = s.Update(ctx, func(tx *Tx) error {
		old = putTreeIndex(t, tx, wide)
		c, err := tx.PutCommit(&Commit{Tree: old, Message: "v3", TimeNs: 1})
		if err != nil {
			return err
		}
		return tx.SetRef("main", ZeroID, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("PRAGMA user_version = 3"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if _, err := Open(dir, Options{ReadOnly: true}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only open of a version-3 store: %v, want ErrReadOnly (needs an upgrade)", err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 4 || SchemaVersion() != 4 {
		t.Fatalf("after the migration: version %d (%v), binary %d; want 4", v, err, SchemaVersion())
	}
	if got := readDir(t, s, old); !reflect.DeepEqual(got, wide) {
		t.Fatal("the tree index does not read back after the migration")
	}
	dirID, _, _ := putDir(t, s, "new", ZeroID, wide, ZeroID, false)
	if k := kindOf(t, s, dirID); k != KindRunIndex {
		t.Fatalf("a large directory written after the migration is a %v", k)
	}
	mustFsckOK(t, s)
}

// TestCutAfter: the cut rule is FNV-1a 64 of the name modulo treeRunAvg
// (docs/store.md), which the inlined hash must keep: it decides every
// split directory's id.
func TestCutAfter(t *testing.T) {
	g := &spliceGen{rng: rand.New(rand.NewPCG(7, 7))}
	cuts := 0
	for i := range 20000 {
		name := g.name()
		if i%3 == 0 {
			name = string(randBytes(uint64(i), 1+i%40))
		}
		h := fnv.New64a()
		h.Write([]byte(name))
		want := h.Sum64()%treeRunAvg == 0
		if cutAfter(name) != want {
			t.Fatalf("cutAfter(%q) = %t, FNV-1a says %t", name, !want, want)
		}
		if want {
			cuts++
		}
	}
	if cuts < 20000/treeRunAvg/2 {
		t.Errorf("%d cuts in 20000 names", cuts)
	}
}
