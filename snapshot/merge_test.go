package snapshot_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

const mT0 = int64(1_600_000_000_000_000_000)

// listing is a directory listing for Build with every entry's mtime fixed
// (mT0 unless given) and every missing parent directory added, so that
// two listings with the same entries import to the same tree id.
type listing map[string]snapshottest.Entry

func newListing(es ...snapshottest.Entry) listing {
	l := listing{}
	l.put(es...)
	return l
}

func (l listing) put(es ...snapshottest.Entry) listing {
	for _, e := range es {
		if e.MtimeNs == 0 && e.Kind != snapshottest.Hardlink {
			e.MtimeNs = mT0
		}
		l[e.Path] = e
		for d := filepath.Dir(e.Path); d != "."; d = filepath.Dir(d) {
			if _, ok := l[d]; !ok {
				l[d] = snapshottest.Entry{Path: d, Kind: snapshottest.Dir, MtimeNs: mT0}
			}
		}
	}
	return l
}

func (l listing) del(ps ...string) listing {
	for _, p := range ps {
		for q := range l {
			if q == p || strings.HasPrefix(q, p+"/") {
				delete(l, q)
			}
		}
	}
	return l
}

func (l listing) clone() listing {
	c := listing{}
	for k, v := range l {
		c[k] = v
	}
	return c
}

// entries returns the listing in an order Build can create: parents
// first, hardlinks after their targets.
func (l listing) entries() []snapshottest.Entry {
	var es, links []snapshottest.Entry
	for _, e := range l {
		if e.Kind == snapshottest.Hardlink {
			links = append(links, e)
		} else {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
	sort.Slice(links, func(i, j int) bool { return links[i].Path < links[j].Path })
	return append(es, links...)
}

func mf(p, data string) snapshottest.Entry {
	return snapshottest.Entry{Path: p, Kind: snapshottest.File, Data: []byte(data)}
}

func md(p string) snapshottest.Entry { return snapshottest.Entry{Path: p, Kind: snapshottest.Dir} }

func withMode(e snapshottest.Entry, mode uint32) snapshottest.Entry { e.Mode = mode; return e }
func withTime(e snapshottest.Entry, ns int64) snapshottest.Entry    { e.MtimeNs = ns; return e }

// importListing builds l in a new directory and imports it.
func importListing(t *testing.T, s *store.Store, l listing) *snapshot.ImportResult {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	snapshottest.Build(t, dir, l.entries())
	_, res := importWithParents(t, s, dir)
	return res
}

func lines(n int, edit map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if s, ok := edit[i]; ok {
			b.WriteString(s)
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

type mergeCase struct {
	name              string
	base              listing
	ours, theirs      func(l listing)
	want              func(l listing) // applied to base; nil when conflicts
	conflicts         []snapshot.Conflict
	oursStatsNotGiven bool
}

func mergeCases() []mergeCase {
	text := lines(30, nil)
	base := func() listing {
		return newListing(
			mf("a", "a\n"), mf("b", "b\n"), mf("text", text),
			mf("bin", "\x00binary\x01"), md("d"), mf("d/x", "x\n"), mf("d/y", "y\n"),
			md("d/sub"), mf("d/sub/z", "z\n"), md("keep"), mf("keep/k", "k\n"),
			snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "a"},
		)
	}
	return []mergeCase{
		{
			name:   "one side each",
			base:   base(),
			ours:   func(l listing) { l.put(mf("a", "ours a\n"), mf("new-ours", "o")).del("b") },
			theirs: func(l listing) { l.put(mf("d/x", "theirs x\n"), mf("d/new", "t")).del("d/sub") },
			want: func(l listing) {
				l.put(mf("a", "ours a\n"), mf("new-ours", "o"), mf("d/x", "theirs x\n"), mf("d/new", "t")).del("b", "d/sub")
			},
		},
		{
			name:   "identical changes",
			base:   base(),
			ours:   func(l listing) { l.put(mf("a", "same\n"), mf("both", "added")).del("d/y") },
			theirs: func(l listing) { l.put(mf("a", "same\n"), mf("both", "added")).del("d/y") },
			want:   func(l listing) { l.put(mf("a", "same\n"), mf("both", "added")).del("d/y") },
		},
		{
			name:   "text merged at distant lines",
			base:   base(),
			ours:   func(l listing) { l.put(withTime(mf("text", lines(30, map[int]string{3: "ours 3\n"})), mT0+10)) },
			theirs: func(l listing) { l.put(withTime(mf("text", lines(30, map[int]string{27: "theirs 27\n"})), mT0+20)) },
			want: func(l listing) {
				l.put(withTime(mf("text", lines(30, map[int]string{3: "ours 3\n", 27: "theirs 27\n"})), mT0+20))
			},
		},
		{
			name:      "text conflict on one line",
			base:      base(),
			ours:      func(l listing) { l.put(mf("text", lines(30, map[int]string{10: "ours\n"}))) },
			theirs:    func(l listing) { l.put(mf("text", lines(30, map[int]string{10: "theirs\n"}))) },
			conflicts: []snapshot.Conflict{{Path: "text", Reason: snapshot.ReasonContent}},
		},
		{
			name:      "binary both modified",
			base:      base(),
			ours:      func(l listing) { l.put(mf("bin", "\x00ours")) },
			theirs:    func(l listing) { l.put(mf("bin", "\x00theirs")) },
			conflicts: []snapshot.Conflict{{Path: "bin", Reason: snapshot.ReasonBinary}},
		},
		{
			name:   "modify/delete and delete/modify",
			base:   base(),
			ours:   func(l listing) { l.put(mf("a", "ours\n")).del("b") },
			theirs: func(l listing) { l.put(mf("b", "theirs\n")).del("a") },
			conflicts: []snapshot.Conflict{
				{Path: "a", Reason: snapshot.ReasonModDel},
				{Path: "b", Reason: snapshot.ReasonDelMod},
			},
		},
		{
			name:   "add/add same",
			base:   base(),
			ours:   func(l listing) { l.put(mf("n/new", "same")) },
			theirs: func(l listing) { l.put(mf("n/new", "same"), mf("n/other", "t")) },
			want:   func(l listing) { l.put(mf("n/new", "same"), mf("n/other", "t")) },
		},
		{
			name:      "add/add different",
			base:      base(),
			ours:      func(l listing) { l.put(mf("new", "ours")) },
			theirs:    func(l listing) { l.put(mf("new", "theirs")) },
			conflicts: []snapshot.Conflict{{Path: "new", Reason: snapshot.ReasonAddAdd}},
		},
		{
			name:      "dir vs file",
			base:      base(),
			ours:      func(l listing) { l.put(mf("x/in", "dir")) },
			theirs:    func(l listing) { l.put(mf("x", "file")) },
			conflicts: []snapshot.Conflict{{Path: "x", Reason: snapshot.ReasonAddAddType}},
		},
		{
			name: "type changed on both sides",
			base: base(),
			ours: func(l listing) { l.del("a").put(mf("a/in", "dir")) },
			theirs: func(l listing) {
				l.del("a").put(snapshottest.Entry{Path: "a", Kind: snapshottest.Symlink, Target: "b"})
			},
			conflicts: []snapshot.Conflict{{Path: "a", Reason: snapshot.ReasonTypeBoth}},
		},
		{
			name:      "type changed and modified",
			base:      base(),
			ours:      func(l listing) { l.del("d").put(mf("d", "now a file")) },
			theirs:    func(l listing) { l.put(mf("d/x", "changed")) },
			conflicts: []snapshot.Conflict{{Path: "d", Reason: snapshot.ReasonTypeMod}},
		},
		{
			name:      "mode changed differently",
			base:      base(),
			ours:      func(l listing) { l.put(withMode(mf("a", "a\n"), 0o600)) },
			theirs:    func(l listing) { l.put(withMode(mf("a", "a\n"), 0o700)) },
			conflicts: []snapshot.Conflict{{Path: "a", Reason: snapshot.ReasonMode}},
		},
		{
			name:   "mode on one side, content on the other, mtime newer",
			base:   base(),
			ours:   func(l listing) { l.put(withTime(withMode(mf("a", "a\n"), 0o600), mT0+5)) },
			theirs: func(l listing) { l.put(withTime(mf("a", "theirs a\n"), mT0+9)) },
			want:   func(l listing) { l.put(withTime(withMode(mf("a", "theirs a\n"), 0o600), mT0+9)) },
		},
		{
			name:      "symlink retargeted differently",
			base:      base(),
			ours:      func(l listing) { l.put(snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "b"}) },
			theirs:    func(l listing) { l.put(snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "d"}) },
			conflicts: []snapshot.Conflict{{Path: "link", Reason: snapshot.ReasonSymlink}},
		},
		{
			// The directory ours deleted keeps what theirs added to it.
			name:   "dir deleted, added to on the other side",
			base:   base(),
			ours:   func(l listing) { l.del("d") },
			theirs: func(l listing) { l.put(withTime(md("d"), mT0+1), mf("d/new", "new")) },
			want:   func(l listing) { l.del("d").put(withTime(md("d"), mT0+1), mf("d/new", "new")) },
		},
		{
			name:      "dir deleted, changed inside on the other side",
			base:      base(),
			ours:      func(l listing) { l.put(mf("d/sub/z", "changed")) },
			theirs:    func(l listing) { l.del("d") },
			conflicts: []snapshot.Conflict{{Path: "d/sub/z", Reason: snapshot.ReasonModDel}},
		},
		{
			name:   "both changed a dir's children",
			base:   base(),
			ours:   func(l listing) { l.put(withTime(md("d"), mT0+3), mf("d/x", "ours x")) },
			theirs: func(l listing) { l.put(withTime(md("d"), mT0+4), mf("d/sub/z", "theirs z")).del("d/y") },
			want: func(l listing) {
				l.put(withTime(md("d"), mT0+4), mf("d/x", "ours x"), mf("d/sub/z", "theirs z")).del("d/y")
			},
		},
		{
			name:   "ours unchanged",
			base:   base(),
			ours:   func(l listing) {},
			theirs: func(l listing) { l.put(mf("keep/k", "theirs")) },
			want:   func(l listing) { l.put(mf("keep/k", "theirs")) },
		},
		{
			name:              "theirs unchanged, ours stats not given",
			base:              base(),
			ours:              func(l listing) { l.put(mf("keep/k", "ours")) },
			theirs:            func(l listing) {},
			want:              func(l listing) { l.put(mf("keep/k", "ours")) },
			oursStatsNotGiven: true,
		},
		{
			// Ours broke a link (a copy-up rewrote one member); theirs
			// linked a new name to the old inode. The merged group
			// would have the new name alone: it is a plain file.
			name: "hardlink group conservative",
			base: newListing(mf("a", "shared"), snapshottest.Entry{Path: "b", Kind: snapshottest.Hardlink, Target: "a"}, mf("z", "z")),
			ours: func(l listing) {
				l.put(mf("a", "ours"), mf("b", "shared"))
			},
			theirs: func(l listing) {
				l.put(snapshottest.Entry{Path: "c", Kind: snapshottest.Hardlink, Target: "a"})
			},
			want: func(l listing) {
				l.put(mf("a", "ours"), mf("b", "shared"), mf("c", "shared"))
			},
		},
		{
			name: "hardlink group re-keyed",
			base: newListing(mf("a", "shared"), snapshottest.Entry{Path: "b", Kind: snapshottest.Hardlink, Target: "a"},
				snapshottest.Entry{Path: "c", Kind: snapshottest.Hardlink, Target: "a"}, mf("z", "z")),
			ours: func(l listing) { l.put(mf("z", "ours z")) },
			theirs: func(l listing) {
				l.del("a").put(mf("b", "shared"), snapshottest.Entry{Path: "c", Kind: snapshottest.Hardlink, Target: "b"})
			},
			want: func(l listing) {
				l.del("a").put(mf("z", "ours z"), mf("b", "shared"), snapshottest.Entry{Path: "c", Kind: snapshottest.Hardlink, Target: "b"})
			},
		},
	}
}

func TestMerge(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	for _, c := range mergeCases() {
		t.Run(c.name, func(t *testing.T) {
			ours, theirs := c.base.clone(), c.base.clone()
			c.ours(ours)
			c.theirs(theirs)
			b := importListing(t, s, c.base)
			o := importListing(t, s, ours)
			th := importListing(t, s, theirs)
			w, err := s.NewWriter(ctx, "merge")
			must(t, err)
			defer w.Abort()
			opts := snapshot.MergeOptions{OursStats: &o.Stats}
			if c.oursStatsNotGiven {
				opts.OursStats = nil
			}
			before := w.Stats()
			res, err := snapshot.MergeWith(ctx, s, w, b.Tree, o.Tree, th.Tree, opts)
			must(t, err)
			if c.want == nil {
				if !reflect.DeepEqual(res.Conflicts, c.conflicts) {
					t.Errorf("conflicts %q, want %q", res.Conflicts, c.conflicts)
				}
				if !res.Tree.IsZero() {
					t.Errorf("tree %s with conflicts", res.Tree.Short())
				}
				if st := w.Stats(); st.NewObjects != before.NewObjects || st.ContentBytes != before.ContentBytes {
					t.Errorf("wrote %d objects with conflicts", st.NewObjects-before.NewObjects)
				}
				return
			}
			if len(res.Conflicts) > 0 {
				t.Fatalf("conflicts %q", res.Conflicts)
			}
			want := c.base.clone()
			c.want(want)
			wr := importListing(t, s, want)
			if res.Tree != wr.Tree {
				t.Errorf("merged tree %s, want %s", res.Tree.Short(), wr.Tree.Short())
				got, _ := snapshot.Diff(ctx, s, wr.Tree, res.Tree)
				for _, ch := range got {
					t.Errorf("  %s %q: want %+v\n    got %+v", ch.Op, ch.Path, ch.Old, ch.New)
				}
			}
			if res.Stats != wr.Stats {
				t.Errorf("stats %+v, want %+v", res.Stats, wr.Stats)
			}
			// The merged tree is complete in the store once committed.
			must(t, w.Finish(func(tx *store.Tx) error {
				_, err := tx.PutCommit(&store.Commit{Tree: res.Tree, Parents: nil, Stats: res.Stats})
				return err
			}))
			out := filepath.Join(t.TempDir(), "out")
			must(t, snapshot.Materialize(ctx, s, res.Tree, out, snapshot.MaterializeOptions{}))
		})
	}
}

// TestMergeEmptyBase: two trees merged over the empty tree (ZeroID) are
// a union, add/add rules applying.
func TestMergeEmptyBase(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	o := importListing(t, s, newListing(mf("a", "a"), mf("d/x", "x")))
	th := importListing(t, s, newListing(mf("b", "b"), mf("d/x", "x"), mf("d/y", "y")))
	want := importListing(t, s, newListing(mf("a", "a"), mf("b", "b"), mf("d/x", "x"), mf("d/y", "y")))
	w, err := s.NewWriter(ctx, "merge")
	must(t, err)
	defer w.Abort()
	res, err := snapshot.Merge(ctx, s, w, store.ZeroID, o.Tree, th.Tree)
	must(t, err)
	if res.Tree != want.Tree || len(res.Conflicts) > 0 || res.Stats != want.Stats {
		t.Errorf("got %s %q %+v, want %s %+v", res.Tree.Short(), res.Conflicts, res.Stats, want.Tree.Short(), want.Stats)
	}
}
