package main

import (
	"bytes"
	"os/exec"
	"sort"
	"strconv"
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

// TestCompletionBash: the bash script, loaded into a real bash, completes
// subcommands, aliases and flags from the command tree (issue 19).
func TestCompletionBash(t *testing.T) {
	code, script, stderr := strataRun(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d: %s", code, stderr)
	}
	for _, tc := range []struct{ words, want string }{
		{"strata ws c", "create"},
		{"strata --json ws ls --", "--help"},
		{"strata run --t", "--timeout --tmpfs"},
		{"strata ex", "exec export export-git"},
		{"strata branch cr", "create"},
	} {
		words := strings.Fields(tc.words)
		sh := script + "\nCOMP_WORDS=(" + tc.words + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "; _strata; echo \"${COMPREPLY[*]}\"\n"
		cmd := exec.Command("bash", "--norc", "-c", sh)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v: %s", err, out)
		}
		got := strings.Fields(string(out))
		sort.Strings(got)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%q: completions %q, want %q", tc.words, got, tc.want)
		}
	}
}

// TestCompletionShells: zsh and fish scripts name every command, and an
// unknown shell is a usage error.
func TestCompletionShells(t *testing.T) {
	code, out, _ := strataRun(t, "completion", "zsh")
	if code != 0 || !strings.HasPrefix(out, "#compdef strata") || !strings.Contains(out, "bashcompinit") {
		t.Errorf("zsh: exit %d, %.80q", code, out)
	}
	code, out, _ = strataRun(t, "completion", "fish")
	if code != 0 || !strings.Contains(out, "complete -c strata -f -n '__strata_at \\'ws\\'' -a 'create'") {
		t.Errorf("fish: exit %d, %.200q", code, out)
	}
	if code, _, _ := strataRun(t, "completion", "tcsh"); code != exitUsage {
		t.Errorf("tcsh: exit %d, want %d", code, exitUsage)
	}
}

// TestHelpExamples: the main verbs' help shows examples.
func TestHelpExamples(t *testing.T) {
	for _, c := range []string{"import", "exec", "diff", "commit", "promote", "apply", "run", "batch"} {
		_, out, _ := strataRun(t, "help", c)
		if !strings.Contains(out, "Examples:\n      strata "+c) && !(c == "run" && strings.Contains(out, "Examples:")) {
			t.Errorf("help %s: no examples in %q", c, out)
		}
	}
	_, out, _ := strataRun(t, "help", "ws", "create")
	if !strings.Contains(out, "strata ws create agent1") {
		t.Errorf("help ws create: no examples")
	}
}
