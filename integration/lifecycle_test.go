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
