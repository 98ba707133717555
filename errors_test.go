package strata

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stratafs/strata/store"
)

// TestKind: each category of error has its kind, whatever wraps it; the
// branch CAS's double-wrapped errors are conflicts first.
func TestKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{invalidf("--net %q: want host or none", "x"), KindUsage},
		{fmt.Errorf("workspace name: %w", ErrInvalidName), KindInvalidName},
		{fmt.Errorf("branch moved: %w (%w)", store.ErrConflict, store.ErrNotFound), KindConflict},
		{fmt.Errorf("branch exists: %w (%w)", store.ErrConflict, store.ErrExists), KindConflict},
		{&ConflictError{Into: "main"}, KindConflict},
		{&RebaseConflictError{}, KindConflict},
		{fmt.Errorf("ref: %w", ErrNotFound), KindNotFound},
		{fmt.Errorf("ws: %w", ErrExists), KindExists},
		{fmt.Errorf("home: %w", ErrNoStore), KindNoStore},
		{fmt.Errorf("x: %w", ErrReadOnly), KindReadOnly},
		{fmt.Errorf("x: %w", ErrNoSpace), KindNoSpace},
		{fmt.Errorf("x: %w", ErrCorrupt), KindCorrupt},
		{fmt.Errorf("overlay: %w", ErrUnsupported), KindUnsupported},
		{&fs.PathError{Op: "open", Path: "/x", Err: fs.ErrPermission}, KindPermission},
		{fmt.Errorf("import: %w", context.Canceled), KindInterrupted},
		{&PatchError{File: "a", Err: errors.New("bad hunk")}, KindError},
		{errors.New("something"), KindError},
	} {
		if got := Kind(tc.err); got != tc.want {
			t.Errorf("Kind(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}
