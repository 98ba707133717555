// Package testutil holds helpers shared by strata's tests: capability gates
// that skip with a reason, or fail when STRATA_TEST_NO_SKIP=1 (after
// restic's RESTIC_TEST_DISALLOW_SKIP) so that CI cannot pass by skipping.
package testutil

import (
	"os"
	"testing"
)

// NoSkip reports whether capability-gated skips must fail instead.
func NoSkip() bool { return os.Getenv("STRATA_TEST_NO_SKIP") == "1" }

// Skip skips the test with reason, or fails it when NoSkip.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if NoSkip() {
		t.Fatalf("required capability missing (STRATA_TEST_NO_SKIP=1): %s", reason)
	}
	t.Skip(reason)
}

// SkipShort skips a long test under -short. It is not a capability gate and
// never fails.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("long test; -short")
	}
}

// AsRoot runs the test only in the root pass of the suite (make test runs
// the integration tests once as root and once as an unprivileged user).
// This is an identity split, not a capability gate: it never fails.
func AsRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("root pass only")
	}
}

// AsUser runs the test only in the unprivileged pass of the suite.
func AsUser(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		t.Skip("unprivileged pass only")
	}
}
