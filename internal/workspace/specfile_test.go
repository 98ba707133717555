package workspace

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/store"
)

// TestSaveSpec: the lifecycle writes a keeper spec file for a workspace
// the front can serve — and removes it for one it cannot: another
// backend, an image root, a record field the front does not know — and
// a reset removes it before anything changes (the front must not start
// the old tree).
func TestSaveSpec(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	rec := &Record{Name: "a", Backend: BackendOverlay, Base: testID(1), MountBase: testID(1).String(), Source: "/src", Fork: testID(1).String()}
	if _, err := m.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	spec := nsexec.Spec{Name: "a", Dir: rec.Dir, Lowers: []string{"/l"}, Upper: rec.Upper, Work: rec.Work, Target: "/src"}
	m.saveSpec(rec, spec)
	f, err := hotpath.ReadSpec(rec.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.Spec.Upper != rec.Upper || f.MountDir != "/src" || f.UID != os.Geteuid() || f.MaxLayers != 0 {
		t.Errorf("spec file %+v", f)
	}
	for name, change := range map[string]func(r *Record, s *nsexec.Spec){
		"another backend": func(r *Record, _ *nsexec.Spec) { r.Backend = "reflink" },
		"an image root":   func(_ *Record, s *nsexec.Spec) { s.Root = &nsexec.Root{} },
	} {
		r, s := *rec, spec
		change(&r, &s)
		m.saveSpec(rec, spec)
		m.saveSpec(&r, s)
		if _, err := hotpath.ReadSpec(rec.Dir); !errors.Is(err, hotpath.ErrNoSpec) {
			t.Errorf("%s: a spec file remains: %v", name, err)
		}
	}
	m.saveSpec(rec, spec)
	if _, err := m.Reset(ctx, rec, store.ZeroID, store.ZeroID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layout.KeeperSpecFile(rec.Dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a reset left the spec file: %v", err)
	}
}

// TestServableFields: a record that sets a field the front does not know
// (what a later strata adds: an image root, another backend's state) is
// not servable; the fields it knows are.
func TestServableFields(t *testing.T) {
	spec := &nsexec.Spec{}
	full := &Record{Backend: BackendOverlay, Upper: "/u", Work: "/w", Tmpfs: true, SubIDs: true, Source: "/s",
		CreatedBranch: true, Fork: "f", MountBase: "m", FromBranch: "main"}
	if !servable(full, spec) {
		t.Error("a record of known fields is not servable")
	}
	if !servableJSON([]byte(`{"backend":"overlay","upper":"/u"}`)) || servableJSON([]byte(`{"backend":"overlay","root_image":"x"}`)) || servableJSON([]byte(`nonsense`)) {
		t.Error("servableJSON")
	}
}
