//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// The view: a sandboxed command's root holds the system, the workspace,
// private /tmp, /var/tmp and /dev/shm, a minimal /dev, /proc and /sys, and
// what --ro/--rw, the store's defaults and PATH's toolchains add — nothing
// else of the host (docs/sandbox.md, "The view"). These tests attack it
// in both sandbox modes, and run real work in it.

// listenUnix listens on a pathname unix socket and accepts in the
// background; the socket goes with the test.
func listenUnix(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	os.Chmod(path, 0o777)
	t.Cleanup(func() { l.Close(); os.Remove(path) })
	go acceptAll(l)
}

// runtimeDir is /run/user/UID, a login session's runtime directory (the
// session bus lives there): made as root when missing (and removed after
// the test); rootless it must exist (scripts/integration.sh makes it for
// the test user). "" when there is none to use.
func runtimeDir(t *testing.T) string {
	t.Helper()
	d := fmt.Sprintf("/run/user/%d", os.Getuid())
	if os.Geteuid() == 0 {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	if unix.Access(d, unix.W_OK) != nil {
		return ""
	}
	return d
}

// TestViewEscapes: every way out of the view fails, with its specific
// error, in --sandbox agent and strict: host pathname sockets (in the
// home, in the host's /tmp, in /run/user/UID), the metadata of the user's
// files (chmod, utime, setxattr), the keeper's /proc/1/root, `..` from
// the workspace, other users' homes, the store; and, as root, what a
// container's capability set leaves out (device nodes, network
// configuration). The attacks of TestSandboxEscapes run in both modes too.
func TestViewEscapes(t *testing.T) {
	userHome, err := os.UserHomeDir()
	if err != nil || userHome == "" || userHome == "/" || strings.HasPrefix(userHome, "/tmp/") {
		t.Fatalf("need a home directory outside /tmp: %q %v", userHome, err)
	}
	// The user's key, with a mode, an mtime and no xattr to keep.
	keyDir, err := os.MkdirTemp(userHome, ".ssh-strata-it-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(keyDir)
	key := filepath.Join(keyDir, "id_ed25519")
	if err := os.WriteFile(key, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nplanted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyTime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(key, keyTime, keyTime)

	// Host sockets an agent must not reach.
	tag := strconv.Itoa(os.Getpid())
	homeSock := filepath.Join(userHome, "strata-it-"+tag+".sock")
	tmpSock := "/tmp/strata-it-" + tag + ".sock"
	runDir := runtimeDir(t)
	runSock := filepath.Join(runDir, "strata-it-"+tag+".sock")
	for _, p := range []string{homeSock, tmpSock, runSock} {
		if p != runSock || runDir != "" {
			listenUnix(t, p)
		}
	}
	// Another user's home: one that exists on the host.
	otherHome := "/home"
	if ents, _ := os.ReadDir("/home"); len(ents) > 0 {
		for _, e := range ents {
			if p := filepath.Join("/home", e.Name()); p != userHome && e.IsDir() {
				otherHome = p
				break
			}
		}
	}

	storeDir, err := os.MkdirTemp("/var/tmp", "strata-it-store-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(storeDir)
	h := &home{t: t, dir: filepath.Join(storeDir, "store")}
	parent := t.TempDir()
	src := filepath.Join(parent, "proj")
	baseTree(t, src)
	if err := os.WriteFile(filepath.Join(parent, "sibling-secret"), []byte("beside the project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	probe := buildStaticProbe(t)
	wsPath := strings.TrimSpace(h.ok("ws", "path", "w").stdout)
	sh(t, "", fmt.Sprintf("cp %q %q/probe", probe, wsPath))
	layer := firstLayer(t, h.dir)

	sleeper := exec.Command("sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	abstract := "strata-it-abstract-" + tag
	ul, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go acceptAll(ul)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go acceptAll(tl)
	tcpPort := tl.Addr().(*net.TCPAddr).Port

	py := func(code string) []string { return []string{"/usr/bin/python3", "-c", code} }
	connect := func(p string) []string {
		return py(fmt.Sprintf("import socket; s=socket.socket(socket.AF_UNIX); s.connect(%q)", p))
	}
	// netConfig sets lo's flags to what they are: harmless with
	// CAP_NET_ADMIN, EPERM without (SIOCSIFFLAGS checks it first).
	netConfig := py(`import socket, fcntl, struct, errno
s = socket.socket(socket.AF_UNIX)
ifr = fcntl.ioctl(s, 0x8913, struct.pack('16sH', b'lo', 0))
try:
    fcntl.ioctl(s, 0x8914, ifr); print('changed')
except OSError as e:
    print('SIOCSIFFLAGS', errno.errorcode[e.errno])`)
	type attack struct {
		name  string
		argv  []string
		want  string            // in stdout+stderr
		mode  map[string]string // per mode, instead of want
		root  bool              // root pass only
		agent bool              // agent only (strict implies what it tests)
	}
	enoent := "No such file or directory"
	attacks := []attack{
		// Host pathname sockets: not in the view at all.
		{name: "connect to a socket in the home", argv: connect(homeSock), want: "FileNotFoundError"},
		{name: "connect to a socket in the host's /tmp", argv: connect(tmpSock), want: "FileNotFoundError"},
		{name: "connect to a socket in /run/user/UID", argv: connect(runSock), want: "FileNotFoundError"},
		{name: "list /run", argv: []string{"ls", "/run", "/var/run"}, want: enoent},
		// The metadata of the user's files.
		{name: "chmod a key in the home", argv: []string{"chmod", "644", key}, want: enoent},
		{name: "utime a key in the home", argv: []string{"touch", "-d", "2001-01-01", key}, want: enoent},
		{name: "setxattr a key in the home", argv: py(fmt.Sprintf("import os; os.setxattr(%q, 'user.x', b'1')", key)), want: "FileNotFoundError"},
		{name: "read a key in the home", argv: []string{"cat", key}, want: enoent},
		// The keeper's root is the host view; it is not dumpable.
		{name: "traverse /proc/1/root", argv: []string{"cat", "/proc/1/root" + key}, want: "Permission denied"},
		{name: "list /proc/1/root", argv: []string{"ls", "/proc/1/root/"}, want: "Permission denied"},
		{name: "the keeper's descriptors", argv: py("import os; [os.readlink('/proc/1/fd/' + f) for f in os.listdir('/proc/1/fd')]"), want: "PermissionError"},
		// Up from the workspace: skeleton directories only.
		{name: "dot-dot from the workspace", argv: []string{"cat", src + "/../sibling-secret"}, want: enoent},
		{name: "dot-dot to the root", argv: []string{"cat", src + "/../../../../../../../" + key}, want: enoent},
		{name: "another user's home", argv: []string{"ls", otherHome}, want: enoent},
		{name: "the store's database", argv: []string{"cat", filepath.Join(h.dir, "strata.db")}, want: enoent},
		{name: "the store's layers", argv: []string{"sh", "-c", "echo x > " + filepath.Join(layer, "injected")}, want: "Directory nonexistent"},
		{name: "write the view's root", argv: []string{"mkdir", "/evil"}, want: "Read-only file system"},
		{name: "write the system", argv: []string{"touch", "/usr/evil"}, want: "Read-only file system"},
		// TestSandboxEscapes' attacks.
		{name: "ptrace a process", argv: []string{"./probe", "ptrace"}, want: "ptrace EPERM"},
		{name: "mount", argv: []string{"./probe", "mount"}, want: "mount EPERM"},
		{name: "create a user namespace", argv: []string{"./probe", "unshare-user"}, want: "unshare-user EPERM"},
		{name: "io_uring_setup", argv: []string{"./probe", "io_uring_setup"}, want: "io_uring_setup EPERM"},
		{name: "bpf", argv: []string{"./probe", "bpf"}, want: "bpf EPERM"},
		{name: "signal a host process", argv: []string{"kill", "-TERM", strconv.Itoa(sleeper.Process.Pid)}, want: "No such process"},
		{name: "signal the keeper", argv: py("import os; os.kill(1, 15)"), want: "PermissionError"},
		// Strict has a network namespace of its own, where the host's
		// abstract names do not exist.
		{name: "connect to a host abstract socket", argv: py(fmt.Sprintf("import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0%s')", abstract)),
			mode: map[string]string{"agent": "PermissionError", "strict": "ConnectionRefusedError"}},
		{name: "connect to host loopback", argv: py(fmt.Sprintf("import socket; socket.create_connection(('127.0.0.1', %d), timeout=5)", tcpPort)),
			mode: map[string]string{"agent": "ConnectionRefusedError", "strict": "PermissionError"}},
		// Root keeps a container's capabilities only.
		{name: "mknod a block device", argv: []string{"mknod", "blk", "b", "7", "0"}, want: "Operation not permitted", root: true},
		{name: "change the network configuration", argv: netConfig, want: "SIOCSIFFLAGS EPERM", root: true},
		{name: "capabilities", argv: []string{"grep", "CapBnd", "/proc/self/status"}, want: "00000000a00405fb", root: true},
	}
	for _, mode := range []string{"agent", "strict"} {
		for _, a := range attacks {
			if a.root && os.Geteuid() != 0 || a.agent && mode != "agent" {
				continue
			}
			want := a.want
			if w, ok := a.mode[mode]; ok {
				want = w
			}
			t.Run(mode+"/"+a.name, func(t *testing.T) {
				if strings.Contains(a.name, "/run/user") && runDir == "" {
					testutil.Skip(t, fmt.Sprintf("/run/user/%d does not exist or is not writable (a login session's runtime directory; scripts/integration.sh makes it)", os.Getuid()))
				}
				flags := []string{"exec", "w", "--sandbox", mode, "--env", sandboxPATH}
				if mode == "agent" && strings.Contains(a.name, "loopback") {
					flags = append(flags, "--net", "none")
				}
				r := h.run(append(append(flags, "--"), a.argv...)...)
				if !strings.Contains(r.stdout+r.stderr, want) {
					t.Errorf("%s: want %q in the output, got %s", a.name, want, r)
				}
			})
		}
	}
	// Nothing changed outside.
	fi, err := os.Stat(key)
	if err != nil || fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(keyTime) {
		t.Errorf("the key's metadata changed: %v %v", fi, err)
	}
	if sz, err := unix.Listxattr(key, make([]byte, 256)); err == nil && sz > 0 {
		t.Errorf("the key gained xattrs")
	}
	if _, err := os.Stat(filepath.Join(layer, "injected")); !os.IsNotExist(err) {
		t.Errorf("a file was written into a layer")
	}
	// --sandbox none keeps the host view: the same socket is reachable.
	if r := h.run(append([]string{"exec", "w", "--sandbox", "none", "--"}, connect(homeSock)...)...); r.code != 0 {
		t.Errorf("--sandbox none: the home's socket: %s", r)
	}
}

// TestViewBinds: --ro and --rw add host paths to a command's view (a
// missing one is an error naming it), store defaults (init --ro) to every
// command's, and a command not found names the --ro that fixes it.
func TestViewBinds(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	data, err := os.MkdirTemp("/var/tmp", "strata-it-data-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(data)
	os.Chmod(data, 0o755)
	os.WriteFile(filepath.Join(data, "model.txt"), []byte("weights\n"), 0o644)
	tools := filepath.Join(data, "tools")
	os.Mkdir(tools, 0o755)
	os.WriteFile(filepath.Join(tools, "strata-it-tool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755)

	// The keeper runs already; each of these gets a view of its own.
	h.ok("exec", "w", "--", "true")
	cat := []string{"cat", filepath.Join(data, "model.txt")}
	if r := h.run(append([]string{"exec", "w", "--"}, cat...)...); !strings.Contains(r.stderr, "No such file or directory") {
		t.Errorf("without --ro: %s", r)
	}
	if r := h.ok(append([]string{"exec", "w", "--ro", data, "--"}, cat...)...); r.stdout != "weights\n" {
		t.Errorf("--ro: %s", r)
	}
	if r := h.run("exec", "w", "--ro", data, "--", "touch", filepath.Join(data, "x")); !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("--ro is read-only: %s", r)
	}
	h.ok("exec", "w", "--rw", data, "--", "sh", "-c", "echo out > "+filepath.Join(data, "out"))
	if b, _ := os.ReadFile(filepath.Join(data, "out")); string(b) != "out\n" {
		t.Errorf("--rw: the host file holds %q", b)
	}
	r := h.fails(2, "exec", "w", "--ro", "/nonexistent-strata-it", "--", "true")
	if !strings.Contains(r.stderr, "/nonexistent-strata-it") {
		t.Errorf("a missing --ro path is not named: %s", r)
	}
	if r := h.fails(2, "exec", "w", "--ro", h.dir, "--", "true"); !strings.Contains(r.stderr, "store") {
		t.Errorf("--ro of the store: %s", r)
	}

	// Not found in the view, found on the host: the hint names --ro.
	path := "PATH=" + tools + ":/usr/bin:/bin"
	r = h.fails(127, "exec", "w", "--env", path, "--", "strata-it-tool")
	if !strings.Contains(r.stderr, "--ro "+tools) {
		t.Errorf("127 without the --ro that fixes it: %s", r)
	}
	if r := h.ok("exec", "w", "--env", path, "--ro", tools, "--", "strata-it-tool"); r.stdout != "tool ran\n" {
		t.Errorf("with the --ro the hint named: %s", r)
	}

	// A store default: every command sees it, the keeper's view holds it.
	h.ok("init", "--ro", data)
	h.ok("ws", "stop", "w")
	if r := h.ok(append([]string{"exec", "w", "--"}, cat...)...); r.stdout != "weights\n" {
		t.Errorf("a store default: %s", r)
	}
	if r := h.ok("doctor"); !strings.Contains(r.stdout, data) {
		t.Errorf("doctor does not show the store default %s:\n%s", data, r.stdout)
	}
	h.ok("init", "--forget", data)
	h.ok("ws", "stop", "w")
	if r := h.run(append([]string{"exec", "w", "--"}, cat...)...); r.code == 0 {
		t.Errorf("a forgotten default is still bound: %s", r)
	}
}

// TestViewShell: a sandboxed shell's terminal is a pty of the view's own
// devpts, named inside (tty), with job control; the home is not there.
func TestViewShell(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		testutil.Skip(t, "script (util-linux) is not installed")
	}
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	userHome, _ := os.UserHomeDir()
	secret, err := os.CreateTemp(userHome, ".strata-it-secret-")
	if err != nil {
		t.Fatal(err)
	}
	secret.Close()
	defer os.Remove(secret.Name())
	for _, sandbox := range []string{"agent", "none"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sc := exec.CommandContext(ctx, "script", "-qec", bin(t)+" --home "+h.dir+" shell w --sandbox "+sandbox, "/dev/null")
		sc.Env = append(os.Environ(), "SHELL=/bin/sh")
		sc.Stdin = strings.NewReader("tty; test -e " + secret.Name() + " && echo HOME-$((6*7))-SEEN; exit 3\n")
		got, err := sc.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(got), "/dev/pts/") || strings.Contains(string(got), "not a tty") {
			t.Errorf("shell --sandbox %s on a terminal: %v\n%s", sandbox, err, got)
		}
		if seen := strings.Contains(string(got), "HOME-42-SEEN"); seen != (sandbox == "none") {
			t.Errorf("shell --sandbox %s: the home seen: %v\n%s", sandbox, seen, got)
		}
	}
}

// TestViewSpecial: a setuid file and a setgid directory made inside,
// committed, arrive through apply and export of the workspace's branch
// without their bits, listed; with --keep-special, with them. As root a
// device node put into the workspace is not written either.
func TestViewSpecial(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	h.ok("exec", "w", "--", "sh", "-ec", "cp /bin/true tool && chmod 4755 tool && mkdir shared && chmod 2775 shared && echo x > shared/f")
	if os.Geteuid() == 0 {
		p := strings.TrimSpace(h.ok("ws", "path", "w").stdout)
		if err := unix.Mknod(filepath.Join(p, "dev0"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
	}
	h.ok("commit", "w", "-m", "special")
	mode := func(p string) os.FileMode {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%v", err)
			return 0
		}
		return fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeType)
	}
	check := func(what, dir string, r result, keep bool) {
		t.Helper()
		tool, shared := os.FileMode(0o755), os.ModeDir|0o775
		if keep {
			tool, shared = 0o755|os.ModeSetuid, os.ModeDir|os.ModeSetgid|0o775
		}
		if got := mode(filepath.Join(dir, "tool")); got != tool {
			t.Errorf("%s: tool mode %v; want %v", what, got, tool)
		}
		if got := mode(filepath.Join(dir, "shared")); got != shared {
			t.Errorf("%s: shared mode %v; want %v", what, got, shared)
		}
		if !keep {
			for _, want := range []string{"tool", "setuid", "shared"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("%s: stderr does not say what was stripped (%s): %s", what, want, r)
				}
			}
		}
		if os.Geteuid() == 0 {
			_, err := os.Lstat(filepath.Join(dir, "dev0"))
			if keep != (err == nil) {
				t.Errorf("%s: device node written %v; want %v", what, err == nil, keep)
			}
			if !keep && !strings.Contains(r.stderr, "device node") {
				t.Errorf("%s: stderr does not list the device node: %s", what, r)
			}
		}
	}
	for _, keep := range []bool{false, true} {
		flags := []string{}
		if keep {
			flags = []string{"--keep-special"}
		}
		to := filepath.Join(t.TempDir(), "apply")
		h.ok("export", "main", to)
		check("apply", to, h.ok(append([]string{"apply", "w", "--to", to}, flags...)...), keep)
		out := filepath.Join(t.TempDir(), "export")
		check("export", out, h.ok(append([]string{"export", "ws/w", out}, flags...)...), keep)
	}
	var res struct {
		Stripped []struct{ Path, Reason, Action string } `json:"stripped"`
	}
	to := filepath.Join(t.TempDir(), "json")
	h.ok("export", "main", to)
	h.okJSON(&res, "--json", "apply", "w", "--to", to)
	if len(res.Stripped) < 2 {
		t.Errorf("apply --json: stripped %+v", res.Stripped)
	}
	// An import is the user's own: export writes it exactly.
	suid := filepath.Join(t.TempDir(), "suid")
	os.MkdirAll(suid, 0o755)
	os.WriteFile(filepath.Join(suid, "own"), []byte("#!/bin/sh\n"), 0o755)
	if err := unix.Chmod(filepath.Join(suid, "own"), 0o4755); err != nil {
		t.Fatal(err)
	}
	h.ok("import", suid, "-b", "own")
	out := filepath.Join(t.TempDir(), "own")
	if r := h.ok("export", "own", out); strings.Contains(r.stderr, "setuid") || mode(filepath.Join(out, "own"))&os.ModeSetuid == 0 {
		t.Errorf("export of an import lost its setuid bit: %s", r)
	}
}

// TestViewWorkflow: real work in the view (--sandbox agent): a .venv with
// absolute shebangs and pip install of a local wheel into it, go build and
// go test with a module cache bound by --ro and a build cache by --rw,
// python with a locale and time zones, DNS under --net host, and git
// clone of a local bare repository given with --ro. (TestSandboxWorkflow
// runs git, npm test, node, gcc and make in the view too.)
func TestViewWorkflow(t *testing.T) {
	parallel(t)
	for _, tool := range []string{"/usr/bin/python3", "go", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, tool+" is not installed (make deps)")
		}
	}
	base := t.TempDir()
	src := filepath.Join(base, "proj")
	os.MkdirAll(src, 0o755)
	// A virtualenv made on the host: its scripts' #! lines name src.
	sh(t, src, "/usr/bin/python3 -m venv .venv && head -1 .venv/bin/pip | grep -q "+src)
	// A local wheel, built offline.
	pkg := filepath.Join(base, "pkgsrc")
	sh(t, "", fmt.Sprintf(`set -e
mkdir -p %[1]q/stratademo && cd %[1]q
printf '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n[project]\nname = "stratademo"\nversion = "1.0"\n' > pyproject.toml
printf 'ANSWER = 42\n' > stratademo/__init__.py
/usr/bin/python3 -m pip wheel -q --no-build-isolation --no-index --no-deps -w %[2]q/wheels .`, pkg, src))
	// A go module that needs another, from a module cache made offline.
	gomod := filepath.Join(base, "gomod")
	modcache := filepath.Join(base, "modcache")
	gocache := filepath.Join(base, "gocache")
	sh(t, "", fmt.Sprintf(`set -e
mkdir -p %[1]q/dep %[3]q && cd %[1]q/dep
printf 'module example.com/dep\n\ngo 1.22\n' > go.mod
printf 'package dep\n\nfunc Answer() int { return 42 }\n' > dep.go
cd %[1]q && mkdir app && cd app
printf 'module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v0.0.0\n\nreplace example.com/dep => ../dep\n' > go.mod
GOTOOLCHAIN=local GOFLAGS=-mod=mod GOMODCACHE=%[2]q GOPROXY=off go mod tidy >/dev/null 2>&1 || true
printf 'package main\n\nimport "example.com/dep"\n\nfunc main() { println(dep.Answer()) }\n' > main.go
printf 'package main\n\nimport ("testing"; "example.com/dep")\n\nfunc TestAnswer(t *testing.T) { if dep.Answer() != 42 { t.Fatal() } }\n' > main_test.go
mkdir -p %[2]q && chmod -R a+rX %[1]q %[2]q`, gomod, modcache, gocache))
	sh(t, "", fmt.Sprintf("cp -r %q %q/gomod", gomod, src))
	// A bare repository beside the project, outside the view.
	bare := filepath.Join(base, "bare.git")
	sh(t, "", fmt.Sprintf(`set -e
git init -q --bare -b main %[1]q
git init -q -b main %[2]q && cd %[2]q && echo hello > readme && git add readme
git -c user.name=t -c user.email=t@example.invalid commit -qm one && git push -q %[1]q main`, bare, filepath.Join(base, "seed")))

	h := newHome(t)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	run := func(flags []string, script string) string {
		t.Helper()
		args := append(append([]string{"exec", "w", "--env", sandboxPATH}, flags...), "--", "sh", "-ec", script)
		r := h.run(args...)
		if r.code != 0 {
			t.Errorf("%q: %s", script, r)
		}
		return r.stdout + r.stderr
	}
	// The venv's scripts run by their absolute #!, and pip installs into it.
	if out := run(nil, ".venv/bin/pip install -q --no-index wheels/*.whl && .venv/bin/python -c 'import stratademo, sys; print(stratademo.ANSWER, sys.prefix)'"); !strings.Contains(out, "42 "+src+"/.venv") {
		t.Errorf("pip install into the .venv: %s", out)
	}
	// go build and go test with a read-only module cache and a read-write
	// build cache from the host.
	goenv := "cd gomod/app && export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOMODCACHE=" + modcache + " GOCACHE=" + gocache + " && "
	if out := run([]string{"--ro", modcache, "--rw", gocache}, goenv+"go build -o app . && ./app && go test ./..."); !strings.Contains(out, "42") || !strings.Contains(out, "ok") {
		t.Errorf("go build and test: %s", out)
	}
	if ents, _ := os.ReadDir(gocache); len(ents) == 0 {
		t.Errorf("the --rw build cache stayed empty")
	}
	// Locale and time zones.
	if out := run([]string{"--env", "LANG=C.UTF-8", "--env", "TZ=Europe/Paris"}, `/usr/bin/python3 -c "
import locale, time, datetime, zoneinfo
locale.setlocale(locale.LC_ALL, '')
print(locale.getlocale()[1], time.strftime('%Z', time.localtime(0)))
print(datetime.datetime(2020, 1, 1, tzinfo=zoneinfo.ZoneInfo('America/New_York')).utcoffset())"`); !strings.Contains(out, "UTF-8 CET") || !strings.Contains(out, "-1 day, 19:00:00") {
		t.Errorf("locale and time zone: %s", out)
	}
	// DNS under --net host: /etc/hosts, and a name the host resolves.
	lookup := `/usr/bin/python3 -c "import socket, sys; print(sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 443)}))" `
	if out := run([]string{"--net", "host"}, lookup+"localhost"); !strings.Contains(out, "127.0.0.1") && !strings.Contains(out, "::1") {
		t.Errorf("resolving localhost: %s", out)
	}
	name := "registry.npmjs.org"
	hostOut, err := exec.Command("/usr/bin/python3", "-c", `import socket, sys; print(sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 443)}))`, name).Output()
	if err != nil {
		testutil.Skip(t, "the host cannot resolve "+name+": no DNS here")
	}
	if out := run([]string{"--net", "host"}, lookup+name); !strings.Contains(out, strings.TrimSpace(string(hostOut))) {
		t.Errorf("resolving %s under --net host: %s; the host says %s", name, out, hostOut)
	}
	// git clone of a bare repository outside the view: with --ro only.
	if r := h.run("exec", "w", "--env", sandboxPATH, "--", "git", "clone", "-q", bare, "nope"); r.code == 0 {
		t.Errorf("git clone without --ro reached the host: %s", r)
	}
	if out := run([]string{"--ro", bare}, "git clone -q "+bare+" clone && cat clone/readme"); !strings.Contains(out, "hello") {
		t.Errorf("git clone with --ro: %s", out)
	}
}
