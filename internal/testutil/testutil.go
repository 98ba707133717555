// Package testutil holds helpers shared by strata's tests: capability gates
// that skip with a reason, or fail when STRATA_TEST_NO_SKIP=1 (after
// restic's RESTIC_TEST_DISALLOW_SKIP) so that CI cannot pass by skipping.
package testutil

import (
	"os"
	"os/exec"
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

// AsRootBecause is AsRoot that names why the test needs the root pass
// (e.g. /dev/fuse is open to root only): the unprivileged pass reports the
// reason. Like AsRoot, it never fails.
func AsRootBecause(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("root pass only: " + why)
	}
}

// AsUser runs the test only in the unprivileged pass of the suite.
func AsUser(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		t.Skip("unprivileged pass only")
	}
}

// Corpus returns the shared test corpus ($STRATA_CORPUS, built by `make
// corpus`: a git repository with a real node_modules). Unset, the test is
// skipped (a plain `go test` run); set but missing or incomplete, it is a
// capability gate: skipped with the reason, or failed under NoSkip — the
// Makefile builds the corpus before any test that reads it.
func Corpus(t testing.TB) string {
	t.Helper()
	c := os.Getenv("STRATA_CORPUS")
	if c == "" {
		if NoSkip() {
			t.Fatal("STRATA_CORPUS is not set (STRATA_TEST_NO_SKIP=1): run the tests through `make test`, which builds it")
		}
		t.Skip("STRATA_CORPUS is not set: `make corpus` builds it")
	}
	if _, err := os.Stat(c + "/node_modules"); err != nil {
		Skip(t, "the corpus is missing at "+c+" ("+err.Error()+"): run `make corpus`")
	}
	return c
}

// LookPath returns the path of a program a test needs, or skips (fails
// under NoSkip) naming it: `make deps` installs what the tests use.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, name+" is not installed (`make deps` installs it): "+err.Error())
	}
	return p
}

// Images returns the directory of the test container images
// ($STRATA_IMAGES, built by `make images`: oci/ with tags base, env and
// instance, env.tar and instance.tar). Like Corpus: unset, the test is
// skipped; set but not built, it is a capability gate.
func Images(t testing.TB) string {
	t.Helper()
	d := os.Getenv("STRATA_IMAGES")
	if d == "" {
		if NoSkip() {
			t.Fatal("STRATA_IMAGES is not set (STRATA_TEST_NO_SKIP=1): run the tests through `make test`, which builds them")
		}
		t.Skip("STRATA_IMAGES is not set: `make images` builds them")
	}
	if _, err := os.Stat(d + "/.key"); err != nil {
		Skip(t, "the test images are missing at "+d+" ("+err.Error()+"): run `make images` as root")
	}
	return d
}
