package snapshot_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// specialEntry is a synthetic tree entry for putTree: a file (data), or
// a device (rdev) when dev.
type specialEntry struct {
	path, data string
	mode       uint32
	dev        bool
	rdev       uint64
}

// putTree writes a tree of entries (files and devices; directories as
// their paths need) with w.
func putTree(t *testing.T, w *store.Writer, es []specialEntry) store.ID {
	t.Helper()
	type node struct {
		entries map[string]store.TreeEntry
		subs    map[string]*node
	}
	newNode := func() *node { return &node{entries: map[string]store.TreeEntry{}, subs: map[string]*node{}} }
	root := newNode()
	for _, e := range es {
		parts := strings.Split(e.path, "/")
		n := root
		for _, d := range parts[:len(parts)-1] {
			if n.subs[d] == nil {
				n.subs[d] = newNode()
			}
			n = n.subs[d]
		}
		te := store.TreeEntry{Name: parts[len(parts)-1], Type: store.TypeFile, Mode: e.mode, Size: int64(len(e.data))}
		if e.dev {
			te = store.TreeEntry{Name: te.Name, Type: store.TypeCharDev, Mode: 0o600, Rdev: e.rdev}
		} else if e.data != "" {
			id, err := w.WriteBytes([]byte(e.data))
			if err != nil {
				t.Fatal(err)
			}
			te.Content = id
		}
		n.entries[te.Name] = te
	}
	var write func(n *node) store.ID
	write = func(n *node) store.ID {
		for name, sub := range n.subs {
			n.entries[name] = store.TreeEntry{Name: name, Type: store.TypeDir, Mode: 0o755, Content: write(sub)}
		}
		var tr store.Tree
		for _, e := range n.entries {
			tr.Entries = append(tr.Entries, e)
		}
		slices.SortFunc(tr.Entries, func(a, b store.TreeEntry) int { return strings.Compare(a.Name, b.Name) })
		id, err := w.PutTree(&tr)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	return write(root)
}

// TestSpecialReason: what a change may not carry into a real directory.
func TestSpecialReason(t *testing.T) {
	c1, c2 := store.ID{1}, store.ID{2}
	file := func(mode uint32, c store.ID) *store.TreeEntry {
		return &store.TreeEntry{Type: store.TypeFile, Mode: mode, Content: c}
	}
	dir := func(mode uint32) *store.TreeEntry { return &store.TreeEntry{Type: store.TypeDir, Mode: mode} }
	dev := func(typ store.EntryType, rdev uint64) *store.TreeEntry {
		return &store.TreeEntry{Type: typ, Mode: 0o600, Rdev: rdev}
	}
	for _, tc := range []struct {
		name     string
		old, new *store.TreeEntry
		special  bool
	}{
		{"plain file", nil, file(0o755, c1), false},
		{"new setuid file", nil, file(0o4755, c1), true},
		{"new setgid file", nil, file(0o2755, c1), true},
		{"setuid added", file(0o755, c1), file(0o4755, c1), true},
		{"setuid kept, same content", file(0o4755, c1), file(0o4755, c1), false},
		{"setuid kept, new content", file(0o4755, c1), file(0o4755, c2), true},
		{"setuid dropped", file(0o4755, c1), file(0o755, c2), false},
		{"setgid added, setuid kept", file(0o4755, c1), file(0o6755, c1), true},
		{"setgid dropped, setuid kept", file(0o6755, c1), file(0o4755, c1), false},
		{"sticky", nil, file(0o1755, c1), false},
		{"new setgid dir", nil, dir(0o2775), true},
		{"setgid dir kept", dir(0o2775), dir(0o2755), false},
		{"new char device", nil, dev(store.TypeCharDev, 0x103), true},
		{"new block device", nil, dev(store.TypeBlockDev, 0x700), true},
		{"device renumbered", dev(store.TypeCharDev, 0x103), dev(store.TypeCharDev, 0x105), true},
		{"device unchanged", dev(store.TypeCharDev, 0x103), dev(store.TypeCharDev, 0x103), false},
		{"fifo", nil, &store.TreeEntry{Type: store.TypeFIFO, Mode: 0o644}, false},
		{"deleted", file(0o4755, c1), nil, false},
	} {
		if got := snapshot.SpecialReason(tc.old, tc.new) != ""; got != tc.special {
			t.Errorf("%s: special %v; want %v (%q)", tc.name, got, tc.special, snapshot.SpecialReason(tc.old, tc.new))
		}
	}
}

// TestStripSpecial: setuid/setgid bits a change adds are cleared, device
// nodes it adds are left out (or keep the base's entry), and everything
// else is untouched.
func TestStripSpecial(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	w, err := s.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	base := putTree(t, w, []specialEntry{
		{path: "keep", data: "k", mode: 0o644},
		{path: "sub/was-file", data: "f", mode: 0o644},
		{path: "sub/kept-suid", data: "s", mode: 0o4755},
	})
	tree := putTree(t, w, []specialEntry{
		{path: "keep", data: "k", mode: 0o644},
		{path: "sub/was-file", dev: true, rdev: 0x103},
		{path: "sub/kept-suid", data: "s", mode: 0o4755},
		{path: "sub/deep/tool", data: "t", mode: 0o4755},
		{path: "null", dev: true, rdev: 0x103},
	})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, stripped, err := snapshot.StripSpecial(ctx, s, w, base, tree)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, x := range stripped {
		paths = append(paths, x.Path+" "+x.Action)
	}
	if want := []string{"null not written", "sub/deep/tool bits cleared", "sub/was-file not written"}; !slices.Equal(paths, want) {
		t.Errorf("stripped %q; want %q", paths, want)
	}
	for p, want := range map[string]uint32{"keep": 0o644, "sub/kept-suid": 0o4755, "sub/deep/tool": 0o755, "sub/was-file": 0o644} {
		e, err := snapshot.Lookup(ctx, s, got, p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if e.Mode != want || e.Type != store.TypeFile {
			t.Errorf("%s: %v mode %o; want a file, mode %o", p, e.Type, e.Mode, want)
		}
	}
	if _, err := snapshot.Lookup(ctx, s, got, "null"); err == nil {
		t.Errorf("the new device node is still in the tree")
	}
	if again, none, err := snapshot.StripSpecial(ctx, s, w, base, base); err != nil || again != base || none != nil {
		t.Errorf("nothing special: %v %v %v", again, none, err)
	}
}
