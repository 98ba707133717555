package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/store"
)

// treeSpec builds trees in a memStore from a compact description:
// "path" is a file with content "path", "path/" a directory, "path@target"
// a symlink; files and dirs get mode 0644/0755 and mtime 1.
func treeSpec(t testing.TB, m *memStore, spec ...string) store.ID {
	t.Helper()
	type dir struct {
		entries map[string]*store.TreeEntry
		subs    map[string]*dir
	}
	root := &dir{entries: map[string]*store.TreeEntry{}, subs: map[string]*dir{}}
	var get func(d *dir, elems []string) *dir
	get = func(d *dir, elems []string) *dir {
		if len(elems) == 0 {
			return d
		}
		s, ok := d.subs[elems[0]]
		if !ok {
			s = &dir{entries: map[string]*store.TreeEntry{}, subs: map[string]*dir{}}
			d.subs[elems[0]] = s
			d.entries[elems[0]] = &store.TreeEntry{Name: elems[0], Type: store.TypeDir, Mode: 0o755, MtimeNs: 1}
		}
		return get(s, elems[1:])
	}
	for _, s := range spec {
		switch {
		case strings.HasSuffix(s, "/"):
			get(root, strings.Split(strings.TrimSuffix(s, "/"), "/"))
		case strings.Contains(s, "@"):
			p, target, _ := strings.Cut(s, "@")
			d, name := splitRel(p)
			var elems []string
			if d != "" {
				elems = strings.Split(d, "/")
			}
			get(root, elems).entries[name] = &store.TreeEntry{Name: name, Type: store.TypeSymlink, Mode: 0o777, MtimeNs: 1, Target: target, Size: int64(len(target))}
		default:
			d, name := splitRel(s)
			var elems []string
			if d != "" {
				elems = strings.Split(d, "/")
			}
			get(root, elems).entries[name] = &store.TreeEntry{Name: name, Type: store.TypeFile, Mode: 0o644, MtimeNs: 1, Size: int64(len(s)), Content: m.putBlob([]byte(s))}
		}
	}
	var put func(d *dir) store.ID
	put = func(d *dir) store.ID {
		var names []string
		for n := range d.entries {
			names = append(names, n)
		}
		slices.Sort(names)
		tr := &store.Tree{}
		for _, n := range names {
			e := *d.entries[n]
			if e.Type == store.TypeDir {
				e.Content = put(d.subs[n])
			}
			tr.Entries = append(tr.Entries, e)
		}
		return m.putTree(tr)
	}
	return put(root)
}

func TestWalk(t *testing.T) {
	m := newMemStore()
	tree := treeSpec(t, m, "b/x", "a-c", "a/y", "a/z/", "c@a")
	walk := func(fn func(p string, e *store.TreeEntry) error) []string {
		var got []string
		err := walkTree(context.Background(), m, tree, func(p string, e *store.TreeEntry) error {
			got = append(got, p)
			return fn(p, e)
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	none := func(string, *store.TreeEntry) error { return nil }
	if got, want := walk(none), []string{"a", "a/y", "a/z", "a-c", "b", "b/x", "c"}; !slices.Equal(got, want) {
		t.Errorf("walk order %q, want %q", got, want)
	}
	skipA := func(p string, e *store.TreeEntry) error {
		if p == "a" {
			return SkipDir
		}
		return nil
	}
	if got, want := walk(skipA), []string{"a", "a-c", "b", "b/x", "c"}; !slices.Equal(got, want) {
		t.Errorf("SkipDir on a dir: %q, want %q", got, want)
	}
	skipFile := func(p string, e *store.TreeEntry) error {
		if p == "a/y" {
			return SkipDir
		}
		return nil
	}
	if got, want := walk(skipFile), []string{"a", "a/y", "a-c", "b", "b/x", "c"}; !slices.Equal(got, want) {
		t.Errorf("SkipDir on a file: %q, want %q", got, want)
	}
	stop := func(p string, e *store.TreeEntry) error {
		if p == "a-c" {
			return SkipAll
		}
		return nil
	}
	if got, want := walk(stop), []string{"a", "a/y", "a/z", "a-c"}; !slices.Equal(got, want) {
		t.Errorf("SkipAll: %q, want %q", got, want)
	}
	boom := errors.New("boom")
	err := walkTree(context.Background(), m, tree, func(p string, e *store.TreeEntry) error { return boom })
	if err != boom {
		t.Errorf("callback error: %v", err)
	}
	if err := walkTree(context.Background(), m, store.ZeroID, func(string, *store.TreeEntry) error { return boom }); err != nil {
		t.Errorf("empty tree: %v", err)
	}
}

func TestLookup(t *testing.T) {
	m := newMemStore()
	tree := treeSpec(t, m, "a/b/c", "l@a/b", "f")
	for _, tc := range []struct {
		path    string
		want    string // name and type, or the error category
		wantErr error
	}{
		{"", " dir", nil},
		{".", " dir", nil},
		{"/", " dir", nil},
		{"a", "a dir", nil},
		{"a/b/c", "c file", nil},
		{"./a//b/", "b dir", nil},
		{"l", "l symlink", nil},
		{"l/c", "", store.ErrNotFound}, // symlinks are not followed
		{"f/x", "", store.ErrNotFound},
		{"a/nope", "", store.ErrNotFound},
		{"a/../f", "", store.ErrInvalidName},
	} {
		e, err := lookup(m, tree, tc.path)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("lookup %q: %v, want %v", tc.path, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("lookup %q: %v", tc.path, err)
			continue
		}
		if got := e.Name + " " + e.Type.String(); got != tc.want {
			t.Errorf("lookup %q = %q, want %q", tc.path, got, tc.want)
		}
	}
	if e, _ := lookup(m, tree, ""); e.Content != tree {
		t.Error("root entry does not carry the tree")
	}
}

func TestDiff(t *testing.T) {
	m := newMemStore()
	base := []string{"keep/a", "keep/deep/b", "mod", "gone/x", "gone/y/z", "f2d", "d2f/in", "l@t"}
	tree := func(extra ...string) store.ID {
		return treeSpec(t, m, extra...)
	}
	baseTree := tree(base...)
	format := func(cs []Change) []string {
		var out []string
		for _, c := range cs {
			s := c.Op.Letter() + " " + c.Path
			if c.Op == Modified && c.Old.Type != c.New.Type {
				s += fmt.Sprintf(" (%v→%v)", c.Old.Type, c.New.Type)
			}
			out = append(out, s)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		a, b store.ID
		want []string
	}{
		{"identical", baseTree, baseTree, nil},
		{"from empty", store.ZeroID, tree("a/b", "c"), []string{"A a", "A a/b", "A c"}},
		{"to empty", tree("a/b"), store.ZeroID, []string{"D a", "D a/b"}},
		{"changes", baseTree, tree(
			"keep/a", "keep/deep/b", // unchanged subtree
			"mod2", "new/n",
			"f2d/inside", // file → dir
			"d2f",        // dir → file
			"l@u",        // new target
		), []string{
			"D d2f/in",
			"M d2f (dir→file)",
			"M f2d (file→dir)",
			"A f2d/inside",
			"D gone", "D gone/x", "D gone/y", "D gone/y/z",
			"M l",
			"D mod",
			"A mod2",
			"A new", "A new/n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := diffTrees(context.Background(), m, tc.a, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			got := format(cs)
			slices.Sort(got) // compare as sets; order is checked below
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("diff:\n got %q\nwant %q", got, want)
			}
			if !slices.IsSortedFunc(cs, func(x, y Change) int { return strings.Compare(x.Path, y.Path) }) {
				t.Errorf("not sorted by path: %q", format(cs))
			}
			for _, c := range cs {
				if (c.Op == Added) != (c.Old == nil) || (c.Op == Deleted) != (c.New == nil) {
					t.Errorf("%s: Old/New do not match op", c.Path)
				}
			}
		})
	}

	// Metadata-only changes are Modified; a directory whose contents
	// changed but not its own metadata is not.
	a := m.putTree(&store.Tree{Entries: []store.TreeEntry{
		{Name: "d", Type: store.TypeDir, Mode: 0o755, Content: tree("x")},
		{Name: "f", Type: store.TypeFile, Mode: 0o644, MtimeNs: 5},
	}})
	b := m.putTree(&store.Tree{Entries: []store.TreeEntry{
		{Name: "d", Type: store.TypeDir, Mode: 0o755, Content: tree("y")},
		{Name: "f", Type: store.TypeFile, Mode: 0o644, MtimeNs: 5, Xattrs: []store.Xattr{{Name: "user.a", Value: []byte{0}}}},
	}})
	cs, err := diffTrees(context.Background(), m, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := format(cs), []string{"D d/x", "A d/y", "M f"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	// A subtree with an equal id is not read.
	missing := store.ID{1}
	c := m.putTree(&store.Tree{Entries: []store.TreeEntry{{Name: "d", Type: store.TypeDir, Mode: 0o755, Content: missing}}})
	if cs, err := diffTrees(context.Background(), m, c, c); err != nil || len(cs) != 0 {
		t.Errorf("equal trees: %v %v", cs, err)
	}
	d := m.putTree(&store.Tree{Entries: []store.TreeEntry{
		{Name: "d", Type: store.TypeDir, Mode: 0o755, Content: missing},
		{Name: "e", Type: store.TypeFile},
	}})
	if _, err := diffTrees(context.Background(), m, c, d); err != nil {
		t.Errorf("equal subtree read: %v", err)
	}
}
