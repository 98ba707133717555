package snapshot

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// RetainAll lets the in-memory writer retain trees too, as the store's
// Writer does.
func (w *memWriter) RetainAll(ids []store.ID) ([]bool, error) {
	ok := make([]bool, len(ids))
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	for i, id := range ids {
		_, blob := w.m.blobs[id]
		_, tree := w.m.trees[id]
		ok[i] = id.IsZero() || blob || tree
	}
	return ok, nil
}

// countingReader counts the trees read from a memStore.
type countingReader struct {
	*memStore
	trees atomic.Int64
}

type countingTG struct{ c *countingReader }

func (g countingTG) Tree(id store.ID) (*store.Tree, error) {
	g.c.trees.Add(1)
	return g.c.memStore.Tree(id)
}

func (c *countingReader) view(ctx context.Context, fn func(tg treeGetter) error) error {
	return fn(countingTG{c})
}

const tA = int64(1_600_000_000_000_000_000) // mtime of every base entry
const tB = int64(1_700_000_000_000_000_000) // mtime of every upper entry

// fixed gives every entry without one the mtime mt.
func fixed(mt int64, es ...snapshottest.Entry) []snapshottest.Entry {
	out := make([]snapshottest.Entry, len(es))
	for i, e := range es {
		if e.MtimeNs == 0 && e.Kind != snapshottest.Hardlink {
			e.MtimeNs = mt
		}
		out[i] = e
	}
	return out
}

func fileE(p, data string) snapshottest.Entry {
	return snapshottest.Entry{Path: p, Kind: snapshottest.File, Data: []byte(data)}
}

func dirE(p string) snapshottest.Entry { return snapshottest.Entry{Path: p, Kind: snapshottest.Dir} }

// upperCase is a hand-made workspace delta: the base tree, the upper
// directory (entries, whiteouts, opaque markers), the change list as
// overlayfs.Changes would report it, and the tree the merged view is.
type upperCase struct {
	name      string
	base      []snapshottest.Entry
	upper     []snapshottest.Entry
	whiteouts []string
	opaque    []string
	changes   []UpperChange
	want      []snapshottest.Entry
	warn      []string // paths that must get a warning
}

func ch(p string, k UpperKind) UpperChange { return UpperChange{Path: p, Kind: k} }

func upperCases() []upperCase {
	base := func() []snapshottest.Entry {
		return fixed(tA,
			dirE("dir"), fileE("dir/a", "a"), fileE("dir/b", "b"), dirE("dir/sub"), fileE("dir/sub/c", "c"),
			fileE("file", "hello\n"), snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "file"},
			dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x"),
			dirE("empty"),
		)
	}
	redirected := func(es ...snapshottest.Entry) snapshottest.Entry {
		e := dirE("dir2")
		e.MtimeNs = tB
		return e
	}
	return []upperCase{
		{
			name:      "add modify delete",
			base:      base(),
			upper:     fixed(tB, fileE("new", "new"), fileE("file", "changed\n"), dirE("dir"), dirE("empty"), fileE("empty/n", "n")),
			whiteouts: []string{"dir/a"},
			changes: []UpperChange{ch(".", UpperModified), ch("dir", UpperModified), ch("dir/a", UpperDeleted),
				ch("empty", UpperModified), ch("empty/n", UpperAdded), ch("file", UpperModified), ch("new", UpperAdded)},
			want: append(fixed(tA,
				fileE("dir/b", "b"), dirE("dir/sub"), fileE("dir/sub/c", "c"),
				snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "file"},
				dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x")),
				fixed(tB, dirE("dir"), fileE("file", "changed\n"), fileE("new", "new"), dirE("empty"), fileE("empty/n", "n"))...),
		},
		{
			name:      "delete a tree",
			base:      base(),
			whiteouts: []string{"dir"},
			changes:   []UpperChange{ch("dir", UpperDeleted)},
			want: fixed(tA, fileE("file", "hello\n"), snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "file"},
				dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x"), dirE("empty")),
		},
		{
			name:    "opaque dir",
			base:    base(),
			upper:   fixed(tB, dirE("dir"), fileE("dir/new", "n")),
			opaque:  []string{"dir"},
			changes: []UpperChange{{Path: "dir", Kind: UpperReplaced, Opaque: true}, ch("dir/new", UpperAdded)},
			want: append(fixed(tA, fileE("file", "hello\n"), snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "file"},
				dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x"), dirE("empty")),
				fixed(tB, dirE("dir"), fileE("dir/new", "n"))...),
		},
		{
			name:    "dir metadata keeps children",
			base:    base(),
			upper:   fixed(tB, snapshottest.Entry{Path: "dir", Kind: snapshottest.Dir, Mode: 0o700}),
			changes: []UpperChange{ch("dir", UpperModified)},
			want: append(fixed(tA, fileE("dir/a", "a"), fileE("dir/b", "b"), dirE("dir/sub"), fileE("dir/sub/c", "c"),
				fileE("file", "hello\n"), snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "file"},
				dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x"), dirE("empty")),
				fixed(tB, snapshottest.Entry{Path: "dir", Kind: snapshottest.Dir, Mode: 0o700})...),
		},
		{
			name: "type changes",
			base: base(),
			upper: fixed(tB, dirE("file"), fileE("file/x", "x"), fileE("dir", "now a file"),
				snapshottest.Entry{Path: "empty", Kind: snapshottest.Symlink, Target: "/etc/passwd"},
				snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "dir"}),
			opaque: []string{"file"},
			changes: []UpperChange{ch("dir", UpperReplaced), ch("empty", UpperReplaced),
				{Path: "file", Kind: UpperReplaced, Opaque: true}, ch("file/x", UpperAdded), ch("link", UpperModified)},
			want: append(fixed(tA, dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x")),
				fixed(tB, dirE("file"), fileE("file/x", "x"), fileE("dir", "now a file"),
					snapshottest.Entry{Path: "empty", Kind: snapshottest.Symlink, Target: "/etc/passwd"},
					snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "dir"})...),
		},
		{
			// Root with redirect_dir=on: "dir" renamed to "dir2", then
			// changed inside. dir2's entries come from the base's "dir".
			name:      "redirect",
			base:      base(),
			upper:     fixed(tB, redirected(), fileE("dir2/new", "n"), dirE("dir2/sub")),
			whiteouts: []string{"dir", "dir2/b"},
			changes: []UpperChange{ch("dir", UpperDeleted), {Path: "dir2", Kind: UpperAdded, RedirectFrom: "dir"},
				ch("dir2/b", UpperDeleted), ch("dir2/new", UpperAdded), ch("dir2/sub", UpperModified)},
			want: append(fixed(tA, fileE("dir2/a", "a"), fileE("dir2/sub/c", "c"),
				fileE("file", "hello\n"), snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "file"},
				dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x"), dirE("empty")),
				fixed(tB, dirE("dir2"), fileE("dir2/new", "n"), dirE("dir2/sub"))...),
		},
		{
			// A copy-up breaks the link: the others stay linked, re-keyed
			// when the key was the member that left.
			name: "base hardlink group loses its key member",
			base: fixed(tA, dirE("h"), fileE("h/a", "shared"),
				snapshottest.Entry{Path: "h/b", Kind: snapshottest.Hardlink, Target: "h/a"},
				snapshottest.Entry{Path: "h/c", Kind: snapshottest.Hardlink, Target: "h/a"},
				fileE("solo", "s"), snapshottest.Entry{Path: "pair", Kind: snapshottest.Hardlink, Target: "solo"}),
			upper:   fixed(tB, fileE("h/a", "changed")),
			changes: []UpperChange{ch("h/a", UpperModified)},
			want: append(fixed(tA, dirE("h"), fileE("h/b", "shared"),
				snapshottest.Entry{Path: "h/c", Kind: snapshottest.Hardlink, Target: "h/b"},
				fileE("solo", "s"), snapshottest.Entry{Path: "pair", Kind: snapshottest.Hardlink, Target: "solo"}),
				fixed(tB, fileE("h/a", "changed"))...),
		},
		{
			name: "base hardlink group left with one member",
			base: fixed(tA, fileE("solo", "s"), snapshottest.Entry{Path: "pair", Kind: snapshottest.Hardlink, Target: "solo"},
				dirE("d"), snapshottest.Entry{Path: "d/third", Kind: snapshottest.Hardlink, Target: "solo"}),
			whiteouts: []string{"solo", "d"},
			changes:   []UpperChange{ch("d", UpperDeleted), ch("solo", UpperDeleted)},
			want:      fixed(tA, fileE("pair", "s")),
		},
		{
			name: "new hardlinks in the upper",
			base: base(),
			upper: fixed(tB, fileE("n1", "linked"), snapshottest.Entry{Path: "n2", Kind: snapshottest.Hardlink, Target: "n1"},
				dirE("dir"), snapshottest.Entry{Path: "dir/n0", Kind: snapshottest.Hardlink, Target: "n1"}),
			changes: []UpperChange{ch("dir", UpperModified), ch("dir/n0", UpperAdded), ch("n1", UpperAdded), ch("n2", UpperAdded)},
			want: append(fixed(tA, fileE("dir/a", "a"), fileE("dir/b", "b"), dirE("dir/sub"), fileE("dir/sub/c", "c"),
				fileE("file", "hello\n"), snapshottest.Entry{Path: "link", Kind: snapshottest.Symlink, Target: "file"},
				dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x"), dirE("empty")),
				fixed(tB, dirE("dir"), fileE("dir/n0", "linked"), snapshottest.Entry{Path: "n1", Kind: snapshottest.Hardlink, Target: "dir/n0"},
					snapshottest.Entry{Path: "n2", Kind: snapshottest.Hardlink, Target: "dir/n0"})...),
		},
		{
			name: "fifo, socket, xattrs",
			base: base(),
			upper: fixed(tB, snapshottest.Entry{Path: "fifo", Kind: snapshottest.FIFO, Mode: 0o640},
				snapshottest.Entry{Path: "file", Kind: snapshottest.File, Data: []byte("hello\n"), Xattrs: map[string][]byte{
					"user.k": []byte("v"), "user.overlay.origin": []byte("o"), "user.overlay.overlay.esc": []byte("e"),
				}}),
			changes: []UpperChange{ch("fifo", UpperAdded), ch("file", UpperModified), ch("link", UpperReplaced)},
			want: append(fixed(tA, dirE("dir"), fileE("dir/a", "a"), fileE("dir/b", "b"), dirE("dir/sub"), fileE("dir/sub/c", "c"),
				dirE("keep"), dirE("keep/deep"), fileE("keep/deep/x", "x"), dirE("empty")),
				fixed(tB, snapshottest.Entry{Path: "fifo", Kind: snapshottest.FIFO, Mode: 0o640},
					snapshottest.Entry{Path: "file", Kind: snapshottest.File, Data: []byte("hello\n"), Xattrs: map[string][]byte{"user.k": []byte("v")}})...),
			warn: []string{"link", "file"},
		},
	}
}

// buildUpper builds the upper directory of c; "link" in a case that
// lists it as replaced by something unrecordable becomes a socket.
func buildUpper(t *testing.T, dir string, c upperCase) {
	t.Helper()
	snapshottest.Build(t, dir, c.upper)
	for _, p := range c.whiteouts {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		must(t, unix.Mknod(filepath.Join(dir, p), unix.S_IFCHR, 0))
	}
	for _, p := range c.opaque {
		must(t, unix.Setxattr(filepath.Join(dir, p), "user.overlay.opaque", []byte("y"), 0))
	}
	for _, x := range c.changes {
		if x.Path == "link" && x.Kind == UpperReplaced {
			l, err := net.Listen("unix", filepath.Join(dir, "link"))
			must(t, err)
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			must(t, l.Close())
		}
	}
	// Directories' mtimes again: whiteouts and sockets touched them.
	for i := len(c.upper) - 1; i >= 0; i-- {
		e := c.upper[i]
		if e.Kind == snapshottest.Dir {
			ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNs), unix.NsecToTimespec(e.MtimeNs)}
			must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, e.Path), ts, unix.AT_SYMLINK_NOFOLLOW))
		}
	}
}

func withUpper(upper string, cs []UpperChange) []UpperChange {
	out := make([]UpperChange, len(cs))
	for i, c := range cs {
		c.UpperPath = filepath.Join(upper, c.Path)
		out[i] = c
	}
	return out
}

// TestApplyUpperCases applies hand-made deltas and checks that the result
// is, id for id, the tree Import makes of the merged view.
func TestApplyUpperCases(t *testing.T) {
	if !snapshottest.Probe(t.TempDir()).Xattrs {
		testutil.Skip(t, "no user xattrs on the test directory's filesystem")
	}
	for _, c := range upperCases() {
		t.Run(c.name, func(t *testing.T) {
			m := newMemStore()
			tmp := t.TempDir()
			src, upper, want := filepath.Join(tmp, "src"), filepath.Join(tmp, "upper"), filepath.Join(tmp, "want")
			snapshottest.Build(t, src, c.base)
			must(t, os.Chtimes(src, time.Unix(0, tA), time.Unix(0, tA)))
			base, _ := importFake(t, m, src, ImportOptions{}, testCfg())
			must(t, os.Mkdir(upper, 0o755))
			buildUpper(t, upper, c)
			snapshottest.Build(t, want, c.want)
			wantRes, _ := importFake(t, m, want, ImportOptions{}, testCfg())

			var w warnings
			for _, withStats := range []bool{true, false} {
				opts := ApplyOptions{Warn: w.fn}
				if withStats {
					opts.BaseStats = &base.Stats
				}
				res, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, withUpper(upper, c.changes), opts, applyConfig{})
				if err != nil {
					t.Fatal(err)
				}
				if res.Tree != wantRes.Tree {
					got := entries(t, m, res.Tree)
					exp := entries(t, m, wantRes.Tree)
					for p, e := range exp {
						if g, ok := got[p]; !ok {
							t.Errorf("%q missing", p)
						} else if !sameEntry(&g, &e) {
							t.Errorf("%q: got %+v\nwant %+v", p, g, e)
						}
					}
					for p := range got {
						if _, ok := exp[p]; !ok {
							t.Errorf("%q: should not be there", p)
						}
					}
					t.Fatalf("tree %s, want %s", res.Tree.Short(), wantRes.Tree.Short())
				}
				if res.Stats != wantRes.Stats {
					t.Errorf("stats (BaseStats given: %v) %+v, want %+v", withStats, res.Stats, wantRes.Stats)
				}
			}
			for _, p := range c.warn {
				if _, ok := w.get(p); !ok {
					t.Errorf("no warning for %q", p)
				}
			}
			if msg, ok := w.get("file"); ok && strings.Contains(msg, "origin") {
				t.Errorf("warned about a kernel marker: %s", msg)
			}
		})
	}
}

// TestApplyUpperCost: a one-file change deep in a wide tree reads only the
// trees on its path and writes only those, keeping every other subtree's
// id; without BaseStats the whole tree is read to count it.
func TestApplyUpperCost(t *testing.T) {
	mem := newMemStore()
	tmp := t.TempDir()
	src, upper := filepath.Join(tmp, "src"), filepath.Join(tmp, "upper")
	var es []snapshottest.Entry
	for i := 0; i < 20; i++ {
		for j := 0; j < 5; j++ {
			// Distinct content: equal subtrees would be read once.
			es = append(es, fileE(filepath.Join("d"+string(rune('a'+i)), "s"+string(rune('a'+j)), "f"), string(rune('a'+i))+string(rune('a'+j))))
		}
	}
	es = append(es, fileE("da/sa/deep/er/file", "old"))
	snapshottest.Build(t, src, es)
	base, _ := importFake(t, mem, src, ImportOptions{}, testCfg())
	snapshottest.Build(t, upper, []snapshottest.Entry{fileE("da/sa/deep/er/file", "new")})
	changes := withUpper(upper, []UpperChange{ch("da/sa/deep/er/file", UpperModified)})

	r := &countingReader{memStore: mem}
	w := mem.writer()
	res, err := applyUpper(context.Background(), r, w, mem, base.Tree, changes, ApplyOptions{BaseStats: &base.Stats}, applyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.trees.Load(); n != 5 {
		t.Errorf("read %d trees, want 5 (root, da, da/sa, da/sa/deep, da/sa/deep/er)", n)
	}
	if n := w.Stats().NewObjects; n != 6 {
		t.Errorf("wrote %d objects, want 6 (1 content, 5 trees)", n)
	}
	if res.FilesRead != 1 || res.Changed != 1 {
		t.Errorf("FilesRead %d Changed %d, want 1 1", res.FilesRead, res.Changed)
	}
	before, after := entries(t, mem, base.Tree), entries(t, mem, res.Tree)
	for p, e := range before {
		if e.Type == store.TypeDir && !strings.HasPrefix("da/sa/deep/er", p) && after[p].Content != e.Content {
			t.Errorf("%s: subtree id changed", p)
		}
	}
	if res.Stats != base.Stats {
		t.Errorf("stats %+v, want %+v (same counts, same size)", res.Stats, base.Stats)
	}

	r.trees.Store(0)
	res2, err := applyUpper(context.Background(), r, mem.writer(), mem, base.Tree, changes, ApplyOptions{}, applyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.trees.Load(); n != 1+20+100+2 || res2.Stats != res.Stats || res2.Tree != res.Tree {
		t.Errorf("without BaseStats: read %d trees (want 123), stats %+v", n, res2.Stats)
	}
}

// TestApplyUpperStatCache: the second commit of an unchanged upper reads
// nothing; a file whose content equals the base's (ContentEqual) is not
// read; one that differs is.
func TestApplyUpperStatCache(t *testing.T) {
	m := newMemStore()
	tmp := t.TempDir()
	src, upper := filepath.Join(tmp, "src"), filepath.Join(tmp, "upper")
	snapshottest.Build(t, src, []snapshottest.Entry{fileE("same", "same"), fileE("other", "o"), fileE("big", strings.Repeat("x", 100_000))})
	base, _ := importFake(t, m, src, ImportOptions{}, testCfg())
	snapshottest.Build(t, upper, []snapshottest.Entry{
		{Path: "same", Kind: snapshottest.File, Data: []byte("same"), Mode: 0o600},
		fileE("other", "changed"), fileE("new", "n"), fileE("big", strings.Repeat("y", 100_000)),
	})
	var calls atomic.Int64
	eq := func(v bool) func() (bool, error) {
		return func() (bool, error) { calls.Add(1); return v, nil }
	}
	cs := withUpper(upper, []UpperChange{
		{Path: "big", Kind: UpperModified}, {Path: "new", Kind: UpperAdded},
		{Path: "other", Kind: UpperModified, ContentEqual: eq(false)},
		{Path: "same", Kind: UpperModified, ContentEqual: eq(true)},
	})
	later := applyConfig{now: func() int64 { return time.Now().Add(time.Hour).UnixNano() }}
	opts := ApplyOptions{StatCacheRoot: upper, BaseStats: &base.Stats}
	res, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, cs, opts, later)
	if err != nil {
		t.Fatal(err)
	}
	// "same" has the same size as the base: ContentEqual is asked; "other"
	// differs in size: it is read without asking.
	if res.FilesRead != 3 || res.CacheHits != 0 || calls.Load() != 1 {
		t.Errorf("first: read %d, hits %d, ContentEqual calls %d; want 3, 0, 1", res.FilesRead, res.CacheHits, calls.Load())
	}
	got := entries(t, m, res.Tree)
	if b := entries(t, m, base.Tree); got["same"].Content != b["same"].Content || got["same"].Mode != 0o600 {
		t.Errorf("same: %+v", got["same"])
	}
	if len(m.caches[upper]) != 4 {
		t.Errorf("stat cache holds %d entries, want 4", len(m.caches[upper]))
	}
	calls.Store(0)
	res2, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, cs, opts, later)
	if err != nil {
		t.Fatal(err)
	}
	if res2.FilesRead != 0 || res2.CacheHits != 4 || calls.Load() != 0 || res2.Tree != res.Tree {
		t.Errorf("second: read %d, hits %d, ContentEqual calls %d, same tree %v; want 0, 4, 0, true",
			res2.FilesRead, res2.CacheHits, calls.Load(), res2.Tree == res.Tree)
	}
	saves := m.cacheSaves
	if _, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, cs, opts, later); err != nil {
		t.Fatal(err)
	}
	if m.cacheSaves != saves {
		t.Error("unchanged stat cache rewritten")
	}

	// The racy rule: files younger than the margin are not cached.
	m2 := newMemStore()
	base2, _ := importFake(t, m2, src, ImportOptions{}, testCfg())
	if _, err := applyUpper(context.Background(), m2, m2.writer(), m2, base2.Tree, cs, opts, applyConfig{}); err != nil {
		t.Fatal(err)
	}
	if n := len(m2.caches[upper]); n != 0 {
		t.Errorf("racy files cached: %d entries", n)
	}
}

// TestApplyUpperUnseenHardlink: a lower file copied up and linked to is
// not itself reported (its metadata and content equal the lower's), yet it
// now shares an inode with the new name; its base group loses it.
func TestApplyUpperUnseenHardlink(t *testing.T) {
	m := newMemStore()
	tmp := t.TempDir()
	src, upper, want := filepath.Join(tmp, "src"), filepath.Join(tmp, "upper"), filepath.Join(tmp, "want")
	snapshottest.Build(t, src, fixed(tA, fileE("hl1", "hl"), snapshottest.Entry{Path: "hl2", Kind: snapshottest.Hardlink, Target: "hl1"}))
	base, _ := importFake(t, m, src, ImportOptions{}, testCfg())
	snapshottest.Build(t, upper, fixed(tA, fileE("hl1", "hl"), snapshottest.Entry{Path: "x", Kind: snapshottest.Hardlink, Target: "hl1"}))
	snapshottest.Build(t, want, fixed(tA, fileE("hl1", "hl"), snapshottest.Entry{Path: "x", Kind: snapshottest.Hardlink, Target: "hl1"}, fileE("hl2", "hl")))
	wantRes, _ := importFake(t, m, want, ImportOptions{}, testCfg())
	res, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, withUpper(upper, []UpperChange{ch("x", UpperAdded)}), ApplyOptions{BaseStats: &base.Stats}, applyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tree != wantRes.Tree || res.Stats != wantRes.Stats {
		t.Errorf("got %v, want %v: %+v", entries(t, m, res.Tree), entries(t, m, wantRes.Tree), res.Stats)
	}
}

// TestApplyUpperErrors: untrusted names and inconsistent change lists are
// refused; an unreadable file fails naming it.
func TestApplyUpperErrors(t *testing.T) {
	m := newMemStore()
	tmp := t.TempDir()
	src, upper := filepath.Join(tmp, "src"), filepath.Join(tmp, "upper")
	snapshottest.Build(t, src, []snapshottest.Entry{fileE("f", "f"), dirE("d")})
	base, _ := importFake(t, m, src, ImportOptions{}, testCfg())
	snapshottest.Build(t, upper, []snapshottest.Entry{fileE("new", "n"), {Path: "secret", Kind: snapshottest.File, Data: []byte("s"), Mode: 0o000}})
	for _, tc := range []struct {
		name    string
		changes []UpperChange
		want    string
	}{
		{"dotdot", []UpperChange{ch("../x", UpperAdded)}, "invalid name"},
		{"empty element", []UpperChange{ch("a//b", UpperAdded)}, "invalid name"},
		{"absolute", []UpperChange{ch("/etc/passwd", UpperAdded)}, "invalid name"},
		{"nul", []UpperChange{ch("a\x00b", UpperAdded)}, "invalid name"},
		{"redirect dotdot", []UpperChange{{Path: "new", Kind: UpperAdded, RedirectFrom: "../x"}}, "invalid name"},
		{"duplicate", []UpperChange{ch("new", UpperAdded), ch("new", UpperModified)}, "two changes"},
		{"under a file", []UpperChange{ch("f/new", UpperAdded)}, "not a directory"},
		{"missing upper", []UpperChange{ch("gone", UpperAdded)}, "gone"},
		{"redirect to a file", []UpperChange{{Path: "d", Kind: UpperReplaced, RedirectFrom: "f"}}, "not a directory in the base"},
		{"delete root", []UpperChange{ch(".", UpperDeleted)}, "root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := withUpper(upper, tc.changes)
			if tc.name == "redirect to a file" {
				must(t, os.MkdirAll(filepath.Join(upper, "d"), 0o755))
			}
			_, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, cs, ApplyOptions{}, applyConfig{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if os.Geteuid() != 0 {
		must(t, os.Chmod(filepath.Join(upper, "secret"), 0)) // Build takes mode 0 for 0644
		_, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, withUpper(upper, []UpperChange{ch("secret", UpperAdded)}), ApplyOptions{}, applyConfig{})
		if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "secret") {
			t.Errorf("unreadable file: %v", err)
		}
	}
	// A symlink planted in the upper where the tree has a directory is not
	// followed to read what it points to.
	outside := filepath.Join(tmp, "outside")
	snapshottest.Build(t, outside, []snapshottest.Entry{fileE("x", "outside")})
	must(t, os.RemoveAll(filepath.Join(upper, "d")))
	must(t, os.Symlink(outside, filepath.Join(upper, "d")))
	_, err := applyUpper(context.Background(), m, m.writer(), m, base.Tree, withUpper(upper, []UpperChange{ch("d/x", UpperAdded)}), ApplyOptions{}, applyConfig{})
	if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("change under an upper symlink: %v, want ELOOP or ENOTDIR (not followed)", err)
	}
}

// FuzzApplyUpperNames feeds ApplyUpper change paths and redirects that are
// arbitrary bytes (they come from a workspace: untrusted). It never fails
// other than with an error, and on success every entry of the result is a
// clean name and nothing outside the upper directory is read.
func FuzzApplyUpperNames(f *testing.F) {
	for _, s := range [][2]string{
		{"a", ""}, {"a/b", "d"}, {"../etc/passwd", ""}, {"d/../../x", "d"}, {".", "d"},
		{"\xff\xfe\nname", ""}, {"a//b", "/d"}, {"d/x", "../d"}, {"x\x00y", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, redirect string) {
		m := newMemStore()
		tmp := t.TempDir()
		upper := filepath.Join(tmp, "upper")
		must(t, os.MkdirAll(filepath.Join(upper, "d"), 0o755))
		must(t, os.WriteFile(filepath.Join(tmp, "secret"), []byte("outside"), 0o644))
		d := m.putTree(&store.Tree{Entries: []store.TreeEntry{{Name: "x", Type: store.TypeFile, Mode: 0o644, Size: 1, Content: m.putBlob([]byte("x"))}}})
		base := m.putTree(&store.Tree{Entries: []store.TreeEntry{{Name: "d", Type: store.TypeDir, Mode: 0o755, Content: d}}})
		if checkRelPath(p, true) == nil && p != "." {
			full := filepath.Join(upper, p)
			if strings.HasPrefix(full, upper+"/") {
				os.MkdirAll(filepath.Dir(full), 0o755)
				os.WriteFile(full, []byte("in upper"), 0o644)
			}
		}
		cs := []UpperChange{{Path: p, Kind: UpperAdded, RedirectFrom: redirect, UpperPath: upper + "/" + p}}
		res, err := applyUpper(context.Background(), m, m.writer(), m, base, cs, ApplyOptions{}, applyConfig{})
		if err != nil {
			return
		}
		err = walkTree(context.Background(), m, res.Tree, func(q string, e *store.TreeEntry) error {
			if !validName(e.Name) {
				t.Errorf("entry %q has an invalid name", q)
			}
			if e.Type == store.TypeFile && e.Size == int64(len("outside")) {
				var b strings.Builder
				m.ReadContentTo(context.Background(), e.Content, &b)
				if b.String() == "outside" {
					t.Errorf("%q: read from outside the upper directory", q)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
