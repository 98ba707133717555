package workspace

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/workspace/layout"
)

// TestRemoveStale: what interrupted processes left goes once older than
// StaleAfter — a create's temporary directory, an unregistered workspace
// directory, an upper a reset replaced, a tmpfs directory without a
// workspace — and nothing a record names, nor the runs, nor the tmpfs
// directory's owner marker.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	l := layout.New(filepath.Join(dir, "store")).WithShm(filepath.Join(dir, "shm"))
	m := &Manager{Layout: l}
	mk := func(p string) string {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := l.Workspace("a")
	rec := Record{Name: "a", Dir: a, Upper: mk(filepath.Join(a, "upper.new")), Work: mk(filepath.Join(a, "work.new"))}
	tmpfsRec := Record{Name: "t", Dir: mk(l.Workspace("t")), Tmpfs: true, Upper: mk(filepath.Join(l.TmpfsWorkspace("t"), "upper")), Work: mk(filepath.Join(l.TmpfsWorkspace("t"), "work"))}
	oldUpper, oldWork := mk(filepath.Join(a, "upper")), mk(filepath.Join(a, "work.old"))
	merged := mk(filepath.Join(a, "merged"))
	creating := mk(filepath.Join(l.Workspaces(), ".tmp-b-123"))
	orphan := mk(l.Workspace("gone"))
	orphanTmpfs := mk(l.TmpfsWorkspace("gone"))
	runs := mk(l.Runs(false))
	diskRuns := mk(l.Runs(true))
	marker := filepath.Join(l.Tmpfs(), layout.TmpfsOwner)
	write(t, marker, l.Home())
	recs := []Record{rec, tmpfsRec}

	if got := m.removeStale(recs, time.Now()); len(got) != 0 {
		t.Errorf("young leftovers removed: %q", got)
	}
	got := m.removeStale(recs, time.Now().Add(StaleAfter+time.Minute))
	slices.Sort(got)
	want := []string{oldUpper, oldWork, creating, orphan, orphanTmpfs}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("removed %q; want %q", got, want)
	}
	for _, p := range []string{rec.Upper, rec.Work, merged, tmpfsRec.Upper, tmpfsRec.Work, tmpfsRec.Dir, runs, diskRuns, marker} {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
}
