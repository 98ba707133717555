//go:build integration

package integration

import (
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
