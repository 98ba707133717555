package gogit

import (
	"github.com/stratafs/strata/worktree"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUnprivileged runs the main tests again as an unprivileged user:
// Snapshot, the synthetic .git and ExportGit need no privilege, and an
// unreadable file in an ignored directory is skipped with a warning.
func TestUnprivileged(t *testing.T) {
	if !runAsUser(t, "^(TestSnapshotMatchesGitArchive|TestSyntheticDotGit|TestExportGit|TestSnapshotTrackedInIgnored|TestSnapshotUnreadableInIgnored)$") {
		t.Skip("not root: the tests run unprivileged already")
	}
}

func TestSnapshotUnreadableInIgnored(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads everything; runs in TestUnprivileged")
	}
	r := newTestRepo(t)
	secret := filepath.Join(r.dir, "node_modules/b/secret.js")
	writeFile(t, secret, "secret\n", 0o644)
	if err := os.Chmod(secret, 0); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	var warned []string
	res := snap(t, s, r.dir, worktree.SnapshotOptions{Warn: func(p, msg string) { warned = append(warned, p+": "+msg) }})
	if len(warned) != 1 || !strings.HasPrefix(warned[0], "node_modules/b/secret.js: ") {
		t.Errorf("warnings %q", warned)
	}
	if !slices.Contains(res.Ignored, "node_modules") {
		t.Errorf("Ignored = %q", res.Ignored)
	}
	d := materialize(t, s, res.Tree)
	if _, err := os.Lstat(filepath.Join(d, "node_modules/b/secret.js")); err == nil {
		t.Error("the unreadable file is in the snapshot")
	}
	if _, err := os.Lstat(filepath.Join(d, "node_modules/b/package.json")); err != nil {
		t.Error(err)
	}
}
