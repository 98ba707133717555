package strata

import (
	"context"
	"errors"
	"testing"

	"github.com/stratafs/strata/store"
)

func TestSetMaxLayers(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	r, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n, err := r.MaxLayers(); err != nil || n != 64 {
		t.Fatalf("default = %d, %v; want 64", n, err)
	}
	for _, bad := range []int{0, -1, 501} {
		if err := r.SetMaxLayers(ctx, bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("SetMaxLayers(%d) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if err := r.SetMaxLayers(ctx, 100); err != nil {
		t.Fatal(err)
	}
	// Another process sees it.
	r2, err := Open(home, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if n, _ := r2.MaxLayers(); n != 100 {
		t.Fatalf("reopened: max layers %d, want 100", n)
	}
	// With a workspace, lowering is refused and raising is not.
	if err := r.update(ctx, func(tx *store.Tx) error {
		return tx.PutWorkspace(&store.Workspace{Name: "w", Branch: "main", Dir: t.TempDir()})
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetMaxLayers(ctx, 10); !errors.Is(err, ErrConflict) {
		t.Fatalf("lowering with a workspace = %v, want ErrConflict", err)
	}
	if err := r.SetMaxLayers(ctx, 200); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.MaxLayers(); n != 200 {
		t.Fatalf("max layers %d, want 200", n)
	}
}
