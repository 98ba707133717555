//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/nsexec"
)

// Image-rooted workspaces and runs (docs/images.md, "Image roots"), on the
// test images of `make images`: "instance" (Debian bookworm minbase with
// python3; /testbed, WorkingDir /testbed, Env PATH=/opt/env/bin:... and
// TESTBED=1, files owned by 1000) and the SWE-bench-shaped images.

// diffLine is one line of `strata --json diff`.
type diffLine struct {
	Path   string `json:"path"`
	Status string `json:"status"`
	New    *struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	} `json:"new"`
}

func diffJSON(h *home, args ...string) []diffLine {
	h.t.Helper()
	r := h.ok(append([]string{"--json", "diff"}, args...)...)
	var out []diffLine
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if l == "" {
			continue
		}
		var d diffLine
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			h.t.Fatalf("diff --json line %q: %v", l, err)
		}
		out = append(out, d)
	}
	return out
}

func diffPaths(ds []diffLine) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Path)
	}
	slices.Sort(out)
	return out
}

// wsInfo is `strata --json ws list`'s line of one workspace.
type wsInfo struct {
	Name    string `json:"name"`
	Changes int64  `json:"changes_bytes"`
	Path    string `json:"path"`
	Root    *struct {
		Image   string `json:"image"`
		Env     string `json:"env"`
		At      string `json:"at"`
		Project string `json:"project"`
		Cwd     string `json:"cwd"`
	} `json:"root"`
}

func wsList(h *home) map[string]wsInfo {
	h.t.Helper()
	out := map[string]wsInfo{}
	for _, l := range strings.Split(strings.TrimSpace(h.ok("--json", "ws", "list").stdout), "\n") {
		if l == "" {
			continue
		}
		var w wsInfo
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			h.t.Fatal(err)
		}
		out[w.Name] = w
	}
	return out
}

// TestImageRootWorkspace: a workspace forked from an image commit runs in
// the image: its / is the image's tree, its environment, working
// directory and user the config's (--env, --cwd override), nothing of the
// caller's environment; diff and commit cover its project directory
// (the config's WorkingDir) and record owners as the image sees them;
// reset, promote, rebase, shell and ws path work on it; a workspace of a
// commit made on it is image-rooted too.
func TestImageRootWorkspace(t *testing.T) {
	imgs := testImages(t)
	h := newHome(t)
	h.env = append(h.env, "STRATA_TEST_HOST_ONLY=leak")
	importImage(h, "oci:"+filepath.Join(imgs, "oci")+":instance", "-b", "inst")
	// An image root is an overlay stack: no reflink or copy form, refused
	// before anything is made.
	for _, b := range []string{"copy", "reflink"} {
		if r := h.fails(2, "ws", "create", "w", "--from", "inst", "--backend", b); !strings.Contains(r.stderr, "image-rooted") {
			t.Errorf("ws create --backend %s of an image: %q", b, r.stderr)
		}
	}
	if r := h.fails(2, "run", "--from", "inst", "--backend", "copy", "--", "true"); !strings.Contains(r.stderr, "image-rooted") {
		t.Errorf("run --backend copy of an image: %q", r.stderr)
	}
	h.ok("ws", "create", "w", "--from", "inst", "--backend", "auto")
	defer h.run("ws", "rm", "--force", "w")

	// The image's world, not the host's.
	got := h.ok("exec", "w", "--", "sh", "-c", `id -u; id -g; pwd; echo "$HOME|$PATH|$TESTBED|$STRATA_TEST_HOST_ONLY"; . /etc/os-release; echo $ID; ls`).stdout
	want := "0\n0\n/testbed\n/root|/opt/env/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|1|\ndebian\nREADME.md\npkg\ntest_link.py\ntest_pkg.py\n"
	if got != want {
		t.Errorf("exec in the image printed\n%s\nwant\n%s", got, want)
	}
	if got := h.ok("exec", "w", "--cwd", "pkg", "--env", "TESTBED=2", "--sandbox", "none", "--", "sh", "-c", `pwd; echo $TESTBED`).stdout; got != "/testbed/pkg\n2\n" {
		t.Errorf("exec --cwd pkg --env TESTBED=2 --sandbox none: %q", got)
	}
	ws := wsList(h)["w"]
	if ws.Root == nil || ws.Root.Project != "/testbed" || ws.Root.Cwd != "/testbed" || !strings.Contains(ws.Root.Image, ":instance") {
		t.Errorf("ws list: %+v", ws.Root)
	}

	// Changes in the project and outside it: diff and commit record the
	// project's; the rest stays in the workspace, uncommitted.
	h.ok("exec", "w", "--", "sh", "-c", "echo new > new.txt && echo more >> README.md && mkdir -p /root/.cache && echo c > /root/.cache/pip && echo o > /opt/out.txt")
	d := diffJSON(h, "w")
	if got, want := diffPaths(d), []string{"testbed/README.md", "testbed/new.txt"}; !slices.Equal(got, want) {
		t.Errorf("diff of the project: %q; want %q", got, want)
	}
	for _, l := range d {
		if l.New == nil || l.New.UID != 0 || l.New.GID != 0 {
			t.Errorf("diff %s: owner %+v; want root's (0:0), as the image sees it", l.Path, l.New)
		}
	}
	if c := wsList(h)["w"].Changes; c == 0 {
		t.Error("ws list: no changes before the commit")
	}
	var cr struct {
		Commit string `json:"commit"`
		Parent string `json:"parent"`
	}
	h.okJSON(&cr, "commit", "w", "-m", "project change")
	if d := diffJSON(h, "w"); len(d) != 0 {
		t.Errorf("diff after the commit: %v", diffPaths(d))
	}
	if c := wsList(h)["w"].Changes; c != 0 {
		t.Errorf("ws list after the commit: %d bytes of changes; the writes outside the project are not changes", c)
	}
	if got := diffPaths(diffJSON(h, "inst..ws/w")); !slices.Equal(got, []string{"testbed/README.md", "testbed/new.txt"}) {
		t.Errorf("the commit holds %q", got)
	}
	if got := h.ok("exec", "w", "--", "cat", "/root/.cache/pip", "/opt/out.txt").stdout; got != "c\no\n" {
		t.Errorf("writes outside the project after the commit: %q", got)
	}

	// A workspace of the commit is image-rooted too (its chain leads to
	// the image), and sees it.
	h.ok("ws", "create", "w2", "--from", "ws/w", "--env", "EXTRA=yes", "--cwd", "/opt")
	defer h.run("ws", "rm", "--force", "w2")
	if got := h.ok("exec", "w2", "--", "sh", "-c", "pwd; echo $EXTRA $TESTBED; cat /testbed/new.txt; test -e /opt/out.txt || echo no-out").stdout; got != "/opt\nyes 1\nnew\nno-out\n" {
		t.Errorf("workspace of a commit on the image: %q", got)
	}
	// --cwd moved the project: /opt is what w2's diff covers.
	h.ok("exec", "w2", "--", "sh", "-c", "echo x > /opt/x && echo y > /testbed/y")
	if got := diffPaths(diffJSON(h, "w2")); !slices.Equal(got, []string{"opt/x"}) {
		t.Errorf("diff of w2 (--cwd /opt): %q", got)
	}

	// Reset: the changes and the writes outside the project go.
	h.ok("exec", "w", "--", "sh", "-c", "echo again > new2.txt")
	h.ok("reset", "w")
	if got := h.ok("exec", "w", "--", "sh", "-c", "ls /testbed; test -e /root/.cache/pip || echo no-cache; test -e /opt/out.txt || echo no-out").stdout; got != "README.md\nnew.txt\npkg\ntest_link.py\ntest_pkg.py\nno-cache\nno-out\n" {
		t.Errorf("after reset: %q", got)
	}
	// Not onto a commit that is not an image: its / would be a project.
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src, "-b", "project")
	if r := h.fails(2, "reset", "w", "project"); !strings.Contains(r.stderr, "not one") {
		t.Errorf("reset onto a project: %s", r)
	}

	// --scope all: everything the workspace changed.
	h.ok("ws", "create", "all", "--from", "inst", "--scope", "all")
	defer h.run("ws", "rm", "--force", "all")
	h.ok("exec", "all", "--", "sh", "-c", "echo a > a.txt && echo o > /opt/o.txt")
	if got := diffPaths(diffJSON(h, "all")); !slices.Equal(got, []string{"opt/o.txt", "testbed/a.txt"}) {
		t.Errorf("diff of a --scope all workspace: %q", got)
	}

	// Promote into the image's branch, rebase another workspace onto it.
	h.ok("ws", "create", "p", "--from", "inst")
	defer h.run("ws", "rm", "--force", "p")
	h.ok("ws", "create", "q", "--from", "inst")
	defer h.run("ws", "rm", "--force", "q")
	h.ok("exec", "p", "--", "sh", "-c", "echo p > p.txt")
	h.ok("commit", "p")
	h.ok("promote", "p")
	h.ok("exec", "q", "--", "sh", "-c", "echo q > q.txt")
	h.ok("rebase", "q", "inst")
	if got := h.ok("exec", "q", "--", "cat", "p.txt", "q.txt").stdout; got != "p\nq\n" {
		t.Errorf("after promote and rebase: %q", got)
	}
	if got := diffPaths(diffJSON(h, "q")); !slices.Equal(got, []string{"testbed/q.txt"}) {
		t.Errorf("diff after the rebase: %q", got)
	}

	// shell without a terminal: the image's bash reads the script.
	if r := h.runIn(t.Context(), "", []byte("echo $0; pwd\n"), "shell", "q"); r.code != 0 || r.stdout != "bash\n/testbed\n" {
		t.Errorf("shell: %s", r)
	}
	// ws path: the project directory, from the host.
	var wp struct {
		Path string `json:"path"`
	}
	h.okJSON(&wp, "ws", "path", "q")
	if b, err := os.ReadFile(filepath.Join(wp.Path, "q.txt")); err != nil || string(b) != "q\n" {
		t.Errorf("ws path %s: q.txt %q, %v", wp.Path, b, err)
	}
	h.ok("ws", "rm", "q", "--force")
	h.fsckClean()
}

// TestImageRootProject: --root IMAGE --at PATH puts a project branch (an
// import --git of the SWE-bench test repository) at PATH over an
// environment image: the project's commits and diff are the project only;
// the environment's own writes go to the root upper, discarded by reset;
// the environment's commit stays while the workspace lives, even with its
// branch deleted and gc run; bad flags are refused before anything is
// made.
func TestImageRootProject(t *testing.T) {
	imgs := testImages(t)
	h := newHome(t)
	importImage(h, "oci:"+filepath.Join(imgs, "oci")+":sweb.env.textkit", "-b", "env")
	repo := filepath.Join(imgs, "swebench", "textkit")
	h.ok("import", "--git", repo, "-b", "proj")
	h.ok("ws", "create", "p", "--from", "proj", "--root", "env", "--at", "/testbed")
	got := h.ok("exec", "p", "--", "sh", "-c", "pwd; id -u; ls; python3 -m pytest -q tests 2>&1 | tail -1").stdout
	if !strings.HasPrefix(got, "/testbed\n0\nREADME.md\npyproject.toml\ntests\ntextkit\n") || !strings.Contains(got, " passed") {
		t.Errorf("the project in the environment:\n%s", got)
	}
	h.ok("exec", "p", "--", "sh", "-c", "rm -rf .pytest_cache $(find . -name __pycache__) && echo mine > mine.txt && echo env > /opt/env.txt && mkdir -p /root/.cache && echo c > /root/.cache/c")
	if got := diffPaths(diffJSON(h, "p")); !slices.Equal(got, []string{"mine.txt"}) {
		t.Errorf("diff of the project: %q", got)
	}
	h.ok("commit", "p", "-m", "mine")
	var head struct {
		Commit struct {
			Stats struct {
				Files int `json:"files"`
			} `json:"stats"`
		} `json:"commit"`
	}
	h.okJSON(&head, "show", "ws/p")
	var proj struct {
		Commit struct {
			Stats struct {
				Files int `json:"files"`
			} `json:"stats"`
		} `json:"commit"`
	}
	h.okJSON(&proj, "show", "proj")
	if head.Commit.Stats.Files != proj.Commit.Stats.Files+1 {
		t.Errorf("the project's commit holds %d files; the project had %d: want one more, nothing of the environment", head.Commit.Stats.Files, proj.Commit.Stats.Files)
	}
	// The environment's writes stay until reset.
	if got := h.ok("exec", "p", "--", "cat", "/opt/env.txt").stdout; got != "env\n" {
		t.Errorf("environment write after commit: %q", got)
	}
	// The branch list does not show the ref that keeps the environment;
	// deleting the environment's branch and gc do not take it away.
	if r := h.ok("branch", "list"); strings.Contains(r.stdout, "ws-roots/") {
		t.Errorf("branch list shows the root ref:\n%s", r.stdout)
	}
	h.ok("branch", "delete", "env")
	h.ok("gc", "--prune", "0s")
	h.ok("ws", "stop", "p")
	if got := h.ok("exec", "p", "--", "sh", "-c", "cat mine.txt /opt/env.txt; git --version | cut -d' ' -f1").stdout; got != "mine\nenv\ngit\n" {
		t.Errorf("after the environment's branch was deleted and gc: %q", got)
	}
	h.ok("reset", "p")
	if got := h.ok("exec", "p", "--", "sh", "-c", "cat mine.txt; test -e /opt/env.txt || echo no-env; test -e /root/.cache/c || echo no-cache").stdout; got != "mine\nno-env\nno-cache\n" {
		t.Errorf("after reset: %q", got)
	}
	h.ok("ws", "rm", "p")
	if r := h.ok("--json", "branch", "list"); strings.Contains(r.stdout, "ws-roots") {
		t.Errorf("ws rm left the root ref: %s", r.stdout)
	}
	h.fsckClean()

	// Refused, nothing made.
	importImage(h, "oci:"+filepath.Join(imgs, "oci")+":sweb.env.textkit", "-b", "env")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ws", "create", "x", "--from", "proj", "--root", "env"}, "needs --at"},
		{[]string{"ws", "create", "x", "--from", "proj", "--at", "/testbed"}, "--at needs --root"},
		{[]string{"ws", "create", "x", "--from", "proj", "--root", "proj", "--at", "/testbed"}, "is not an image"},
		{[]string{"ws", "create", "x", "--from", "proj", "--root", "env", "--at", "/tmp/x"}, "mounted over"},
		{[]string{"ws", "create", "x", "--from", "proj", "--scope", "all"}, "apply to image-rooted ones"},
		{[]string{"run", "--from", "proj", "--root", "env", "--", "true"}, "needs --at"},
		{[]string{"run", "--from", "env", "--scope", "some", "--", "true"}, "want project or all"},
	} {
		if r := h.fails(2, tc.args...); !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %s; want %q", tc.args, r, tc.want)
		}
	}
	if ws := wsList(h); len(ws) != 0 {
		t.Errorf("refused creates left workspaces: %v", ws)
	}
}

// TestImageRootRun: one-shot runs and batch jobs rooted in an image, and
// on an environment: a patch applies in the project directory, --commit
// records the project's change only (as the image sees owners), --keep
// leaves an image-rooted workspace, --net none keeps the image's own
// resolv.conf, --ro binds a host directory the image lacks, and a batch
// mixes both shapes.
func TestImageRootRun(t *testing.T) {
	imgs := testImages(t)
	h := newHome(t)
	oci := "oci:" + filepath.Join(imgs, "oci")
	importImage(h, oci+":sweb.eval.textkit_1776_textkit-1", "-b", "inst")
	importImage(h, oci+":sweb.env.textkit", "-b", "env")
	var rows []map[string]any
	b, err := os.ReadFile(filepath.Join(imgs, "swebench", "dataset.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	row := rows[0]
	base := row["base_commit"].(string)
	h.ok("import", "--git", filepath.Join(imgs, "swebench", "textkit")+"@"+base, "-b", "proj")
	dir := t.TempDir()
	// The task's test patch adds the failing test; with the gold patch
	// it passes.
	gold, tests := filepath.Join(dir, "gold.diff"), filepath.Join(dir, "tests.diff")
	if err := os.WriteFile(gold, []byte(row["patch"].(string)+row["test_patch"].(string)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tests, []byte(row["test_patch"].(string)), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := []string{"tests/test_slug.py", "textkit/slug.py"}
	inImage := []string{"testbed/tests/test_slug.py", "testbed/textkit/slug.py"}
	h.ok("run", "--from", "inst", "--", "true")

	// The failing test passes with the gold patch, in both shapes.
	var fail2pass []string
	if err := json.Unmarshal([]byte(row["FAIL_TO_PASS"].(string)), &fail2pass); err != nil {
		t.Fatal(err)
	}
	test := fail2pass[0]
	h.fails(1, "run", "--from", "inst", "--patch", tests, "--", "python3", "-m", "pytest", "-q", test)
	var res struct {
		ExitCode int    `json:"exit_code"`
		Commit   string `json:"commit"`
		Branch   string `json:"branch"`
		Diff     struct {
			Paths []string `json:"paths"`
		} `json:"diff"`
		Workspace string `json:"workspace"`
	}
	h.okJSON(&res, "run", "--from", "inst", "--patch", gold, "--commit", "fixed", "--", "sh", "-c", "python3 -m pytest -q -p no:cacheprovider "+test+" && find . -name __pycache__ -prune -exec rm -rf {} +")
	if res.ExitCode != 0 || res.Commit == "" || !slices.Equal(res.Diff.Paths, inImage) {
		t.Errorf("run --patch --commit in the image: %+v", res)
	}
	d := diffJSON(h, "inst..fixed")
	if got := diffPaths(d); !slices.Equal(got, inImage) || d[0].New.UID != 0 {
		t.Errorf("the run's commit holds %q (%+v)", got, d)
	}
	h.okJSON(&res, "run", "--from", "proj", "--root", "env", "--at", "/testbed", "--patch", gold, "--commit", "proj-fixed", "--",
		"sh", "-c", "python3 -m pytest -q -p no:cacheprovider "+test+" && find . -name __pycache__ -prune -exec rm -rf {} + && echo e > /opt/e")
	if res.ExitCode != 0 || !slices.Equal(res.Diff.Paths, changed) {
		t.Errorf("run --root --at --patch --commit: %+v", res)
	}
	if got := diffPaths(diffJSON(h, "proj..proj-fixed")); !slices.Equal(got, changed) {
		t.Errorf("the project run's commit holds %q", got)
	}

	// --keep: an image-rooted workspace, with the run's change.
	h.okJSON(&res, "run", "--from", "inst", "--keep", "--", "sh", "-c", "echo kept > kept.txt")
	if got := h.ok("exec", res.Workspace, "--", "sh", "-c", "pwd; cat kept.txt").stdout; got != "/testbed\nkept\n" {
		t.Errorf("kept run: %q", got)
	}
	h.okJSON(&res, "run", "--from", "proj", "--root", "env", "--at", "/testbed", "--keep", "--", "sh", "-c", "echo k > k.txt; echo e > /opt/e")
	if got := h.ok("exec", res.Workspace, "--", "sh", "-c", "cat k.txt /opt/e").stdout; got != "k\ne\n" {
		t.Errorf("kept project run: %q", got)
	}
	if got := diffPaths(diffJSON(h, res.Workspace)); !slices.Equal(got, []string{"k.txt"}) {
		t.Errorf("kept project run's diff: %q", got)
	}
	h.ok("ws", "rm", "--force", res.Workspace)

	// A host directory the image lacks, read-only; the image's own
	// resolv.conf under --net none, the host's under host.
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "in.txt"), []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(data, 0o755)
	if got := h.ok("run", "--from", "inst", "--ro", data, "--", "sh", "-c", "cat "+data+"/in.txt; touch "+data+"/x 2>/dev/null || echo ro").stdout; got != "data\nro\n" {
		t.Errorf("run --ro %s: %q", data, got)
	}
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	if got := h.ok("run", "--from", "inst", "--net", "host", "--", "cat", "/etc/resolv.conf").stdout; got != string(hostResolv) {
		t.Errorf("--net host: resolv.conf %q, the host's %q", got, hostResolv)
	}

	// batch: both shapes, the scope field, a bad field refused first.
	jobs := filepath.Join(dir, "jobs.jsonl")
	lines := []string{
		`{"id":"img","from":"inst","cmd":"pwd; echo x > x.txt; echo y > /opt/y"}`,
		`{"id":"img-all","from":"inst","scope":"all","cmd":"echo x > x.txt; echo y > /opt/y"}`,
		`{"id":"env","from":"proj","root":"env","at":"/testbed","cmd":"pwd; echo x > x.txt; echo y > /opt/y"}`,
	}
	if err := os.WriteFile(jobs, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := h.ok("batch", jobs, "-j", "2").stdout
	type jobResult struct {
		ID         string `json:"id"`
		ExitCode   int    `json:"exit_code"`
		StdoutTail string `json:"stdout_tail"`
		Diff       struct {
			Paths []string `json:"paths"`
		} `json:"diff"`
	}
	results := map[string]jobResult{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r jobResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		results[r.ID] = r
	}
	if r := results["img"]; r.ExitCode != 0 || r.StdoutTail != "/testbed\n" || !slices.Equal(r.Diff.Paths, []string{"testbed/x.txt"}) {
		t.Errorf("batch image job: %+v", r)
	}
	if r := results["img-all"]; r.ExitCode != 0 || !slices.Equal(r.Diff.Paths, []string{"opt/y", "testbed/x.txt"}) {
		t.Errorf("batch image job, scope all: %+v", r)
	}
	if r := results["env"]; r.ExitCode != 0 || r.StdoutTail != "/testbed\n" || !slices.Equal(r.Diff.Paths, []string{"x.txt"}) {
		t.Errorf("batch environment job: %+v", r)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"id":"a","from":"proj","at":"/testbed","cmd":"true"}`+"\n"+`{"id":"b","from":"inst","scope":"x","cmd":"true"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := h.fails(2, "batch", bad); !strings.Contains(r.stderr, "--at needs --root") || !strings.Contains(r.stderr, "want project or all") {
		t.Errorf("bad batch: %s", r)
	}
	h.fsckClean()
}

// TestImageRootSubIDs: rootless, a workspace with --subids sees the
// image's other users as themselves (its layers are written with the
// image's ids as the subordinate-id namespace holds them): /opt/env/secret
// of uid 1000 is 1000 inside; a chown inside is recorded as the image's
// id. Without --subids every file is root's inside (rootless). As real
// root the image's owners are kept either way.
func TestImageRootSubIDs(t *testing.T) {
	needSubIDs(t)
	imgs := testImages(t)
	h := newHome(t)
	// The image's layers for --subids hold files of subordinate ids,
	// which only their namespace may remove (as podman's storage).
	t.Cleanup(func() { _ = nsexec.RemoveAll(filepath.Join(h.dir, "layers")) })
	importImage(h, "oci:"+filepath.Join(imgs, "oci")+":instance", "-b", "inst")
	h.ok("ws", "create", "s", "--from", "inst", "--subids")
	defer h.run("ws", "rm", "--force", "s")
	h.ok("ws", "create", "n", "--from", "inst")
	defer h.run("ws", "rm", "--force", "n")
	stat := `stat -c "%u:%g" /opt/env/secret /opt/env/lib /opt/env/setuid`
	if got := h.ok("exec", "s", "--", "sh", "-c", stat).stdout; got != "1000:1000\n1000:1000\n0:0\n" {
		t.Errorf("--subids: owners %q; want the image's", got)
	}
	want := "0:0\n0:0\n0:0\n"
	if os.Geteuid() == 0 {
		want = "1000:1000\n1000:1000\n0:0\n"
	}
	if got := h.ok("exec", "n", "--", "sh", "-c", stat).stdout; got != want {
		t.Errorf("without --subids: owners %q; want %q", got, want)
	}
	h.ok("exec", "s", "--", "sh", "-c", "echo x > x && chown 1000:1000 x && echo y > y && chown 5:6 y && echo more >> /opt/env/secret")
	owners := map[string]string{}
	for _, l := range diffJSON(h, "s") {
		owners[l.Path] = itoa(int(l.New.UID)) + ":" + itoa(int(l.New.GID))
	}
	if owners["testbed/x"] != "1000:1000" || owners["testbed/y"] != "5:6" || len(owners) != 2 {
		t.Errorf("recorded owners %v", owners)
	}
	h.ok("commit", "s")
	h.ok("ws", "create", "s2", "--from", "ws/s", "--subids")
	defer h.run("ws", "rm", "--force", "s2")
	if got := h.ok("exec", "s2", "--", "sh", "-c", `stat -c "%u:%g" x y`).stdout; got != "1000:1000\n5:6\n" {
		t.Errorf("a workspace of the commit: %q", got)
	}
	h.ok("ws", "rm", "--force", "s2")
	h.ok("gc")
	h.fsckClean()
}

// TestImageRootCreateCost: creating an image-rooted workspace writes the
// image's layers once; the next workspace of the image writes no layer
// and only a few small files of its own (a keeper then only mounts).
func TestImageRootCreateCost(t *testing.T) {
	imgs := testImages(t)
	h := newHome(t)
	importImage(h, "oci:"+filepath.Join(imgs, "oci")+":instance", "-b", "inst")
	h.ok("ws", "create", "a", "--from", "inst")
	layers := func() []string {
		var out []string
		_ = filepath.WalkDir(filepath.Join(h.dir, "layers"), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && filepath.Dir(filepath.Dir(p)) == filepath.Join(h.dir, "layers") {
				out = append(out, p)
				return filepath.SkipDir
			}
			return nil
		})
		return out
	}
	before := layers()
	if len(before) < 3 {
		t.Fatalf("layers after the first workspace: %q", before)
	}
	h.ok("ws", "create", "b", "--from", "inst")
	if after := layers(); !slices.Equal(before, after) {
		t.Errorf("the second workspace wrote layers: %q, before %q", after, before)
	}
	var files int
	var bytes int64
	_ = filepath.WalkDir(filepath.Join(h.dir, "workspaces", "b"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
			}
		}
		return nil
	})
	if files > 2 || bytes > 4096 {
		t.Errorf("the second workspace's directory holds %d files, %d bytes", files, bytes)
	}
	h.ok("exec", "b", "--", "true")
}

// TestImageRootMCP: an agent's workspace_create from an image ref runs in
// the image — exec there, read_file and write_file relative to its
// project directory, diff of the project — and root/at put a project
// on an environment.
func TestImageRootMCP(t *testing.T) {
	imgs := testImages(t)
	h := newHome(t)
	importImage(h, "oci:"+filepath.Join(imgs, "oci")+":instance", "-b", "inst")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "p.txt"), []byte("project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src, "-b", "proj")
	cs := mcpStdio(t, h, nil)
	mcpCall(t, cs, "workspace_create", map[string]any{"name": "a", "from": "inst"}, nil)
	var ex struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	mcpCall(t, cs, "exec", map[string]any{"workspace": "a", "command": "pwd; echo $TESTBED; cat README.md"}, &ex)
	readme := h.ok("exec", "a", "--", "cat", "README.md").stdout
	if ex.ExitCode != 0 || ex.Stdout != "/testbed\n1\n"+readme {
		t.Errorf("exec in the image: %+v", ex)
	}
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "a", "path": "agent.txt", "content": "from the agent\n"}, nil)
	var rf struct {
		Content string `json:"content"`
	}
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "a", "path": "README.md"}, &rf)
	if rf.Content != readme {
		t.Errorf("read_file README.md: %q; want %q", rf.Content, readme)
	}
	if got := h.ok("exec", "a", "--", "cat", "/testbed/agent.txt").stdout; got != "from the agent\n" {
		t.Errorf("write_file landed elsewhere: %q", got)
	}
	if got := diffPaths(diffJSON(h, "a")); !slices.Equal(got, []string{"testbed/agent.txt"}) {
		t.Errorf("diff after write_file: %q", got)
	}
	mcpCall(t, cs, "workspace_create", map[string]any{"name": "b", "from": "proj", "root": "inst", "at": "/work"}, nil)
	mcpCall(t, cs, "exec", map[string]any{"workspace": "b", "command": "pwd; cat p.txt; cat /testbed/README.md"}, &ex)
	if ex.ExitCode != 0 || ex.Stdout != "/work\nproject\n"+readme {
		t.Errorf("exec in a project on the image: %+v", ex)
	}
}
