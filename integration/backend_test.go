//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// The reflink and copy backends, end to end through the CLI: the whole
// workspace suite on a real XFS (reflink=1) and a real Btrfs (both on
// loop devices: testutil.ReflinkDir) with the reflink backend, and on the
// test's own filesystem (TMPDIR, ext4 here) with the copy backend.
//
// Every pass runs them: the root and rootless passes with user
// namespaces (commands in the workspace's keeper), and the third pass of
// scripts/integration.sh with user namespaces denied (inside bwrap
// --disable-userns, and under a seccomp filter refusing CLONE_NEWUSER),
// where `--backend auto` must choose the backend each case names and
// commands run without namespaces (nsexec.RunNoNS).

// envDenied names the third pass's denial ("bwrap" or "seccomp"); unset in
// the passes where user namespaces work.
const envDenied = "STRATA_TEST_USERNS_DENIED"

// deniedPass is the denial this pass runs under, "" for none.
func deniedPass() string { return os.Getenv(envDenied) }

// backendCase is where and how a backend test runs.
type backendCase struct {
	name, fs, backend string
}

func backendCases() []backendCase {
	return []backendCase{
		{"xfs", "xfs", "reflink"},
		{"btrfs", "btrfs", "reflink"},
		{"copy", "", "copy"},
	}
}

// root is a fresh directory on the case's filesystem.
func (c backendCase) root(t *testing.T) string {
	t.Helper()
	if c.fs == "" {
		d, err := os.MkdirTemp(os.Getenv("TMPDIR"), "strata-it-backend-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return testutil.ReflinkDir(t, c.fs)
}

// args are the --backend arguments a workspace or run of the case gets:
// the backend itself, or auto where user namespaces are denied (which
// must choose it).
func (c backendCase) args() []string {
	if deniedPass() != "" {
		return []string{"--backend", "auto"}
	}
	return []string{"--backend", c.backend}
}

// backendHome is a store on the case's filesystem with a project imported
// from there: baseTree, a git repository, and a 1 MiB file.
func backendHome(t *testing.T, c backendCase) (*home, string) {
	t.Helper()
	root := c.root(t)
	h := &home{t: t, dir: filepath.Join(root, "store")}
	src := filepath.Join(root, "proj")
	baseTree(t, src)
	sh(t, src, `mkdir -p repo/lib/sub && echo 'package lib' > repo/lib/a.go && echo x > repo/lib/sub/b &&
cd repo && git init -q && git add -A && git -c user.name=t -c user.email=t@example.invalid commit -qm init`)
	if err := os.WriteFile(filepath.Join(src, "big.bin"), pseudoRandom(1<<20, 7), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src)
	return h, src
}

type wsJSON struct {
	Name    string `json:"name"`
	Base    string `json:"base"`
	Backend string `json:"backend"`
	Upper   string `json:"upper"`
	Changes int64  `json:"changes_bytes"`
	State   string `json:"state"`
}

// createWS creates workspace name of the case's backend (extra: more
// arguments) and checks that it got it.
func createWS(t *testing.T, h *home, c backendCase, name string, extra ...string) wsJSON {
	t.Helper()
	var w wsJSON
	r := h.ok(append(append([]string{"--json", "ws", "create", name}, c.args()...), extra...)...)
	if err := json.Unmarshal([]byte(r.stdout), &w); err != nil {
		t.Fatalf("ws create: %v: %s", err, r)
	}
	if w.Backend != c.backend {
		t.Fatalf("ws create %s: backend %q, want %q (%s)", name, w.Backend, c.backend, r.stderr)
	}
	if deniedPass() != "" && c.backend == "copy" && !strings.Contains(r.stderr, "backend auto chose copy") {
		t.Errorf("auto chose copy without saying what it costs: %s", r.stderr)
	}
	return w
}

// wsPath is `strata ws path`: the tree itself for reflink and copy.
func wsPath(t *testing.T, h *home, name string) string {
	t.Helper()
	p := strings.TrimSpace(h.ok("ws", "path", name).stdout)
	if want := filepath.Join(h.dir, "workspaces", name, "upper"); !strings.HasPrefix(p, want) {
		t.Fatalf("ws path %s = %s, want the workspace's own tree %s[.*]", name, p, want)
	}
	return p
}

// wsClean asserts that workspace name is clean by every measure: ws
// list's changes, diff, a commit with nothing to do.
func wsClean(t *testing.T, h *home, name string) {
	t.Helper()
	for _, l := range cliLines(t, h.ok("--json", "ws", "list").stdout) {
		if l["name"] == name && l["changes_bytes"].(float64) != 0 {
			t.Errorf("ws list: %s has %v bytes of changes", name, l["changes_bytes"])
		}
	}
	if d := h.ok("diff", name, "--stat").stdout; strings.TrimSpace(d) != "" {
		t.Errorf("diff %s after a commit: %q", name, d)
	}
	var cr struct{ Clean bool }
	h.okJSON(&cr, "commit", name)
	if !cr.Clean {
		t.Errorf("commit %s after a commit was not clean", name)
	}
}

func headOf(t *testing.T, h *home, ref string) string {
	t.Helper()
	var s struct {
		Commit struct {
			ID   string `json:"id"`
			Tree string `json:"tree"`
		} `json:"commit"`
	}
	h.okJSON(&s, "show", ref)
	return s.Commit.ID
}

func layerFlavourDir() string {
	if os.Geteuid() == 0 {
		return "trusted"
	}
	return "user"
}

// wsExec runs a shell script in workspace name.
func wsExec(t *testing.T, h *home, name, script string) result {
	t.Helper()
	return h.ok("exec", name, "--env", sandboxPATH, "--", "sh", "-ec", script)
}

// TestBackendWorkspace: every verb on the reflink backend (XFS, Btrfs) and
// the copy backend: create (the tree shares the layer cache's blocks; on
// Btrfs it is a snapshot of the clone cache), exec with renames of
// directories from the base (mv, rename(2), git mv), an edit that writes
// no shared block through, diff, commit (equal to an export; clean after
// by every measure; the next commit reads one file), reset (to its base,
// and to a ref), rebase (with --conflict=fail and markers), promote, gc
// with the layers and the clone cache evicted under a workspace, fsck, ws
// rm without --force.
func TestBackendWorkspace(t *testing.T) {
	for _, c := range backendCases() {
		t.Run(c.name, func(t *testing.T) {
			h, src := backendHome(t, c)
			mainID := headOf(t, h, "main")
			w := createWS(t, h, c, "w")
			p := wsPath(t, h, "w")
			if w.Upper != p {
				t.Errorf("ws create: upper %s, ws path %s", w.Upper, p)
			}
			if out := wsExec(t, h, "w", "pwd").stdout; deniedPass() == "" && strings.TrimSpace(out) != src {
				t.Errorf("pwd in the keeper %q, want the project's path %s", out, src)
			} else if deniedPass() != "" && strings.TrimSpace(out) != p {
				t.Errorf("pwd without namespaces %q, want the tree %s", out, p)
			}
			snapshottest.CompareTrees(t, src, p, snapshottest.Owner(os.Geteuid() == 0),
				snapshottest.Ignore(func(rel string) bool { return rel == "." }))

			// No shared block written through: the tree's big.bin shares
			// the layer's blocks until the workspace writes one.
			layer := filepath.Join(h.dir, "layers", layerFlavourDir(), mainID, "big.bin")
			layerSum := sha256.Sum256(readFile(t, layer))
			const off = 256 << 10
			lp, _ := physicalAt(t, extents(t, layer), off)
			if c.backend == "reflink" {
				wp, shared := physicalAt(t, extents(t, filepath.Join(p, "big.bin")), off)
				if !shared || wp != lp {
					t.Errorf("the tree's big.bin does not share the layer's blocks (layer %d, tree %d, shared %v)", lp, wp, shared)
				}
			}
			wsExec(t, h, "w", fmt.Sprintf("printf 'EDITED' | dd of=big.bin bs=1 seek=%d conv=notrunc 2>/dev/null", off))
			if sha256.Sum256(readFile(t, layer)) != layerSum {
				t.Fatal("editing the workspace's big.bin changed the layer's file")
			}
			if lp2, _ := physicalAt(t, extents(t, layer), off); lp2 != lp {
				t.Errorf("the layer's block moved: %d → %d", lp, lp2)
			}
			if wp, _ := physicalAt(t, extents(t, filepath.Join(p, "big.bin")), off); wp == lp {
				t.Errorf("the workspace's edited block is the layer's (%d): written through", wp)
			}
			if c.fs == "btrfs" {
				var st syscall.Stat_t
				if err := syscall.Stat(p, &st); err != nil || st.Ino != 256 {
					t.Errorf("on Btrfs the tree is not a subvolume (a snapshot): inode %d, %v", st.Ino, err)
				}
				if ents, _ := filepath.Glob(filepath.Join(h.dir, "clones", layerFlavourDir(), mainID, "tree")); len(ents) != 1 {
					t.Errorf("no clone cache entry of main: %v", ents)
				}
			}

			// Renaming directories of the base just works: mv, rename(2),
			// git mv.
			wsExec(t, h, "w", `mv tree/a tree/moved && python3 -c "import os; os.rename('src/deep', 'src/deep2')" &&
cd repo && git mv lib lib2 && git status --short | grep -q 'lib2/a.go'`)
			d := h.ok("diff", "w", "--name-status").stdout
			for _, want := range []string{"tree/moved/b/t1", "src/deep2/er/file", "repo/lib2/a.go", "big.bin"} {
				if !strings.Contains(d, want) {
					t.Errorf("diff lacks %s:\n%s", want, d)
				}
			}
			var cr struct {
				Commit      string `json:"commit"`
				Incremental bool   `json:"incremental"`
				FilesRead   int64  `json:"files_read"`
				Clean       bool   `json:"clean"`
			}
			h.okJSON(&cr, "commit", "w", "-m", "renames")
			out := filepath.Join(t.TempDir(), "export")
			h.ok("export", "ws/w", out)
			snapshottest.CompareTrees(t, p, out, snapshottest.Owner(os.Geteuid() == 0),
				snapshottest.Ignore(func(rel string) bool { return rel == "." }))
			wsClean(t, h, "w")
			// The next commit reads what changed since, and only that.
			wsExec(t, h, "w", "echo 'line 4' >> src/app.txt")
			h.okJSON(&cr, "commit", "w", "-m", "one line")
			if cr.Clean || !cr.Incremental || cr.FilesRead != 1 {
				t.Errorf("a one-line commit: %+v; want incremental, 1 file read", cr)
			}
			wsClean(t, h, "w")

			// reset drops what is uncommitted; reset REF moves the
			// workspace and its branch there.
			wsExec(t, h, "w", "echo junk > junk.txt && rm -rf tree")
			h.ok("reset", "w")
			p = wsPath(t, h, "w")
			if _, err := os.Stat(filepath.Join(p, "junk.txt")); !os.IsNotExist(err) {
				t.Errorf("reset kept junk.txt: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(p, "src/app.txt")); err != nil || !strings.Contains(string(b), "line 4") {
				t.Errorf("reset lost a committed change: %q %v", b, err)
			}
			wsClean(t, h, "w")
			h.ok("reset", "w", "main")
			p = wsPath(t, h, "w")
			snapshottest.CompareTrees(t, src, p, snapshottest.Owner(os.Geteuid() == 0),
				snapshottest.Ignore(func(rel string) bool { return rel == "." }))

			// rebase: main moves (a workspace bound to it commits); w's
			// uncommitted change is carried onto it.
			createWS(t, h, c, "m", "--branch", "main")
			wsExec(t, h, "m", "echo 'main docs' > docs/readme")
			h.ok("commit", "m", "-m", "main moves")
			wsExec(t, h, "w", "echo mine > mine.txt")
			h.ok("rebase", "w", "main")
			p = wsPath(t, h, "w")
			if b, _ := os.ReadFile(filepath.Join(p, "docs/readme")); string(b) != "main docs\n" {
				t.Errorf("after rebase: docs/readme %q", b)
			}
			if b, _ := os.ReadFile(filepath.Join(p, "mine.txt")); string(b) != "mine\n" {
				t.Errorf("after rebase: the uncommitted mine.txt %q", b)
			}
			if d := h.ok("diff", "w", "--name-status").stdout; strings.TrimSpace(d) != "A\tmine.txt" {
				t.Errorf("after rebase, diff:\n%s", d)
			}
			// A conflict: refused, nothing changed; with markers, written.
			wsExec(t, h, "m", "printf 'line 1\\nMAIN\\nline 3\\n' > src/app.txt")
			h.ok("commit", "m", "-m", "main edits app")
			wsExec(t, h, "w", "printf 'line 1\\nMINE\\nline 3\\n' > src/app.txt")
			h.fails(3, "rebase", "w", "main")
			if b, _ := os.ReadFile(filepath.Join(wsPath(t, h, "w"), "src/app.txt")); string(b) != "line 1\nMINE\nline 3\n" {
				t.Errorf("a refused rebase changed the file: %q", b)
			}
			h.ok("rebase", "w", "main", "--conflict=markers")
			if b, _ := os.ReadFile(filepath.Join(wsPath(t, h, "w"), "src/app.txt")); !strings.Contains(string(b), "<<<<<<<") || !strings.Contains(string(b), "MINE") {
				t.Errorf("rebase --conflict=markers: %q", b)
			}
			wsExec(t, h, "w", "printf 'line 1\\nBOTH\\nline 3\\n' > src/app.txt")
			h.ok("commit", "w", "-m", "resolved")
			wsClean(t, h, "w")

			// promote into main.
			h.ok("promote", "w")
			main := filepath.Join(t.TempDir(), "main")
			h.ok("export", "main", main)
			if b, _ := os.ReadFile(filepath.Join(main, "src/app.txt")); string(b) != "line 1\nBOTH\nline 3\n" {
				t.Errorf("promote: main's src/app.txt %q", b)
			}
			if b, _ := os.ReadFile(filepath.Join(main, "mine.txt")); string(b) != "mine\n" {
				t.Errorf("promote: main's mine.txt %q", b)
			}

			// gc: a workspace's tree shares the layers' blocks but needs
			// neither the layers nor the clone cache: evicted under it, it
			// reads and commits as before.
			createWS(t, h, c, "g")
			gp := wsPath(t, h, "g")
			want := filepath.Join(t.TempDir(), "g-base")
			h.ok("export", "main", want)
			evictAll(t, h)
			h.ok("gc")
			snapshottest.CompareTrees(t, want, gp, snapshottest.Owner(os.Geteuid() == 0),
				snapshottest.Ignore(func(rel string) bool { return rel == "." }))
			wsExec(t, h, "g", "echo after-gc >> big.bin")
			h.ok("commit", "g")
			wsClean(t, h, "g")
			h.fsckClean()
			for _, n := range []string{"w", "m", "g"} {
				h.ok("ws", "rm", n)
			}
			if ents, _ := os.ReadDir(filepath.Join(h.dir, "workspaces")); len(ents) != 0 {
				t.Errorf("ws rm left %v", ents)
			}
		})
	}
}

// evictAll evicts every layer and clone cache entry of h's store, as gc
// would once they are old (gc spares what is younger than a minute).
func evictAll(t *testing.T, h *home) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(h.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := snapshot.NewLayerCache(filepath.Join(h.dir, "layers")).Evict(ctx, s, snapshot.EvictOptions{})
	if err != nil || len(ev.Removed) == 0 {
		t.Fatalf("evict layers: %+v %v", ev, err)
	}
	if _, err := snapshot.NewCloneCache(filepath.Join(h.dir, "clones")).Evict(snapshot.CloneEvictOptions{}); err != nil {
		t.Fatal(err)
	}
	if ms, _ := filepath.Glob(filepath.Join(h.dir, "layers", "*", "[0-9a-f]*")); len(ms) != 0 {
		t.Fatalf("layers left: %v", ms)
	}
}

// TestBackendConformance: each kind of change (commit_test.go's cases),
// made in a reflink or copy workspace, committed and exported, gives the
// workspace's tree exactly; the workspace is clean afterwards.
func TestBackendConformance(t *testing.T) {
	parallel(t)
	for _, c := range backendCases() {
		t.Run(c.name, func(t *testing.T) {
			h, _ := backendHome(t, c)
			for i, tc := range conformanceCases {
				t.Run(tc.name, func(t *testing.T) {
					name := fmt.Sprintf("c%02d", i)
					createWS(t, h, c, name)
					defer h.run("ws", "rm", "--force", name)
					h.ok("exec", name, "--sandbox", "none", "--", "/bin/sh", "-ec", tc.script)
					p := wsPath(t, h, name)
					var cr struct {
						Commit string `json:"commit"`
						Clean  bool   `json:"clean"`
					}
					h.okJSON(&cr, "commit", name, "-m", tc.name)
					if clean := cleanCases[tc.name]; (clean != nil && clean(p)) != cr.Clean {
						t.Errorf("commit: clean %v", cr.Clean)
					}
					out := filepath.Join(t.TempDir(), "export")
					h.ok("export", "ws/"+name, out)
					snapshottest.CompareTrees(t, p, out, snapshottest.Owner(os.Geteuid() == 0),
						snapshottest.Ignore(func(rel string) bool { return rel == "." }))
					wsClean(t, h, name)
				})
			}
		})
	}
}

// TestBackendRuns: one-shot runs and batches on each backend: the change
// is diffed and committed (a patch applied first, a deletion included),
// kept as a workspace of the backend, or discarded leaving nothing; a
// timeout kills the command; a batch runs jobs in parallel.
func TestBackendRuns(t *testing.T) {
	for _, c := range backendCases() {
		t.Run(c.name, func(t *testing.T) {
			h, _ := backendHome(t, c)
			type runJSON struct {
				ExitCode int    `json:"exit_code"`
				TimedOut bool   `json:"timed_out"`
				Backend  string `json:"backend"`
				Commit   string `json:"commit"`
				Work     string `json:"workspace"`
				Diff     struct {
					Files int      `json:"files"`
					Ins   int      `json:"insertions"`
					Del   int      `json:"deletions"`
					Paths []string `json:"paths"`
				} `json:"diff"`
			}
			run := func(args ...string) runJSON {
				t.Helper()
				var r runJSON
				res := h.run(append(append([]string{"--json", "run"}, c.args()...), args...)...)
				if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
					t.Fatalf("run %v: %v: %s", args, err, res)
				}
				if r.Backend != c.backend {
					t.Errorf("run: backend %q, want %q", r.Backend, c.backend)
				}
				return r
			}
			r := run("--", "sh", "-ec", "mv tree/a tree/moved && printf 'a\\nb\\n' > new.txt && rm docs/readme")
			// The moved directory's files count as new (as an overlay's
			// copied-up rename does); a deleted directory's files are not
			// counted, as for an overlay's whiteout.
			if r.ExitCode != 0 || r.Diff.Files != 5 || r.Diff.Ins != 5 || r.Diff.Del != 1 {
				t.Errorf("run diff: %+v", r)
			}
			patch := filepath.Join(t.TempDir(), "p.diff")
			if err := os.WriteFile(patch, []byte(`diff --git a/src/app.txt b/src/app.txt
--- a/src/app.txt
+++ b/src/app.txt
@@ -1,3 +1,3 @@
 line 1
-line 2
+line two
 line 3
diff --git a/docs/target b/docs/target
deleted file mode 100644
--- a/docs/target
+++ /dev/null
@@ -1 +0,0 @@
-target
`), 0o644); err != nil {
				t.Fatal(err)
			}
			r = run("--patch", patch, "--commit", "runs", "--", "sh", "-ec", "grep -q 'line two' src/app.txt && test ! -e docs/target && echo ran > ran.txt")
			if r.ExitCode != 0 || r.Commit == "" {
				t.Fatalf("run --patch --commit: %+v", r)
			}
			out := filepath.Join(t.TempDir(), "runs")
			h.ok("export", "runs", out)
			if b, _ := os.ReadFile(filepath.Join(out, "src/app.txt")); string(b) != "line 1\nline two\nline 3\n" {
				t.Errorf("committed src/app.txt %q", b)
			}
			if _, err := os.Lstat(filepath.Join(out, "docs/target")); !os.IsNotExist(err) {
				t.Errorf("the patch's deletion was not committed: %v", err)
			}
			if b, _ := os.ReadFile(filepath.Join(out, "ran.txt")); string(b) != "ran\n" {
				t.Errorf("committed ran.txt %q", b)
			}
			r = run("--keep", "--", "sh", "-ec", "echo kept > kept.txt")
			if r.Work == "" {
				t.Fatalf("run --keep: %+v", r)
			}
			var ws []wsJSON
			for _, l := range cliLines(t, h.ok("--json", "ws", "list").stdout) {
				b, _ := json.Marshal(l)
				var w wsJSON
				json.Unmarshal(b, &w)
				ws = append(ws, w)
			}
			if len(ws) != 1 || ws[0].Name != r.Work || ws[0].Backend != c.backend {
				t.Errorf("the kept run: %+v", ws)
			}
			if got := wsExec(t, h, r.Work, "cat kept.txt").stdout; got != "kept\n" {
				t.Errorf("the kept run's file: %q", got)
			}
			h.ok("commit", r.Work)
			wsClean(t, h, r.Work)
			h.ok("ws", "rm", r.Work)
			r = run("--timeout", "1s", "--", "sleep", "30")
			if !r.TimedOut || r.ExitCode != 124 {
				t.Errorf("run --timeout: %+v", r)
			}
			jobs := filepath.Join(t.TempDir(), "jobs.jsonl")
			var lines []string
			for i := 0; i < 4; i++ {
				lines = append(lines, fmt.Sprintf(`{"id": "j%d", "cmd": "mv tree/a tree/j%d && test -d tree/j%d/b"}`, i, i, i))
			}
			if err := os.WriteFile(jobs, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			b := h.ok(append(append([]string{"batch", "-j", "2"}, c.args()...), jobs)...)
			results := cliLines(t, b.stdout)
			if len(results) != 4 {
				t.Fatalf("batch: %s", b)
			}
			for _, res := range results {
				if res["exit_code"].(float64) != 0 || res["backend"] != c.backend {
					t.Errorf("batch job: %v", res)
				}
			}
			// Nothing is left of the runs.
			if ents, _ := os.ReadDir(filepath.Join(h.dir, "runs")); len(ents) != 0 {
				t.Errorf("runs left %v", ents)
			}
			h.fsckClean()
		})
	}
}

// TestBackendRefused: the reflink backend where the filesystem cannot
// clone (TMPDIR: ext4 here) is refused, naming the way out, and leaves
// nothing behind; --tmpfs and --subids are an overlay's.
func TestBackendRefused(t *testing.T) {
	c := backendCase{"copy", "", "copy"}
	h, _ := backendHome(t, c)
	r := h.run("ws", "create", "w", "--backend", "reflink")
	if r.code == 0 || !strings.Contains(r.stderr, "--backend copy") || !strings.Contains(r.stderr, "XFS") {
		t.Errorf("reflink on TMPDIR: %s", r)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.dir, "workspaces")); len(ents) != 0 {
		t.Errorf("a refused create left %v", ents)
	}
	if out := h.ok("ws", "list").stdout; strings.Contains(out, "w ") {
		t.Errorf("a refused create registered: %s", out)
	}
	if r := h.run("ws", "create", "w", "--backend", "copy", "--tmpfs"); r.code != 2 || !strings.Contains(r.stderr, "--tmpfs") {
		t.Errorf("copy --tmpfs: %s", r)
	}
	if r := h.run("ws", "create", "w", "--backend", "bogus"); r.code != 2 || !strings.Contains(r.stderr, "want overlay, reflink, copy or auto") {
		t.Errorf("bogus backend: %s", r)
	}
}

// TestBackendMCP: workspace_create takes a backend; the file tools and
// exec work on a copy workspace, whose tree is a directory of its own; a
// checkpoint leaves it clean.
func TestBackendMCP(t *testing.T) {
	h := newHome(t)
	mcpProject(t, h)
	cs := mcpStdio(t, h, nil)
	var w struct {
		Backend string `json:"backend"`
		Path    string `json:"path"`
	}
	mcpCall(t, cs, "workspace_create", map[string]any{"name": "c", "backend": "copy"}, &w)
	if w.Backend != "copy" || !strings.HasSuffix(w.Path, "/workspaces/c/upper") {
		t.Fatalf("workspace_create: %+v", w)
	}
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "c", "path": "new.txt", "content": "from mcp\n"}, nil)
	var ex mcpExec
	mcpCall(t, cs, "exec", map[string]any{"workspace": "c", "command": "cat new.txt && mv docs renamed && ls renamed"}, &ex)
	if ex.ExitCode != 0 || ex.Stdout != "from mcp\nread.md\n" {
		t.Errorf("exec: %+v", ex)
	}
	mcpCall(t, cs, "checkpoint", map[string]any{"workspace": "c", "message": "via mcp"}, nil)
	wsClean(t, h, "c")
	mcpFails(t, cs, "workspace_create", map[string]any{"name": "x", "backend": "zfs"}, "want overlay, reflink, copy or auto")
}
