package snapshot_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

func objectTotal(tb testing.TB, s *store.Store) int64 {
	tb.Helper()
	m, err := s.ObjectCount(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// TestApplyUpperScratch: ApplyUpper through a scratch Writer (a diff)
// builds the same tree as through a Writer, readable through the store
// while the Writer lives, and stores nothing: no object, and no stat
// cache (which would name content the store does not hold) — while the
// same apply through a Writer saves one.
func TestApplyUpperScratch(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	src, upper := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _ := importCommit(t, s, src, snapshot.ImportOptions{})
	if err := os.WriteFile(filepath.Join(upper, "a"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	added := bytes.Repeat([]byte("added line\n"), 20000)
	if err := os.WriteFile(filepath.Join(upper, "n"), added, 0o644); err != nil {
		t.Fatal(err)
	}
	waitRacy(t) // old enough for the stat cache
	changes := []snapshot.UpperChange{
		{Path: "a", Kind: snapshot.UpperModified, UpperPath: filepath.Join(upper, "a")},
		{Path: "n", Kind: snapshot.UpperAdded, UpperPath: filepath.Join(upper, "n")},
	}
	opts := snapshot.ApplyOptions{StatCacheRoot: upper, BaseStats: &base.Stats}
	objects := objectTotal(t, s)

	sw, err := s.NewScratchWriter(ctx, "diff")
	if err != nil {
		t.Fatal(err)
	}
	res, err := snapshot.ApplyUpper(ctx, s, sw, base.Tree, changes, opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := objectTotal(t, s); n != objects {
		t.Errorf("a scratch apply stored %d objects", n-objects)
	}
	if c, err := s.LoadStatCache(ctx, upper); err != nil || len(c) != 0 {
		t.Errorf("a scratch apply saved a stat cache of %d entries (%v)", len(c), err)
	}
	ch, err := snapshot.Diff(ctx, s, base.Tree, res.Tree)
	if err != nil || len(ch) != 2 {
		t.Fatalf("diff of the scratch tree: %v, %+v", err, ch)
	}
	var buf bytes.Buffer
	if _, err := s.ReadContentTo(ctx, ch[1].New.Content, &buf); err != nil || !bytes.Equal(buf.Bytes(), added) {
		t.Errorf("content of n read back: %d bytes, %v", buf.Len(), err)
	}
	sw.Abort()

	w, err := s.NewWriter(ctx, "commit")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	res2, err := snapshot.ApplyUpper(ctx, s, w, base.Tree, changes, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Tree != res.Tree {
		t.Errorf("a Writer built tree %s, the scratch Writer %s", res2.Tree.Short(), res.Tree.Short())
	}
	if c, err := s.LoadStatCache(ctx, upper); err != nil || len(c) != 2 {
		t.Errorf("a Writer's apply saved a stat cache of %d entries (%v), want 2", len(c), err)
	}
}
