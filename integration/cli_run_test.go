//go:build integration

package integration

// CLI tests of README features of exec's flags, diff, promote, apply,
// export-git, run and batch that no other test drives through the real
// binary. Helpers shared with cli_test.go are defined there.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
)

// cliHostDir makes a directory outside /tmp (which is private inside a
// workspace, so a directory there would be hidden rather than fenced).
func cliHostDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "strata-it-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// cliLandlockABI is the kernel's Landlock ABI as strata doctor reports it
// (0: none).
func cliLandlockABI(h *home) int {
	h.t.Helper()
	var rep struct {
		Checks []struct {
			Name   string `json:"name"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		} `json:"checks"`
	}
	r := h.run("--json", "doctor")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		h.t.Fatalf("doctor --json: %v\n%s", err, r)
	}
	for _, c := range rep.Checks {
		if c.Name != "landlock" || !c.OK {
			continue
		}
		if m := regexp.MustCompile(`^ABI (\d+):`).FindStringSubmatch(c.Detail); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// cliProject is a small project for the change commands.
func cliProject(t testing.TB) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{
		"a.txt":   "1\n2\n3\n",
		"b.txt":   "b\n",
		"del.txt": "gone\nsoon\n",
		"mode.sh": "#!/bin/sh\n",
		"bin.dat": "\x00\x01\x02binary\x00",
		"src/x":   "x\n",
	})
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	return src
}

// TestCLIExecCwd: the command starts at the import's path, or at --cwd:
// relative to the workspace root, or absolute.
func TestCLIExecCwd(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	for _, tc := range []struct{ cwd, want string }{
		{"", src},
		{"src", filepath.Join(src, "src")},
		{"./src/", filepath.Join(src, "src")},
		{filepath.Join(src, "src"), filepath.Join(src, "src")},
		{"/tmp", "/tmp"},
		{"/usr/bin", "/usr/bin"},
	} {
		args := []string{"exec", "w"}
		if tc.cwd != "" {
			args = append(args, "--cwd", tc.cwd)
		}
		if got := h.ok(append(args, "--", "pwd")...).stdout; got != tc.want+"\n" {
			t.Errorf("exec --cwd %q: pwd = %q, want %q", tc.cwd, got, tc.want)
		}
	}
	// Relative paths in the command resolve against --cwd.
	if got := h.ok("exec", "w", "--cwd", "src", "--", "cat", "x").stdout; got != "x\n" {
		t.Errorf("exec --cwd src -- cat x: %q", got)
	}
	// A directory that does not exist: strata fails (125), naming it.
	if r := h.fails(125, "exec", "w", "--cwd", "nosuch", "--", "true"); !strings.Contains(r.stderr, "nosuch") {
		t.Errorf("exec --cwd nosuch: %s", r)
	}
	// run takes --cwd too.
	if got := h.ok("run", "--cwd", "src", "--", "pwd").stdout; got != filepath.Join(src, "src")+"\n" {
		t.Errorf("run --cwd src: pwd = %q", got)
	}
}

// TestCLIExecHostPaths: a host directory outside the workspace is not in
// the sandbox's view; --ro binds it read-only, --rw read-write.
func TestCLIExecHostPaths(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	host := cliHostDir(t)
	secret := filepath.Join(host, "secret")
	if err := os.WriteFile(secret, []byte("host data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := "echo from-ws > " + filepath.Join(host, "new") + " && rm " + secret

	// No flag: the directory is not in the sandbox's view at all.
	r := h.fails(1, "exec", "w", "--", "cat", secret)
	if !strings.Contains(r.stderr, "No such file or directory") {
		t.Errorf("reading a host file without --ro: %s", r)
	}
	if r := h.run("exec", "w", "--", "ls", host); r.code == 0 || !strings.Contains(r.stderr, "No such file or directory") {
		t.Errorf("listing a host dir without --ro: %s", r)
	}
	if r := h.run("exec", "w", "--", "sh", "-c", write); r.code == 0 || !strings.Contains(r.stderr, "nonexistent") {
		t.Errorf("writing a host dir without --rw: %s", r)
	}
	// --ro: readable, listable, not writable.
	if got := h.ok("exec", "w", "--ro", host, "--", "cat", secret).stdout; got != "host data\n" {
		t.Errorf("exec --ro: cat = %q", got)
	}
	if got := h.ok("exec", "w", "--ro", host, "--", "ls", host).stdout; got != "secret\n" {
		t.Errorf("exec --ro: ls = %q", got)
	}
	if r := h.run("exec", "w", "--ro", host, "--", "sh", "-c", write); r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("writing a --ro dir: %s", r)
	}
	if _, err := os.Stat(filepath.Join(host, "new")); !os.IsNotExist(err) {
		t.Fatalf("a file was written into a --ro dir (%v)", err)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("a file was removed from a --ro dir: %v", err)
	}
	// --rw: the command writes and removes on the host itself.
	h.ok("exec", "w", "--rw", host, "--", "sh", "-c", write)
	if b, err := os.ReadFile(filepath.Join(host, "new")); err != nil || string(b) != "from-ws\n" {
		t.Errorf("exec --rw: the host reads %q, %v", b, err)
	}
	if _, err := os.Stat(secret); !os.IsNotExist(err) {
		t.Errorf("exec --rw: rm did not remove the host file (%v)", err)
	}
	// Only that directory: its parent stays fenced.
	// (Inside, the parent is the view's private /var/tmp: a write there
	// may succeed, but never reaches the host's.)
	h.run("exec", "w", "--rw", host, "--", "sh", "-c", "echo x > "+host+"-sibling")
	if _, err := os.Lstat(host + "-sibling"); !os.IsNotExist(err) {
		os.Remove(host + "-sibling")
		t.Errorf("--rw %s granted its parent on the host too (%v)", host, err)
	}
	// Relative paths are usage errors; --sandbox none has no fence to open.
	if r := h.fails(2, "exec", "w", "--ro", "rel/dir", "--", "true"); !strings.Contains(r.stderr, "absolute") {
		t.Errorf("--ro rel/dir: %s", r)
	}
	h.fails(2, "exec", "w", "--sandbox", "none", "--rw", host, "--", "true")
	// run takes them too.
	if got := h.ok("run", "--ro", host, "--", "cat", filepath.Join(host, "new")).stdout; got != "from-ws\n" {
		t.Errorf("run --ro: %q", got)
	}
}

// cliPortProbe binds and listens on each port, then connects to each, on
// 127.0.0.1, printing "bind PORT RESULT" and "connect PORT RESULT".
const cliPortProbe = `import errno, socket, sys
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
ls = []
for p in map(int, sys.argv[1:]):
    try:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", p)); s.listen(4); ls.append(s); print("bind", p, "OK")
    except OSError as e:
        print("bind", p, err(e))
for p in map(int, sys.argv[1:]):
    try:
        c = socket.socket(); c.settimeout(5); c.connect(("127.0.0.1", p)); print("connect", p, "OK")
    except OSError as e:
        print("connect", p, err(e))
`

// TestCLIExecPorts: --allow-connect and --allow-bind restrict TCP to the
// listed ports (Landlock ABI 4+); strict denies IP sockets outright.
// --net none gives the command a loopback of its own, so the listeners are
// inside the sandbox.
func TestCLIExecPorts(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	if abi := cliLandlockABI(h); abi < 4 {
		testutil.Skip(t, fmt.Sprintf("Landlock ABI %d: TCP rules need ABI 4", abi))
	}
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	const p1, p2 = "41001", "41002"
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "bind 41001 OK\nbind 41002 OK\nconnect 41001 OK\nconnect 41002 OK\n"},
		{[]string{"--allow-connect", p1}, "bind 41001 OK\nbind 41002 OK\nconnect 41001 OK\nconnect 41002 EACCES\n"},
		{[]string{"--allow-bind", p1}, "bind 41001 OK\nbind 41002 EACCES\nconnect 41001 OK\nconnect 41002 ECONNREFUSED\n"},
		{[]string{"--allow-bind", p1, "--allow-bind", p2, "--allow-connect", p2}, "bind 41001 OK\nbind 41002 OK\nconnect 41001 EACCES\nconnect 41002 OK\n"},
		// Strict: the socket deny comes first, whatever the ports
		// (docs/sandbox.md: "Strict denies IP sockets outright").
		{[]string{"--sandbox", "strict", "--allow-connect", p1, "--allow-bind", p1}, "bind 41001 EPERM\nbind 41002 EPERM\nconnect 41001 EPERM\nconnect 41002 EPERM\n"},
	} {
		args := append([]string{"exec", "w", "--net", "none"}, tc.flags...)
		args = append(args, "--", "/usr/bin/python3", "-c", cliPortProbe, p1, p2)
		if got := h.ok(args...).stdout; got != tc.want {
			t.Errorf("exec %v:\n%s\nwant:\n%s", tc.flags, got, tc.want)
		}
	}
	// run takes them too.
	got := h.ok("run", "--net", "none", "--allow-connect", p2, "--", "/usr/bin/python3", "-c", cliPortProbe, p1, p2).stdout
	if got != "bind 41001 OK\nbind 41002 OK\nconnect 41001 EACCES\nconnect 41002 OK\n" {
		t.Errorf("run --allow-connect %s:\n%s", p2, got)
	}
	if r := h.fails(2, "exec", "w", "--allow-connect", "http", "--", "true"); !strings.Contains(r.stderr, "port") {
		t.Errorf("--allow-connect http: %s", r)
	}
	h.fails(2, "exec", "w", "--allow-bind", "70000", "--", "true")
}

// TestCLIExecRequireABI: --sandbox-require-abi N runs when the kernel's
// Landlock ABI is at least N and refuses (125, nothing runs) otherwise.
func TestCLIExecRequireABI(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	abi := cliLandlockABI(h)
	if abi < 1 {
		testutil.Skip(t, "no Landlock on this kernel")
	}
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	for n := 1; n <= abi; n++ {
		h.ok("exec", "w", "--sandbox-require-abi", strconv.Itoa(n), "--", "sh", "-c", "echo ran > ran"+strconv.Itoa(n))
	}
	if got := h.ok("exec", "w", "--", "cat", "ran"+strconv.Itoa(abi)).stdout; got != "ran\n" {
		t.Errorf("--sandbox-require-abi %d did not run: %q", abi, got)
	}
	need := strconv.Itoa(abi + 1)
	r := h.fails(125, "exec", "w", "--sandbox-require-abi", need, "--", "sh", "-c", "echo ran > never")
	if !strings.HasPrefix(cliStderr(r.stderr), "strata: landlock: ") || !strings.Contains(r.stderr, "ABI "+need) || r.stdout != "" {
		t.Errorf("--sandbox-require-abi %s on ABI %d: want a refusal naming ABI %s, got %s", need, abi, need, r)
	}
	h.fails(1, "exec", "w", "--", "test", "-e", "never")
	r = h.fails(125, "--json", "run", "--sandbox-require-abi", need, "--", "sh", "-c", "echo ran")
	var e struct{ Error, Kind string }
	if err := json.Unmarshal([]byte(cliStderr(r.stderr)), &e); err != nil || !strings.Contains(e.Error, "ABI "+need) || r.stdout != "" {
		t.Errorf("run --json --sandbox-require-abi %s: %s (%v)", need, r, err)
	}
	h.fails(2, "exec", "w", "--sandbox", "none", "--sandbox-require-abi", "1", "--", "true")
}

// cliFileChange is one line of diff --json.
type cliFileChange struct {
	Path   string `json:"path"`
	Status string `json:"status"`
	Old    *struct {
		Type string `json:"type"`
		Mode uint32 `json:"mode"`
		Size int64  `json:"size"`
	} `json:"old"`
	New *struct {
		Type   string `json:"type"`
		Mode   uint32 `json:"mode"`
		Size   int64  `json:"size"`
		Target string `json:"target"`
	} `json:"new"`
	Binary  bool `json:"binary"`
	Added   int  `json:"added"`
	Deleted int  `json:"deleted"`
}

// TestCLIDiff: diff --json (one object per file), diff REF (its first
// parent against it), diff A..B.
func TestCLIDiff(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	h.ok("exec", "w", "--", "sh", "-ec", `printf '1\ntwo\n3\n4\n' > a.txt
printf 'new\nfile\n' > new.txt
rm del.txt
printf '\000\001changed\000' > bin.dat
chmod 755 mode.sh
rm link && echo now-a-file > link`)

	r := h.ok("--json", "diff", "w")
	got := map[string]cliFileChange{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var fc cliFileChange
		if err := json.Unmarshal([]byte(line), &fc); err != nil {
			t.Fatalf("diff --json line %q: %v", line, err)
		}
		got[fc.Path] = fc
		order = append(order, fc.Path)
	}
	if strings.Join(order, " ") != "a.txt bin.dat del.txt link mode.sh new.txt" {
		t.Errorf("diff --json paths: %v", order)
	}
	check := func(path, status string, added, deleted int, f func(fc cliFileChange) bool) {
		t.Helper()
		fc, ok := got[path]
		if !ok {
			t.Errorf("diff --json: no line for %s", path)
			return
		}
		if fc.Status != status || fc.Added != added || fc.Deleted != deleted || !f(fc) {
			b, _ := json.Marshal(fc)
			t.Errorf("diff --json %s: %s; want status %s, +%d -%d", path, b, status, added, deleted)
		}
	}
	check("a.txt", "M", 2, 1, func(fc cliFileChange) bool {
		return fc.Old != nil && fc.New != nil && fc.Old.Size == 6 && fc.New.Size == 10 && !fc.Binary
	})
	check("new.txt", "A", 2, 0, func(fc cliFileChange) bool {
		return fc.Old == nil && fc.New != nil && fc.New.Type == "file" && fc.New.Size == 9
	})
	check("del.txt", "D", 0, 2, func(fc cliFileChange) bool { return fc.New == nil && fc.Old != nil && fc.Old.Size == 10 })
	check("bin.dat", "M", 0, 0, func(fc cliFileChange) bool { return fc.Binary })
	check("mode.sh", "M", 0, 0, func(fc cliFileChange) bool {
		return fc.Old != nil && fc.New != nil && fc.Old.Mode&0o777 == 0o644 && fc.New.Mode&0o777 == 0o755
	})
	check("link", "T", 1, 1, func(fc cliFileChange) bool {
		return fc.Old != nil && fc.New != nil && fc.Old.Type == "symlink" && fc.New.Type == "file"
	})
	// The text forms agree.
	ns := h.ok("diff", "w", "--name-status").stdout
	if ns != "M\ta.txt\nM\tbin.dat\nD\tdel.txt\nT\tlink\nM\tmode.sh\nA\tnew.txt\n" {
		t.Errorf("diff --name-status:\n%s", ns)
	}
	if st := h.ok("diff", "w", "--stat").stdout; !strings.HasSuffix(st, " 6 files changed, 5 insertions(+), 4 deletions(-)\n") || !strings.Contains(st, " bin.dat | Bin\n") {
		t.Errorf("diff --stat:\n%s", st)
	}
	h.fails(2, "diff", "w", "--stat", "--patch")

	// Two commits; diff REF is REF^..REF, diff A..B spans both.
	h.ok("commit", "w", "-m", "one")
	h.ok("exec", "w", "--", "sh", "-c", "echo more >> new.txt && echo c > src/c")
	h.ok("commit", "w", "-m", "two")
	for _, tc := range []struct{ arg, want string }{
		{"ws/w", "M\tnew.txt\nA\tsrc/c\n"},
		{cliHead(h, "ws/w"), "M\tnew.txt\nA\tsrc/c\n"},
		{"ws/w^", ns},
		{"ws/w~1", ns},
		{"main..ws/w", "M\ta.txt\nM\tbin.dat\nD\tdel.txt\nT\tlink\nM\tmode.sh\nA\tnew.txt\nA\tsrc/c\n"},
		{"ws/w~2..ws/w", "M\ta.txt\nM\tbin.dat\nD\tdel.txt\nT\tlink\nM\tmode.sh\nA\tnew.txt\nA\tsrc/c\n"},
		{"ws/w^..ws/w", "M\tnew.txt\nA\tsrc/c\n"},
		{"ws/w..main", "M\ta.txt\nM\tbin.dat\nA\tdel.txt\nT\tlink\nM\tmode.sh\nD\tnew.txt\nD\tsrc/c\n"},
		{"main..main", ""},
		{"w", ""}, // the workspace is clean after its commit
	} {
		if got := h.ok("diff", tc.arg, "--name-status").stdout; got != tc.want {
			t.Errorf("diff %s --name-status:\n%s\nwant:\n%s", tc.arg, got, tc.want)
		}
	}
	// --json of a REF, and its patch.
	lines := cliLines(t, h.ok("--json", "diff", "ws/w").stdout)
	if len(lines) != 2 || lines[0]["path"] != "new.txt" || lines[0]["added"] != 1.0 || lines[1]["status"] != "A" {
		t.Errorf("diff --json ws/w: %v", lines)
	}
	patch := h.ok("diff", "ws/w").stdout
	if !strings.Contains(patch, "diff --git a/new.txt b/new.txt\n") || !strings.Contains(patch, "+more\n") || !strings.Contains(patch, "new file mode 100644") {
		t.Errorf("diff ws/w (patch):\n%s", patch)
	}
	// A root commit: everything added.
	if got := h.ok("diff", "main", "--name-status").stdout; !strings.HasPrefix(got, "A\ta.txt\nA\tb.txt\n") {
		t.Errorf("diff of a root commit:\n%s", got)
	}
	h.fails(2, "diff", "..main")
	h.fails(1, "diff", "main..nosuch")
}

// TestCLIPromoteTargets: promote --into BRANCH, and promote BRANCH (a
// branch, not a workspace).
func TestCLIPromoteTargets(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("branch", "create", "release")
	mainHead := cliHead(h, "main")
	h.ok("ws", "create", "a")
	defer h.run("ws", "rm", "--force", "a", "f", "g")
	h.ok("exec", "a", "--", "sh", "-c", "echo a > a-only.txt")
	h.ok("commit", "a")
	aHead := cliHead(h, "ws/a")

	// --into: the named branch moves, the one a was forked from does not.
	r := h.ok("promote", "a", "--into", "release")
	if r.stdout != "promoted ws/a into release (fast-forward): "+aHead[:12]+"\n" {
		t.Errorf("promote a --into release: %q", r.stdout)
	}
	if cliHead(h, "release") != aHead || cliHead(h, "main") != mainHead {
		t.Errorf("promote --into release moved the wrong branch")
	}
	h.fails(1, "promote", "a", "--into", "nosuch")
	h.fails(2, "promote", "a", "--into", "ws/a")

	// A branch: by default into main.
	var p struct {
		From, Into, How, Commit string
	}
	h.okJSON(&p, "promote", "ws/a")
	if p.From != "ws/a" || p.Into != "main" || p.How != "fast-forward" || p.Commit != aHead || cliHead(h, "main") != aHead {
		t.Errorf("promote ws/a: %+v", p)
	}
	h.okJSON(&p, "promote", "ws/a")
	if p.How != "up-to-date" {
		t.Errorf("promote ws/a again: %+v", p)
	}

	// A branch of its own, while main moved: a merge commit.
	h.ok("branch", "create", "feat")
	h.ok("ws", "create", "f", "--branch", "feat")
	h.ok("exec", "f", "--", "sh", "-c", "echo f > feat.txt")
	h.ok("commit", "f")
	h.ok("exec", "a", "--", "sh", "-c", "echo more > more.txt")
	h.ok("commit", "a")
	h.ok("promote", "a")
	h.okJSON(&p, "promote", "feat", "--into", "main")
	if p.How != "merge" || p.Into != "main" {
		t.Fatalf("promote feat --into main: %+v", p)
	}
	var c struct {
		Commit struct {
			Parents []string `json:"parents"`
		} `json:"commit"`
	}
	h.okJSON(&c, "show", "main")
	if len(c.Commit.Parents) != 2 || c.Commit.Parents[1] != cliHead(h, "feat") {
		t.Errorf("the merge commit's parents: %v", c.Commit.Parents)
	}
	for _, f := range []string{"feat.txt", "more.txt", "a-only.txt"} {
		h.ok("show", "main:"+f)
	}

	// A branch forked from another branch goes back into that one.
	h.ok("branch", "create", "fix", "--from", "release")
	h.ok("ws", "create", "g", "--branch", "fix")
	h.ok("exec", "g", "--", "sh", "-c", "echo fix > fix.txt")
	h.ok("commit", "g")
	mainBefore := cliHead(h, "main")
	h.okJSON(&p, "promote", "fix")
	if p.Into != "release" || p.How != "fast-forward" || cliHead(h, "release") != cliHead(h, "fix") || cliHead(h, "main") != mainBefore {
		t.Errorf("promote fix (forked from release): %+v; want a fast-forward of release", p)
	}
	h.fails(1, "promote", "nosuch")
}

// TestCLIApplyRefs: apply REF writes REF^..REF, apply A..B writes A..B,
// into a real directory.
func TestCLIApplyRefs(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	h.ok("exec", "w", "--", "sh", "-c", "echo 4 >> a.txt && echo new > new.txt && rm del.txt")
	h.ok("commit", "w", "-m", "one")
	h.ok("exec", "w", "--", "sh", "-c", "echo b2 > b.txt && mkdir -p d/e && echo deep > d/e/f")
	h.ok("commit", "w", "-m", "two")
	two := cliHead(h, "ws/w")
	exp := func(ref string) string {
		t.Helper()
		d := filepath.Join(t.TempDir(), "exp")
		h.ok("export", ref, d)
		return d
	}

	// apply REF: only REF's own change, onto its parent.
	target := exp("ws/w^")
	r := h.ok("apply", two, "--to", target)
	want := "modified\tb.txt\ncreated\td\ncreated\td/e\ncreated\td/e/f\napplied " + cliHead(h, "ws/w^")[:12] + ".." + two[:12] + " to " + target + ": 4 paths\n"
	if r.stdout != want {
		t.Errorf("apply %s:\n%s\nwant:\n%s", two[:12], r.stdout, want)
	}
	compareGitContent(t, exp("ws/w"), target)

	// apply REF where REF^ differs from the target only outside REF's
	// change: it still applies (a.txt, new.txt, del.txt are not touched).
	onMain := exp("main")
	h.ok("apply", "ws/w", "--to", onMain) // ws/NAME branch: since its fork
	compareGitContent(t, exp("ws/w"), onMain)

	// apply A..B.
	ab := exp("main")
	var res struct {
		From    string `json:"from"`
		To      string `json:"to"`
		Dir     string `json:"dir"`
		Written []struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		} `json:"written"`
	}
	h.okJSON(&res, "apply", "main..ws/w^", "--to", ab)
	var paths []string
	for _, w := range res.Written {
		paths = append(paths, w.Op+" "+w.Path)
	}
	sort.Strings(paths)
	if res.From != cliHead(h, "main") || res.To != cliHead(h, "ws/w^") || res.Dir != ab || strings.Join(paths, ",") != "created new.txt,deleted del.txt,modified a.txt" {
		t.Errorf("apply main..ws/w^ --json: %+v", res)
	}
	compareGitContent(t, exp("ws/w^"), ab)
	// The remaining step, then back again.
	h.ok("apply", "ws/w^..ws/w", "--to", ab)
	compareGitContent(t, exp("ws/w"), ab)
	h.ok("apply", "ws/w..main", "--to", ab)
	compareGitContent(t, exp("main"), ab)

	// A target whose file differs from A: refused, nothing written.
	edited := exp("ws/w^")
	os.WriteFile(filepath.Join(edited, "b.txt"), []byte("mine\n"), 0o644)
	r = h.fails(3, "apply", two, "--to", edited)
	if !strings.Contains(r.stderr, "b.txt") {
		t.Errorf("refused apply does not name b.txt: %s", r)
	}
	if _, err := os.Stat(filepath.Join(edited, "d")); !os.IsNotExist(err) {
		t.Errorf("a refused apply wrote d/")
	}
	h.fails(2, "apply", two)
	h.fails(1, "apply", "main..nosuch", "--to", edited)
}

// TestCLIExportGitDefaultRepo: export-git REF without --repo writes to the
// repository REF's base was imported from.
func TestCLIExportGitDefaultRepo(t *testing.T) {
	repo := gitRepo(t)
	before := sh(t, repo, "git status --porcelain; git rev-parse HEAD; git branch")
	mainSHA := strings.TrimSpace(sh(t, repo, "git rev-parse main"))
	h := newHome(t)
	h.ok("import", "--git", repo)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	h.ok("exec", "w", "--", "sh", "-c", "echo e >> src/lib.txt && echo new > new.txt")
	h.ok("commit", "w", "-m", "agent")
	h.ok("exec", "w", "--", "sh", "-c", "echo uncommitted > later.txt") // not part of ws/w

	r := h.ok("export-git", "ws/w", "--branch", "agent/ref")
	m := regexp.MustCompile(`^branch agent/ref of (.+): commit ([0-9a-f]{12}) on ([0-9a-f]{12}) \(2 paths\)\n$`).FindStringSubmatch(r.stdout)
	if m == nil || m[1] != repo || m[3] != mainSHA[:12] {
		t.Fatalf("export-git ws/w: %q; want the imported repository %s, parent %s", r.stdout, repo, mainSHA[:12])
	}
	if got := strings.TrimSpace(sh(t, repo, "git rev-parse agent/ref^")); got != mainSHA {
		t.Errorf("agent/ref's parent is %s, want main %s", got, mainSHA)
	}
	if got := sh(t, repo, "git diff --name-only main agent/ref"); got != "new.txt\nsrc/lib.txt\n" {
		t.Errorf("agent/ref changes:\n%s", got)
	}
	if got := sh(t, repo, "git show agent/ref:src/lib.txt"); got != "a\nb\nc\nd\ne\n" {
		t.Errorf("agent/ref:src/lib.txt = %q", got)
	}
	// A commit id works as REF too; --json names the repository.
	var res struct {
		Commit string `json:"commit"`
		Branch string `json:"branch"`
		Parent string `json:"parent"`
		Repo   string `json:"repo"`
		Files  int    `json:"changed"`
	}
	h.okJSON(&res, "export-git", cliHead(h, "ws/w")[:10], "--branch", "agent/id")
	if res.Repo != repo || res.Branch != "agent/id" || res.Parent != mainSHA || res.Files != 2 {
		t.Errorf("export-git ID --json: %+v", res)
	}
	if a, b := sh(t, repo, "git rev-parse agent/ref^{tree}"), sh(t, repo, "git rev-parse agent/id^{tree}"); a != b {
		t.Errorf("the same change exported twice gives two trees: %s %s", a, b)
	}
	after := sh(t, repo, "git status --porcelain; git rev-parse HEAD; git branch")
	if strings.Replace(strings.Replace(after, "  agent/id\n", "", 1), "  agent/ref\n", "", 1) != before {
		t.Errorf("the repository changed beyond the new branches:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// A commit that does not descend from import --git has no repository.
	other := newHome(t)
	other.ok("import", cliProject(t))
	if r := other.fails(1, "export-git", "main", "--branch", "x"); !strings.Contains(r.stderr, "import --git") {
		t.Errorf("export-git of a plain import: %s", r)
	}
	h.fails(2, "export-git", "ws/w")
}

// TestCLIRunCommitConflict: run --commit BRANCH onto a branch that is
// elsewhere than the run's base conflicts: exit 3, nothing changes.
func TestCLIRunCommitConflict(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("branch", "create", "elsewhere")
	old := cliHead(h, "elsewhere")
	os.WriteFile(filepath.Join(src, "b.txt"), []byte("moved\n"), 0o644)
	h.ok("import", src)
	r := h.fails(3, "run", "--commit", "elsewhere", "--", "sh", "-c", "echo x > x.txt")
	if !strings.Contains(r.stderr, `branch "elsewhere" is at `+old[:12]+", not at the run's base") {
		t.Errorf("run --commit onto a branch elsewhere: %s", r)
	}
	r = h.fails(3, "--json", "run", "--commit", "elsewhere", "--", "sh", "-c", "echo x > x.txt")
	if rr := decodeRun(t, r); rr.Commit != "" || rr.ExitCode != 0 || rr.Diff.Files != 1 {
		t.Errorf("run --json of the conflict: %+v", rr)
	}
	if e := cliLines(t, cliStderr(r.stderr)); len(e) != 1 || e[0]["kind"] != "conflict" {
		t.Errorf("run --json conflict error: %q", r.stderr)
	}
	if cliHead(h, "elsewhere") != old {
		t.Errorf("the conflicting run moved the branch")
	}
	h.fails(1, "show", "elsewhere:x.txt")
	// From the branch itself, it lands.
	h.ok("run", "--from", "elsewhere", "--commit", "elsewhere", "--", "sh", "-c", "echo x > x.txt")
	if got := h.ok("show", "elsewhere:x.txt").stdout; got != "x\n" {
		t.Errorf("run --from elsewhere --commit elsewhere: %q", got)
	}
}

// TestCLIRunExitCodes: 125 when strata fails, 126 when the command cannot
// be executed, 127 when it is not found; otherwise the command's own.
func TestCLIRunExitCodes(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	if r := h.fails(125, "run", "--from", "nosuch", "--", "true"); !strings.Contains(r.stderr, "nosuch") {
		t.Errorf("run --from nosuch: %s", r)
	}
	// mode.sh is 0644 in the commit.
	if r := h.fails(126, "run", "--", "./mode.sh"); !strings.Contains(r.stderr, "mode.sh") {
		t.Errorf("run of a non-executable file: %s", r)
	}
	if r := h.fails(127, "run", "--", "no-such-command-xyz"); !strings.Contains(r.stderr, "no-such-command-xyz") {
		t.Errorf("run of a missing command: %s", r)
	}
	for code, argv := range map[int][]string{
		126: {"./mode.sh"},
		127: {"no-such-command-xyz"},
		9:   {"sh", "-c", "exit 9"},
		0:   {"true"},
	} {
		r := h.run(append([]string{"--json", "run", "--"}, argv...)...)
		if rr := decodeRun(t, r); r.code != code || rr.ExitCode != code {
			t.Errorf("run --json %v: exit %d, exit_code %d; want %d", argv, r.code, rr.ExitCode, code)
		}
	}
	h.fails(2, "run")
	h.fails(2, "run", "--keep", "--commit", "x", "--", "true")
}

// TestCLIRunSignalDurations: a command killed by a signal reports it
// (exit 128+N); durations_ns has every phase and a total that covers them.
func TestCLIRunSignalDurations(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	for sig, n := range map[string]int{"KILL": 9, "TERM": 15, "SEGV": 11} {
		r := h.fails(128+n, "--json", "run", "--", "sh", "-c", "echo started; kill -"+sig+" $$")
		var m map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("run --json: %v\n%s", err, r)
		}
		if m["signal"] != "SIG"+sig || m["exit_code"] != float64(128+n) || m["timed_out"] != false {
			t.Errorf("run killed by SIG%s: signal %v exit_code %v timed_out %v", sig, m["signal"], m["exit_code"], m["timed_out"])
		}
		if cliStderr(r.stderr) != "started\n" {
			t.Errorf("run --json: the command's stdout goes to stderr: %q", r.stderr)
		}
	}
	// Not killed: signal is empty, but there.
	var m map[string]any
	if err := json.Unmarshal([]byte(h.ok("--json", "run", "--", "true").stdout), &m); err != nil {
		t.Fatal(err)
	}
	if s, ok := m["signal"]; !ok || s != "" {
		t.Errorf("run --json of a command that exited: signal = %v (present %v); want \"\"", s, ok)
	}

	phases := []string{"fork", "patch", "run", "diff", "commit", "discard"}
	checkDurations := func(what string, d map[string]int64, ran ...string) {
		t.Helper()
		var sum int64
		for _, p := range phases {
			v, ok := d[p]
			if !ok || v < 0 {
				t.Errorf("%s: durations_ns[%s] = %d (present %v)", what, p, v, ok)
			}
			sum += v
		}
		for _, p := range ran {
			if d[p] <= 0 {
				t.Errorf("%s: durations_ns[%s] = %d; the phase ran", what, p, d[p])
			}
		}
		if d["total"] < sum {
			t.Errorf("%s: total %d < the sum of the phases %d: %v", what, d["total"], sum, d)
		}
	}
	patch := patchFor(t, src, "a.txt", "2", "two")
	out := filepath.Join(t.TempDir(), "out")
	r := h.ok("--json", "run", "--patch", patch, "--commit", "passed", "--output", out, "--", "true")
	rr := decodeRun(t, r)
	checkDurations("run --patch --commit", rr.Durations, "fork", "patch", "run", "diff", "commit", "discard")
	// result.json is the same result.
	b, err := os.ReadFile(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fromFile runResult
	if err := json.Unmarshal(b, &fromFile); err != nil {
		t.Fatal(err)
	}
	checkDurations("result.json", fromFile.Durations, "fork", "patch", "run", "diff", "commit", "discard")
	if fromFile.Durations["total"] != rr.Durations["total"] || fromFile.Commit != rr.Commit || fromFile.ID != rr.ID {
		t.Errorf("result.json differs from the printed result:\n%s\n%s", b, r.stdout)
	}
	rr = decodeRun(t, h.ok("--json", "run", "--", "true"))
	checkDurations("run", rr.Durations, "fork", "run", "diff", "discard")
	if rr.Durations["patch"] != 0 || rr.Durations["commit"] != 0 {
		t.Errorf("run without --patch/--commit: patch %d commit %d; want 0", rr.Durations["patch"], rr.Durations["commit"])
	}
	r = h.fails(3, "--json", "run", "--keep", "--", "sh", "-c", "exit 3")
	rr = decodeRun(t, r)
	defer h.run("ws", "rm", "--force", rr.Work)
	checkDurations("run --keep", rr.Durations, "fork", "run", "diff")
	if rr.Durations["discard"] != 0 {
		t.Errorf("run --keep discarded for %d ns", rr.Durations["discard"])
	}
}

// cliBatch writes jobs to a batch file and runs strata batch on it,
// returning the result lines by id.
func cliBatch(t *testing.T, h *home, jobs []string, args ...string) (map[string]map[string]any, result) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(jobs, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run(append([]string{"batch", file}, args...)...)
	res := map[string]map[string]any{}
	failed := false
	for _, m := range cliLines(t, r.stdout) {
		res[m["id"].(string)] = m
		failed = failed || m["error"] != nil || m["exit_code"] != 0.0
	}
	if len(res) != len(jobs) {
		t.Fatalf("batch: %d results for %d jobs:\n%s", len(res), len(jobs), r)
	}
	// Exit 4 when any job failed, so that set -e scripts notice (issue 19).
	if want := map[bool]int{false: 0, true: 4}[failed]; r.code != want {
		t.Errorf("batch: exit %d, want %d:\n%s", r.code, want, r)
	}
	return res, r
}

// TestCLIBatchJobs: a job's from, patch_text, protect and env; --output
// keeps each job's output whole.
func TestCLIBatchJobs(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	other := filepath.Join(t.TempDir(), "other")
	cliWrite(t, other, map[string]string{"only-other.txt": "from the other branch\n"})
	h.ok("import", other, "-b", "other")
	patchText, err := os.ReadFile(patchFor(t, src, "src/app.txt", "line 2", "line two"))
	if err != nil {
		t.Fatal(err)
	}
	pt, _ := json.Marshal(string(patchText))
	jobs := []string{
		`{"id": "big", "cmd": "head -c 10000 /dev/zero | tr '\\000' x; echo; echo to-err >&2"}`,
		`{"id": "from", "from": "other", "cmd": ["cat", "only-other.txt"]}`,
		`{"id": "inline", "patch_text": ` + string(pt) + `, "cmd": "grep -x 'line two' src/app.txt"}`,
		`{"id": "protected", "commit": "guarded", "protect": ["docs/**"], "cmd": "echo x > docs/readme && echo y > free.txt"}`,
		`{"id": "unprotected", "commit": "free", "protect": ["docs/**"], "cmd": "echo y > free.txt"}`,
		`{"id": "env", "env": {"JOB_VAR": "job value", "HOME": "/tmp/job-home"}, "cmd": "printf '%s|%s' \"$JOB_VAR\" \"$HOME\""}`,
		`{"id": "env-list", "env": ["A=1", "B=2"], "cmd": "echo $A$B"}`,
		`{"id": "noenv", "cmd": "echo \"[${JOB_VAR-unset}]\""}`,
	}
	outDir := filepath.Join(t.TempDir(), "output")
	res, _ := cliBatch(t, h, jobs, "--output", outDir)
	read := func(id, f string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(outDir, id, f))
		if err != nil {
			t.Errorf("--output: %s/%s: %v", id, f, err)
		}
		return string(b)
	}
	// --output: stdout and stderr whole, result.json, no tails in the line.
	if got := read("big", "stdout"); got != strings.Repeat("x", 10000)+"\n" {
		t.Errorf("--output big/stdout: %d bytes, want 10001", len(got))
	}
	if got := cliStderr(read("big", "stderr")); got != "to-err\n" {
		t.Errorf("--output big/stderr = %q", got)
	}
	var rj map[string]any
	if err := json.Unmarshal([]byte(read("big", "result.json")), &rj); err != nil || rj["exit_code"] != 0.0 || rj["from"] != res["big"]["from"] || rj["output"] != filepath.Join(outDir, "big") {
		t.Errorf("--output big/result.json: %v (%v)", rj, err)
	}
	for id, m := range res {
		if _, ok := m["stdout_tail"]; ok {
			t.Errorf("job %s: stdout_tail with --output", id)
		}
		if m["output"] != filepath.Join(outDir, id) {
			t.Errorf("job %s: output = %v", id, m["output"])
		}
	}
	// from: the job forks that branch.
	if got := read("from", "stdout"); got != "from the other branch\n" || res["from"]["exit_code"] != 0.0 {
		t.Errorf("job from: %q %v", got, res["from"])
	}
	if res["from"]["from"] != cliHead(h, "other") {
		t.Errorf("job from: forked %v, want other's head", res["from"]["from"])
	}
	// patch_text: applied before the command.
	if got := read("inline", "stdout"); got != "line two\n" || res["inline"]["exit_code"] != 0.0 {
		t.Errorf("job inline: %q %v", got, res["inline"])
	}
	if d, _ := res["inline"]["diff"].(map[string]any); d["files"] != 1.0 {
		t.Errorf("job inline: diff %v", res["inline"]["diff"])
	}
	// protect: a violation is reported and nothing is committed.
	pm := res["protected"]
	vs, _ := pm["policy_violations"].([]any)
	if len(vs) != 1 || vs[0].(map[string]any)["path"] != "docs/readme" || pm["error_kind"] == nil || pm["commit"] != "" {
		t.Errorf("job protected: %v", pm)
	}
	h.fails(1, "log", "guarded")
	if res["unprotected"]["commit"] == "" || res["unprotected"]["branch"] != "free" {
		t.Errorf("job unprotected: %v", res["unprotected"])
	}
	if got := h.ok("show", "free:free.txt").stdout; got != "y\n" {
		t.Errorf("job unprotected committed free.txt = %q", got)
	}
	// env: visible to the command, and only to its job.
	if got := read("env", "stdout"); got != "job value|/tmp/job-home" {
		t.Errorf("job env: %q", got)
	}
	if got := read("env-list", "stdout"); got != "12\n" {
		t.Errorf("job env-list: %q", got)
	}
	if got := read("noenv", "stdout"); got != "[unset]\n" {
		t.Errorf("job noenv: %q", got)
	}

	// A job whose commit conflicts (the branch is elsewhere) keeps its
	// output tails and its total duration in the line (issue 19).
	res, _ = cliBatch(t, h, []string{`{"id": "conflict", "commit": "other", "cmd": "echo out; echo y > f"}`})
	cm := res["conflict"]
	if d, _ := cm["durations_ns"].(map[string]any); cm["stdout_tail"] != "out\n" || cm["error_kind"] != "conflict" || d["total"] == nil || d["total"].(float64) <= 0 {
		t.Errorf("conflicted job: %v", cm)
	}

	// Without --output: the last 4 KiB of each stream in the line.
	res, _ = cliBatch(t, h, jobs[:1])
	tail, _ := res["big"]["stdout_tail"].(string)
	if tail != strings.Repeat("x", 4095)+"\n" || cliStderr(fmt.Sprint(res["big"]["stderr_tail"])) != "to-err\n" {
		t.Errorf("stdout_tail: %d bytes (%.20q...), stderr_tail %q", len(tail), tail, res["big"]["stderr_tail"])
	}
}

// TestCLIBatchParallel: --parallel N runs N jobs at once. Each job creates
// its marker in a shared directory (granted with --rw) and waits for the
// other's: one at a time, the first would give up and fail.
func TestCLIBatchParallel(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	shared := cliHostDir(t)
	job := func(me, other string) string {
		script := fmt.Sprintf(`touch %[1]s/%[2]s; i=0; while [ ! -e %[1]s/%[3]s ]; do i=$((i+1)); if [ $i -gt 300 ]; then echo gave up; exit 1; fi; sleep 0.1; done; echo met %[3]s`, shared, me, other)
		b, _ := json.Marshal(script)
		return fmt.Sprintf(`{"id": %q, "cmd": %s, "timeout": "90s"}`, me, b)
	}
	res, _ := cliBatch(t, h, []string{job("a", "b"), job("b", "a")}, "--parallel", "2", "--rw", shared)
	for id, other := range map[string]string{"a": "b", "b": "a"} {
		if res[id]["exit_code"] != 0.0 || res[id]["stdout_tail"] != "met "+other+"\n" {
			t.Errorf("job %s did not run alongside %s: %v", id, other, res[id])
		}
	}
	for _, f := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(shared, f)); err != nil {
			t.Errorf("marker %s not on the host: %v", f, err)
		}
	}
}
