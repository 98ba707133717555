package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/store"
)

func testID(b byte) store.ID {
	var id store.ID
	for i := range id {
		id[i] = b
	}
	return id
}

// TestRecordRoundTrip: a record survives its registry row, its JSON keeps
// the field names every earlier record was written with, and a store
// moved on disk finds its workspaces' uppers again.
func TestRecordRoundTrip(t *testing.T) {
	l := layout.New("/old/store")
	rec := &Record{
		Name: "a", Branch: "ws/a", Base: testID(1), Dir: l.Workspace("a"), CreatedNs: 42,
		Backend: BackendOverlay, Upper: "/old/store/workspaces/a/upper.abc", Work: "/old/store/workspaces/a/work.abc",
		SubIDs: true, Source: "/src", CreatedBranch: true, Fork: testID(2).String(), MountBase: testID(3).String(), FromBranch: "main",
	}
	row, err := rec.Row()
	if err != nil {
		t.Fatal(err)
	}
	if row.Name != "a" || row.Branch != "ws/a" || row.Base != testID(1) || row.CreatedNs != 42 || row.Dir != rec.Dir {
		t.Errorf("row columns %+v", row)
	}
	var keys map[string]any
	if err := json.Unmarshal(row.Extra, &keys); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range keys {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"backend", "created_branch", "fork", "from_branch", "mount_base", "source", "subids", "upper", "work"}
	if !slices.Equal(got, want) {
		t.Errorf("record JSON keys %q; want %q", got, want)
	}
	back, err := FromRow(l, row)
	if err != nil {
		t.Fatal(err)
	}
	if *back != *rec {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, rec)
	}
	// The store moved: the paths follow it (a tmpfs upper stays put).
	moved, _ := FromRow(layout.New("/new/store"), row)
	if moved.Dir != "/new/store/workspaces/a" || moved.Upper != "/new/store/workspaces/a/upper.abc" || moved.Work != "/new/store/workspaces/a/work.abc" {
		t.Errorf("moved store: %q %q %q", moved.Dir, moved.Upper, moved.Work)
	}
	rec.Tmpfs, rec.Upper, rec.Work = true, "/dev/shm/strata-1/x/a/upper", "/dev/shm/strata-1/x/a/work"
	row, _ = rec.Row()
	moved, _ = FromRow(layout.New("/new/store"), row)
	if moved.Upper != rec.Upper || moved.Work != rec.Work {
		t.Errorf("a tmpfs upper moved: %q %q", moved.Upper, moved.Work)
	}
}

// TestRecordLegacy: a record written before backends existed reads as an
// overlay workspace; one without a mount base or fork takes its base.
func TestRecordLegacy(t *testing.T) {
	l := layout.New("/s")
	row := &store.Workspace{Name: "old", Branch: "ws/old", Base: testID(7),
		Extra: []byte(`{"upper":"/s/workspaces/old/upper","work":"/s/workspaces/old/work","source":"/p","created_branch":true}`)}
	rec, err := FromRow(l, row)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Backend != BackendOverlay || rec.Source != "/p" || !rec.CreatedBranch || rec.Dir != "/s/workspaces/old" {
		t.Errorf("legacy record %+v", rec)
	}
	if rec.MountBaseID() != testID(7) || rec.ForkID() != testID(7) {
		t.Errorf("mount base %s, fork %s; want the base", rec.MountBaseID().Short(), rec.ForkID().Short())
	}
	rec.MountBase, rec.Fork = testID(8).String(), testID(9).String()
	if rec.MountBaseID() != testID(8) || rec.ForkID() != testID(9) {
		t.Error("recorded mount base or fork ignored")
	}
	m := &Manager{Layout: l}
	if _, err := m.Backend(rec); err != nil {
		t.Errorf("overlay backend: %v", err)
	}
	rec.Backend = "zfs"
	if _, err := m.Backend(rec); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown backend: %v; want ErrUnsupported", err)
	}
	if dirty, _ := m.Uncommitted(rec); !dirty {
		t.Error("a workspace of an unknown backend reads as clean")
	}
}

// TestRecordStore: Save, Load and List through the registry.
func TestRecordStore(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	st, _ := m.DB()
	src := t.TempDir()
	write(t, src+"/f", "x")
	base, _ := commitDir(t, m, src)
	rec := &Record{Name: "a", Branch: "ws/a", Base: base, Dir: m.Layout.Workspace("a"), Backend: BackendOverlay,
		Upper: m.Layout.Workspace("a") + "/upper", Work: m.Layout.Workspace("a") + "/work", FromBranch: "main"}
	if err := st.Update(ctx, func(tx *store.Tx) error { return Save(tx, rec) }); err != nil {
		t.Fatal(err)
	}
	got, err := m.Load(ctx, "a")
	if err != nil || *got != *rec {
		t.Fatalf("Load = %+v, %v; want %+v", got, err, rec)
	}
	if _, err := m.Load(ctx, "b"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "strata ws list") {
		t.Errorf("Load of a missing workspace: %v", err)
	}
	// A row whose fields cannot be read: Load says so, List still lists
	// it with the registry's columns.
	if err := st.Update(ctx, func(tx *store.Tx) error {
		return tx.PutWorkspace(&store.Workspace{Name: "bad", Branch: "ws/bad", Base: base, Extra: []byte("{")})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Load(ctx, "bad"); err == nil || !strings.Contains(err.Error(), "registry record") {
		t.Errorf("Load of a damaged record: %v", err)
	}
	all, err := m.List(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "a" || all[1].Name != "bad" || all[1].Base != base || all[1].Backend != BackendOverlay {
		t.Errorf("List = %+v, %v", all, err)
	}
}

// TestUnchanged: a transaction that finds the workspace committed or reset
// by another process meanwhile refuses.
func TestUnchanged(t *testing.T) {
	rec := &Record{Base: testID(1), Upper: "/s/workspaces/a/upper"}
	for _, tc := range []struct {
		cur  Record
		want bool
	}{
		{Record{Base: testID(1), Upper: "/moved/workspaces/a/upper"}, true},
		{Record{Base: testID(2), Upper: "/s/workspaces/a/upper"}, false},
		{Record{Base: testID(1), Upper: "/s/workspaces/a/upper.abc"}, false},
	} {
		if got := rec.Unchanged(&tc.cur); got != tc.want {
			t.Errorf("Unchanged(%+v) = %v", tc.cur, got)
		}
	}
}
