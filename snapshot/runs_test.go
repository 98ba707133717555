package snapshot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/store"
)

// runsBase stores a root holding "wide", a directory large enough to be
// a run index: n files with names of varied length (some "f%05d", some
// random), two subdirectories with files, symlinks and a hardlink pair. It
// returns the root, its stats and the wide directory's file names.
func runsBase(t *testing.T, s *store.Store, rng *rand.Rand, n int) (store.ID, store.CommitStats, []string) {
	t.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "runs base")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	var st store.CommitStats
	file := func(name, content string, group string) store.TreeEntry {
		st.Files++
		st.Bytes += int64(len(content))
		id, err := w.WriteBytes([]byte(content))
		if err != nil {
			t.Fatal(err)
		}
		return store.TreeEntry{Name: name, Type: store.TypeFile, Mode: 0o644, MtimeNs: 1, Size: int64(len(content)), Content: id, LinkGroup: group}
	}
	put := func(es []store.TreeEntry) store.ID {
		slices.SortFunc(es, func(a, b store.TreeEntry) int { return strings.Compare(a.Name, b.Name) })
		id, err := w.PutTree(&store.Tree{Entries: es})
		if err != nil {
			t.Fatal(err)
		}
		st.Dirs++
		return id
	}
	names := map[string]bool{}
	var wide []store.TreeEntry
	var files []string
	for len(files) < n {
		name := fmt.Sprintf("f%05d", len(files))
		if len(files)%3 == 0 {
			name = randName(rng)
		}
		if names[name] {
			continue
		}
		names[name] = true
		files = append(files, name)
		wide = append(wide, file(name, "wide/"+name+"\n", ""))
	}
	for _, d := range []string{"sub1", "m-sub2"} {
		var es []store.TreeEntry
		for i := range 3 {
			es = append(es, file(fmt.Sprintf("x%d", i), d+fmt.Sprint(i), ""))
		}
		wide = append(wide, store.TreeEntry{Name: d, Type: store.TypeDir, Mode: 0o755, MtimeNs: 1, Content: put(es)})
	}
	wide = append(wide,
		store.TreeEntry{Name: "link-a", Type: store.TypeSymlink, Mode: 0o777, MtimeNs: 1, Size: 6, Target: "f00001"},
		file("h1", "linked\n", "wide/h1"), file("h2", "linked\n", "wide/h1"))
	root := []store.TreeEntry{
		file("README", "top\n", ""),
		{Name: "wide", Type: store.TypeDir, Mode: 0o755, MtimeNs: 1, Content: put(wide)},
	}
	id := put(root)
	if err := w.Finish(func(tx *store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	st.Dirs--  // the root is not counted
	st.Other++ // link-a
	return id, st, files
}

func randName(rng *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789-._"
	b := make([]byte, 1+rng.IntN(14))
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	if b[0] == '.' {
		b[0] = 'q'
	}
	return string(b)
}

// TestApplyUpperRuns checks that a commit loading a large directory run by
// run makes, id for id and count for count, the tree that loading it
// whole makes — over random edits that modify, add and remove names at
// run boundaries, empty runs, split them, edit inside subdirectories,
// remove or add directories and break a hardlink group — and that it
// loads only the runs it needs.
func TestApplyUpperRuns(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(14, 7))
	base, baseStats, files := runsBase(t, s, rng, 3000)
	var sawRuns bool
	var firsts, lasts []string // each run's first and last name
	err = s.View(ctx, func(tx *store.Tx) error {
		r, err := tx.Tree(base)
		if err != nil {
			return err
		}
		var runs []store.TreeRun
		runs, sawRuns, err = tx.TreeRuns(r.Entries[1].Content)
		for _, run := range runs {
			t, err := tx.Tree(run.Tree)
			if err != nil {
				return err
			}
			firsts = append(firsts, t.Entries[0].Name)
			lasts = append(lasts, t.Entries[len(t.Entries)-1].Name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawRuns {
		t.Fatal("the wide directory is not stored as a run index")
	}

	apply := func(changes []UpperChange, cfg applyConfig, count bool) (*ApplyResult, *store.Writer) {
		t.Helper()
		w, err := s.NewWriter(ctx, "runs test")
		if err != nil {
			t.Fatal(err)
		}
		w.Optimistic()
		st := baseStats
		opts := ApplyOptions{BaseStats: &st}
		if count {
			opts.BaseStats = nil // counted from the tree: every run read
		}
		res, err := applyUpper(ctx, storeReader{s}, w, s, base, changes, opts, cfg)
		if err != nil {
			w.Abort()
			t.Fatal(err)
		}
		return res, w
	}

	isFile := map[string]bool{}
	for _, f := range files {
		isFile[f] = true
	}
	// edge returns a file name at a run's edge (first or last), "" when
	// the run chosen has none there.
	edge := func(last bool) string {
		i := rng.IntN(len(firsts))
		n := firsts[i]
		if last {
			n = lasts[i]
		}
		if !isFile[n] {
			return ""
		}
		return n
	}
	for round := range 80 {
		upper := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(upper, "wide"), 0o755))
		used := map[string]bool{}
		var cs []UpperChange
		add := func(p string, k UpperKind, content *string, dir bool) {
			used[p] = true
			full := filepath.Join(upper, p)
			switch {
			case dir:
				must(t, os.MkdirAll(full, 0o755))
			case content != nil:
				must(t, os.MkdirAll(filepath.Dir(full), 0o755))
				must(t, os.WriteFile(full, []byte(*content), 0o644))
			}
			cs = append(cs, UpperChange{Path: p, Kind: k, UpperPath: full})
		}
		pick := func() string {
			for {
				p := "wide/" + files[rng.IntN(len(files))]
				if !used[p] {
					return p
				}
			}
		}
		text := func(i int) *string { s := fmt.Sprintf("round %d edit %d\n", round, i); return &s }
		ops := 1 + rng.IntN(4)
		if round == 0 {
			ops = 1 // one modified file: the case the runs are for
		}
		for i := range ops {
			op := rng.IntN(13)
			if round == 0 {
				op = 0
			}
			switch op {
			case 0: // modify
				add(pick(), UpperModified, text(i), false)
			case 1: // add a name anywhere, before the first or after the last
				name := randName(rng)
				if i%2 == 0 {
					name = []string{"0", "~z", "f00000a", "zzzz"}[rng.IntN(4)] + name
				}
				if p := "wide/" + name; !used[p] && !slices.Contains(files, name) {
					add(p, UpperAdded, text(i), false)
				}
			case 2: // remove one
				add(pick(), UpperDeleted, nil, false)
			case 3: // remove a range of sorted names: empties runs
				sorted := slices.Sorted(slices.Values(files))
				from := rng.IntN(len(sorted) - 200)
				for _, n := range sorted[from : from+50+rng.IntN(150)] {
					if p := "wide/" + n; !used[p] {
						add(p, UpperDeleted, nil, false)
					}
				}
			case 4: // add many names with one prefix: splits a run
				prefix := randName(rng)
				for j := range 150 + rng.IntN(200) {
					if p := fmt.Sprintf("wide/%s%04d", prefix, j); !used[p] {
						add(p, UpperAdded, text(j), false)
					}
				}
			case 5: // edit inside a subdirectory of the wide one
				if !used["wide/sub1"] && !used["wide/sub1/x1"] {
					add("wide/sub1/x1", UpperModified, text(i), false)
				}
			case 6: // remove a subdirectory
				if !used["wide/m-sub2"] {
					add("wide/m-sub2", UpperDeleted, nil, false)
				}
			case 7: // a new directory with a file in it
				if d := "wide/" + randName(rng) + "-d"; !used[d] {
					add(d, UpperAdded, nil, true)
					add(d+"/inner", UpperAdded, text(i), false)
				}
			case 8: // break the hardlink pair
				if !used["wide/h1"] {
					add("wide/h1", UpperModified, text(i), false)
				}
			case 9, 10: // modify the first or the last name of a run
				if n := edge(op == 10); n != "" && !used["wide/"+n] {
					add("wide/"+n, UpperModified, text(i), false)
				}
			case 11: // remove a run's last name: its cut moves on
				if n := edge(true); n != "" && !used["wide/"+n] {
					add("wide/"+n, UpperDeleted, nil, false)
				}
			case 12: // add a name just before a run's first: the run before takes it
				n := edge(false)
				if n == "" {
					break
				}
				c := n[len(n)-1] - 1
				if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
					break
				}
				if p := "wide/" + n[:len(n)-1] + string(c) + "~"; !used[p] && !isFile[p[len("wide/"):]] {
					add(p, UpperAdded, text(i), false)
				}
			}
		}
		var trees, runs int
		count := round%4 == 3
		got, wr := apply(cs, applyConfig{counted: func(t, r int) { trees, runs = t, r }}, count)
		want, ww := apply(cs, applyConfig{wholeDirs: true}, count)
		ww.Abort()
		if got.Tree != want.Tree || got.Stats != want.Stats || got.Changed != want.Changed {
			wr.Abort()
			t.Fatalf("round %d (%d changes): run by run %s %+v (%d changed), whole %s %+v (%d)", round, len(cs), got.Tree.Short(), got.Stats, got.Changed, want.Tree.Short(), want.Stats, want.Changed)
		}
		if round == 0 && (runs != 1 || trees > 3) {
			t.Errorf("one modified file: %d trees read, %d runs loaded; want the root, the run (and the file's nothing else)", trees, runs)
		}
		if runs == 0 && len(cs) > 0 {
			t.Errorf("round %d: no run loaded: the wide directory was not loaded run by run", round)
		}
		if err := wr.Finish(func(tx *store.Tx) error { return nil }); err != nil {
			t.Fatalf("round %d: finish: %v", round, err)
		}
		// What was stored reads back as the whole-directory edit's tree.
		err := s.View(ctx, func(tx *store.Tx) error {
			_, err := tx.Tree(got.Tree)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Fsck(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck: %+v", rep.Problems)
	}
}
