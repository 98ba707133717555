package snapshot_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// TestApplyUpperEntry pins UpperChange.Entry (package image's layer
// changes): entries are applied as given, without reading UpperPath; a
// Modified directory keeps what is beneath it and an opaque one does
// not; a caller's link-group key (with a NUL, which no tree holds) is
// re-keyed to the group's first member, and a group of one is dropped.
func TestApplyUpperEntry(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write := func(base store.ID, cs []snapshot.UpperChange) store.ID {
		t.Helper()
		w, err := s.NewWriter(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		for i := range cs {
			if e := cs[i].Entry; e != nil && e.Type == store.TypeFile && e.Size > 0 {
				id, n, err := w.WriteContent(strings.NewReader(strings.Repeat("x", int(e.Size))))
				if err != nil || n != e.Size {
					t.Fatal(err)
				}
				e.Content = id
			}
		}
		res, err := snapshot.ApplyUpper(ctx, s, w, base, cs, snapshot.ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Finish(nil); err != nil {
			t.Fatal(err)
		}
		return res.Tree
	}
	dir := func(mode uint32) *store.TreeEntry { return &store.TreeEntry{Type: store.TypeDir, Mode: mode} }
	file := func(size int64, uid uint32, group string) *store.TreeEntry {
		return &store.TreeEntry{Type: store.TypeFile, Mode: 0o644, UID: uid, Size: size, LinkGroup: group}
	}
	mod := snapshot.UpperModified
	base := write(store.ZeroID, []snapshot.UpperChange{
		{Path: "d", Kind: mod, Entry: dir(0o755)},
		{Path: "d/keep", Kind: mod, Entry: file(3, 0, "")},
		{Path: "o", Kind: mod, Entry: dir(0o755)},
		{Path: "o/hidden", Kind: mod, Entry: file(1, 0, "")},
		{Path: "dev", Kind: mod, Entry: &store.TreeEntry{Type: store.TypeCharDev, Mode: 0o666, Rdev: 0x103}},
	})
	tree := write(base, []snapshot.UpperChange{
		{Path: "d", Kind: mod, Entry: dir(0o700)},
		{Path: "d/new", Kind: mod, Entry: file(2, 1000, "d/new\x00k")},
		{Path: "d/link", Kind: mod, Entry: file(2, 1000, "d/new\x00k")},
		{Path: "o", Kind: mod, Opaque: true, Entry: dir(0o750)},
		{Path: "o/only", Kind: mod, Entry: file(4, 0, "o/only\x00k")},
		{Path: "dev", Kind: snapshot.UpperDeleted},
	})
	get := func(p string) *store.TreeEntry {
		e, err := snapshot.Lookup(ctx, s, tree, p)
		if err != nil {
			return nil
		}
		return e
	}
	if e := get("d"); e == nil || e.Mode != 0o700 {
		t.Errorf("d: %+v, want mode 0700", e)
	}
	if get("d/keep") == nil {
		t.Error("d/keep: gone; a Modified directory keeps what is beneath")
	}
	if get("o/hidden") != nil || get("o/only") == nil {
		t.Error("o: opaque directory kept what was beneath, or lost its own entry")
	}
	if get("dev") != nil {
		t.Error("dev: not deleted")
	}
	l, n := get("d/link"), get("d/new")
	if l == nil || n == nil || l.LinkGroup != "d/link" || n.LinkGroup != "d/link" || n.UID != 1000 {
		t.Errorf("link group: %+v %+v, want both keyed d/link (the first in walk order)", l, n)
	}
	if o := get("o/only"); o != nil && o.LinkGroup != "" {
		t.Errorf("o/only: group %q, want none (a group of one)", o.LinkGroup)
	}
}
