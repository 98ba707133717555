//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/seccomp"
)

// envNoNSInner marks the copy of this test binary that runs where user
// namespaces are denied.
const envNoNSInner = "STRATA_IT_NONS_INNER"

// TestRunNoNSDenied (both passes): where user namespaces are denied —
// inside bwrap --disable-userns, and under a seccomp filter refusing
// CLONE_NEWUSER — a command still runs in a workspace directory without
// any namespace (nsexec.RunNoNS, through strata-init), fenced: it writes
// the workspace and its private TMPDIR, cannot read a file outside (the
// home's stand-in) nor write the host's /tmp, and cannot create a unix
// socket. This binary runs itself (this test, as the inner part) under
// each denial.
func TestRunNoNSDenied(t *testing.T) {
	if os.Getenv(envNoNSInner) == "1" {
		noNSInner(t)
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(self), "strata-init")); err != nil {
		testutil.Skip(t, "strata-init is not beside the test binary (run through scripts/integration.sh): "+err.Error())
	}
	outside, err := os.MkdirTemp("/var/tmp", "strata-it-nons-outside-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outside)
	os.Chmod(outside, 0o755)
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{self, "-test.run", "^TestRunNoNSDenied$", "-test.v", "-test.count=1"}
	for name, cmd := range map[string]*exec.Cmd{
		"bwrap --disable-userns":         underBwrap(t, args...),
		"seccomp refusing CLONE_NEWUSER": underSeccomp(t, args...),
	} {
		t.Run(name, func(t *testing.T) {
			cmd.Env = append(cmd.Environ(), envNoNSInner+"=1", "STRATA_IT_NONS_OUTSIDE="+outside)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if err != nil || !strings.Contains(out.String(), "--- PASS: TestRunNoNSDenied") {
				t.Fatalf("inner run: %v\n%s", err, out.String())
			}
			t.Logf("inner run:\n%s", out.String())
		})
	}
}

func noNSInner(t *testing.T) {
	ctx := context.Background()
	if err := exec.Command("unshare", "-U", "true").Run(); err == nil {
		t.Fatal("user namespaces are not denied here")
	}
	abi, err := landlock.ABI()
	if abi < 1 {
		testutil.Skip(t, "no Landlock: "+err.Error())
	}
	base := t.TempDir()
	spec := nsexec.NoNSSpec{Name: "it", Workspace: filepath.Join(base, "ws"), Tmp: filepath.Join(base, "tmp")}
	for _, d := range []string{spec.Workspace, spec.Tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := landlock.Plan(nsexec.NoNSPolicy(spec.Workspace, spec.Tmp, nil, nil, false), abi)
	if err != nil {
		t.Fatal(err)
	}
	f, err := seccomp.Plan(seccomp.Agent(), runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	progs, err := seccomp.Program(f)
	if err != nil {
		t.Fatal(err)
	}
	deny, err := seccomp.UnixSocketDeny(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	progs = append(progs, deny)
	secret := filepath.Join(os.Getenv("STRATA_IT_NONS_OUTSIDE"), "secret")
	run := func(script string) (nsexec.ExitStatus, string) {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		done := make(chan struct{})
		go func() { out.ReadFrom(r); close(done) }()
		st, err := nsexec.RunNoNS(ctx, spec, nsexec.Command{Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Landlock: rs, Seccomp: progs}, nil, w, w)
		w.Close()
		<-done
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return st, out.String()
	}
	if st, out := run(`echo ok > f && cat f && touch "$TMPDIR/t" && echo "$TMPDIR"`); st.Code != 0 || out != "ok\n"+spec.Tmp+"\n" {
		t.Errorf("workspace: %v %q", st, out)
	}
	if st, out := run("cat " + secret); st.Code == 0 || !strings.Contains(out, "Permission denied") {
		t.Errorf("outside: %v %q", st, out)
	}
	if st, out := run("echo x > /tmp/strata-it-nons-$$"); st.Code == 0 || !strings.Contains(out, "Permission denied") {
		t.Errorf("host /tmp: %v %q", st, out)
	}
	if st, out := run(`python3 -c "import socket; socket.socket(socket.AF_UNIX)"`); st.Code == 0 || !strings.Contains(out, "PermissionError") {
		t.Errorf("unix socket: %v %q", st, out)
	}
	if _, err := os.Stat(filepath.Join(spec.Workspace, "f")); err != nil {
		t.Errorf("the workspace file: %v", err)
	}
}

// runDenied runs the tests of this binary that match pattern again where
// user namespaces are denied — inside bwrap --disable-userns and under a
// seccomp filter refusing CLONE_NEWUSER — with envDenied naming the
// denial, and fails unless test passes in each.
func runDenied(t *testing.T, test string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{self, "-test.run", "^" + test + "$", "-test.v", "-test.count=1", "-test.timeout=10m"}
	for _, d := range []struct {
		name string
		cmd  *exec.Cmd
	}{{"bwrap", underBwrap(t, args...)}, {"seccomp", underSeccomp(t, args...)}} {
		t.Run(d.name, func(t *testing.T) {
			d.cmd.Env = append(d.cmd.Environ(), envDenied+"="+d.name)
			out, err := d.cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
				t.Fatalf("%s where user namespaces are denied (%s): %v\n%s", test, d.name, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// TestNoNSEscapes: where user namespaces are denied, a workspace of a
// namespace-free backend (auto: copy here) runs its commands without any
// namespace, and each way out fails with its specific error — Landlock
// (EACCES) around the filesystem: the home's secrets, another workspace,
// the store (also through `..`), the host's /tmp and /dev/shm, the
// keeper-less /proc/1/root; seccomp (EPERM): unix sockets (a host
// listener in the home), ptrace, mount, user namespaces, io_uring, bpf,
// IP sockets under strict and --net none; Landlock's signal scoping: a
// host process cannot be signalled. TMPDIR and HOME are private to the
// workspace; the user is told what runs without namespaces; --sandbox
// none runs unfenced only when asked. In the passes where user
// namespaces work, the test runs itself under both denials.
func TestNoNSEscapes(t *testing.T) {
	if deniedPass() == "" {
		runDenied(t, "TestNoNSEscapes")
		return
	}
	userHome, err := os.UserHomeDir()
	if err != nil || userHome == "" || userHome == "/" {
		t.Fatalf("need a home directory to plant secrets in: %q %v", userHome, err)
	}
	secrets, err := os.MkdirTemp(userHome, "strata-it-nons-secrets-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(secrets)
	plant := filepath.Join(secrets, "id_ed25519")
	if err := os.WriteFile(plant, []byte("planted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(secrets, "agent.sock")
	listenUnix(t, sock)
	hostTmp, err := os.MkdirTemp("/tmp", "strata-it-nons-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hostTmp)
	os.Chmod(hostTmp, 0o755)
	if err := os.WriteFile(filepath.Join(hostTmp, "f"), []byte("host tmp\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	var w, w2 wsJSON
	h.okJSON(&w, "ws", "create", "w")
	h.okJSON(&w2, "ws", "create", "w2")
	if w.Backend != "copy" && w.Backend != "reflink" {
		t.Fatalf("auto chose %q where user namespaces are denied", w.Backend)
	}
	defer h.run("ws", "rm", "--force", "w", "w2")
	other := filepath.Join(wsPath(t, h, "w2"), "src/app.txt")
	tree := wsPath(t, h, "w")
	probe := buildStaticProbe(t)
	sh(t, "", fmt.Sprintf("cp %q %q/probe", probe, tree))
	sleeper := exec.Command("sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()

	py := func(code string) []string { return []string{"/usr/bin/python3", "-c", code} }
	denied := "Permission denied"
	for _, tc := range []struct {
		name  string
		argv  []string
		flags []string
		want  string
	}{
		{"read a home secret", []string{"cat", plant}, nil, denied},
		{"list the home", []string{"ls", secrets}, nil, denied},
		{"write into the home", []string{"sh", "-c", "echo x > " + filepath.Join(secrets, "dropped")}, nil, denied},
		{"read another workspace", []string{"cat", other}, nil, denied},
		{"read the store database", []string{"cat", filepath.Join(h.dir, "strata.db")}, nil, denied},
		{"the store through ..", []string{"cat", "../../../strata.db"}, nil, denied},
		{"write into the layers", []string{"sh", "-c", "echo x > " + filepath.Join(firstLayer(t, h.dir), "injected")}, nil, denied},
		{"read the host's /tmp", []string{"cat", filepath.Join(hostTmp, "f")}, nil, denied},
		{"write the host's /tmp", []string{"sh", "-c", "echo x > " + filepath.Join(hostTmp, "dropped")}, nil, denied},
		{"write /dev/shm", []string{"sh", "-c", "echo x > /dev/shm/strata-it-nons"}, nil, denied},
		{"/proc/1/root", []string{"ls", "/proc/1/root/"}, nil, denied},
		{"connect to a host unix socket", py(fmt.Sprintf("import socket; s=socket.socket(socket.AF_UNIX); s.connect(%q)", sock)), nil, "PermissionError"},
		{"signal a host process", []string{"kill", "-TERM", strconv.Itoa(sleeper.Process.Pid)}, nil, "Operation not permitted"},
		{"ptrace", []string{"./probe", "ptrace"}, nil, "ptrace EPERM"},
		{"mount", []string{"./probe", "mount"}, nil, "mount EPERM"},
		{"create a user namespace", []string{"./probe", "unshare-user"}, nil, "unshare-user EPERM"},
		{"io_uring_setup", []string{"./probe", "io_uring_setup"}, nil, "io_uring_setup EPERM"},
		{"bpf", []string{"./probe", "bpf"}, nil, "bpf EPERM"},
		{"strict denies inet sockets", py("import socket; socket.socket(socket.AF_INET)"), []string{"--sandbox", "strict"}, "PermissionError"},
		{"--net none denies inet sockets", py("import socket; socket.socket(socket.AF_INET)"), []string{"--net", "none"}, "PermissionError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"exec", "w", "--env", sandboxPATH}, tc.flags...)
			r := h.run(append(append(args, "--"), tc.argv...)...)
			if all := r.stdout + r.stderr; !strings.Contains(all, tc.want) {
				t.Errorf("want %q in the output, got %s", tc.want, r)
			}
			if !strings.Contains(r.stderr, "no user namespaces here") {
				t.Errorf("not told that the command runs without namespaces: %s", r)
			}
		})
	}
	for _, p := range []string{filepath.Join(secrets, "dropped"), filepath.Join(hostTmp, "dropped"), "/dev/shm/strata-it-nons"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was written from the workspace", p)
		}
	}
	if st, _ := procState(t, sleeper.Process.Pid); st != "S" {
		t.Errorf("the host sleeper is in state %q", st)
	}
	// TMPDIR and HOME are the workspace's own.
	r := h.ok("exec", "w", "--env", sandboxPATH, "--", "sh", "-ec", `echo "$TMPDIR $HOME" && echo t > "$TMPDIR/t" && cat "$TMPDIR/t"`)
	if f := strings.Fields(r.stdout); len(f) != 3 || f[0] != f[1] || !strings.HasPrefix(f[0], filepath.Join(h.dir, "workspaces", "w")) {
		t.Errorf("TMPDIR and HOME: %q", r.stdout)
	}
	// --sandbox none is unfenced, and only when asked.
	if r := h.ok("exec", "w", "--sandbox", "none", "--", "cat", plant); r.stdout != "planted\n" {
		t.Errorf("--sandbox none: %s", r)
	}
	if r := h.run("exec", "w", "--sandbox", "none", "--net", "none", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "needs a sandbox") {
		t.Errorf("--sandbox none --net none: %s", r)
	}
}
