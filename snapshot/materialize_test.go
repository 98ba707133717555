package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

func TestMaterializeTarget(t *testing.T) {
	m := newMemStore()
	tree := treeSpec(t, m, "a/b", "c")
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "full/x"), "x")
	writeFile(t, filepath.Join(base, "file"), "x")
	must(t, os.Mkdir(filepath.Join(base, "empty"), 0o711))
	must(t, os.Mkdir(filepath.Join(base, "real"), 0o755))
	must(t, os.Symlink("real", filepath.Join(base, "link")))
	for _, tc := range []struct {
		name    string
		dir     string
		wantErr string
	}{
		{"new", "new", ""},
		{"empty", "empty", ""},
		{"not empty", "full", "not empty"},
		{"a file", "file", "not a directory"},
		{"a symlink to an empty dir", "link", "symlink"},
		{"parent missing", "no/such", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(base, tc.dir)
			err := materialize(context.Background(), m, tree, dir, MaterializeOptions{}, matConfig{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(dir, "a/b")); err != nil || string(b) != "a/b" {
					t.Errorf("a/b: %q %v", b, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	if err := materialize(context.Background(), m, tree, filepath.Join(base, "full"), MaterializeOptions{}, matConfig{}); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("%v is not ErrNotEmpty", err)
	}
	if fi, err := os.Stat(filepath.Join(base, "new")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("a new target: %v %v, want mode 0755", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(base, "empty")); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("an existing target's mode changed: %v %v", fi.Mode(), err)
	}
	if names, _ := os.ReadDir(filepath.Join(base, "real")); len(names) != 0 {
		t.Error("wrote through the symlink")
	}
}

// TestMaterializeHostileTrees hands Materialize trees that a real store
// would refuse: nothing may be written outside the target, and the target
// is cleaned up.
func TestMaterializeHostileTrees(t *testing.T) {
	m := newMemStore()
	file := func(name string) store.TreeEntry {
		return store.TreeEntry{Name: name, Type: store.TypeFile, Mode: 0o644, Size: 1, Content: m.putBlob([]byte("x"))}
	}
	dirOf := func(name string, es ...store.TreeEntry) store.TreeEntry {
		return store.TreeEntry{Name: name, Type: store.TypeDir, Mode: 0o755, Content: m.putTree(&store.Tree{Entries: es})}
	}
	for _, tc := range []struct {
		name    string
		entries []store.TreeEntry
	}{
		{"dotdot", []store.TreeEntry{file("..")}},
		{"dot", []store.TreeEntry{file(".")}},
		{"slash", []store.TreeEntry{file("../escape")}},
		{"absolute", []store.TreeEntry{file("/tmp/escape")}},
		{"empty", []store.TreeEntry{file("")}},
		{"nul", []store.TreeEntry{file("a\x00b")}},
		{"nested dotdot", []store.TreeEntry{dirOf("d", file(".."))}},
		{"duplicate", []store.TreeEntry{file("a"), file("a")}},
		{"unsorted", []store.TreeEntry{file("b"), file("a")}},
		{"symlink then dir of same name", []store.TreeEntry{
			{Name: "a", Type: store.TypeSymlink, Target: "/tmp", Size: 4},
			dirOf("a", file("escape")),
		}},
		{"bad type", []store.TreeEntry{{Name: "x", Type: 99}}},
		{"size lies", []store.TreeEntry{{Name: "x", Type: store.TypeFile, Size: 5, Content: m.putBlob([]byte("x"))}}},
		{"missing content", []store.TreeEntry{{Name: "x", Type: store.TypeFile, Size: 5, Content: store.ID{9}}}},
		{"empty symlink", []store.TreeEntry{{Name: "x", Type: store.TypeSymlink}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dst := filepath.Join(base, "dst")
			tree := m.putTree(&store.Tree{Entries: tc.entries})
			err := materialize(context.Background(), m, tree, dst, MaterializeOptions{}, matConfig{})
			if err == nil {
				t.Fatal("no error")
			}
			if names, _ := os.ReadDir(base); len(names) != 0 {
				t.Errorf("left %v in %s", names, base)
			}
		})
	}
}

// TestMaterializePlantedSymlinks races Materialize: a symlink appears where
// a file is about to be created, or in place of a directory whose
// metadata is about to be set. Neither may be followed.
func TestMaterializePlantedSymlinks(t *testing.T) {
	m := newMemStore()
	tree := treeSpec(t, m, "d/f", "d/sub/g")
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	writeFile(t, victim, "untouched")
	must(t, os.Chmod(outside, 0o755))

	t.Run("file", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "dst")
		err := materialize(context.Background(), m, tree, dst, MaterializeOptions{}, matConfig{
			workers: 1,
			beforeCreate: func(dirfd int, rel string) {
				unix.Symlinkat(victim, dirfd, filepath.Base(rel))
			},
		})
		if !errors.Is(err, unix.EEXIST) {
			t.Errorf("error %v, want EEXIST", err)
		}
	})
	t.Run("dir", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "dst")
		err := materialize(context.Background(), m, tree, dst, MaterializeOptions{}, matConfig{
			beforeFinish: func(rel string) {
				if rel == "d/sub" {
					p := filepath.Join(dst, rel)
					os.Rename(p, p+".moved")
					os.Symlink(outside, p)
				}
			},
		})
		if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("error %v, want ELOOP, EXDEV or ENOTDIR", err)
		}
	})
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Errorf("victim now %q", b)
	}
	if fi, _ := os.Stat(outside); fi.Mode().Perm() != 0o755 {
		t.Errorf("outside dir mode changed to %v", fi.Mode())
	}
	if names, _ := os.ReadDir(outside); len(names) != 1 {
		t.Errorf("outside now holds %v", names)
	}
}

func TestMaterializeLinkGroups(t *testing.T) {
	m := newMemStore()
	x := m.putBlob([]byte("x"))
	y := m.putBlob([]byte("y"))
	f := func(name, group string, content store.ID) store.TreeEntry {
		return store.TreeEntry{Name: name, Type: store.TypeFile, Mode: 0o644, Size: 1, Content: content, LinkGroup: group}
	}
	sub := m.putTree(&store.Tree{Entries: []store.TreeEntry{f("c", "g", x), f("d", "h", y)}})
	tree := m.putTree(&store.Tree{Entries: []store.TreeEntry{
		f("a", "g", x),
		f("b", "h", x), // same group as sub/d but different content: not linked
		{Name: "sub", Type: store.TypeDir, Mode: 0o555, Content: sub},
	}})
	dst := filepath.Join(t.TempDir(), "dst")
	var w warnings
	materializeFake(t, m, tree, dst, MaterializeOptions{Warn: w.fn})
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "sub"), 0o755) })
	ino := func(p string) uint64 {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(dst, p), &st))
		return st.Ino
	}
	if ino("a") != ino("sub/c") {
		t.Error("a and sub/c are not one inode")
	}
	if ino("b") == ino("sub/d") {
		t.Error("b and sub/d linked despite different content")
	}
	if _, ok := w.get("sub/d"); !ok {
		t.Error("no warning for the inconsistent group")
	}
}

func TestMaterializeProgress(t *testing.T) {
	m := newMemStore()
	tree := treeSpec(t, m, "a/b", "a/c/d", "e", "l@e")
	var last Progress
	var phases []string
	materializeFake(t, m, tree, filepath.Join(t.TempDir(), "dst"), MaterializeOptions{Progress: func(p Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		last = p
	}})
	if !slices.Equal(phases, []string{PhaseWalk, PhaseWrite}) {
		t.Errorf("phases %q", phases)
	}
	want := Progress{Phase: PhaseWrite, Entries: 6, EntriesTotal: 6, Bytes: 3 + 5 + 1, BytesTotal: 9}
	if last != want {
		t.Errorf("last progress %+v, want %+v", last, want)
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"a": true, "-x": true, "a b": true, "\xff": true, "a\nb": true, "...": true, ".a": true,
		"": false, ".": false, "..": false, "a/b": false, "/": false, "a\x00": false,
	} {
		if got := validName(name); got != want {
			t.Errorf("validName(%q) = %v", name, got)
		}
	}
}

func TestOpenBeneath(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "d/f"), "x")
	must(t, os.Symlink("d", filepath.Join(root, "l")))
	must(t, os.Symlink("/", filepath.Join(root, "abs")))
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	for _, tc := range []struct {
		rel string
		ok  bool
	}{
		{"", true}, {"d", true}, {"d/f", true},
		{"l", false}, {"l/f", false}, {"abs/etc", false}, {"../x", false}, {"d/../../x", false},
	} {
		f, err := openBeneath(fd, tc.rel, unix.O_RDONLY)
		if err == nil {
			unix.Close(f)
		}
		if (err == nil) != tc.ok {
			t.Errorf("openBeneath(%q): %v, want ok=%v", tc.rel, err, tc.ok)
		}
	}
}

// TestMaterializeCleanup: a failure late in Materialize (while finishing
// directories, after a read-only one is done) leaves an existing target
// empty and removes a created one.
func TestMaterializeCleanup(t *testing.T) {
	m := newMemStore()
	inner := treeSpec(t, m, "f", "g/h")
	tree := m.putTree(&store.Tree{Entries: []store.TreeEntry{
		// A name longer than XATTR_NAME_MAX (255): setxattr fails.
		{Name: "a", Type: store.TypeDir, Mode: 0o755, Content: inner, Xattrs: []store.Xattr{{Name: "user." + strings.Repeat("x", 300)}}},
		{Name: "b", Type: store.TypeDir, Mode: 0o555, Content: inner},
	}})
	for _, existing := range []bool{false, true} {
		base := t.TempDir()
		dst := filepath.Join(base, "dst")
		if existing {
			must(t, os.Mkdir(dst, 0o750))
		}
		err := materialize(context.Background(), m, tree, dst, MaterializeOptions{}, matConfig{})
		if err == nil || !strings.Contains(err.Error(), "setxattr") {
			t.Fatalf("error %v, want a setxattr failure", err)
		}
		names, err := os.ReadDir(dst)
		switch {
		case existing && (err != nil || len(names) != 0):
			t.Errorf("existing target: %v %v, want empty", names, err)
		case !existing && !os.IsNotExist(err):
			t.Errorf("created target still there: %v", err)
		}
	}
}
