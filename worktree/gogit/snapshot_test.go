package gogit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
	"github.com/stratafs/strata/worktree"
)

// archive extracts `git archive REV` (files 0644/0755, directories 0755,
// every mtime the commit time) into a new directory.
func archive(t testing.TB, repo, rev string) string {
	t.Helper()
	testutil.LookPath(t, "tar")
	d := filepath.Join(t.TempDir(), "archive")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `git -c tar.umask=022 archive "$1" | tar -x -p -C "$2"`, "sh", rev, d)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s | tar -x: %v\n%s", rev, err, out)
	}
	return d
}

func TestSnapshotMatchesGitArchive(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	cases := []struct {
		name, rev string
		wantRev   string
		branch    string
		ignored   []string
	}{
		{"head", "", r.c4, "main", []string{".venv", "node_modules", "packages/p1/node_modules"}},
		{"older hash", r.c1, r.c1, "", []string{".venv", "node_modules"}},
		{"branch", "feature", r.c3, "feature", []string{".venv", "node_modules"}},
		{"annotated tag", "v1", r.c1, "", []string{".venv", "node_modules"}},
		{"relative", "HEAD~1", r.c2, "", []string{".venv", "node_modules", "packages/p1/node_modules"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			arg := r.dir
			if tc.rev != "" {
				arg += "@" + tc.rev
			}
			var warnings []string
			res := snap(t, s, arg, worktree.SnapshotOptions{Warn: func(p, msg string) { warnings = append(warnings, p+": "+msg) }})
			if res.Rev != tc.wantRev {
				t.Errorf("Rev = %s, want %s", res.Rev, tc.wantRev)
			}
			if res.Branch != tc.branch {
				t.Errorf("Branch = %q, want %q", res.Branch, tc.branch)
			}
			if res.Repo != r.dir || res.GitDir != filepath.Join(r.dir, ".git") {
				t.Errorf("Repo, GitDir = %q, %q", res.Repo, res.GitDir)
			}
			if !slices.Equal(res.Ignored, tc.ignored) {
				t.Errorf("Ignored = %q, want %q", res.Ignored, tc.ignored)
			}
			if len(warnings) > 0 {
				t.Errorf("warnings: %q", warnings)
			}
			d := materialize(t, s, res.Tree)
			want := archive(t, r.dir, tc.wantRev)
			skip := func(rel string) bool {
				return rel == ".git" || slices.Contains(tc.ignored, rel)
			}
			snapshottest.CompareTrees(t, want, d, snapshottest.Ignore(skip))
			for _, ig := range tc.ignored {
				snapshottest.CompareTrees(t, filepath.Join(r.dir, ig), filepath.Join(d, ig))
				var a, b syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(r.dir, ig), &a); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Lstat(filepath.Join(d, ig), &b); err != nil {
					t.Fatal(err)
				}
				if a.Mtim != b.Mtim || a.Mode != b.Mode {
					t.Errorf("%s: mtime/mode %v %o, want %v %o", ig, b.Mtim, b.Mode, a.Mtim, a.Mode)
				}
			}
			for _, absent := range []string{"dist", "env", "debug.log", "scratch", "untracked.txt"} {
				if _, err := os.Lstat(filepath.Join(d, absent)); err == nil {
					t.Errorf("%s is in the snapshot", absent)
				}
			}
			// Statistics agree with a walk of the tree.
			var st store.CommitStats
			err := snapshot.Walk(context.Background(), s, res.Tree, func(_ string, e *store.TreeEntry) error {
				switch e.Type {
				case store.TypeFile:
					st.Files++
					st.Bytes += e.Size
				case store.TypeDir:
					st.Dirs++
				default:
					st.Other++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if st != res.Stats {
				t.Errorf("Stats = %+v, a walk counts %+v", res.Stats, st)
			}
		})
	}
}

// TestSnapshotHardlinkKeys pins that the hardlink groups of an imported
// ignored directory are keyed relative to the snapshot's root (Import keys
// them relative to the directory it imports).
func TestSnapshotHardlinkKeys(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	res := snap(t, s, r.dir, worktree.SnapshotOptions{})
	groups := map[string][]string{}
	err := snapshot.Walk(context.Background(), s, res.Tree, func(p string, e *store.TreeEntry) error {
		if e.LinkGroup != "" {
			groups[e.LinkGroup] = append(groups[e.LinkGroup], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"node_modules/a/index.js": {"node_modules/a/index.js", "node_modules/b/index.js"}}
	if len(groups) != 1 || !slices.Equal(groups["node_modules/a/index.js"], want["node_modules/a/index.js"]) {
		t.Errorf("link groups = %q, want %q", groups, want)
	}
}

func TestSnapshotBlobCache(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	distinct := func(rev string) map[string]bool {
		m := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(git(t, r.dir, "ls-tree", "-r", rev)), "\n") {
			f := strings.Fields(line)
			// Not symlinks (their targets are not cached), not the empty
			// blob (empty content needs no object).
			if f[1] == "blob" && f[0] != "120000" && f[2] != "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391" {
				m[f[2]] = true
			}
		}
		return m
	}
	head, old := distinct(r.c4), distinct(r.c1)
	newInOld := 0
	for h := range old {
		if !head[h] {
			newInOld++
		}
	}

	blobWorkersOverride = 3 // several readers even for a few blobs
	first := snap(t, s, r.dir, worktree.SnapshotOptions{})
	blobWorkersOverride = 0
	if first.BlobsRead != int64(len(head))+1 || first.BlobsCached != 0 {
		t.Errorf("first: read %d, cached %d; want %d, 0", first.BlobsRead, first.BlobsCached, len(head)+1)
	}
	second := snap(t, s, r.dir, worktree.SnapshotOptions{})
	if second.BlobsRead != 0 || second.BlobsCached != int64(len(head))+1 {
		t.Errorf("second: read %d, cached %d; want 0, %d", second.BlobsRead, second.BlobsCached, len(head)+1)
	}
	if second.Tree != first.Tree {
		t.Errorf("the same commit and working copy gave trees %s and %s", first.Tree.Short(), second.Tree.Short())
	}
	older := snap(t, s, r.dir+"@"+r.c1, worktree.SnapshotOptions{})
	if older.BlobsRead != int64(newInOld) || older.BlobsCached != int64(len(old)-newInOld)+1 {
		t.Errorf("older rev: read %d, cached %d; want %d, %d", older.BlobsRead, older.BlobsCached, newInOld, len(old)-newInOld+1)
	}
	// Both revisions are remembered.
	again := snap(t, s, r.dir+"@"+r.c1, worktree.SnapshotOptions{})
	head2 := snap(t, s, r.dir, worktree.SnapshotOptions{})
	if again.BlobsRead != 0 || head2.BlobsRead != 0 {
		t.Errorf("after both: read %d and %d blobs, want 0", again.BlobsRead, head2.BlobsRead)
	}

	// A cache entry whose content the store no longer has is read again.
	s2 := openStore(t)
	objects, err := worktree.ObjectsDir(first.GitDir)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := s.LoadStatCache(context.Background(), blobCacheRoot(objects))
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.SaveStatCache(context.Background(), blobCacheRoot(objects), cache, 1); err != nil {
		t.Fatal(err)
	}
	fresh := snap(t, s2, r.dir, worktree.SnapshotOptions{})
	if fresh.BlobsRead != int64(len(head)) || fresh.Tree != first.Tree {
		t.Errorf("stale cache: read %d blobs (want %d), tree %s (want %s)", fresh.BlobsRead, len(head), fresh.Tree.Short(), first.Tree.Short())
	}
}

func TestSnapshotWithIgnored(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	cases := []struct {
		with []string
		want []string
	}{
		{nil, []string{".venv", "node_modules", "packages/p1/node_modules"}},
		{[]string{"auto"}, []string{".venv", "node_modules", "packages/p1/node_modules"}},
		{[]string{"none"}, nil},
		{[]string{"dist"}, []string{"dist"}},
		{[]string{"/node_modules"}, []string{"node_modules"}},
		{[]string{"packages/*/node_modules"}, []string{"packages/p1/node_modules"}},
		{[]string{"**/node_modules"}, []string{"node_modules", "packages/p1/node_modules"}},
		{[]string{"auto", "dist", "env"}, []string{".venv", "dist", "env", "node_modules", "packages/p1/node_modules"}},
		{[]string{"src"}, nil}, // not ignored
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.with, ","), func(t *testing.T) {
			res := snap(t, s, r.dir, worktree.SnapshotOptions{WithIgnored: tc.with})
			if !slices.Equal(res.Ignored, tc.want) {
				t.Errorf("Ignored = %q, want %q", res.Ignored, tc.want)
			}
		})
	}
	if _, err := snapErr(t, s, r.dir, worktree.SnapshotOptions{WithIgnored: []string{"none", "dist"}}); err == nil {
		t.Error("none with a pattern: no error")
	}
	if _, err := snapErr(t, s, r.dir, worktree.SnapshotOptions{WithIgnored: []string{"[x"}}); err == nil {
		t.Error("bad glob: no error")
	}
}

// TestSnapshotTrackedInIgnored: REV tracks a file inside an ignored
// directory; the tracked version wins over the working copy's.
func TestSnapshotTrackedInIgnored(t *testing.T) {
	r := newTestRepo(t)
	writeFile(t, filepath.Join(r.dir, "node_modules/a/index.js"), "tracked version\n", 0o644)
	git(t, r.dir, "add", "-f", "node_modules/a/index.js")
	gitAt(t, r.dir, "2020-05-06T07:08:09Z", "commit", "-q", "-m", "track one")
	writeFile(t, filepath.Join(r.dir, "node_modules/a/index.js"), "working copy version\n", 0o644)
	s := openStore(t)
	res := snap(t, s, r.dir, worktree.SnapshotOptions{})
	d := materialize(t, s, res.Tree)
	b, err := os.ReadFile(filepath.Join(d, "node_modules/a/index.js"))
	if err != nil || string(b) != "tracked version\n" {
		t.Errorf("node_modules/a/index.js = %q, %v; want the tracked version", b, err)
	}
	for _, p := range []string{"node_modules/b/package.json", "node_modules/.bin/a-link"} {
		if _, err := os.Lstat(filepath.Join(d, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	useRealObjects(t, d, res.GitDir)
	if out := git(t, d, "status", "--porcelain"); out != "" {
		t.Errorf("git status:\n%s", out)
	}
}

func TestSnapshotSubmodule(t *testing.T) {
	r := newTestRepo(t)
	sub := filepath.Join(t.TempDir(), "sub")
	git(t, filepath.Dir(sub), "init", "-q", "-b", "main", sub)
	writeFile(t, filepath.Join(sub, "x"), "x\n", 0o644)
	git(t, sub, "add", "x")
	git(t, sub, "commit", "-q", "-m", "sub")
	git(t, r.dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "vendor/sub")
	gitAt(t, r.dir, "2020-06-07T08:09:10Z", "commit", "-q", "-m", "submodule")
	s := openStore(t)
	var warned []string
	res := snap(t, s, r.dir, worktree.SnapshotOptions{Warn: func(p, msg string) { warned = append(warned, p) }})
	if !slices.Equal(warned, []string{"vendor/sub"}) {
		t.Errorf("warnings for %q, want vendor/sub", warned)
	}
	d := materialize(t, s, res.Tree)
	ents, err := os.ReadDir(filepath.Join(d, "vendor/sub"))
	if err != nil || len(ents) != 0 {
		t.Errorf("vendor/sub: %v entries, %v; want an empty directory", len(ents), err)
	}
	useRealObjects(t, d, res.GitDir)
	if out := git(t, d, "status", "--porcelain"); out != "" {
		t.Errorf("git status:\n%s", out)
	}
}

func TestSnapshotLinkedWorktree(t *testing.T) {
	r := newTestRepo(t)
	wt := filepath.Join(t.TempDir(), "wt")
	git(t, r.dir, "worktree", "add", "-q", "-b", "wt-branch", wt, r.c2)
	s := openStore(t)
	res := snap(t, s, wt, worktree.SnapshotOptions{})
	if res.Rev != r.c2 || res.Branch != "wt-branch" || res.Repo != wt {
		t.Errorf("Rev %s Branch %q Repo %q", res.Rev, res.Branch, res.Repo)
	}
	objects, err := worktree.ObjectsDir(res.GitDir)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(r.dir, ".git/objects"); objects != want {
		t.Errorf("worktree.ObjectsDir(%s) = %s, want %s", res.GitDir, objects, want)
	}
	d := materialize(t, s, res.Tree)
	useRealObjects(t, d, res.GitDir)
	if out := git(t, d, "status", "--porcelain"); out != "" {
		t.Errorf("git status:\n%s", out)
	}
}

func TestSnapshotErrors(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	for _, arg := range []string{
		r.dir + "@no-such-rev",
		t.TempDir(), // not a repository
		filepath.Join(t.TempDir(), "missing"),
	} {
		if _, err := snapErr(t, s, arg, worktree.SnapshotOptions{}); err == nil {
			t.Errorf("%s: no error", arg)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w, err := s.NewWriter(context.Background(), "cancelled")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if _, err := Snapshot(ctx, s, w, r.dir, worktree.SnapshotOptions{}); err == nil {
		t.Error("cancelled context: no error")
	}
}

func TestSnapshotProgress(t *testing.T) {
	r := newTestRepo(t)
	s := openStore(t)
	phases := map[string]bool{}
	snap(t, s, r.dir, worktree.SnapshotOptions{Progress: func(p snapshot.Progress) { phases[p.Phase] = true }})
	for _, ph := range []string{snapshot.PhaseRead, snapshot.PhaseWalk, snapshot.PhaseWrite} {
		if !phases[ph] {
			t.Errorf("no %s progress", ph)
		}
	}
}

func TestAlternatesPath(t *testing.T) {
	a, b := worktree.AlternatesPath("/src/repo/.git/objects"), worktree.AlternatesPath("/src/other/.git/objects")
	if a == b || !strings.HasPrefix(a, "/tmp/.strata-git/") || !strings.HasSuffix(a, "/objects") ||
		len(a) != len("/tmp/.strata-git/")+16+len("/objects") {
		t.Errorf("worktree.AlternatesPath: %q, %q", a, b)
	}
	if worktree.AlternatesPath("/src/repo/.git/objects") != a {
		t.Error("worktree.AlternatesPath is not a function of its argument")
	}
}

func TestSplitRepoArg(t *testing.T) {
	dir := t.TempDir()
	at := filepath.Join(dir, "with@at")
	if err := os.Mkdir(at, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ arg, repo, rev string }{
		{dir, dir, "HEAD"},
		{dir + "@main", dir, "main"},
		{dir + "@", dir, "HEAD"},
		{dir + "@HEAD@{1}", dir, "HEAD@{1}"},
		{at, at, "HEAD"},
		{at + "@v1", at, "v1"},
		{"@main", ".", "main"},
	}
	for _, tc := range cases {
		repo, rev := splitRepoArg(tc.arg)
		if repo != tc.repo || rev != tc.rev {
			t.Errorf("splitRepoArg(%q) = %q, %q; want %q, %q", tc.arg, repo, rev, tc.repo, tc.rev)
		}
	}
}

func TestSelector(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "venvish/env/pyvenv.cfg"), "", 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "plain/env"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		with []string
		rel  string
		want bool
	}{
		{nil, "node_modules", true},
		{nil, "a/b/node_modules", true},
		{nil, "venvish/env", true},
		{nil, "plain/env", false},
		{nil, "dist", false},
		{[]string{"none"}, "node_modules", false},
		{[]string{"dist"}, "a/dist", true},
		{[]string{"/dist"}, "a/dist", false},
		{[]string{"/dist"}, "dist", true},
		{[]string{"a/*"}, "a/dist", true},
		{[]string{"a/*"}, "b/a/dist", false},
		{[]string{"a/**/c"}, "a/c", true},
		{[]string{"a/**/c"}, "a/x/y/c", true},
		{[]string{"build*/"}, "build-out", true},
	}
	for _, tc := range cases {
		sel, err := newSelector(tc.with)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.selects(tc.rel, filepath.Join(dir, tc.rel)); got != tc.want {
			t.Errorf("%q selects %q = %v, want %v", tc.with, tc.rel, got, tc.want)
		}
	}
}

// TestSnapshotSharedClone: a repository whose objects are in another
// repository (git clone --shared: objects/info/alternates) is read through
// its alternates, and the synthetic .git lists them after the source's own.
func TestSnapshotSharedClone(t *testing.T) {
	r := newTestRepo(t)
	clone := filepath.Join(t.TempDir(), "clone")
	git(t, filepath.Dir(clone), "clone", "-q", "--shared", r.dir, clone)
	s := openStore(t)
	res := snap(t, s, clone, worktree.SnapshotOptions{})
	if res.Rev != r.c4 || res.BlobsRead == 0 {
		t.Errorf("Rev %s, blobs read %d", res.Rev, res.BlobsRead)
	}
	d := materialize(t, s, res.Tree)
	alt, err := os.ReadFile(filepath.Join(d, ".git/objects/info/alternates"))
	if err != nil {
		t.Fatal(err)
	}
	objects, err := worktree.ObjectsDir(res.GitDir)
	if err != nil {
		t.Fatal(err)
	}
	if want := worktree.AlternatesPath(objects) + "\n" + filepath.Join(r.dir, ".git/objects") + "\n"; string(alt) != want {
		t.Errorf("alternates = %q, want %q", alt, want)
	}
	useRealObjects(t, d, res.GitDir)
	if out := git(t, d, "status", "--porcelain"); out != "" {
		t.Errorf("git status:\n%s", out)
	}
	git(t, d, "fsck", "--connectivity-only", "--no-progress")
}
