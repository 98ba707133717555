package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/store"
)

// testSweeper is a sweeper of a store at home with its tmpfs directories
// under shm, a clock that says now, and runs alive when alive says so.
func testSweeper(t *testing.T, now time.Time, alive func(runState) bool) *sweeper {
	t.Helper()
	dir := t.TempDir()
	l := layout.New(filepath.Join(dir, "store")).WithShm(filepath.Join(dir, "shm"))
	return &sweeper{l: l, now: func() time.Time { return now }, alive: alive, missing: missingWithin}
}

func mkRun(t *testing.T, root, name, state string) string {
	t.Helper()
	d := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(d, "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	if state != "-" {
		if err := os.WriteFile(filepath.Join(d, layout.RunState), []byte(state), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestCleanRunsKeepsUnreadableYoungRuns: a run whose state file cannot be
// read (being written, or torn) is left alone while young; one whose
// process is gone goes. (With the real liveness test: this process.)
func TestCleanRunsKeepsUnreadableYoungRuns(t *testing.T) {
	s := testSweeper(t, time.Now(), runAlive)
	root := s.l.Runs(true)
	_, start, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	empty := mkRun(t, root, "empty", "")
	torn := mkRun(t, root, "torn", `{"pid":12`)
	missing := mkRun(t, root, "missing", "-")
	live := mkRun(t, root, "live", fmt.Sprintf(`{"pid":%d,"start":%d}`, os.Getpid(), start))
	dead := mkRun(t, root, "dead", fmt.Sprintf(`{"pid":%d,"start":%d}`, os.Getpid(), start+1))
	s.cleanRuns(false)
	for _, d := range []string{empty, torn, missing, live} {
		if !exists(d) {
			t.Errorf("%s was swept", filepath.Base(d))
		}
	}
	if exists(dead) {
		t.Error("the dead run is still there")
	}
	// StaleAfter later, the runs without a readable state file go too;
	// the live one stays.
	s.now = func() time.Time { return time.Now().Add(StaleAfter + time.Minute) }
	s.cleanRuns(false)
	for _, d := range []string{empty, torn, missing} {
		if exists(d) {
			t.Errorf("%s outlived StaleAfter", filepath.Base(d))
		}
	}
	if !exists(live) {
		t.Error("the live run was swept")
	}
}

// TestSweepDeletedStores: the tmpfs directory of a store whose database is
// gone is removed once untouched for two seconds — not while young, not
// that of a store that exists, and never this store's own.
func TestSweepDeletedStores(t *testing.T) {
	s := testSweeper(t, time.Now(), func(runState) bool { return false })
	user := s.l.TmpfsUser()
	mk := func(name, home string) string {
		d := filepath.Join(user, name)
		if err := os.MkdirAll(filepath.Join(d, layout.RunsName), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, layout.TmpfsOwner), []byte(home), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	live := filepath.Join(t.TempDir(), "live")
	write(t, layout.New(live).DB(), "")
	gone := mk("gone", filepath.Join(t.TempDir(), "deleted-store"))
	present := mk("present", live)
	mine := mk(filepath.Base(s.l.Tmpfs()), filepath.Join(t.TempDir(), "deleted-too"))
	s.sweepDeletedStores()
	if !exists(gone) {
		t.Error("a deleted store's directory went while young")
	}
	s.now = func() time.Time { return time.Now().Add(3 * time.Second) }
	s.sweepDeletedStores()
	if exists(gone) {
		t.Error("a deleted store's directory stayed")
	}
	if !exists(present) || !exists(mine) {
		t.Error("an existing store's directory, or this store's own, went")
	}
}

// TestSweepDue: the sweep of every store's runs happens at most once a
// sweepEvery, by the marker's mtime.
func TestSweepDue(t *testing.T) {
	t0 := time.Now()
	s := testSweeper(t, t0, nil)
	if !s.sweepDue() {
		t.Fatal("the first sweep is not due")
	}
	if s.sweepDue() {
		t.Error("a second sweep at once")
	}
	s.now = func() time.Time { return t0.Add(sweepEvery / 2) }
	if s.sweepDue() {
		t.Error("a sweep within sweepEvery")
	}
	s.now = func() time.Time { return t0.Add(sweepEvery + time.Second) }
	if !s.sweepDue() {
		t.Error("no sweep after sweepEvery")
	}
}

// TestLiveRunBases: gc keeps the bases of the live runs only, tmpfs and
// disk alike.
func TestLiveRunBases(t *testing.T) {
	s := testSweeper(t, time.Now(), func(st runState) bool { return st.PID == 1 })
	mkRun(t, s.l.Runs(false), "a", fmt.Sprintf(`{"pid":1,"base":%q}`, testID(1)))
	mkRun(t, s.l.Runs(true), "b", fmt.Sprintf(`{"pid":1,"base":%q}`, testID(2)))
	mkRun(t, s.l.Runs(true), "c", fmt.Sprintf(`{"pid":2,"base":%q}`, testID(3)))
	mkRun(t, s.l.Runs(true), "d", "-")
	got := s.liveRunBases()
	if !slices.Equal(got, []store.ID{testID(1), testID(2)}) {
		t.Errorf("live run bases %v", got)
	}
}
