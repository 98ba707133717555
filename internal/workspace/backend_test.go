package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratafs/strata/store"
)

// TestCreateRemove: a workspace's directory appears whole (upper, work,
// merged) or not at all; a leftover directory of the name refuses the
// create, naming the way out; Remove takes everything, the tmpfs
// directory included.
func TestCreateRemove(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	rec := &Record{Name: "a", Backend: BackendOverlay}
	undo, err := m.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Dir != m.Layout.Workspace("a") || rec.Upper != filepath.Join(rec.Dir, "upper") || rec.Work != filepath.Join(rec.Dir, "work") {
		t.Errorf("record paths %+v", rec)
	}
	for _, p := range []string{rec.Upper, rec.Work, filepath.Join(rec.Dir, "merged")} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", p, err)
		}
	}
	if ents, _ := os.ReadDir(m.Layout.Workspaces()); len(ents) != 1 {
		t.Errorf("workspaces/ holds %d entries; want 1 (no temporary left)", len(ents))
	}
	if _, err := m.Create(ctx, &Record{Name: "a", Backend: BackendOverlay}); !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), "ws rm --force a") {
		t.Errorf("create over a leftover: %v", err)
	}
	undo()
	if exists(rec.Dir) {
		t.Error("undo left the directory")
	}

	tr := &Record{Name: "t", Backend: BackendOverlay, Tmpfs: true}
	if _, err := m.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if tr.Upper != filepath.Join(m.Layout.TmpfsWorkspace("t"), "upper") || !exists(tr.Upper) || !exists(tr.Work) {
		t.Errorf("tmpfs record %+v", tr)
	}
	if b, err := os.ReadFile(filepath.Join(m.Layout.Tmpfs(), "store")); err != nil || string(b) != m.Layout.Home() {
		t.Errorf("the tmpfs directory does not name its store: %q, %v", b, err)
	}
	if err := m.Remove(tr); err != nil {
		t.Fatal(err)
	}
	if exists(tr.Dir) || exists(m.Layout.TmpfsWorkspace("t")) {
		t.Error("Remove left the workspace's directories")
	}
	if _, err := m.Create(ctx, &Record{Name: "x", Backend: "zfs"}); !errors.Is(err, ErrUnsupported) || exists(m.Layout.Workspace("x")) {
		t.Errorf("create with an unknown backend: %v", err)
	}
}

// TestResetSwitch: a reset makes the fresh tree beside the current one
// and changes nothing else; Apply points the record at it; Done removes
// the old tree, Discard the new one.
func TestResetSwitch(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	rec := &Record{Name: "a", Backend: BackendOverlay, Base: testID(1), MountBase: testID(1).String()}
	if _, err := m.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(rec.Upper, "keep.txt"), "work")
	old := *rec
	for _, done := range []bool{false, true} {
		sw, err := m.Reset(ctx, rec, store.ZeroID, store.ZeroID)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(sw.Upper) != rec.Dir || !strings.HasPrefix(filepath.Base(sw.Upper), "upper.") || !DirEmpty(sw.Upper) || !exists(sw.Work) {
			t.Errorf("fresh tree %q %q", sw.Upper, sw.Work)
		}
		if *rec != old || !exists(filepath.Join(rec.Upper, "keep.txt")) {
			t.Fatal("Reset changed the workspace before the switch was recorded")
		}
		if !done {
			sw.Discard()
			if exists(sw.Upper) || exists(sw.Work) {
				t.Error("Discard left the fresh tree")
			}
			continue
		}
		cur := *rec
		sw.Apply(&cur, testID(2))
		if cur.Base != testID(2) || cur.MountBaseID() != testID(2) || cur.Upper != sw.Upper || cur.Work != sw.Work || rec.Unchanged(&cur) {
			t.Errorf("applied %+v", cur)
		}
		sw.Done()
		if exists(rec.Upper) || exists(rec.Work) || !exists(sw.Upper) {
			t.Error("Done did not replace the old tree")
		}
	}
}
