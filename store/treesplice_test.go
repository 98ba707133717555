package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// spliceGen generates large directories and edits of them for the splice
// tests, deterministically from a seed.
type spliceGen struct {
	rng  *rand.Rand
	pool []ID // contents stored in the store, for entries to reference
}

const nameAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789._-"

// name returns a random entry name: one of a few shared prefixes, then
// mostly short random text, sometimes long.
func (g *spliceGen) name() string {
	prefixes := []string{"", "a", "ab", "abc", "abc-1", "src", "src-", "src_main", "node_modules", "Z", "x"}
	for {
		n := g.rng.IntN(12)
		if g.rng.IntN(25) == 0 {
			n = 80 + g.rng.IntN(170)
		}
		b := []byte(prefixes[g.rng.IntN(len(prefixes))])
		for range n {
			b = append(b, nameAlphabet[g.rng.IntN(len(nameAlphabet))])
		}
		if s := string(b); ValidateName(s) == nil {
			return s
		}
	}
}

// entry returns a random entry named name: mostly small, now and then a
// symlink with a long target or a large xattr (some over treeRunMaxBytes
// on their own, which end a run early), a tenth with stored content.
func (g *spliceGen) entry(name string) TreeEntry {
	e := TreeEntry{Name: name, Type: TypeFile, Mode: 0o644, MtimeNs: g.rng.Int64N(1 << 50), Size: g.rng.Int64N(1 << 20)}
	if g.rng.IntN(10) == 0 {
		e.Content = g.pool[g.rng.IntN(len(g.pool))]
	}
	switch g.rng.IntN(100) {
	case 0:
		e.Xattrs = []Xattr{{Name: "user.big", Value: make([]byte, 1000+g.rng.IntN(19000))}}
	case 1, 2, 3:
		e.Type, e.Size, e.Target = TypeSymlink, 0, strings.Repeat("t", g.rng.IntN(400))
	}
	return e
}

// dir returns a directory large enough to split.
func (g *spliceGen) dir() []TreeEntry {
	seen := map[string]bool{}
	var es []TreeEntry
	n := 1000 + g.rng.IntN(1500)
	for len(es) < n || treeSize(es) <= treeSplitMin {
		name := g.name()
		if !seen[name] {
			seen[name] = true
			es = append(es, g.entry(name))
		}
	}
	slices.SortFunc(es, func(a, b TreeEntry) int { return strings.Compare(a.Name, b.Name) })
	return es
}

// runOf returns the run whose name range holds name.
func runOf(runs []TreeRun, name string) int {
	i := sort.Search(len(runs), func(i int) bool { return runs[i].First > name })
	return max(i-1, 0)
}

// inRange returns the entries of es (sorted) in run i's name range.
func inRange(es []TreeEntry, runs []TreeRun, i int) []TreeEntry {
	lo, hi := 0, len(es)
	if i > 0 {
		lo = sort.Search(len(es), func(j int) bool { return es[j].Name >= runs[i].First })
	}
	if i+1 < len(runs) {
		hi = sort.Search(len(es), func(j int) bool { return es[j].Name >= runs[i+1].First })
	}
	return es[lo:hi]
}

// edit changes es, a directory stored as runs, in one of the ways an
// editor does, and returns what it did, the edited directory, and the
// names it touched (changed, added or removed).
func (g *spliceGen) edit(es []TreeEntry, runs []TreeRun) (string, []TreeEntry, []string) {
	next := slices.Clone(es)
	var touched []string
	insert := func(e TreeEntry) bool {
		i, ok := slices.BinarySearchFunc(next, e.Name, func(x TreeEntry, n string) int { return strings.Compare(x.Name, n) })
		if ok || ValidateName(e.Name) != nil {
			return false
		}
		next = slices.Insert(next, i, e)
		touched = append(touched, e.Name)
		return true
	}
	remove := func(i int) {
		touched = append(touched, next[i].Name)
		next = slices.Delete(next, i, i+1)
	}
	// start returns where run r starts in next, which is still es here.
	start := func(r int) int {
		n := 0
		for _, x := range runs[:r] {
			n += x.Entries
		}
		return n
	}
	r := g.rng.IntN(len(runs))
	var what string
	switch op := g.rng.IntN(12); op {
	case 0, 1:
		what = "modify an entry"
		i := g.rng.IntN(len(next))
		e := &next[i]
		switch g.rng.IntN(4) {
		case 0:
			e.MtimeNs++
		case 1:
			e.Mode, e.Size = 0o600, 1<<40 // a longer entry
		case 2:
			e.Xattrs = []Xattr{{Name: "user.grown", Value: make([]byte, 100+g.rng.IntN(treeRunMaxBytes+4000))}}
		case 3:
			e.Xattrs, e.Target = nil, ""
		}
		touched = append(touched, e.Name)
	case 2:
		what = "insert before the first name"
		name := "!" + g.name()
		for name >= next[0].Name {
			name = "!" + name
		}
		insert(g.entry(name))
	case 3:
		what = fmt.Sprintf("insert at run %d's end", r)
		last := es[start(r)+runs[r].Entries-1].Name
		for _, suffix := range []string{"~", "-", "\x01", "0"} {
			name := last + suffix
			if (r+1 == len(runs) || name < runs[r+1].First) && insert(g.entry(name)) {
				break
			}
		}
	case 4:
		what = fmt.Sprintf("delete run %d's first entry", r)
		remove(start(r))
	case 5:
		what = fmt.Sprintf("delete run %d's last entry", r)
		remove(start(r) + runs[r].Entries - 1)
	case 6:
		what = fmt.Sprintf("delete run %d's %d entries", r, runs[r].Entries)
		for range runs[r].Entries {
			remove(start(r))
		}
	case 7:
		n := 20 + g.rng.IntN(300)
		what = fmt.Sprintf("add %d entries to run %d", n, r)
		for added, tries := 0, 0; added < n && tries < 20*n; tries++ { // a narrow range may not take n
			name := runs[r].First + string(nameAlphabet[g.rng.IntN(len(nameAlphabet))]) + g.name()
			if (r+1 == len(runs) || name < runs[r+1].First) && insert(g.entry(name)) {
				added++
			}
		}
	case 8:
		// Under treeSplitMin: stored as one tree.
		what = "shrink under the split size"
		goal, size := treeSplitMin-g.rng.IntN(8000), treeSize(next)
		for size > goal {
			i := g.rng.IntN(len(next))
			size -= entrySize(&next[i])
			remove(i)
		}
	case 9:
		// Just over treeSplitMin: still split, in fewer runs. Only small
		// entries go, so as not to fall under it.
		what = "shrink to just over the split size"
		var small []string
		for i := range next {
			if entrySize(&next[i]) < 300 {
				small = append(small, next[i].Name)
			}
		}
		size := treeSize(next)
		for size > treeSplitMin+300 && len(small) > 0 {
			k := g.rng.IntN(len(small))
			i, _ := slices.BinarySearchFunc(next, small[k], func(e TreeEntry, n string) int { return strings.Compare(e.Name, n) })
			small = slices.Delete(small, k, k+1)
			size -= entrySize(&next[i])
			remove(i)
		}
	case 10:
		n := 1 + g.rng.IntN(60)
		what = fmt.Sprintf("many (%d) changes anywhere", n)
		for range n {
			switch g.rng.IntN(3) {
			case 0:
				insert(g.entry(g.name()))
			case 1:
				remove(g.rng.IntN(len(next)))
			case 2:
				i := g.rng.IntN(len(next))
				next[i].MtimeNs--
				touched = append(touched, next[i].Name)
			}
		}
	case 11:
		what = "no change"
	}
	return what, next, touched
}

// edits returns the RunEdits that take the directory stored as runs to
// next: one for each run whose range holds a touched name, and now and
// then one for a run that did not change (an editor may hand back a run
// it loaded and left alone).
func (g *spliceGen) edits(runs []TreeRun, next []TreeEntry, touched []string) []RunEdit {
	set := map[int]bool{}
	for _, name := range touched {
		set[runOf(runs, name)] = true
	}
	if g.rng.IntN(5) == 0 {
		set[g.rng.IntN(len(runs))] = true
	}
	var out []RunEdit
	for i := range runs {
		if set[i] {
			out = append(out, RunEdit{Run: i, Entries: slices.Clone(inRange(next, runs, i))})
		}
	}
	return out
}

// putID is the id PutTree gives the directory es.
func putID(tb testing.TB, es []TreeEntry) (ID, Kind) {
	tb.Helper()
	et, err := encodeDirectory(&Tree{Entries: es})
	if err != nil {
		tb.Fatal(err)
	}
	if et.index == nil {
		return HashObject(KindTree, et.tree), KindTree
	}
	return HashObject(KindRunIndex, et.index), KindRunIndex
}

func treeRuns(tb testing.TB, s *Store, id ID) ([]TreeRun, bool) {
	tb.Helper()
	var runs []TreeRun
	var ok bool
	if err := s.View(context.Background(), func(tx *Tx) (err error) { runs, ok, err = tx.TreeRuns(id); return err }); err != nil {
		tb.Fatal(err)
	}
	return runs, ok
}

// TestPutTreeSpliceProperty: random large directories, random edits of
// the kinds an editor makes (an entry modified, inserted before the first
// name or at a run's end, a run's first or last entry or all its entries
// removed, enough added to split a run, enough removed to fall under the
// split size or just over it, many changes at once, none), each stored
// with PutTreeSplice from the runs it touches: the id is PutTree's of the
// whole edited directory, the store reads the directory back, and fsck
// finds nothing wrong. Each edit starts from the previous one's result.
func TestPutTreeSpliceProperty(t *testing.T) {
	const seeds, steps = 6, 50
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t)
			g := &spliceGen{rng: rand.New(rand.NewPCG(seed, 0x5eed))}
			w, err := s.NewWriter(ctx, "pool")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 16 {
				id, err := w.WriteBytes([]byte(fmt.Sprint("content ", i)))
				if err != nil {
					t.Fatal(err)
				}
				g.pool = append(g.pool, id)
			}
			if err := w.Finish(nil); err != nil {
				t.Fatal(err)
			}

			var model []TreeEntry
			var dir, head ID
			commit := func(w *Writer, tree ID) {
				t.Helper()
				err := w.Finish(func(tx *Tx) error {
					var parents []ID
					if !head.IsZero() {
						parents = []ID{head}
					}
					c, err := tx.PutCommit(&Commit{Tree: tree, Parents: parents, Message: "splice", TimeNs: 1})
					if err != nil {
						return err
					}
					if err := tx.SetRef("main", head, c); err != nil {
						return err
					}
					head = c
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			base := func() {
				model = g.dir()
				w, err := s.NewWriter(ctx, "base")
				if err != nil {
					t.Fatal(err)
				}
				defer w.Abort()
				if dir, err = w.PutTree(&Tree{Entries: slices.Clone(model)}); err != nil {
					t.Fatal(err)
				}
				commit(w, dir)
			}
			base()
			kinds := map[string]int{}
			for step := range steps {
				runs, ok := treeRuns(t, s, dir)
				if !ok {
					t.Fatalf("step %d: the directory %s is not a run index", step, dir.Short())
				}
				what, next, touched := g.edit(model, runs)
				edits := g.edits(runs, next, touched)
				want, wantKind := putID(t, next)

				w, err := s.NewWriter(ctx, "splice")
				if err != nil {
					t.Fatal(err)
				}
				switch step % 3 { // how the caller holds prev
				case 0:
					if ok, err := w.Retain(dir); !ok || err != nil {
						t.Fatalf("retain: %v %v", ok, err)
					}
				case 1:
					w.Optimistic()
					w.Retain(dir)
				}
				got, err := w.PutTreeSplice(dir, edits)
				if err != nil {
					w.Abort()
					t.Fatalf("step %d (%s, %d edits of %d runs): %v", step, what, len(edits), len(runs), err)
				}
				if got != want {
					w.Abort()
					t.Fatalf("step %d (%s, %d edits of %d runs): id %s, PutTree's %s (a %v)", step, what, len(edits), len(runs), got.Short(), want.Short(), wantKind)
				}
				commit(w, got)
				if k := kindOf(t, s, got); k != wantKind {
					t.Fatalf("step %d (%s): stored a %v, want a %v", step, what, k, wantKind)
				}
				if back := readDir(t, s, got); !reflect.DeepEqual(back, next) {
					t.Fatalf("step %d (%s): read back %d entries, not the %d written", step, what, len(back), len(next))
				}
				kinds[strings.Fields(what)[0]+" "+wantKind.String()]++
				model, dir = next, got
				if wantKind != KindRunIndex {
					base()
				}
			}
			mustFsckOK(t, s)
			t.Logf("edits by kind and result: %v", kinds)
		})
	}
}

// spliceStore stores the directory es (large) and returns its id, in a
// store of its own.
func spliceStore(t *testing.T, es []TreeEntry) (*Store, ID) {
	t.Helper()
	s := newStore(t)
	dir, _, _ := putDir(t, s, "main", ZeroID, es, ZeroID, false)
	if k := kindOf(t, s, dir); k != KindRunIndex {
		t.Fatalf("setup: a %v", k)
	}
	return s, dir
}

// TestPutTreeSpliceLocal: editing one entry reads no other run and stores
// one run and the index, covered by prev; what it keeps is prev's.
func TestPutTreeSpliceLocal(t *testing.T) {
	wide := wideEntries(6000)
	s, dir := spliceStore(t, wide)
	runs, _ := treeRuns(t, s, dir)
	r := len(runs) / 2
	next := slices.Clone(wide)
	at := slices.IndexFunc(next, func(e TreeEntry) bool { return e.Name == runs[r].First }) + 3
	next[at].MtimeNs++
	edit := []RunEdit{{Run: r, Entries: slices.Clone(inRange(next, runs, r))}}

	reads := 0
	sp, err := splice(runs, len(wide), edit, func(TreeRun) ([]TreeEntry, error) { reads++; return nil, errors.New("no read expected") })
	if err != nil || reads != 0 {
		t.Fatalf("splice: %d reads, %v", reads, err)
	}
	for i := range sp.runs {
		if (sp.payloads[i] != nil) != (i == r) || (i != r && sp.runs[i] != runs[i]) {
			t.Errorf("run %d: cut again %t, %v (was %v)", i, sp.payloads[i] != nil, sp.runs[i], runs[i])
		}
	}

	ctx := context.Background()
	w, err := s.NewWriter(ctx, "edit")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	w.Optimistic()
	w.Retain(dir)
	id, err := w.PutTreeSplice(dir, edit)
	if want, _ := putID(t, next); err != nil || id != want {
		t.Fatalf("PutTreeSplice = %s, %v; want %s", id.Short(), err, want.Short())
	}
	for _, run := range runs {
		if under, ok := w.runsUnder[run.Tree]; run != runs[r] && (!ok || under != dir) {
			t.Errorf("kept run %s is not covered by prev", run.Tree.Short())
		}
	}
	if err := w.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.NewObjects != 2 {
		t.Errorf("stored %d objects, want 2 (the run and the index)", st.NewObjects)
	}
}

// TestPutTreeSpliceCovered: the runs a splice keeps and the entries it
// reads are covered by prev — Finish checks prev, not them — so a prev
// gone by Finish fails it with ErrNotFound rather than landing a
// directory whose runs may be gone; without prev retained, Finish checks
// each.
func TestPutTreeSpliceCovered(t *testing.T) {
	ctx := context.Background()
	wide := wideEntries(6000)
	runs := splitEntries(wide)
	// Delete the first run's entries: the second is read and cut again
	// only if the new first run crosses into it; here it starts at a
	// cut, so the splice reads nothing and keeps every other run.
	for _, c := range []struct {
		name    string
		retain  bool
		drop    bool
		wantErr error
	}{
		{"retained", true, false, nil},
		{"not retained", false, false, nil},
		{"retained, prev gone", true, true, ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, dir := spliceStore(t, wide)
			w, err := s.NewWriter(ctx, "edit")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if c.retain {
				w.Optimistic()
				w.Retain(dir)
			}
			next := wide[len(runs[0]):]
			edits := []RunEdit{{Run: 0, Entries: []TreeEntry{}}}
			id, err := w.PutTreeSplice(dir, edits)
			if want, _ := putID(t, next); err != nil || id != want {
				t.Fatalf("PutTreeSplice = %s, %v; want %s", id.Short(), err, want.Short())
			}
			if c.drop {
				if err := s.Update(ctx, func(tx *Tx) error {
					_, err := tx.exec(`DELETE FROM objects WHERE id = ?`, dir[:])
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			err = w.Finish(func(tx *Tx) error {
				c, err := tx.PutCommit(&Commit{Tree: id, Message: "m", TimeNs: 1})
				if err != nil {
					return err
				}
				return tx.SetRef("edited", ZeroID, c)
			})
			if !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
				t.Fatalf("Finish: %v, want %v", err, c.wantErr)
			}
			if err == nil {
				if got := readDir(t, s, id); !reflect.DeepEqual(got, next) {
					t.Fatal("the spliced directory does not read back")
				}
			}
		})
	}
}

// TestPutTreeSpliceOneRun: a directory over the split size that is one
// run (small entries, then one over treeRunMaxBytes at its end) is stored
// as one tree, as PutTree stores it.
func TestPutTreeSpliceOneRun(t *testing.T) {
	wide := wideEntries(6000)
	big := TreeEntry{Name: "zzz", Type: TypeFile, Xattrs: []Xattr{{Name: "user.big", Value: make([]byte, treeSplitMin)}}}
	s, dir := spliceStore(t, append(slices.Clone(wide), big))
	runs, _ := treeRuns(t, s, dir)
	next := append(slices.Clone(wide[:5]), big)
	var edits []RunEdit
	for i := range runs {
		edits = append(edits, RunEdit{Run: i, Entries: slices.Clone(inRange(next, runs, i))})
	}
	want, kind := putID(t, next)
	if kind != KindTree || treeSize(next) <= treeSplitMin {
		t.Fatalf("setup: %v of %d bytes", kind, treeSize(next))
	}
	w, err := s.NewWriter(context.Background(), "edit")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if id, err := w.PutTreeSplice(dir, edits); err != nil || id != want {
		t.Fatalf("PutTreeSplice = %s, %v; want the tree %s", id.Short(), err, want.Short())
	}
}

// TestPutTreeSpliceInvalid: edits that do not fit prev's runs, and a prev
// that is not a run index, are ErrInvalidArgument, and nothing is
// written or recorded; a missing prev is ErrNotFound.
func TestPutTreeSpliceInvalid(t *testing.T) {
	ctx := context.Background()
	wide := wideEntries(6000)
	s, dir := spliceStore(t, wide)
	runs, _ := treeRuns(t, s, dir)
	var small, old ID
	if err := s.Update(ctx, func(tx *Tx) (err error) {
		if small, err = tx.PutTree(&Tree{Entries: wide[:10]}); err != nil {
			return err
		}
		old = putTreeIndex(t, tx, wide)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	run := func(i int) []TreeEntry { return slices.Clone(inRange(wide, runs, i)) }
	entry := func(name string) TreeEntry { return TreeEntry{Name: name, Type: TypeFile} }
	for _, c := range []struct {
		name  string
		prev  ID
		edits []RunEdit
		want  error
	}{
		{"run out of range", dir, []RunEdit{{Run: len(runs), Entries: nil}}, ErrInvalidArgument},
		{"negative run", dir, []RunEdit{{Run: -1}}, ErrInvalidArgument},
		{"edits not sorted", dir, []RunEdit{{Run: 2, Entries: run(2)}, {Run: 1, Entries: run(1)}}, ErrInvalidArgument},
		{"run edited twice", dir, []RunEdit{{Run: 1, Entries: run(1)}, {Run: 1, Entries: run(1)}}, ErrInvalidArgument},
		{"entries not sorted", dir, []RunEdit{{Run: 1, Entries: append(run(1), run(1)[0])}}, ErrInvalidArgument},
		{"entry before the run", dir, []RunEdit{{Run: 1, Entries: append([]TreeEntry{wide[0]}, run(1)...)}}, ErrInvalidArgument},
		{"entry in the next run", dir, []RunEdit{{Run: 1, Entries: append(run(1), entry(runs[2].First))}}, ErrInvalidArgument},
		{"entry after the run", dir, []RunEdit{{Run: 0, Entries: append(run(0), entry(runs[1].First+"x"))}}, ErrInvalidArgument},
		{"prev a tree", small, nil, ErrInvalidArgument},
		{"prev a tree index", old, nil, ErrInvalidArgument},
		{"prev missing", ID{1}, nil, ErrNotFound},
		{"bad name", dir, []RunEdit{{Run: len(runs) - 1, Entries: append(run(len(runs)-1), entry("zz/z"))}}, ErrInvalidName},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := s.NewWriter(ctx, "edit")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if _, err := w.PutTreeSplice(c.prev, c.edits); !errors.Is(err, c.want) {
				t.Fatalf("PutTreeSplice: %v, want %v", err, c.want)
			}
			if len(w.batch) != 0 || len(w.external) != 0 {
				t.Fatalf("%d objects buffered, %d references recorded", len(w.batch), len(w.external))
			}
		})
	}
	// The edge of each range is accepted: run 0 takes names before its
	// first, the last run names after everything.
	w, err := s.NewWriter(ctx, "edit")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	last := len(runs) - 1
	edits := []RunEdit{{Run: 0, Entries: append([]TreeEntry{entry("0")}, run(0)...)}, {Run: last, Entries: append(run(last), entry("zzz"))}}
	next := append(append([]TreeEntry{entry("0")}, wide...), entry("zzz"))
	if id, err := w.PutTreeSplice(dir, edits); err != nil || id != must(putID(t, next)) {
		t.Fatalf("edits at both ends: %s, %v", id.Short(), err)
	}
	// No edits: prev itself.
	if id, err := w.PutTreeSplice(dir, nil); err != nil || id != dir {
		t.Fatalf("no edits: %s, %v; want prev %s", id.Short(), err, dir.Short())
	}
}

func must(id ID, _ Kind) ID { return id }

// TestTreeRuns: TreeRuns names the runs of a run index, and nothing for a
// tree or a tree index (kind 5); a missing directory is ErrNotFound, a
// commit is not a directory, and a run index that does not decode is
// ErrCorrupt.
func TestTreeRuns(t *testing.T) {
	ctx := context.Background()
	wide := wideEntries(6000)
	s, dir := spliceStore(t, wide)
	et, err := encodeDirectory(&Tree{Entries: wide})
	if err != nil {
		t.Fatal(err)
	}
	var small, old, bad ID
	var commit ID
	if err := s.Update(ctx, func(tx *Tx) (err error) {
		if small, err = tx.PutTree(&Tree{Entries: wide[:10]}); err != nil {
			return err
		}
		old = putTreeIndex(t, tx, wide)
		if bad, err = tx.Put(KindRunIndex, []byte{1, 1}); err != nil {
			return err
		}
		commit, err = tx.PutCommit(&Commit{Tree: dir, Message: "m", TimeNs: 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.View(ctx, func(tx *Tx) error {
		if runs, ok, err := tx.TreeRuns(dir); err != nil || !ok || !reflect.DeepEqual(runs, et.info) {
			t.Errorf("run index: %v %v %v", runs, ok, err)
		}
		for name, id := range map[string]ID{"tree": small, "tree index": old} {
			if runs, ok, err := tx.TreeRuns(id); err != nil || ok || runs != nil {
				t.Errorf("%s: %v %v %v", name, runs, ok, err)
			}
		}
		for name, c := range map[string]struct {
			id   ID
			want error
		}{"missing": {ID{1}, ErrNotFound}, "commit": {commit, ErrNotFound}, "undecodable": {bad, ErrCorrupt}} {
			if _, ok, err := tx.TreeRuns(c.id); ok || !errors.Is(err, c.want) {
				t.Errorf("%s: %v %v, want %v", name, ok, err, c.want)
			}
		}
		// Each run read back passes Check.
		runs, _, _ := tx.TreeRuns(dir)
		for _, r := range runs {
			rt, err := tx.Tree(r.Tree)
			if err != nil || r.Check(rt) != nil {
				t.Errorf("run %s: %v, %v", r.Tree.Short(), err, r.Check(rt))
			}
		}
		return nil
	})
}

// TestTreeRunCheck: Check refuses a tree that is not the run its index
// describes: another entry count, first name or size.
func TestTreeRunCheck(t *testing.T) {
	es := wideEntries(40)
	_, run, err := encodeRun(es)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Check(&Tree{Entries: es}); err != nil {
		t.Fatalf("the run itself: %v", err)
	}
	longer := slices.Clone(es)
	longer[7].Size = 1 << 40
	renamed := slices.Clone(es)
	renamed[0].Name = "file-"
	for name, tr := range map[string][]TreeEntry{
		"an entry fewer": es[1:],
		"an entry more":  append(slices.Clone(es), TreeEntry{Name: "zz", Type: TypeFile}),
		"empty":          nil,
		"first renamed":  renamed,
		"an entry grown": longer,
	} {
		if err := run.Check(&Tree{Entries: tr}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// rawRunIndex encodes a run index with any total, for decode tests.
func rawRunIndex(total uint64, runs []TreeRun) []byte {
	p := encodeRunIndex(runs)
	var sum uint64
	for _, r := range runs {
		sum += uint64(r.Entries)
	}
	return append(appendUvarint(nil, total), p[uvarintLen(sum):]...)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// TestDecodeRunIndex: what encodeDirectory does not produce for a split
// directory is refused.
func TestDecodeRunIndex(t *testing.T) {
	a, b := ID{1}, ID{2}
	goodRuns := []TreeRun{{"a", 500, 40000, a}, {"b", 600, 40000, b}}
	good := encodeRunIndex(goodRuns)
	if runs, total, err := decodeRunIndex(good); err != nil || total != 1100 || !reflect.DeepEqual(runs, goodRuns) {
		t.Fatalf("good index: %v %d %v", runs, total, err)
	}
	with := func(change func(r []TreeRun)) []byte {
		r := slices.Clone(goodRuns)
		change(r)
		return encodeRunIndex(r)
	}
	for name, p := range map[string][]byte{
		"one run":            encodeRunIndex([]TreeRun{{"a", 500, 80000, a}}),
		"empty run":          with(func(r []TreeRun) { r[0].Entries = 0 }),
		"zero id":            with(func(r []TreeRun) { r[1].Tree = ZeroID }),
		"firsts decreasing":  with(func(r []TreeRun) { r[0].First, r[1].First = "b", "a" }),
		"firsts equal":       with(func(r []TreeRun) { r[1].First = "a" }),
		"empty first":        with(func(r []TreeRun) { r[0].First = "" }),
		"first with a slash": with(func(r []TreeRun) { r[1].First = "b/c" }),
		"first dot-dot":      with(func(r []TreeRun) { r[0].First = ".." }),
		"size under entries": with(func(r []TreeRun) { r[1].Size = 600*44 - 1 }),
		"size over a tree":   with(func(r []TreeRun) { r[1].Size = maxObjectSize }),
		"one tree's worth":   with(func(r []TreeRun) { r[0].Size, r[1].Size = 30000, treeSplitMin-2-30000 }),
		"truncated":          good[:len(good)-1],
		"trailing bytes":     append(slices.Clone(good), 0),
		"total too big":      rawRunIndex(1101, goodRuns),
		"total too small":    rawRunIndex(1099, goodRuns),
		"huge count":         {7, 0xff, 0xff, 0xff, 0x7f},
		"overlong total":     append([]byte{0xcc, 0x88, 0x00}, good[2:]...),
		"first past the end": {2, 2, 0x7f, 'a'},
		"no runs":            {0, 0},
	} {
		if _, _, err := decodeRunIndex(p); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// The smallest split directory decodes: one byte over treeSplitMin.
	edge := with(func(r []TreeRun) { r[0].Size, r[1].Size = 30000, treeSplitMin+1-uvarintLen(1100)-30000 })
	if _, _, err := decodeRunIndex(edge); err != nil {
		t.Errorf("a directory of treeSplitMin+1 bytes: %v", err)
	}
}

// TestPutTreeSpliceSplitEdge: an edit that leaves the directory exactly
// treeSplitMin bytes stores one tree; one byte more, a run index — the
// index's sizes decide, as the whole directory's size decides PutTree.
func TestPutTreeSpliceSplitEdge(t *testing.T) {
	wide := wideEntries(6000)
	s, dir := spliceStore(t, wide)
	runs, _ := treeRuns(t, s, dir)
	for _, c := range []struct {
		size int
		kind Kind
	}{{treeSplitMin, KindTree}, {treeSplitMin + 1, KindRunIndex}} {
		// The first entries, the last of them padded to the size.
		k := 0
		for treeSize(wide[:k+1]) < c.size-300 {
			k++
		}
		next := slices.Clone(wide[:k])
		last := &next[k-1]
		for n := 0; treeSize(next) != c.size; n++ {
			last.Target = strings.Repeat("p", n)
			if treeSize(next) > c.size {
				t.Fatalf("cannot pad to %d bytes", c.size)
			}
		}
		var edits []RunEdit
		for i := runOf(runs, last.Name); i < len(runs); i++ {
			edits = append(edits, RunEdit{Run: i, Entries: slices.Clone(inRange(next, runs, i))})
		}
		want, kind := putID(t, next)
		if kind != c.kind {
			t.Fatalf("setup: %d bytes is a %v for PutTree, want a %v", c.size, kind, c.kind)
		}
		w, err := s.NewWriter(context.Background(), "edit")
		if err != nil {
			t.Fatal(err)
		}
		if id, err := w.PutTreeSplice(dir, edits); err != nil || id != want {
			t.Errorf("%d bytes: PutTreeSplice = %s, %v; want %s, a %v", c.size, id.Short(), err, want.Short(), c.kind)
		}
		w.Abort()
	}
}

// BenchmarkWideDirEdit: the store's part of a one-entry edit of a
// 4,000-entry directory (the bench's wide directory: names f00000…, each
// file's content stored), read and written back the two ways an editor
// can: the whole directory (Tx.Tree, then PutTreeLike) or the run holding
// the entry (Tx.TreeRuns and Tx.Tree of that run, then PutTreeSplice).
// The Writer is aborted, not finished: the durable transaction is the
// same for both.
func BenchmarkWideDirEdit(b *testing.B) {
	ctx := context.Background()
	s := newStore(b)
	w, err := s.NewWriter(ctx, "wide")
	if err != nil {
		b.Fatal(err)
	}
	var es []TreeEntry
	for i := range 4000 {
		name := fmt.Sprintf("f%05d", i)
		c := fmt.Sprintf("wide/%s: line %d\n", name, i)
		id, err := w.WriteBytes([]byte(c))
		if err != nil {
			b.Fatal(err)
		}
		es = append(es, TreeEntry{Name: name, Type: TypeFile, Mode: 0o644, Size: int64(len(c)), MtimeNs: 1, Content: id})
	}
	dir, err := w.PutTree(&Tree{Entries: es})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Finish(nil); err != nil {
		b.Fatal(err)
	}
	edit := func(e *TreeEntry, i int) { e.MtimeNs = int64(i) + 2 }
	b.Run("whole", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var t *Tree
			if err := s.View(ctx, func(tx *Tx) (err error) { t, err = tx.Tree(dir); return err }); err != nil {
				b.Fatal(err)
			}
			edit(&t.Entries[2000], i)
			w, _ := s.NewWriter(ctx, "edit")
			if _, err := w.PutTreeLike(t, dir); err != nil {
				b.Fatal(err)
			}
			w.Abort()
		}
	})
	b.Run("splice", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var run []TreeEntry
			var r int
			err := s.View(ctx, func(tx *Tx) error {
				runs, _, err := tx.TreeRuns(dir)
				if err != nil {
					return err
				}
				r = runOf(runs, "f02000")
				t, err := tx.Tree(runs[r].Tree)
				if err == nil {
					err = runs[r].Check(t)
				}
				run = t.Entries
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			k, _ := slices.BinarySearchFunc(run, "f02000", func(e TreeEntry, n string) int { return strings.Compare(e.Name, n) })
			edit(&run[k], i)
			w, _ := s.NewWriter(ctx, "edit")
			if _, err := w.PutTreeSplice(dir, []RunEdit{{Run: r, Entries: run}}); err != nil {
				b.Fatal(err)
			}
			w.Abort()
		}
	})
}
