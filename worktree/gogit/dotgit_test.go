package gogit

import (
	"bytes"
	"github.com/stratafs/strata/worktree"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSyntheticDotGit: in a materialized snapshot, with its alternates
// pointed at the source's objects (what the keeper's bind mount does), git
// works: status is clean, log shows REV, diff shows an edit, a commit goes
// to the snapshot's own objects, fsck passes.
func TestSyntheticDotGit(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	cases := []struct {
		name, rev, want, head string
	}{
		{"branch head", "", r.c4, "refs/heads/main"},
		{"named branch", "feature", r.c3, "refs/heads/feature"},
		{"detached", r.c2, r.c2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			arg := r.dir
			if tc.rev != "" {
				arg += "@" + tc.rev
			}
			res := snap(t, s, arg, worktree.SnapshotOptions{})
			d := materialize(t, s, res.Tree)
			useRealObjects(t, d, res.GitDir)
			srcStatus := git(t, r.dir, "status", "--porcelain")

			// First of all (a git command may refresh the index): git trusts
			// the index. Same size and mtime, other bytes, is not noticed
			// (nothing was re-read), and the index is not rewritten.
			readme := filepath.Join(d, "README.md")
			st, err := os.Stat(readme)
			if err != nil {
				t.Fatal(err)
			}
			old, err := os.ReadFile(readme)
			if err != nil {
				t.Fatal(err)
			}
			same := strings.Repeat("x", len(old))
			if err := os.WriteFile(readme, []byte(same), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(readme, st.ModTime(), st.ModTime()); err != nil {
				t.Fatal(err)
			}
			index, err := os.ReadFile(filepath.Join(d, ".git/index"))
			if err != nil {
				t.Fatal(err)
			}
			if out := git(t, d, "status", "--porcelain"); out != "" {
				t.Errorf("git status re-read a file whose stat matches the index:\n%s", out)
			}
			if b, _ := os.ReadFile(filepath.Join(d, ".git/index")); !bytes.Equal(b, index) {
				t.Error("git status rewrote the index: it did not trust it")
			}
			if err := os.WriteFile(readme, old, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(readme, st.ModTime(), st.ModTime()); err != nil {
				t.Fatal(err)
			}

			if out := git(t, d, "status", "--porcelain", "--untracked-files=all"); out != "" {
				t.Errorf("git status --porcelain:\n%s", out)
			}
			if got := strings.TrimSpace(git(t, d, "rev-parse", "HEAD")); got != tc.want {
				t.Errorf("HEAD = %s, want %s", got, tc.want)
			}
			head, err := gitErr(d, "", "symbolic-ref", "-q", "HEAD")
			if strings.TrimSpace(head) != tc.head || (tc.head != "") != (err == nil) {
				t.Errorf("symbolic-ref HEAD = %q, %v; want %q", head, err, tc.head)
			}
			if log := git(t, d, "log", "--format=%H"); !strings.HasPrefix(log, tc.want+"\n") {
				t.Errorf("git log:\n%s", log)
			}
			if tags := git(t, d, "tag", "--list"); tags != "light\nv1\n" {
				t.Errorf("tags = %q", tags)
			}
			if got := strings.TrimSpace(git(t, d, "rev-parse", "v1^{commit}")); got != r.c1 {
				t.Errorf("v1^{commit} = %s, want %s", got, r.c1)
			}
			if cfg := strings.TrimSpace(git(t, d, "config", "user.email")); cfg != "repo@example.com" {
				t.Errorf("user.email = %q", cfg)
			}

			// An edit shows in diff and status.
			now := time.Now()
			if err := os.WriteFile(readme, append(old, "edited\n"...), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(readme, now, now); err != nil {
				t.Fatal(err)
			}
			diff := git(t, d, "diff")
			if !strings.Contains(diff, "+edited") || !strings.Contains(diff, "README.md") {
				t.Errorf("git diff:\n%s", diff)
			}
			if out := git(t, d, "status", "--porcelain"); out != " M README.md\n" {
				t.Errorf("git status after an edit:\n%s", out)
			}
			gitAt(t, d, "2022-01-01T00:00:00Z", "commit", "-q", "-am", "in the workspace")
			commit := strings.TrimSpace(git(t, d, "rev-parse", "HEAD"))
			if parent := strings.TrimSpace(git(t, d, "rev-parse", "HEAD^")); parent != tc.want {
				t.Errorf("the new commit's parent is %s, want %s", parent, tc.want)
			}
			loose := filepath.Join(d, ".git/objects", commit[:2], commit[2:])
			if _, err := os.Stat(loose); err != nil {
				t.Errorf("the new commit is not in the snapshot's objects: %v", err)
			}
			if _, err := gitErr(r.dir, "", "cat-file", "-e", commit); err == nil {
				t.Errorf("the source repository has the workspace's commit %s", commit)
			}
			git(t, d, "fsck", "--connectivity-only", "--no-progress")
			if got := git(t, r.dir, "status", "--porcelain"); got != srcStatus {
				t.Errorf("the source's status changed:\n%s\nwas:\n%s", got, srcStatus)
			}
		})
	}
}

// TestSyntheticDotGitLayout pins the files of the synthetic .git.
func TestSyntheticDotGitLayout(t *testing.T) {
	r := newTestRepo(t)
	writeFile(t, filepath.Join(r.dir, ".git/info/exclude"), "*.secret\n", 0o644)
	s := openStore(t)
	res := snap(t, s, r.dir, worktree.SnapshotOptions{})
	d := materialize(t, s, res.Tree)
	objects, err := worktree.ObjectsDir(res.GitDir)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(d, ".git", p))
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
	if got := read("HEAD"); got != "ref: refs/heads/main\n" {
		t.Errorf("HEAD = %q", got)
	}
	if got := read("refs/heads/main"); got != r.c4+"\n" {
		t.Errorf("refs/heads/main = %q", got)
	}
	if got := read("objects/info/alternates"); got != worktree.AlternatesPath(objects)+"\n" {
		t.Errorf("alternates = %q", got)
	}
	if got := read("info/exclude"); got != "*.secret\n" {
		t.Errorf("info/exclude = %q", got)
	}
	cfg := read("config")
	for _, want := range []string{"repositoryformatversion = 0", "bare = false", "filemode = true", "checkStat = minimal", "trustctime = false", "name = Repo User"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	for _, dir := range []string{"objects/pack", "refs/tags"} {
		ents, err := os.ReadDir(filepath.Join(d, ".git", dir))
		if err != nil || len(ents) != 0 {
			t.Errorf("%s: %d entries, %v", dir, len(ents), err)
		}
	}
	// The index is one second newer than the files (not racily clean).
	idx, err := os.Stat(filepath.Join(d, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Stat(filepath.Join(d, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if idx.ModTime().Sub(f.ModTime()) != time.Second {
		t.Errorf("index mtime %v, files %v", idx.ModTime(), f.ModTime())
	}
	ls := git(t, d, "ls-files", "-s")
	want := git(t, r.dir, "ls-tree", "-r", "--format=%(objectmode) %(objectname) 0\t%(path)", "HEAD")
	if ls != want {
		t.Errorf("ls-files -s:\n%s\nwant:\n%s", ls, want)
	}
}
