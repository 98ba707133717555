package strata

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/store"
)

// TestParseTarget: NAME | REF | A..B is read one way for every verb: a
// range where the verb takes one, a registered workspace (winning over a
// branch of its name, with ~N naming its branch's ancestors), else a ref.
func TestParseTarget(t *testing.T) {
	ctx := context.Background()
	r, err := Open(filepath.Join(t.TempDir(), "store"), OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	imp, err := r.Import(ctx, src, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A workspace "feat" on ws/feat, and a branch named "feat" too.
	if err := r.update(ctx, func(tx *store.Tx) error {
		for _, b := range []string{"ws/feat", "feat"} {
			if err := tx.SetRef(b, store.ZeroID, imp.Commit); err != nil {
				return err
			}
		}
		return workspace.Save(tx, &workspace.Record{Name: "feat", Branch: "ws/feat", Base: imp.Commit, Backend: workspace.BackendOverlay})
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arg    string
		ranges bool
		ref    string
		ws     bool
		exact  bool
		from   string
	}{
		{arg: "main..feat", ranges: true, from: "main"},
		{arg: "main..feat", ranges: false, ref: "main..feat"},
		{arg: "feat", ref: "ws/feat", ws: true, exact: true},
		{arg: "feat~1", ref: "ws/feat~1", ws: true},
		{arg: "feat^^", ref: "ws/feat^^", ws: true},
		{arg: "main", ref: "main"},
		{arg: "main~2", ref: "main~2"},
		{arg: "nosuch", ref: "nosuch"},
		{arg: "ws/feat", ref: "ws/feat"},
		{arg: "x~y", ref: "x~y"},
	} {
		got, err := r.parseTarget(ctx, "diff", tc.arg, tc.ranges)
		if err != nil {
			t.Errorf("%q: %v", tc.arg, err)
			continue
		}
		if got.Range != (tc.from != "") || got.From != tc.from || got.Ref != tc.ref || (got.WS != nil) != tc.ws || got.Exact != tc.exact {
			t.Errorf("%q (ranges %v): %+v", tc.arg, tc.ranges, got)
		}
	}
	for _, bad := range []string{"..feat", "main..", ".."} {
		if _, err := r.parseTarget(ctx, "apply", bad, true); !errors.Is(err, ErrInvalidArgument) || err.Error() != `apply "`+bad+`": want A..B` {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
