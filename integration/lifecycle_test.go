//go:build integration

package integration

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestResetDecidesFirst pins issue 12's defect 1: with two workspaces on
// one branch, a reset onto a ref the branch cannot move to (it moved since
// the workspace's base) emptied the upper and then failed with "branch
// moved meanwhile". It must fail (exit 3) with the changes intact; and the
// reset the refused commit advises — onto the branch's head — succeeds.
func TestResetDecidesFirst(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("branch", "create", "feat")
	h.ok("ws", "create", "a", "--branch", "feat")
	defer h.run("ws", "rm", "--force", "a")
	h.ok("ws", "create", "b", "--branch", "feat")
	defer h.run("ws", "rm", "--force", "b")
	h.ok("exec", "a", "--", "sh", "-c", "echo a > a.txt")
	h.ok("exec", "b", "--", "sh", "-c", "echo b > b.txt")
	h.ok("commit", "a")
	h.fails(3, "commit", "b")
	featHead := h.ok("log", "feat", "-n", "1").stdout
	h.ok("ws", "create", "c")
	defer h.run("ws", "rm", "--force", "c")
	h.ok("exec", "c", "--", "sh", "-c", "echo c > c.txt")
	h.ok("commit", "c")

	r := h.fails(3, "reset", "b", "ws/c")
	if !strings.Contains(r.stderr, "nothing changed") {
		t.Errorf("refused reset does not say nothing changed:\n%s", r)
	}
	if got := h.ok("exec", "b", "--", "cat", "b.txt").stdout; got != "b\n" {
		t.Fatalf("a refused reset lost the workspace's changes: b.txt = %q", got)
	}
	if h.ok("log", "feat", "-n", "1").stdout != featHead {
		t.Errorf("a refused reset moved the branch")
	}

	h.ok("reset", "b", "feat")
	h.ok("exec", "b", "--", "test", "!", "-e", "b.txt")
	h.ok("exec", "b", "--", "test", "-f", "a.txt")
	h.ok("exec", "b", "--", "sh", "-c", "echo again > b.txt")
	h.ok("commit", "b")
	h.fsckClean()
}

// TestBranchDeleteRefusesForked pins issue 12's defect 6: `branch delete
// main` succeeded while workspaces were forked from it, and afterwards
// `branch create X` failed ("ref main: no such branch"). It must exit 3
// naming the workspaces and change nothing, unless --force; a branch a
// workspace is bound to is refused even with --force.
func TestBranchDeleteRefusesForked(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "a")
	defer h.run("ws", "rm", "--force", "a")
	h.ok("ws", "create", "b")
	defer h.run("ws", "rm", "--force", "b")
	r := h.fails(3, "branch", "delete", "main")
	for _, w := range []string{"a", "b"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("refusal does not name workspace %s:\n%s", w, r)
		}
	}
	h.ok("branch", "create", "x")
	r = h.fails(3, "branch", "delete", "--force", "ws/a")
	if !strings.Contains(r.stderr, `"a"`) && !strings.Contains(r.stderr, " a ") {
		t.Errorf("refusal does not name workspace a:\n%s", r)
	}
	h.ok("branch", "delete", "--force", "main")
	h.fails(1, "log", "main")
}

// TestCleanAfterCommit pins issue 12's defect 2: right after a commit, `ws
// rm` refused ("uncommitted changes") while diff was empty, `ws list`
// CHANGES showed the old size, and every commit re-read all that the
// workspace ever changed (five 1-file commits read 1, 2, 3, 4, 5 files).
// After a commit the workspace is clean by every measure and the next
// commit reads only what changed since; what it commits is still the whole
// merged view, through deletions, renames and new directories.
func TestCleanAfterCommit(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	type commitRes struct {
		Commit      string `json:"commit"`
		Clean       bool   `json:"clean"`
		FilesRead   int64  `json:"files_read"`
		Incremental bool   `json:"incremental"`
	}
	for i := 0; i < 5; i++ {
		h.ok("exec", "w", "--", "sh", "-c", "echo "+itoa(i)+" > new"+itoa(i)+".txt")
		var c commitRes
		h.okJSON(&c, "commit", "w")
		if c.FilesRead != 1 {
			t.Errorf("commit %d read %d files, want 1 (only what changed since the last commit)", i+1, c.FilesRead)
		}
		var wl []struct {
			Name    string `json:"name"`
			Changes int64  `json:"changes_bytes"`
		}
		for _, line := range strings.Split(strings.TrimSpace(h.ok("ws", "list", "--json").stdout), "\n") {
			var one struct {
				Name    string `json:"name"`
				Changes int64  `json:"changes_bytes"`
			}
			if err := json.Unmarshal([]byte(line), &one); err == nil {
				wl = append(wl, one)
			} else if err := json.Unmarshal([]byte(line), &wl); err != nil {
				t.Fatalf("ws list --json: %v\n%s", err, line)
			}
		}
		for _, e := range wl {
			if e.Name == "w" && e.Changes != 0 {
				t.Errorf("after commit %d: ws list CHANGES = %d, want 0", i+1, e.Changes)
			}
		}
	}
	// Every kind of change, committed in steps; each commit must equal
	// the merged view.
	steps := []string{
		"echo changed > src/app.txt && rm docs/readme && mkdir -p fresh/sub && echo f > fresh/sub/f",
		"rm new1.txt && rm -rf fresh && mkdir fresh && echo again > fresh/g && chmod 700 tree",
		"mv new2.txt tree/a/moved.txt && echo x >> tree/a/b/t1 && ln -sf app.txt src/lnk",
		"rm -rf tree/a && mkdir -p tree/a && echo back > tree/a/only && touch -r src/run.sh src/app.txt",
		"echo more > fresh/g2 && rm fresh/g && chmod 755 tree",
	}
	for i, s := range steps {
		h.ok("exec", "w", "--", "sh", "-c", s)
		var c commitRes
		h.okJSON(&c, "commit", "w")
		if !c.Incremental {
			t.Errorf("step %d (%s): the commit read the whole upper, want only the changes since the last commit", i+1, s)
		}
		exp := filepath.Join(t.TempDir(), "exp")
		h.ok("export", c.Commit, exp)
		view := strings.TrimSpace(h.ok("ws", "path", "w").stdout)
		if out, err := exec.Command("diff", "-r", "--no-dereference", exp, view).CombinedOutput(); err != nil {
			t.Fatalf("step %d (%s): the commit differs from the merged view: %v\n%s", i+1, s, err, out)
		}
		if r := h.ok("diff", "w", "--stat"); strings.TrimSpace(r.stdout) != "" {
			t.Errorf("step %d: not clean after commit:\n%s", i+1, r.stdout)
		}
	}
	h.ok("ws", "rm", "w")
	h.fsckClean()
}

// TestRebase pins issue 12's defect 3 (no way forward for a workspace
// whose branch moved): `strata rebase NAME [REF]` merges the workspace's
// commits and uncommitted changes onto REF three ways; on conflict it
// exits 3, lists the paths and changes nothing; --conflict=markers writes
// git-style markers for an agent to resolve and commit.
func TestRebase(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("branch", "create", "feat")
	for _, w := range []string{"a", "b"} {
		h.ok("ws", "create", w, "--branch", "feat")
		defer h.run("ws", "rm", "--force", w)
	}
	// Disjoint changes: b's uncommitted work lands on a's commit.
	h.ok("exec", "a", "--", "sh", "-c", "echo a > a.txt && printf 'line 1 a\\nline 2\\nline 3\\n' > src/app.txt")
	h.ok("commit", "a")
	h.ok("exec", "b", "--", "sh", "-c", "echo b > b.txt && printf 'line 1\\nline 2\\nline 3 b\\n' > src/app.txt")
	h.fails(3, "commit", "b")
	h.ok("rebase", "b")
	if got := h.ok("exec", "b", "--", "cat", "src/app.txt", "a.txt", "b.txt").stdout; got != "line 1 a\nline 2\nline 3 b\na\nb\n" {
		t.Errorf("after rebase: %q", got)
	}
	if r := h.ok("diff", "b", "--name-status"); !strings.Contains(r.stdout, "b.txt") || strings.Contains(r.stdout, "a.txt") {
		t.Errorf("after rebase, b's uncommitted changes are not exactly its own:\n%s", r.stdout)
	}
	h.ok("commit", "b")

	// A conflict: refused, nothing changed; then markers.
	h.ok("exec", "a", "--", "true") // a is behind now
	h.ok("rebase", "a")
	h.ok("exec", "a", "--", "sh", "-c", "printf 'line 1 a\\nline 2 A\\nline 3 b\\n' > src/app.txt")
	h.ok("commit", "a")
	h.ok("exec", "b", "--", "sh", "-c", "printf 'line 1 a\\nline 2 B\\nline 3 b\\n' > src/app.txt && echo more > b2.txt")
	before := h.ok("ws", "list").stdout
	r := h.fails(3, "rebase", "b")
	if !strings.Contains(r.stderr, "src/app.txt") || !strings.Contains(r.stderr, "nothing was changed") {
		t.Errorf("conflicting rebase does not list the path or say nothing changed:\n%s", r)
	}
	if got := h.ok("exec", "b", "--", "cat", "src/app.txt").stdout; got != "line 1 a\nline 2 B\nline 3 b\n" {
		t.Errorf("a refused rebase changed the workspace: %q", got)
	}
	if after := h.ok("ws", "list").stdout; after != before {
		t.Errorf("a refused rebase changed the registry:\n%s\n%s", before, after)
	}
	h.ok("rebase", "b", "--conflict=markers")
	got := h.ok("exec", "b", "--", "cat", "src/app.txt").stdout
	want := "line 1 a\n<<<<<<< feat\nline 2 A\n=======\nline 2 B\n>>>>>>> b\nline 3 b\n"
	if got != want {
		t.Errorf("markers: got %q, want %q", got, want)
	}
	h.ok("exec", "b", "--", "test", "-f", "b2.txt")
	h.ok("exec", "b", "--", "sh", "-c", "printf 'line 1 a\\nline 2 AB\\nline 3 b\\n' > src/app.txt")
	h.ok("commit", "b")

	// A workspace's own commits are carried onto another ref.
	h.ok("ws", "create", "c")
	defer h.run("ws", "rm", "--force", "c")
	h.ok("ws", "create", "d")
	defer h.run("ws", "rm", "--force", "d")
	h.ok("exec", "c", "--", "sh", "-c", "echo c > c.txt")
	var cp struct {
		Commit string `json:"commit"`
	}
	h.okJSON(&cp, "commit", "c", "-m", "c's checkpoint")
	h.ok("exec", "c", "--", "sh", "-c", "echo c2 > c2.txt")
	h.ok("exec", "d", "--", "sh", "-c", "echo d > d.txt")
	h.ok("commit", "d")
	h.ok("promote", "d")
	h.ok("rebase", "c", "main")
	h.ok("exec", "c", "--", "test", "-f", "d.txt")
	h.ok("exec", "c", "--", "test", "-f", "c.txt")
	if got := h.ok("diff", "c", "--name-status").stdout; !strings.Contains(got, "c2.txt") || strings.Contains(got, "c.txt\n") && !strings.Contains(got, "c2.txt") {
		t.Errorf("c's uncommitted change after rebase:\n%s", got)
	}
	if got := h.ok("show", "ws/c").stdout; !strings.Contains(got, "parent "+cp.Commit) {
		t.Errorf("c's checkpoint is not a parent of its branch's head after rebase:\n%s", got)
	}
	h.ok("commit", "c")
	h.ok("promote", "c")
	h.fsckClean()
}
