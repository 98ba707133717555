package seccomp

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
)

// A seccomp filter is irreversible process state, so tests that Apply run in a
// re-executed test binary (go-landlock's lltest.RunInSubprocess): the
// parent re-runs exactly the current (sub)test in a child with childEnv
// set, optionally as an unprivileged user, and fails if the child does.

const childEnv = "STRATA_SECCOMP_TEST_CHILD"

func isChild() bool { return os.Getenv(childEnv) == "1" }

// variants are the identities a sandbox test runs as: the current one, and
// as root also an unprivileged uid (setpriv), because the filter must hold
// for both and its denials must not be mistaken for the kernel's own.
var variants = []string{"self", "unprivileged"}

// inChild runs the current test in a child process and reports false; in
// the child it reports true and the test body runs. variant is one of
// variants.
func inChild(t *testing.T, variant string) bool {
	t.Helper()
	if isChild() {
		return true
	}
	runChild(t, variant == "unprivileged")
	return false
}

func runChild(t *testing.T, unprivileged bool) {
	t.Helper()
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	args := []string{"-test.run=" + strings.Join(pattern, "/"), "-test.v", "-test.count=1", "-test.timeout=60s"}

	tmp := sharedDir(t)
	bin, err := os.Executable() // os.Args[0] may be relative to another directory
	if err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if unprivileged {
		if os.Geteuid() != 0 {
			// Identity split, not a capability gate: the plain
			// variant already runs unprivileged.
			t.Skip("already unprivileged: the self variant covers it")
		}
		if _, err := exec.LookPath("setpriv"); err != nil {
			testutil.Skip(t, "setpriv (util-linux) not installed")
		}
		uid, gid := testUser()
		if err := os.Chown(tmp, uid, gid); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command("setpriv", append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(gid), "--clear-groups", "--", copyBinary(t, bin)}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(os.Environ(), childEnv+"=1", "TMPDIR="+tmp)
	cmd.Dir = tmp
	start := time.Now()
	out, err := cmd.CombinedOutput()
	passed := strings.Contains(string(out), "--- PASS: "+t.Name()+" ")
	if err != nil || !passed {
		t.Fatalf("child %v (after %v): %v\n%s", cmd.Args, time.Since(start).Round(time.Millisecond), err, out)
	}
	if testing.Verbose() {
		t.Logf("child output:\n%s", out)
	}
}

// testUser is the unprivileged identity: $STRATA_TEST_UID/GID, else 1000.
func testUser() (uid, gid int) {
	uid, gid = 1000, 1000
	if v, err := strconv.Atoi(os.Getenv("STRATA_TEST_UID")); err == nil {
		uid, gid = v, v
	}
	if v, err := strconv.Atoi(os.Getenv("STRATA_TEST_GID")); err == nil {
		gid = v
	}
	return uid, gid
}

// sharedDir is a fresh directory that the unprivileged user can enter: the
// test's TempDir may sit under a 0700 parent.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "strata-sctest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	copyOnce sync.Once
	copyPath string
	copyErr  error
)

// copyBinary copies the test binary where the unprivileged user can run
// it; go test keeps it in a 0700 directory.
func copyBinary(t *testing.T, bin string) string {
	t.Helper()
	copyOnce.Do(func() {
		var dir string
		dir, copyErr = os.MkdirTemp("/tmp", "strata-sctest-bin-")
		if copyErr != nil {
			return
		}
		copyErr = os.Chmod(dir, 0o755)
		copyPath = filepath.Join(dir, filepath.Base(bin))
		if copyErr == nil {
			copyErr = copyFile(bin, copyPath)
		}
	})
	if copyErr != nil {
		t.Fatal(copyErr)
	}
	return copyPath
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range []string{copyPath, probePath} {
		if p != "" {
			os.RemoveAll(filepath.Dir(p))
		}
	}
	os.Exit(code)
}
