package strata

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/store"
)

// TestDefaultBackend: the store's default backend is auto until set; it
// is kept across processes and beside the other settings; a bad name is
// refused; auto is stored as no setting.
func TestDefaultBackend(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	r, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := r.DefaultBackend(); err != nil || b != "" {
		t.Fatalf("default %q, %v", b, err)
	}
	if err := r.SetDefaultBackend("zfs"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("zfs: %v", err)
	}
	if err := r.SetMaxLayers(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDefaultBackend(BackendCopy); err != nil {
		t.Fatal(err)
	}
	r2, err := Open(home, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if b, _ := r2.DefaultBackend(); b != BackendCopy {
		t.Errorf("reopened: %q", b)
	}
	if n, _ := r2.MaxLayers(); n != 100 {
		t.Errorf("the backend setting lost max layers: %d", n)
	}
	// chooseBackend takes the store's default when none is asked for.
	if b, err := r2.chooseBackend(ctx, "", store.CommitStats{}, nil); err != nil || b != BackendCopy {
		t.Errorf("chooseBackend(\"\") = %q, %v", b, err)
	}
	if b, err := r2.chooseBackend(ctx, BackendOverlay, store.CommitStats{}, nil); err != nil || b != BackendOverlay {
		t.Errorf("chooseBackend(overlay) = %q, %v", b, err)
	}
	if err := r2.SetDefaultBackend(BackendAuto); err != nil {
		t.Fatal(err)
	}
	if b, _ := r2.DefaultBackend(); b != "" {
		t.Errorf("auto stored as %q", b)
	}
}

// TestCacheRootsPlain: gc keeps the layers of an overlay workspace's
// bases, not those of a reflink or copy workspace, whose tree is a clone
// that does not need them — unless a reset left its tree to be made
// (from its base's stack) on first use.
func TestCacheRootsPlain(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	r, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := map[byte]store.ID{}
	// One branch: only its head (a fourth commit) is a root of its own.
	for b := byte(1); b <= 4; b++ {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "f"), []byte{b}, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := r.Import(ctx, src, ImportOptions{Branch: "x"})
		if err != nil {
			t.Fatal(err)
		}
		ids[b] = res.Commit
	}
	id := func(b byte) store.ID { return ids[b] }
	made := filepath.Join(t.TempDir(), "upper")
	if err := os.Mkdir(made, 0o700); err != nil {
		t.Fatal(err)
	}
	recs := []*workspace.Record{
		{Name: "o", Branch: "ws/o", Base: id(1), Backend: BackendOverlay, Upper: made},
		{Name: "p", Branch: "ws/p", Base: id(2), Backend: BackendReflink},
		{Name: "q", Branch: "ws/q", Base: id(3), Backend: BackendCopy, Upper: "/nonexistent/upper.x", Work: "/nonexistent/work.x"},
	}
	if err := r.update(ctx, func(tx *store.Tx) error {
		for _, rec := range recs {
			if err := workspace.Save(tx, rec); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// p's tree exists: its records' paths are derived from the layout.
	if err := os.MkdirAll(filepath.Join(home, "workspaces", "p", "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	keep, _, err := r.cacheRoots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(keep, id(1)) || slices.Contains(keep, id(2)) || !slices.Contains(keep, id(3)) {
		t.Errorf("keep %v: want the overlay's base and the unmade copy's, not the made reflink's", keep)
	}
}

// TestRootBackend: an image-rooted workspace or run is an overlay stack;
// asking for a reflink or copy one is a usage error, before anything is
// made.
func TestRootBackend(t *testing.T) {
	for _, asked := range []string{"", BackendAuto, BackendOverlay} {
		got, err := rootBackend(asked)
		if err != nil || got != BackendOverlay {
			t.Errorf("rootBackend(%q) = %q, %v; want overlay", asked, got, err)
		}
	}
	for _, asked := range []string{BackendReflink, BackendCopy, "bogus"} {
		if got, err := rootBackend(asked); err == nil || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("rootBackend(%q) = %q, %v; want an invalid-argument error", asked, got, err)
		}
	}
}
