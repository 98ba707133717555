//go:build integration

// Package integration holds strata's end-to-end tests against the real
// kernel: real namespaces, overlay mounts, SQLite files, Landlock, seccomp
// and npm dependency trees. `make test` runs them twice, as root and as an
// unprivileged user (scripts/integration.sh).
//
// They drive the built binary named by $STRATA_BIN, as users and harnesses
// do, and use the shared corpus at $STRATA_CORPUS.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

// bin is the strata binary under test.
func bin(t testing.TB) string {
	t.Helper()
	b := os.Getenv("STRATA_BIN")
	if b == "" {
		t.Fatal("STRATA_BIN is not set: run the integration tests with `make integration`")
	}
	return b
}

// corpus is the shared corpus (a git repo with history and a real
// node_modules), built by `make corpus`.
func corpus(t testing.TB) string {
	t.Helper()
	c := os.Getenv("STRATA_CORPUS")
	if c == "" {
		testutil.Skip(t, "STRATA_CORPUS is not set: run `make corpus` and export it")
	}
	if _, err := os.Stat(filepath.Join(c, "node_modules")); err != nil {
		testutil.Skip(t, "corpus missing at "+c+": run `make corpus`")
	}
	return c
}

// result is one strata invocation.
type result struct {
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return "exit " + itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// home is a store for one test.
type home struct {
	t   testing.TB
	dir string
	env []string
}

func newHome(t testing.TB) *home {
	t.Helper()
	h := &home{t: t, dir: filepath.Join(t.TempDir(), "store")}
	return h
}

// run runs strata --home DIR args... and returns its result without
// failing the test.
func (h *home) run(args ...string) result {
	h.t.Helper()
	return h.runIn(context.Background(), "", nil, args...)
}

func (h *home) runIn(ctx context.Context, dir string, stdin []byte, args ...string) result {
	h.t.Helper()
	cmd := exec.CommandContext(ctx, bin(h.t), append([]string{"--home", h.dir}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), h.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		h.t.Fatalf("strata %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ok runs strata and fails the test unless it exits 0.
func (h *home) ok(args ...string) result {
	h.t.Helper()
	start := time.Now()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("strata %s: %s", strings.Join(args, " "), r)
	}
	if d := time.Since(start); d > 10*time.Second {
		h.t.Logf("strata %s took %s", strings.Join(args, " "), d.Round(time.Millisecond))
	}
	return r
}

// fails runs strata and fails the test unless it exits with code; it
// returns the result for checking the message.
func (h *home) fails(code int, args ...string) result {
	h.t.Helper()
	r := h.run(args...)
	if r.code != code {
		h.t.Fatalf("strata %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	return r
}

// okJSON runs strata --json and decodes its single-object output into v.
func (h *home) okJSON(v any, args ...string) {
	h.t.Helper()
	r := h.ok(append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		h.t.Fatalf("strata --json %s: decoding %q: %v", strings.Join(args, " "), r.stdout, err)
	}
}

// fsckClean asserts that fsck finds nothing wrong.
func (h *home) fsckClean() {
	h.t.Helper()
	h.ok("fsck")
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// sh runs a shell command, failing the test on error.
func sh(t testing.TB, dir, script string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-ec", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh -c %q: %v\n%s", script, err, out)
	}
	return string(out)
}

// parallel marks one of the long tests that may run beside another: each
// has its own home, registry, images and temporary directories, and none
// measures time. Most of a test's time is spent waiting for the processes
// it starts, one at a time, so two of them together use the CI machine's
// two cores where one leaves a third of them idle (CI must stay under 30
// minutes). STRATA_IT_SERIAL=1 runs them one after another.
func parallel(t *testing.T) {
	if os.Getenv("STRATA_IT_SERIAL") != "1" {
		t.Parallel()
	}
}
