package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// plainSetup is a store with a project committed and a copy workspace of
// it created and populated (the copy backend works on any filesystem).
func plainSetup(t *testing.T, backend string) (*Manager, *Record, string) {
	t.Helper()
	m := testManager(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "proj")
	write(t, filepath.Join(src, "a/b/file"), "one\n")
	write(t, filepath.Join(src, "a/other"), "other\n")
	write(t, filepath.Join(src, "top"), "top\n")
	base, _ := commitDir(t, m, src)
	rec := &Record{Name: "w", Backend: backend, Base: base, MountBase: base.String()}
	undo, err := m.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Populate(ctx, rec); err != nil {
		undo()
		t.Fatal(err)
	}
	return m, rec, src
}

// readTree reads the workspace through a writer that is finished (the
// tree stored), and returns it with what Read said.
func readTree(t *testing.T, m *Manager, rec *Record) *Tree {
	t.Helper()
	ctx := context.Background()
	st, _ := m.DB()
	wr, err := st.NewWriter(ctx, "read")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := m.Read(ctx, rec, wr, ReadOptions{})
	if err != nil {
		wr.Abort()
		t.Fatal(err)
	}
	if err := wr.Finish(func(*store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return tr
}

// importTree imports dir and returns its tree (what Read must equal).
func importTree(t *testing.T, m *Manager, dir string) store.ID {
	t.Helper()
	_, c := commitDir(t, m, dir)
	return c.Tree
}

// TestPlainLifecycle: a copy workspace's tree is its base's whole tree
// (with its stat index); Read finds what changed — a directory renamed
// too — and equals an import of the directory; after Committed the
// workspace is clean and the next Read applies only the next change to
// the committed tree; Reset with content writes the content (through a
// delta layer on the old base's stack), clean Reset leaves the tree to be
// made from the new base on first use; Remove takes all.
func TestPlainLifecycle(t *testing.T) {
	m, rec, src := plainSetup(t, BackendCopy)
	ctx := context.Background()
	if rec.Upper != filepath.Join(rec.Dir, layout.Upper) || rec.Work != filepath.Join(rec.Dir, layout.Work) {
		t.Fatalf("paths %+v", rec)
	}
	if b, err := os.ReadFile(filepath.Join(rec.Upper, "a/b/file")); err != nil || string(b) != "one\n" {
		t.Fatalf("the tree: %q %v", b, err)
	}
	if !isPlainTree(rec.Upper) || isPlainTree(filepath.Join(rec.Dir, "elsewhere")) {
		t.Error("isPlainTree")
	}
	if dirty, _ := m.Uncommitted(rec); dirty {
		t.Error("a fresh workspace is dirty")
	}
	tr := readTree(t, m, rec)
	if tr.Tree != tr.Base.Tree || !tr.Delta {
		t.Errorf("a fresh workspace reads as %s (delta %v), want its base %s", tr.Tree.Short(), tr.Delta, tr.Base.Tree.Short())
	}

	// A directory renamed, a file appended, a file added.
	if err := os.Rename(filepath.Join(rec.Upper, "a"), filepath.Join(rec.Upper, "renamed")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(rec.Upper, "top"), "top\nmore\n")
	write(t, filepath.Join(rec.Upper, "new"), "new\n")
	dirty, n := m.Uncommitted(rec)
	if !dirty || n != int64(len("top\nmore\nnew\n")+len("one\nother\n")) {
		t.Errorf("Uncommitted: %v, %d bytes", dirty, n)
	}
	tr = readTree(t, m, rec)
	if want := importTree(t, m, rec.Upper); tr.Tree != want {
		t.Fatalf("Read %s, an import of the tree %s", tr.Tree.Short(), want.Short())
	}
	if tr.Result.FilesRead != 2 {
		t.Errorf("read %d files; want 2 (top and new: the renamed directory's files are moved)", tr.Result.FilesRead)
	}
	// The commit lands: base moves to a commit of tr.Tree.
	st, _ := m.DB()
	var c2 store.ID
	if err := st.Update(ctx, func(tx *store.Tx) error {
		var err error
		c2, err = tx.PutCommit(&store.Commit{Tree: tr.Tree, Parents: []store.ID{rec.Base}, Stats: tr.Result.Stats})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	m.Committed(rec, c2, tr)
	rec.Base = c2
	if dirty, _ := m.Uncommitted(rec); dirty {
		t.Error("dirty after Committed")
	}
	write(t, filepath.Join(rec.Upper, "renamed/b/file"), "one\ntwo\n")
	tr = readTree(t, m, rec)
	if !tr.Delta || tr.Result.FilesRead != 1 || tr.Tree != importTree(t, m, rec.Upper) {
		t.Errorf("the next read: delta %v, %d files read", tr.Delta, tr.Result.FilesRead)
	}

	// Reset with content: a rebase's tree, written now.
	content := importTree(t, m, src)
	sw, err := m.Reset(ctx, rec, store.ZeroID, content)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(sw.Upper, "a/b/file")); string(b) != "one\n" {
		t.Errorf("reset content: %q", b)
	}
	if ents, _ := filepath.Glob(filepath.Join(sw.Work, layout.TempPrefix+"*")); len(ents) != 0 {
		t.Errorf("the delta layer was left: %v", ents)
	}
	cur := *rec
	sw.Apply(&cur, c2)
	sw.Done()
	if exists(rec.Upper) || !exists(cur.Upper) {
		t.Error("Done did not replace the tree")
	}
	rec = &cur
	// The index holds content, not the base's tree: dirty, and Read
	// gives content.
	if dirty, _ := m.Uncommitted(rec); !dirty {
		t.Error("a rebased tree (content ≠ base) reads clean")
	}
	if tr = readTree(t, m, rec); tr.Tree != content {
		t.Errorf("after the reset: %s, want the content %s", tr.Tree.Short(), content.Short())
	}

	// A clean reset: nothing is made until the tree is needed.
	sw, err = m.Reset(ctx, rec, store.ZeroID, store.ZeroID)
	if err != nil {
		t.Fatal(err)
	}
	if exists(sw.Upper) {
		t.Error("a clean reset made the tree at once")
	}
	cur = *rec
	sw.Apply(&cur, c2)
	sw.Done()
	rec = &cur
	if dirty, _ := m.Uncommitted(rec); dirty || !rec.NeedsLayers() {
		t.Errorf("a reset, unmade tree: dirty %v, needs layers %v", dirty, rec.NeedsLayers())
	}
	if tr = readTree(t, m, rec); tr.Tree != tr.Base.Tree {
		t.Error("an unmade tree does not read as its base")
	}
	if err := m.EnsureTree(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(rec.Upper, "renamed/b/file")); string(b) != "one\n" || rec.NeedsLayers() {
		t.Errorf("the tree made on use: %q", b)
	}
	if err := m.Remove(rec); err != nil || exists(rec.Dir) {
		t.Errorf("Remove: %v", err)
	}
}

// TestPlainLostIndex: a damaged stat index makes Read take the whole tree
// (an import's), saying so; the workspace is not taken for clean.
func TestPlainLostIndex(t *testing.T) {
	m, rec, _ := plainSetup(t, BackendCopy)
	write(t, filepath.Join(rec.Upper, "top"), "changed\n")
	if err := os.WriteFile(plainIndex(rec), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if dirty, _ := m.Uncommitted(rec); !dirty {
		t.Error("clean without an index")
	}
	var warned []string
	st, _ := m.DB()
	wr, _ := st.NewWriter(context.Background(), "read")
	defer wr.Abort()
	tr, err := m.Read(context.Background(), rec, wr, ReadOptions{Warn: func(p, msg string) { warned = append(warned, msg) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Flush(); err != nil {
		t.Fatal(err)
	}
	if tr.Tree != importTree(t, m, rec.Upper) || tr.Delta || len(warned) != 1 || !strings.Contains(warned[0], "stat index") {
		t.Errorf("read without an index: %s, delta %v, warned %q", tr.Tree.Short(), tr.Delta, warned)
	}
}

// TestPlainRefuses: the overlay's options and the reflink backend where
// the filesystem cannot clone are refused, leaving nothing.
func TestPlainRefuses(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "p")
	write(t, filepath.Join(src, "f"), "x")
	base, _ := commitDir(t, m, src)
	for _, rec := range []*Record{
		{Name: "t", Backend: BackendCopy, Tmpfs: true, Base: base},
		{Name: "s", Backend: BackendReflink, SubIDs: true, Base: base},
	} {
		if _, err := m.Create(ctx, rec); err == nil {
			t.Errorf("%+v: created", rec)
		}
		if exists(m.Layout.Workspace(rec.Name)) {
			t.Errorf("%s: left its directory", rec.Name)
		}
	}
	if snapshot.IsBtrfs(m.Layout.Home()) || cloneWorksIn(m.Layout.Home()) {
		return // this filesystem clones: nothing to refuse
	}
	rec := &Record{Name: "r", Backend: BackendReflink, Base: base}
	undo, err := m.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Populate(ctx, rec)
	undo()
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "--backend copy") {
		t.Errorf("reflink where nothing clones: %v", err)
	}
}

func cloneWorksIn(dir string) bool { return (&Manager{Layout: layout.New(dir)}).canReflink() }

// TestCheckBackend and the record of a plain workspace.
func TestPlainRecord(t *testing.T) {
	for _, b := range []string{"", "overlay", "reflink", "copy", "auto"} {
		if err := CheckBackend(b); err != nil {
			t.Errorf("%q: %v", b, err)
		}
	}
	if err := CheckBackend("zfs"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("zfs: %v", err)
	}
	l := layout.New("/s")
	rec := &Record{Name: "w", Backend: BackendReflink, Upper: "/old/workspaces/w/upper.abc", Work: "/old/workspaces/w/work.abc"}
	row, err := rec.Row()
	if err != nil {
		t.Fatal(err)
	}
	var extra map[string]any
	json.Unmarshal(row.Extra, &extra)
	if extra["backend"] != "reflink" {
		t.Errorf("record JSON %s", row.Extra)
	}
	back, err := FromRow(l, row)
	if err != nil || back.Backend != BackendReflink || back.Upper != "/s/workspaces/w/upper.abc" || back.Work != "/s/workspaces/w/work.abc" {
		t.Errorf("back: %+v %v", back, err)
	}
	if got := humanBytes(445 << 20); got != "445 MiB" {
		t.Errorf("humanBytes: %q", got)
	}
}
