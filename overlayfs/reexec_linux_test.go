package overlayfs

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
)

// Tests that mount run in a re-executed test binary, so that namespaces and
// mounts never outlive the child (after go-landlock's RunInSubprocess). The
// child runs the same top-level test; stage() tells it where it is.
const envStage = "STRATA_OVERLAYFS_TEST_STAGE"

const (
	// stageUserNS: in a new user and mount namespace, mapped to root.
	stageUserNS = "userns"
	// stageMountNS: real root in a private mount namespace.
	stageMountNS = "mountns"
	// stageDropUID: running as an unprivileged uid; re-executes itself
	// into stageUserNS, so that the user namespace is owned by that uid
	// as it is for a real rootless user.
	stageDropUID = "dropuid"
)

// unprivilegedUID is the uid the root pass uses for the rootless path:
// STRATA_TEST_UID, else the uid of STRATA_TEST_USER (the user make test's
// rootless pass runs as), else 1000. The uid needs no passwd entry.
func unprivilegedUID() int {
	if s := os.Getenv("STRATA_TEST_UID"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if name := os.Getenv("STRATA_TEST_USER"); name != "" {
		if u, err := user.Lookup(name); err == nil {
			if n, err := strconv.Atoi(u.Uid); err == nil && n > 0 {
				return n
			}
		}
	}
	return 1000
}

func stage() string { return os.Getenv(envStage) }

// runChild re-executes the running top-level test at stage st, with extra
// environment, and fails (or skips, if the child skipped) t accordingly.
func runChild(t *testing.T, st string, env ...string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	args := []string{"-test.run=^" + top + "$", "-test.count=1", "-test.v"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	switch st {
	case stageUserNS:
		attr.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	case stageMountNS:
		attr.Cloneflags = unix.CLONE_NEWNS
	case stageDropUID:
		// The uid must be able to read and execute the binary.
		exe = copyExecutable(t, exe)
		uid := uint32(unprivilegedUID())
		attr.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = "/"
	cmd.Env = append(append(os.Environ(), envStage+"="+st), env...)
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		testutil.Skip(t, "cannot start a child in stage "+st+": "+err.Error())
	}
	switch {
	case err != nil:
		t.Fatalf("child (stage %s) failed: %v\n%s", st, err, out)
	case bytes.Contains(out, []byte("--- SKIP: "+top)):
		testutil.Skip(t, "child (stage "+st+") skipped:\n"+string(out))
	case bytes.Contains(out, []byte("no tests to run")):
		t.Fatalf("child (stage %s) ran no test:\n%s", st, out)
	case testing.Verbose():
		t.Logf("child (stage %s):\n%s", st, out)
	}
}

// copyExecutable copies the test binary to a directory every user can
// read, because go test builds it in a root-only directory.
func copyExecutable(t *testing.T, exe string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "strata-overlayfs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "overlayfs.test")
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// privateMounts keeps the child's mounts from propagating anywhere:
// mount --make-rprivate /.
func privateMounts(t testing.TB) {
	t.Helper()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make / rprivate: %v", err)
	}
}

// rootlessChildren runs body in a child in a user namespace (the rootless
// path): once mapped to the current user and, when the tests run as root,
// once more as an unprivileged user who owns the namespace. body runs only
// in the child.
func rootlessChildren(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	switch stage() {
	case stageUserNS:
		privateMounts(t)
		body(t)
		return
	case stageDropUID:
		runChild(t, stageUserNS)
		return
	case "":
	default:
		return
	}
	t.Run("userns", func(t *testing.T) { runChild(t, stageUserNS) })
	if os.Geteuid() == 0 {
		t.Run("uid"+strconv.Itoa(unprivilegedUID()), func(t *testing.T) { runChild(t, stageDropUID) })
	}
}

// rootChild runs body as real root in a private mount namespace; it skips
// outside the root pass.
func rootChild(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	switch stage() {
	case stageMountNS:
		privateMounts(t)
		body(t)
		return
	case "":
	default:
		return
	}
	testutil.AsRoot(t)
	runChild(t, stageMountNS)
}
