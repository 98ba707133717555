package layout

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayout: every path of a store, from its home, in one place.
func TestLayout(t *testing.T) {
	l := New("/srv/store")
	uid := os.Getuid()
	for got, want := range map[string]string{
		l.Home():                     "/srv/store",
		l.DB():                       "/srv/store/strata.db",
		l.Settings():                 "/srv/store/settings.json",
		l.Features():                 "/srv/store/features.json",
		l.Layers():                   "/srv/store/layers",
		l.LayersLock():               "/srv/store/layers.lock",
		l.Cache():                    "/srv/store/cache",
		l.Workspaces():               "/srv/store/workspaces",
		l.Workspace("a"):             "/srv/store/workspaces/a",
		l.Runs(true):                 "/srv/store/runs",
		l.Run(true, "r1"):            "/srv/store/runs/r1",
		l.TmpfsUser():                fmt.Sprintf("/dev/shm/strata-%d", uid),
		KeeperSocket("/w"):           "/w/keeper.sock",
		KeeperInfoFile("/w"):         "/w/keeper.json",
		MergedDir("/w"):              "/w/merged",
		CommittedIndexFile("/w"):     "/w/committed.idx",
		RunStateFile("/r"):           "/r/run.json",
		l.WithShm("/x").TmpfsUser():  fmt.Sprintf("/x/strata-%d", uid),
		New("rel").Home():            mustAbs(t, "rel"),
		l.TmpfsWorkspace("a"):        filepath.Join(l.Tmpfs(), "a"),
		l.Runs(false):                filepath.Join(l.Tmpfs(), "runs"),
		l.Run(false, "r1"):           filepath.Join(l.Tmpfs(), "runs", "r1"),
		filepath.Dir(l.Tmpfs()):      l.TmpfsUser(),
		l.WithShm("/x").Home():       "/srv/store",
		New("/srv/store/").Tmpfs():   l.Tmpfs(),
		New("/srv/store/").DB():      l.DB(),
		New("/srv/store2").Layers():  "/srv/store2/layers",
		l.WithShm("/x").Workspaces(): "/srv/store/workspaces",
	} {
		if got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	// The tmpfs directory names the store by a hash of its home: stable,
	// and different for another store.
	if a, b := l.Tmpfs(), New("/srv/other").Tmpfs(); a == b || len(filepath.Base(a)) != 12 {
		t.Errorf("tmpfs dirs %q and %q", a, b)
	}
	if New("/srv/store").Tmpfs() != l.Tmpfs() {
		t.Error("the tmpfs directory of one store changed")
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestUpperNames: a reset's fresh upper and work, how a moved store finds
// them again, and which names gc takes for uppers.
func TestUpperNames(t *testing.T) {
	u, w := FreshUpper("/s/workspaces/a", "abc")
	if u != "/s/workspaces/a/upper.abc" || w != "/s/workspaces/a/work.abc" {
		t.Errorf("FreshUpper = %q, %q", u, w)
	}
	for _, tc := range []struct{ dir, recorded, kind, want string }{
		{"/new/workspaces/a", "/old/workspaces/a/upper.abc", Upper, "/new/workspaces/a/upper.abc"},
		{"/new/workspaces/a", "/old/workspaces/a/upper", Upper, "/new/workspaces/a/upper"},
		{"/new/workspaces/a", "", Upper, "/new/workspaces/a/upper"},
		{"/new/workspaces/a", "/old/workspaces/a/work.x", Work, "/new/workspaces/a/work.x"},
		// A name that is not an upper's does not travel.
		{"/new/workspaces/a", "/old/elsewhere/other", Upper, "/new/workspaces/a/upper"},
	} {
		if got := Relocate(tc.dir, tc.recorded, tc.kind); got != tc.want {
			t.Errorf("Relocate(%q, %q, %q) = %q; want %q", tc.dir, tc.recorded, tc.kind, got, tc.want)
		}
	}
	for name, want := range map[string]bool{"upper": true, "work": true, "upper.1a": true, "work.1a": true, "merged": false, "keeper.sock": false, "uppers": false} {
		if IsUpperOrWork(name) != want {
			t.Errorf("IsUpperOrWork(%q) = %v", name, !want)
		}
	}
}

// TestDefaultHome: $STRATA_HOME, then $XDG_DATA_HOME/strata, then
// ~/.local/share/strata.
func TestDefaultHome(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("STRATA_HOME", "")
	for _, tc := range []struct{ strata, xdg, want string }{
		{"/s", "/x", "/s"},
		{"", "/x", "/x/strata"},
		{"", "", "/home/u/.local/share/strata"},
	} {
		t.Setenv("STRATA_HOME", tc.strata)
		t.Setenv("XDG_DATA_HOME", tc.xdg)
		if got, err := DefaultHome(); err != nil || got != tc.want {
			t.Errorf("DefaultHome with STRATA_HOME=%q XDG_DATA_HOME=%q = %q, %v; want %q", tc.strata, tc.xdg, got, err, tc.want)
		}
	}
	if !strings.HasPrefix(ShmDir, "/dev/") {
		t.Errorf("ShmDir %q", ShmDir)
	}
}
