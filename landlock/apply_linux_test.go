package landlock

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

func TestABI(t *testing.T) {
	abi, err := ABI()
	if abi == 0 {
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("ABI 0 without ErrUnsupported: %v", err)
		}
		testutil.Skip(t, "no Landlock: "+err.Error())
	}
	if err != nil {
		t.Fatalf("ABI %d with error %v", abi, err)
	}
	t.Logf("Landlock ABI %d", abi)
}

// plannedInChild plans p for the running kernel and sends the ruleset
// through JSON, as the parent does for nsexec's child.
func plannedInChild(t *testing.T, p Policy) *Ruleset {
	t.Helper()
	abi, err := ABI()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Plan(p, abi)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Ruleset
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	t.Logf("uid %d, ABI %d, handled fs=%v net=%v scoped=%v", os.Getuid(), abi, back.HandledFS, back.HandledNet, back.Scoped)
	for _, w := range back.Warnings {
		t.Log(w)
	}
	return &back
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// wantErrno checks that err carries exactly errno.
func wantErrno(t *testing.T, what string, err error, errno syscall.Errno) {
	t.Helper()
	if errno == 0 {
		if err != nil {
			t.Errorf("%s: %v; want success", what, err)
		}
		return
	}
	if !errors.Is(err, errno) {
		t.Errorf("%s: err = %v; want %v (%s)", what, err, errno, unix.ErrnoName(errno))
	}
}

// TestApplyFiles: reads and writes outside the policy fail with EACCES;
// inside they work, including a rename across directories of the
// workspace, which needs REFER (ABI 2+).
func TestApplyFiles(t *testing.T) {
	requireABI(t, 2)
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			if !inChild(t, v) {
				return
			}
			base, err := os.MkdirTemp("", "files-")
			if err != nil {
				t.Fatal(err)
			}
			ws, tmp, ro, outside := filepath.Join(base, "ws"), filepath.Join(base, "tmp"), filepath.Join(base, "ro"), filepath.Join(base, "outside")
			mkdirs(t, ws+"/a", ws+"/b", tmp, ro, outside)
			writeFile(t, ws+"/a/f", "f")
			writeFile(t, ro+"/doc", "doc")
			writeFile(t, outside+"/secret", "secret")

			r := plannedInChild(t, Policy{RW: []string{ws, tmp}, RO: []string{ro}, RWFiles: []string{"/dev/null"}})
			if err := Apply(r); err != nil {
				t.Fatal(err)
			}

			// Allowed.
			_, err = os.ReadFile(ro + "/doc")
			wantErrno(t, "read RO file", err, 0)
			wantErrno(t, "write in workspace", os.WriteFile(ws+"/new", []byte("x"), 0o644), 0)
			wantErrno(t, "rename across workspace dirs (refer)", os.Rename(ws+"/a/f", ws+"/b/f"), 0)
			wantErrno(t, "rename directory within workspace", os.Rename(ws+"/a", ws+"/b/a"), 0)
			wantErrno(t, "rename workspace -> tmp (both RW with refer)", os.Rename(ws+"/b/f", tmp+"/f"), 0)
			wantErrno(t, "write /dev/null", os.WriteFile("/dev/null", []byte("x"), 0), 0)

			// Denied: EACCES.
			_, err = os.ReadFile(outside + "/secret")
			wantErrno(t, "read outside", err, unix.EACCES)
			_, err = os.ReadDir(outside)
			wantErrno(t, "list outside", err, unix.EACCES)
			wantErrno(t, "create outside", os.WriteFile(outside+"/new", []byte("x"), 0o644), unix.EACCES)
			_, err = os.OpenFile(outside+"/secret", os.O_WRONLY, 0)
			wantErrno(t, "write outside", err, unix.EACCES)
			_, err = os.OpenFile(ro+"/doc", os.O_WRONLY, 0)
			wantErrno(t, "write RO file", err, unix.EACCES)
			wantErrno(t, "create in RO dir", os.WriteFile(ro+"/new", []byte("x"), 0o644), unix.EACCES)
			wantErrno(t, "remove in RO dir", os.Remove(ro+"/doc"), unix.EACCES)
			wantErrno(t, "mkdir outside", os.Mkdir(outside+"/d", 0o755), unix.EACCES)
			wantErrno(t, "truncate outside (ABI 3+)", os.Truncate(outside+"/secret", 0), unix.EACCES)
			wantErrno(t, "move a file out of the workspace", os.Rename(ws+"/new", outside+"/new"), unix.EACCES)
			// A hard link from the read-only tree into the workspace
			// would make the file writable: refused as a reparent.
			wantErrno(t, "link RO file into workspace", os.Link(ro+"/doc", ws+"/doc"), unix.EXDEV)
			_, err = os.ReadFile("/etc/hostname")
			wantErrno(t, "read /etc", err, unix.EACCES)
			err = exec.Command("/bin/true").Run()
			wantErrno(t, "exec /bin/true (not in policy)", err, unix.EACCES)
		})
	}
}

// TestApplyTCP: connect and bind to ports not allowed fail with EACCES
// (ABI 4+); allowed ports work.
func TestApplyTCP(t *testing.T) {
	requireABI(t, 4)
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			if !inChild(t, v) {
				return
			}
			allowed, denied := listenTCP(t), listenTCP(t)
			bindOK, bindDenied := freePort(t), freePort(t)
			r := plannedInChild(t, Policy{ConnectTCP: []uint16{allowed}, BindTCP: []uint16{bindOK}})
			if err := Apply(r); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, "connect allowed port", connectTCP(allowed), 0)
			wantErrno(t, "connect other port", connectTCP(denied), unix.EACCES)
			wantErrno(t, "bind allowed port", bindTCP(bindOK), 0)
			wantErrno(t, "bind other port", bindTCP(bindDenied), unix.EACCES)
			wantErrno(t, "bind ephemeral port 0 (not listed)", bindTCP(0), unix.EACCES)
			// Files stay unrestricted in a network-only policy.
			_, err := os.ReadFile("/etc/hostname")
			wantErrno(t, "read /etc", err, 0)
		})
	}
}

// TestApplyStrictTCP: RestrictTCP with no ports denies all TCP.
func TestApplyStrictTCP(t *testing.T) {
	requireABI(t, 4)
	if !inChild(t, "self") {
		return
	}
	port := listenTCP(t)
	r := plannedInChild(t, Policy{RestrictTCP: true})
	if err := Apply(r); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "connect", connectTCP(port), unix.EACCES)
	wantErrno(t, "bind", bindTCP(0), unix.EACCES)
}

// TestApplyScopes: a signal to, or an abstract unix connect to, a process
// outside the domain fails with EPERM (ABI 6+); inside the domain both
// work.
func TestApplyScopes(t *testing.T) {
	requireABI(t, 6)
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			if !inChild(t, v) {
				return
			}
			// Outside the domain: started before Apply. cat exits when
			// its stdin closes, since it can no longer be killed.
			outside := exec.Command("/bin/cat")
			stdin, err := outside.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := outside.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); outside.Wait() }()
			name := "@strata-landlock-test-" + strconv.Itoa(os.Getpid())
			outsideSock := listenUnix(t, name+"-outside")

			r := plannedInChild(t, Policy{ScopeSignals: true, ScopeAbstractUnix: true})
			if err := Apply(r); err != nil {
				t.Fatal(err)
			}

			wantErrno(t, "signal a process outside the domain", unix.Kill(outside.Process.Pid, unix.SIGTERM), unix.EPERM)
			wantErrno(t, "connect abstract socket outside the domain", connectUnix(name+"-outside"), unix.EPERM)

			inside := exec.Command("/bin/sleep", "60")
			if err := inside.Start(); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, "signal a process inside the domain", unix.Kill(inside.Process.Pid, unix.SIGTERM), 0)
			inside.Wait()
			insideSock := listenUnix(t, name+"-inside")
			wantErrno(t, "connect abstract socket inside the domain", connectUnix(name+"-inside"), 0)
			unix.Close(outsideSock)
			unix.Close(insideSock)
		})
	}
}

// TestApplyNothing: a ruleset that handles nothing only sets
// no_new_privs.
func TestApplyNothing(t *testing.T) {
	if !inChild(t, "self") {
		return
	}
	r, err := Plan(Policy{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Enforced() || len(r.Warnings) != 0 {
		t.Fatalf("empty policy: %+v", r)
	}
	if err := Apply(r); err != nil {
		t.Fatal(err)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil || nnp != 1 {
		t.Errorf("no_new_privs = %d, %v; want 1", nnp, err)
	}
	if _, err := os.ReadFile("/etc/hostname"); err != nil {
		t.Error(err)
	}
}

func listenTCP(t *testing.T) uint16 {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(sa.(*unix.SockaddrInet4).Port)
}

// freePort finds a port nobody listens on; it may be taken again by the
// time it is used, which only makes a test fail with EADDRINUSE.
func freePort(t *testing.T) uint16 {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(sa.(*unix.SockaddrInet4).Port)
}

// connectTCP and bindTCP use raw sockets: Go's net.Listen defaults to
// Multipath TCP, which Landlock does not restrict.
func connectTCP(port uint16) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: int(port)})
}

func bindTCP(port uint16) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: int(port)})
}

func listenUnix(t *testing.T, name string) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	return fd
}

func connectUnix(name string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: name})
}
