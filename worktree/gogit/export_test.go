package gogit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// importDir imports dir as a commit and returns its tree.
func importDir(t testing.TB, s *store.Store, dir string) store.ID {
	t.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "test import")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	res, err := snapshot.Import(ctx, s, w, dir, snapshot.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Finish(func(tx *store.Tx) error {
		c, err := tx.PutCommit(&store.Commit{Tree: res.Tree, TimeNs: 2, Stats: res.Stats})
		if err != nil {
			return err
		}
		return tx.SetRef("import-"+filepath.Base(dir), store.ZeroID, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Tree
}

// nameStatus lists `git diff --name-status` between two revisions as
// "X\tpath" lines, sorted.
func nameStatus(t testing.TB, repo, a, b string) []string {
	t.Helper()
	out := git(t, repo, "diff", "--no-renames", "--name-status", "-z", a, b)
	f := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	var lines []string
	for i := 0; i+1 < len(f); i += 2 {
		lines = append(lines, f[i]+"\t"+f[i+1])
	}
	sort.Strings(lines)
	return lines
}

func TestExportGit(t *testing.T) {
	r := newTestRepo(t)
	writeFile(t, filepath.Join(r.dir, "forced.log"), "tracked though ignored\n", 0o644)
	git(t, r.dir, "add", "-f", "forced.log")
	gitAt(t, r.dir, "2020-05-06T07:08:09Z", "commit", "-q", "-m", "forced")
	head := strings.TrimSpace(git(t, r.dir, "rev-parse", "HEAD"))
	s := openStore(t)
	base := snap(t, s, r.dir, worktree.SnapshotOptions{})
	wd := materialize(t, s, base.Tree)

	// The change, made in a copy of the snapshot.
	p := func(rel string) string { return filepath.Join(wd, rel) }
	writeFile(t, p("README.md"), "# changed\n", 0o644)
	os.Remove(p("src/main.go"))
	writeFile(t, p("src/added.go"), "package main\n// added\n", 0o644)
	if err := os.Chmod(p("src/new.go"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "src/new.go", p("link"))
	symlink(t, "README.md", p("newlink"))
	os.Remove(p("dup2.txt"))
	symlink(t, "dup1.txt", p("dup2.txt"))
	os.RemoveAll(p("bin"))
	writeFile(t, p("bin"), "bin is a file now\n", 0o644)
	os.Remove(p("CHANGELOG"))
	writeFile(t, p("CHANGELOG/entry.txt"), "a directory now\n", 0o644)
	writeFile(t, p("new dir/nested/file.txt"), "deep\n", 0o644)
	writeFile(t, p(".gitignore"), "node_modules/\ndist/\n.venv/\nenv/\n*.log\n*.tmp\n", 0o644)
	writeFile(t, p("notes.tmp"), "ignored by the changed .gitignore\n", 0o644)
	writeFile(t, p("forced.log"), "tracked, changed\n", 0o644)
	writeFile(t, p("new.log"), "ignored\n", 0o644)
	writeFile(t, p("node_modules/new.js"), "ignored\n", 0o644)
	writeFile(t, p("node_modules/a/index.js"), "ignored change\n", 0o644)
	writeFile(t, p("dist/x.js"), "ignored\n", 0o644)
	writeFile(t, p("env/new.txt"), "ignored\n", 0o644)
	writeFile(t, p("packages/p1/node_modules/m/index.js"), "ignored change\n", 0o644)
	writeFile(t, p(".git/description"), "not exported\n", 0o644)
	if err := syscall.Mkfifo(p("pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := importDir(t, s, wd)

	srcStatus := git(t, r.dir, "status", "--porcelain", "--ignored")
	srcIndex, err := os.ReadFile(filepath.Join(r.dir, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	srcHead, err := os.ReadFile(filepath.Join(r.dir, ".git/HEAD"))
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	res, err := ExportGit(ctx, s, base.Tree, tree, base.Rev, r.dir, worktree.ExportOptions{Branch: "strata/test", Message: "the change"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"A\tCHANGELOG/entry.txt",
		"A\tbin",
		"A\tnew dir/nested/file.txt",
		"A\tnewlink",
		"A\tsrc/added.go",
		"D\tCHANGELOG",
		"D\tbin/run.sh",
		"D\tbin/tool",
		"D\tsrc/main.go",
		"M\t.gitignore",
		"M\tREADME.md",
		"M\tforced.log",
		"M\tlink",
		"M\tsrc/new.go",
		"T\tdup2.txt",
	}
	got := nameStatus(t, r.dir, head, "strata/test")
	if !slices.Equal(got, want) {
		t.Errorf("git diff --name-status:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if res.Changed != len(want) || res.Parent != head || res.Branch != "strata/test" ||
		strings.TrimSpace(git(t, r.dir, "rev-parse", "strata/test")) != res.Commit {
		t.Errorf("result %+v", res)
	}
	if !slices.Equal(res.Skipped, []string{"pipe"}) {
		t.Errorf("Skipped = %q", res.Skipped)
	}
	ls := git(t, r.dir, "ls-tree", "strata/test", "src/new.go", "link", "newlink", "dup2.txt", "README.md")
	for _, w := range []string{"100755 blob", "120000 blob"} {
		if !strings.Contains(ls, w) {
			t.Errorf("ls-tree lacks %q:\n%s", w, ls)
		}
	}
	for path, content := range map[string]string{
		"README.md": "# changed\n", "link": "src/new.go", "dup2.txt": "dup1.txt",
		"docs/big.bin": strings.Repeat("0123456789abcdef", 8<<10),
	} {
		if got := git(t, r.dir, "show", "strata/test:"+path); got != content {
			t.Errorf("%s = %.40q, want %.40q", path, got, content)
		}
	}
	if msg := git(t, r.dir, "log", "-1", "--format=%an <%ae>|%cn|%P|%B", "strata/test"); msg != "Repo User <repo@example.com>|Repo User|"+head+"|the change\n\n" {
		t.Errorf("commit: %q", msg)
	}
	patch := git(t, r.dir, "log", "-p", "-1", "strata/test")
	if !strings.Contains(patch, "+# changed") || !strings.Contains(patch, "new mode 100755") {
		t.Errorf("git log -p:\n%s", patch)
	}
	git(t, r.dir, "fsck", "--no-progress")

	// The working copy, index and HEAD are untouched.
	if got := git(t, r.dir, "status", "--porcelain", "--ignored"); got != srcStatus {
		t.Errorf("source status changed:\n%s\nwas:\n%s", got, srcStatus)
	}
	if b, _ := os.ReadFile(filepath.Join(r.dir, ".git/index")); !bytes.Equal(b, srcIndex) {
		t.Error("the source's index changed")
	}
	if b, _ := os.ReadFile(filepath.Join(r.dir, ".git/HEAD")); !bytes.Equal(b, srcHead) {
		t.Error("the source's HEAD changed")
	}

	// An existing branch is refused without Force, moved with it.
	_, err = ExportGit(ctx, s, base.Tree, tree, base.Rev, r.dir, worktree.ExportOptions{Branch: "strata/test"})
	if !errors.Is(err, store.ErrExists) {
		t.Errorf("existing branch: %v, want ErrExists", err)
	}
	again, err := ExportGit(ctx, s, base.Tree, tree, base.Rev, r.dir, worktree.ExportOptions{Branch: "strata/test", Force: true, Author: "Bo <bo@example.com>"})
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, r.dir, "log", "-1", "--format=%an <%ae>|%s", "strata/test"); got != "Bo <bo@example.com>|strata: "+tree.Short()+"\n" {
		t.Errorf("forced export: %q (%s)", got, again.Commit)
	}
	// The checked-out branch is never moved.
	_, err = ExportGit(ctx, s, base.Tree, tree, base.Rev, r.dir, worktree.ExportOptions{Branch: "main", Force: true})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("checked-out branch: %v, want ErrConflict", err)
	}
	for _, bad := range []worktree.ExportOptions{{Branch: ""}, {Branch: "a..b"}, {Branch: "x", Author: "no email"}} {
		if _, err := ExportGit(ctx, s, base.Tree, tree, base.Rev, r.dir, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if _, err := ExportGit(ctx, s, base.Tree, tree, "no-such-rev", r.dir, worktree.ExportOptions{Branch: "y"}); err == nil {
		t.Error("bad parent: no error")
	}
}

// TestExportGitNoChange: an unchanged tree gives a commit with the
// parent's tree.
func TestExportGitNoChange(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	base := snap(t, s, r.dir, worktree.SnapshotOptions{})
	res, err := ExportGit(context.Background(), s, base.Tree, base.Tree, base.Rev, r.dir, worktree.ExportOptions{Branch: "same"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 0 {
		t.Errorf("Changed = %d", res.Changed)
	}
	if a, b := git(t, r.dir, "rev-parse", "same^{tree}"), git(t, r.dir, "rev-parse", base.Rev+"^{tree}"); a != b {
		t.Errorf("tree %s, parent's %s", a, b)
	}
}

// TestExportGitDeleteDirectory: deleting a directory deletes its files;
// a directory that empties disappears.
func TestExportGitDeleteDirectory(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	base := snap(t, s, r.dir, worktree.SnapshotOptions{WithIgnored: []string{"none"}})
	wd := materialize(t, s, base.Tree)
	os.RemoveAll(filepath.Join(wd, "src"))
	os.RemoveAll(filepath.Join(wd, "dir with space"))
	if err := os.Mkdir(filepath.Join(wd, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tree := importDir(t, s, wd)
	if _, err := ExportGit(context.Background(), s, base.Tree, tree, base.Rev, r.dir, worktree.ExportOptions{Branch: "del"}); err != nil {
		t.Fatal(err)
	}
	got := nameStatus(t, r.dir, base.Rev, "del")
	want := []string{"D\tdir with space/file with spaces.txt", "D\tsrc/main.go", "D\tsrc/new.go"}
	if !slices.Equal(got, want) {
		t.Errorf("name-status %q, want %q", got, want)
	}
	if out := git(t, r.dir, "ls-tree", "del", "src", "emptydir"); out != "" {
		t.Errorf("ls-tree: %q", out)
	}
}
