package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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

// TestBadInputMessages: errors about bad input name what is wrong and end
// without the bogus ": invalid name" of before (issue 19); they stay usage
// errors (exit 2).
func TestBadInputMessages(t *testing.T) {
	home := newHome(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"batch", write("json.jsonl", "{nope\n")}, "json.jsonl:1: invalid character"},
		{[]string{"batch", write("field.jsonl", `{"id": "a", "cmd": "true", "bogus": 1}`+"\n")}, `unknown field "bogus"`},
		{[]string{"batch", write("dup.jsonl", `{"id": "a", "cmd": "true"}`+"\n"+`{"id": "a", "cmd": "true"}`+"\n")}, `job id "a" already used on line 1`},
		{[]string{"batch", write("nocmd.jsonl", `{"id": "a"}`+"\n")}, "job a: no cmd"},
		{[]string{"batch", write("timeout.jsonl", `{"id": "a", "cmd": "true", "timeout": "soon"}`+"\n")}, `job a: timeout "soon"`},
		{[]string{"batch", write("sandbox.jsonl", `{"id": "a", "cmd": "true", "sandbox": "bogus"}`+"\n")}, `job a: sandbox "bogus"`},
		{[]string{"diff", "main.."}, "want A..B"},
		{[]string{"init", "--max-layers", "9999"}, "max layers 9999"},
	} {
		code, _, stderr := strataRun(t, append([]string{"--home", home}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "invalid name") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q, without \"invalid name\"", tc.args, code, stderr, tc.want)
		}
	}
}

// TestBatchValidatesAllFirst: a bad job on the last line stops the batch
// before the first (good) job runs, and every bad job is named (issue 19).
func TestBatchValidatesAllFirst(t *testing.T) {
	home := newHome(t)
	marker := filepath.Join(t.TempDir(), "ran")
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	jobs := `{"id": "good", "cmd": ["touch", "` + marker + `"]}` + "\n" +
		`{"id": "bad1", "cmd": "true", "net": "bogus"}` + "\n" +
		`{"id": "bad2", "cmd": "true", "keep": true, "commit": "x"}` + "\n"
	if err := os.WriteFile(file, []byte(jobs), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := strataRun(t, "--home", home, "batch", file)
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "2 of 3 jobs are invalid") ||
		!strings.Contains(stderr, `job bad1: net "bogus"`) || !strings.Contains(stderr, "job bad2: run: --keep and --commit") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the good job ran")
	}
}
