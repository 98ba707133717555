package main

import (
	"bytes"
	"strings"
	"testing"
)

// strataRun runs the CLI in-process and returns its exit code, stdout and
// stderr.
func strataRun(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"strata"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// newHome returns a --home with an initialized store.
func newHome(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	if code, _, stderr := strataRun(t, "--home", home, "init"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	return home
}

// TestHelpSubcommand: `strata help ws create` shows create's help, not
// ws's (issue 19).
func TestHelpSubcommand(t *testing.T) {
	for _, args := range [][]string{{"help", "ws", "create"}, {"ws", "create", "--help"}, {"ws", "help", "create"}} {
		code, out, stderr := strataRun(t, args...)
		if code != 0 || !strings.Contains(out, "strata ws create") || !strings.Contains(out, "--from") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
	code, out, _ := strataRun(t, "help", "branch", "list")
	if code != 0 || !strings.Contains(out, "strata branch list") {
		t.Errorf("help branch list: exit %d, %q", code, out)
	}
}

// TestListAliases: `ws ls` and `branch ls` work as `ws list` and
// `branch list` (issue 19).
func TestListAliases(t *testing.T) {
	home := newHome(t)
	for _, args := range [][]string{{"ws", "ls"}, {"branch", "ls"}} {
		code, _, stderr := strataRun(t, append([]string{"--home", home}, args...)...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
}

// TestLogShortAttached: `log -n1` (git's form) is `log -n 1` (issue 19).
func TestLogShortAttached(t *testing.T) {
	home := newHome(t)
	code, _, stderr := strataRun(t, "--home", home, "log", "-n1")
	// The fresh store has no main yet: the flag must parse, the ref not
	// resolve.
	if code == 2 || strings.Contains(stderr, "flag provided but not defined") {
		t.Errorf("log -n1: exit %d: %s", code, stderr)
	}
}

// TestHelpTextsAgree: no flag's help states a default that its
// "(default: ...)" contradicts or repeats (issue 19).
func TestHelpTextsAgree(t *testing.T) {
	for _, args := range [][]string{{"init"}, {"diff"}, {"run"}, {"exec"}, {"shell"}, {"--help"}} {
		_, out, _ := strataRun(t, append(args, "--help")...)
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "default") > 1 {
				t.Errorf("%v: two defaults in %q", args, strings.TrimSpace(line))
			}
			if strings.Contains(line, "--max-layers") && !strings.Contains(line, "(default: 64)") {
				t.Errorf("init: %q", strings.TrimSpace(line))
			}
		}
	}
}
