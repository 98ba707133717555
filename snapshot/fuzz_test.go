package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/store"
)

// FuzzMaterializeNames feeds Materialize trees whose names and symlink
// targets are arbitrary bytes (DESIGN invariant 6: they are untrusted).
// Whatever happens, nothing is written outside the target; on success
// every name is one clean element and every symlink target is verbatim.
func FuzzMaterializeNames(f *testing.F) {
	for _, seed := range [][2]string{
		{"a|b|c", "x"},
		{"..|.|/x", "../../etc"},
		{"a|a", "/"},
		{"a/b|c\x00d|", ""},
		{"\xff\xfe|line\nbreak|-dash", "a\nb"},
		{"z|y|x", "/proc/self/root"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, names, target string) {
		m := newMemStore()
		content := m.putBlob([]byte("data"))
		leaf := m.putTree(&store.Tree{Entries: []store.TreeEntry{
			{Name: "leaf", Type: store.TypeFile, Mode: 0o644, Size: 4, Content: content},
		}})
		var es []store.TreeEntry
		for i, n := range strings.Split(names, "|") {
			switch i % 3 {
			case 0:
				es = append(es, store.TreeEntry{Name: n, Type: store.TypeFile, Mode: 0o644, Size: 4, Content: content})
			case 1:
				es = append(es, store.TreeEntry{Name: n, Type: store.TypeDir, Mode: 0o755, Content: leaf})
			case 2:
				es = append(es, store.TreeEntry{Name: n, Type: store.TypeSymlink, Target: target, Size: int64(len(target))})
			}
		}
		slices.SortStableFunc(es, func(a, b store.TreeEntry) int { return strings.Compare(a.Name, b.Name) })
		tree := m.putTree(&store.Tree{Entries: es})

		base := t.TempDir()
		sentinel := filepath.Join(base, "sentinel")
		if err := os.Mkdir(sentinel, 0o755); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(base, "dst", "target")
		if err := os.Mkdir(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		err := materialize(context.Background(), m, tree, dst, MaterializeOptions{}, matConfig{})

		if got, _ := os.ReadDir(sentinel); len(got) != 0 {
			t.Fatalf("wrote outside the target: %v", got)
		}
		if got, _ := os.ReadDir(base); len(got) != 2 {
			t.Fatalf("wrote outside the target: %v", got)
		}
		if got, _ := os.ReadDir(filepath.Dir(dst)); err != nil && len(got) != 0 {
			t.Fatalf("failed materialize left %v", got)
		}
		if err != nil {
			return
		}
		n := 0
		werr := filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == dst {
				return nil
			}
			if !validName(d.Name()) {
				t.Errorf("created invalid name %q", d.Name())
			}
			if d.Type()&os.ModeSymlink != 0 {
				if l, err := os.Readlink(p); err != nil || l != target {
					t.Errorf("symlink %q → %q, want %q", p, l, target)
				}
			}
			n++
			return nil
		})
		if werr != nil {
			t.Fatal(werr)
		}
		want := 0
		for _, e := range es {
			want++
			if e.Type == store.TypeDir {
				want++
			}
		}
		if n != want {
			t.Errorf("created %d entries, want %d", n, want)
		}
	})
}

// FuzzLookupPath checks that a path given by a user never climbs out of a
// tree and never panics.
func FuzzLookupPath(f *testing.F) {
	for _, s := range []string{"", ".", "a/b", "../a", "a/../../b", "/a//b/", "\xff/\n"} {
		f.Add(s)
	}
	m := newMemStore()
	tree := treeSpec(f, m, "a/b", "c")
	f.Fuzz(func(t *testing.T, p string) {
		e, err := lookup(m, tree, p)
		hasDotDot := slices.Contains(strings.Split(p, "/"), "..")
		if hasDotDot && !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("lookup %q with ..: %v", p, err)
		}
		if err == nil && e == nil {
			t.Errorf("lookup %q: nil entry without error", p)
		}
	})
}
