//go:build integration

package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

// escapeProbe is a static C program that makes one forbidden system call
// per argument and prints "name ERRNO": run inside a sandboxed workspace
// after execve, it shows the seccomp filter survives exec and applies to
// programs that are not the shell.
const escapeProbe = `#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>
static const char *en(int e) {
	switch (e) { case 0: return "OK"; case EPERM: return "EPERM"; case ENOSYS: return "ENOSYS"; case EACCES: return "EACCES"; }
	static char b[32]; snprintf(b, sizeof b, "errno%d", e); return b;
}
static int r(long v) { return v < 0 ? errno : 0; }
int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		const char *op = argv[i]; int e = -1;
		if (!strcmp(op, "unshare-user")) e = r(unshare(CLONE_NEWUSER));
		if (!strcmp(op, "unshare-mount")) e = r(unshare(CLONE_NEWNS));
		if (!strcmp(op, "mount")) e = r(mount("none", "/tmp", "tmpfs", 0, 0));
		if (!strcmp(op, "ptrace")) e = r(ptrace(PTRACE_ATTACH, 1, 0, 0));
		if (!strcmp(op, "io_uring_setup")) e = r(syscall(425, 1, (void *)0));
		if (!strcmp(op, "bpf")) e = r(syscall(SYS_bpf, 0, 0, 0));
		printf("%s %s\n", op, en(e));
	}
	return 0;
}
`

// sandboxPATH is the PATH sandboxed commands get in these tests: system
// directories only (a toolchain under a home directory, like pyenv's, is
// outside the fence unless granted with --ro).
const sandboxPATH = "PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"

// TestSandboxEscapes: inside --sandbox agent, each escape attempt fails
// with its specific error.
func TestSandboxEscapes(t *testing.T) {
	userHome, err := os.UserHomeDir()
	if err != nil || userHome == "" || userHome == "/" || strings.HasPrefix(userHome, "/tmp/") {
		t.Fatalf("need a home directory outside /tmp to plant secrets in (private /tmp would hide it): %q %v", userHome, err)
	}
	// The invoking user's secrets, planted fresh under the home directory
	// (never a real key of the user's): a key in a .ssh directory, and
	// another directory's notes.
	secrets, err := os.MkdirTemp(userHome, "strata-it-secrets-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(secrets)
	plant := filepath.Join(secrets, ".ssh", "id_ed25519")
	if err := os.Mkdir(filepath.Dir(plant), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plant, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nplanted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(secrets, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes"), []byte("private\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The store where users keep it: outside /tmp, which is private in a
	// workspace (a store under /tmp would be hidden, not fenced).
	storeDir, err := os.MkdirTemp("/var/tmp", "strata-it-store-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(storeDir)
	h := &home{t: t, dir: filepath.Join(storeDir, "store")}
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")

	// Static probe, built on the host and copied into the workspace.
	probe := buildStaticProbe(t)
	wsPath := strings.TrimSpace(h.ok("ws", "path", "w").stdout)
	sh(t, "", fmt.Sprintf("cp %q %q/probe", probe, wsPath))

	// A host process to signal and trace, and host listeners.
	sleeper := exec.Command("sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	abstract := fmt.Sprintf("@strata-it-%d", os.Getpid())
	ul, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go acceptAll(ul)
	go acceptAll(tl)
	tcpPort := tl.Addr().(*net.TCPAddr).Port
	layer := firstLayer(t, h.dir)

	// sh -c prints the shell's message; each case names the text that
	// proves the specific error.
	py := func(code string) []string { return []string{"/usr/bin/python3", "-c", code} }
	for _, tc := range []struct {
		name  string
		argv  []string
		flags []string
		want  string
	}{
		// The home and the store are not in the sandbox's view at all
		// (view_test.go has the rest of the view's escapes).
		{"read ~/.ssh key", []string{"cat", plant}, nil, "No such file or directory"},
		{"list another home dir", []string{"ls", other}, nil, "No such file or directory"},
		{"read another home dir's file", []string{"cat", filepath.Join(other, "notes")}, nil, "No such file or directory"},
		{"write outside the workspace", []string{"sh", "-c", "echo x > " + filepath.Join(other, "dropped")}, nil, "Directory nonexistent"},
		{"write into the store's layers", []string{"sh", "-c", "echo x > " + filepath.Join(layer, "injected")}, nil, "Directory nonexistent"},
		{"read the store database", []string{"cat", filepath.Join(h.dir, "strata.db")}, nil, "No such file or directory"},
		{"ptrace a process", []string{"./probe", "ptrace"}, nil, "ptrace EPERM"},
		{"mount", []string{"./probe", "mount"}, nil, "mount EPERM"},
		{"create a user namespace", []string{"./probe", "unshare-user"}, nil, "unshare-user EPERM"},
		{"create a user namespace (util)", []string{"unshare", "-U", "true"}, nil, "Operation not permitted"},
		{"io_uring_setup", []string{"./probe", "io_uring_setup"}, nil, "io_uring_setup EPERM"},
		{"bpf", []string{"./probe", "bpf"}, nil, "bpf EPERM"},
		// The host's processes are not in the workspace's PID namespace:
		// their pids do not exist there.
		{"signal a host process", []string{"kill", "-TERM", strconv.Itoa(sleeper.Process.Pid)}, nil, "No such process"},
		// The keeper is visible (pid 1) but outside the Landlock domain.
		{"signal the keeper", py("import os; os.kill(1, 15)"), nil, "PermissionError"},
		{"connect to a host abstract socket", py(fmt.Sprintf("import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0%s')", abstract[1:])), nil, "PermissionError"},
		{"connect to host loopback with --net none", py(fmt.Sprintf("import socket; socket.create_connection(('127.0.0.1', %d), timeout=5)", tcpPort)), []string{"--net", "none"}, "ConnectionRefusedError"},
		{"strict denies inet sockets", py("import socket; socket.socket(socket.AF_INET)"), []string{"--sandbox", "strict"}, "PermissionError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"exec", "w", "--env", sandboxPATH}, tc.flags...)
			args = append(append(args, "--"), tc.argv...)
			r := h.run(args...)
			all := r.stdout + r.stderr
			if !strings.Contains(all, tc.want) {
				t.Errorf("%s: want %q in the output, got %s", tc.name, tc.want, r)
			}
			if strings.Contains(tc.want, "EPERM") && r.code != 0 {
				t.Errorf("%s: the probe failed: %s", tc.name, r)
			}
		})
	}
	// Nothing escaped.
	if _, err := os.Stat(filepath.Join(other, "dropped")); !os.IsNotExist(err) {
		t.Errorf("a file was written outside the workspace")
	}
	if _, err := os.Stat(filepath.Join(layer, "injected")); !os.IsNotExist(err) {
		t.Errorf("a file was written into a layer")
	}
	// Writing at the source path inside lands in the workspace, never in
	// the source tree.
	h.ok("exec", "w", "--", "sh", "-c", "echo mine > "+filepath.Join(src, "src/app.txt"))
	if b, _ := os.ReadFile(filepath.Join(src, "src/app.txt")); string(b) != "line 1\nline 2\nline 3\n" {
		t.Errorf("the source tree was modified: %q", b)
	}
	// The host process the workspace tried to signal is alive, neither
	// stopped nor traced.
	if st, tracer := procState(t, sleeper.Process.Pid); st != "S" || tracer != 0 {
		t.Errorf("the host sleeper %d is in state %q, traced by %d; want S (sleeping), untraced", sleeper.Process.Pid, st, tracer)
	}
}

// procState returns a process's state letter (R, S, D, T, Z, ...; "" when
// it is gone) and the pid of its tracer (0: none), from /proc/PID/status.
// A killed child not yet reaped is Z: kill(pid, 0) would still succeed.
func procState(t testing.TB, pid int) (state string, tracer int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if os.IsNotExist(err) {
		return "", 0
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			state, _, _ = strings.Cut(v, " ")
		case "TracerPid":
			tracer, _ = strconv.Atoi(v)
		}
	}
	return state, tracer
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// firstLayer returns one materialized layer directory of the store.
func firstLayer(t testing.TB, store string) string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(store, "layers", "*", "[0-9a-f]*"))
	if len(ms) == 0 {
		t.Fatalf("no layer under %s", store)
	}
	return ms[0]
}

func buildStaticProbe(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	c := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(c, []byte(escapeProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "probe")
	if b, err := exec.Command("gcc", "-static", "-O1", "-o", out, c).CombinedOutput(); err != nil {
		testutil.Skip(t, fmt.Sprintf("gcc -static: %v: %s", err, b))
	}
	return out
}

// TestSandboxWorkflow: real work succeeds inside --sandbox agent: git, npm
// and node on the corpus, go build and test, python, gcc, make.
func TestSandboxWorkflow(t *testing.T) {
	parallel(t)
	h, src := corpusHome(t)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	run := func(script string) string {
		t.Helper()
		start := time.Now()
		r := h.ok("exec", "w", "--env", sandboxPATH, "--", "sh", "-ec", script)
		if d := time.Since(start); d > 5*time.Second {
			t.Logf("%q took %s", script, d.Round(time.Millisecond))
		}
		return r.stdout + r.stderr
	}
	run("echo '// agent change' >> src/routes.js && git add -A && git -c user.name=agent -c user.email=agent@example.invalid commit -qm 'agent change' && git log --oneline -1 | grep 'agent change'")
	if out := run("npm test 2>&1"); !strings.Contains(out, "pass 2") {
		t.Errorf("npm test in the sandbox:\n%s", out)
	}
	if out := run("node -e 'console.log(require(\"react\").version)'"); strings.TrimSpace(out) == "" {
		t.Errorf("node in the sandbox printed nothing")
	}
	// $TMPDIR: /tmp in the view; the workspace's own where user
	// namespaces are denied (the host's /tmp is outside the fence there).
	run(`mkdir -p "$TMPDIR/gomod" && cd "$TMPDIR/gomod" && printf 'module example.com/m\n\ngo 1.22\n' > go.mod &&
printf 'package main\n\nfunc Add(a, b int) int { return a + b }\n\nfunc main() { println(Add(1, 2)) }\n' > main.go &&
printf 'package main\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) { if Add(1, 2) != 3 { t.Fatal() } }\n' > main_test.go &&
GOFLAGS=-mod=mod GOTOOLCHAIN=local go build -o m . && ./m && GOTOOLCHAIN=local go test ./...`)
	run(`python3 -c "open('py-out.txt', 'w').write('from python')" && grep -q 'from python' py-out.txt`)
	run(`printf '#include <stdio.h>\nint main(void){puts("from gcc");return 0;}\n' > hello.c && gcc -o hello hello.c && ./hello | grep -q 'from gcc'`)
	run(`printf 'all:\n\techo from make > made.txt\n' > Makefile.strata && make -f Makefile.strata && grep -q 'from make' made.txt`)
	// The source tree saw none of it.
	if _, err := os.Stat(filepath.Join(src, "made.txt")); !os.IsNotExist(err) {
		t.Errorf("the workflow wrote into the source tree")
	}
	if out, _ := exec.Command("git", "-C", src, "log", "--oneline", "-1").Output(); strings.Contains(string(out), "agent change") {
		t.Errorf("the workspace's git commit reached the source repository")
	}
}
