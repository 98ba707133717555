package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stratafs/strata"
)

// TestExitFor: exit codes come from strata.Kind (docs/cli.md, "Exit
// codes"): usage errors — the CLI's own, a bad name, a bad argument — 2,
// conflicts 3, anything else 1.
func TestExitFor(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{usagef("unknown flag"), exitUsage},
		{fmt.Errorf("ws: %w", strata.ErrInvalidName), exitUsage},
		{fmt.Errorf("--net: %w", strata.ErrInvalidArgument), exitUsage},
		{fmt.Errorf("moved: %w", strata.ErrConflict), exitConflict},
		{fmt.Errorf("ref: %w", strata.ErrNotFound), exitError},
		{errors.New("disk on fire"), exitError},
	} {
		if got := exitFor(tc.err); got != tc.want {
			t.Errorf("exitFor(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
	if strata.Kind(usagef("x")) != strata.KindUsage || !isUsage(usagef("x")) {
		t.Error("a CLI usage error is not a usage error")
	}
}
