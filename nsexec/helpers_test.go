package nsexec

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/overlayfs"
)

// The tests run against the real kernel, each twice when run as root: as
// root (no user namespace, like real root), and rootless, in a copy of
// the test binary re-executed as an unprivileged uid (STRATA_TEST_USER,
// else 1000), as a real user runs strata. Unprivileged, they run once,
// rootless.
const (
	envStage = "STRATA_NSEXEC_TEST_STAGE" // "rootless" in the re-executed copy
	// envInit names the strata-init binary TestMain built, for the
	// re-executed copy; "self" selects the fallback (the test binary).
	envInit = "STRATA_NSEXEC_TEST_INIT"
)

var (
	// initBuilt is the strata-init TestMain built, "" if it could not.
	initBuilt string
	// cleanupDirs are removed after the tests.
	cleanupDirs []string
)

func TestMain(m *testing.M) {
	Init() // the fallback re-executes the test binary: keeper, run, probe, test entries
	if p := os.Getenv(envInit); p != "" {
		initBuilt = p
	} else if err := buildInit(); err != nil {
		fmt.Fprintf(os.Stderr, "nsexec tests: cannot build %s (%v); testing the fallback only\n", InitName, err)
	}
	if initBuilt != "" && initBuilt != "self" {
		initOverride = initBuilt
	}
	code := m.Run()
	for _, d := range cleanupDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// buildInit builds cmd/strata-init, as make build does, into a directory
// every user can read.
func buildInit() error {
	dir, err := os.MkdirTemp("", "strata-nsexec-init-")
	if err != nil {
		return err
	}
	cleanupDirs = append(cleanupDirs, dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	out := filepath.Join(dir, InitName)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/stratafs/strata/cmd/strata-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, b)
	}
	initBuilt = out
	return nil
}

func stage() string { return os.Getenv(envStage) }

// testUID is the unprivileged identity of the rootless pass when the
// tests run as root.
func testUID() (uid, gid int) {
	uid, gid = 1000, 1000
	if name := os.Getenv("STRATA_TEST_USER"); name != "" {
		if u, err := user.Lookup(name); err == nil {
			uid, _ = strconv.Atoi(u.Uid)
			gid, _ = strconv.Atoi(u.Gid)
		}
	}
	return uid, gid
}

// both runs body as root (when root) and rootless: see the top of this file.
func both(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	switch {
	case stage() == "rootless":
		t.Run("rootless", body)
	case os.Geteuid() != 0:
		t.Run("rootless", body)
	default:
		t.Run("root", body)
		t.Run("rootless", func(t *testing.T) { runRootless(t) })
	}
}

// asRootOrRootless runs body once: rootless (the main path).
func rootlessOnly(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if stage() == "rootless" || os.Geteuid() != 0 {
		t.Run("rootless", body)
		return
	}
	t.Run("rootless", func(t *testing.T) { runRootless(t) })
}

var (
	copyOnce sync.Once
	copyPath string
	copyErr  error
)

// runRootless re-runs the current subtest in a copy of the test binary as
// the unprivileged uid.
func runRootless(t *testing.T) {
	t.Helper()
	copyOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			copyErr = err
			return
		}
		dir, err := os.MkdirTemp("", "strata-nsexec-test-")
		if err != nil {
			copyErr = err
			return
		}
		cleanupDirs = append(cleanupDirs, dir)
		os.Chmod(dir, 0o755)
		copyPath = filepath.Join(dir, "nsexec.test")
		copyErr = copyFile(exe, copyPath)
	})
	if copyErr != nil {
		t.Fatal(copyErr)
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+part+"$")
	}
	args := []string{"-test.run=" + strings.Join(pattern, "/"), "-test.v", "-test.count=1", "-test.timeout=5m"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	uid, gid := testUID()
	cmd := exec.Command(copyPath, args...)
	cmd.Dir = "/"
	initEnv := initBuilt
	if initOverride == "" {
		initEnv = "self"
	}
	cmd.Env = append(os.Environ(), envStage+"=rootless", envInit+"="+initEnv, "TMPDIR=/tmp", "HOME=/tmp")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	passed := bytes.Contains(out, []byte("--- PASS: "+t.Name()+" "))
	if bytes.Contains(out, []byte("--- SKIP: "+t.Name()+" ")) {
		testutil.Skip(t, "rootless child skipped:\n"+string(out))
	}
	if err != nil || !passed {
		t.Fatalf("rootless child as uid %d (%v): %v\n%s", uid, time.Since(start).Round(time.Millisecond), err, out)
	}
	if testing.Verbose() {
		t.Logf("rootless child as uid %d:\n%s", uid, out)
	}
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

var (
	featOnce sync.Once
	feat     overlayfs.Features
	featErr  error
)

// features probes overlay once per process, as the workspace will mount.
func features(t testing.TB) overlayfs.Features {
	t.Helper()
	featOnce.Do(func() {
		dir, err := os.MkdirTemp("", "strata-nsexec-probe-")
		if err != nil {
			featErr = err
			return
		}
		defer os.RemoveAll(dir)
		feat, featErr = ProbeOverlay(context.Background(), dir, !RealRoot())
	})
	if featErr != nil {
		testutil.Skip(t, "overlay probe: "+featErr.Error())
	}
	if !feat.Overlay {
		testutil.Skip(t, fmt.Sprintf("overlay not mountable here: %v", feat.Errors))
	}
	return feat
}

const helloText = "hello from the lower layer\n"

// newSpec builds a workspace by hand under base (a fresh temp dir when
// ""): a bottom layer with hello, d/x and gone; a top layer with top and a
// whiteout (char 0/0) hiding gone; empty upper and work; a state
// directory; and an empty target directory.
func newSpec(t testing.TB, base string) Spec {
	t.Helper()
	if base == "" {
		base = t.TempDir()
	}
	p := func(s ...string) string { return filepath.Join(append([]string{base}, s...)...) }
	for _, d := range []string{"l1", "l2/d", "upper", "work", "state", "merged"} {
		if err := os.MkdirAll(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string, mode os.FileMode) {
		if err := os.WriteFile(p(name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("l2/hello", helloText, 0o644)
	write("l2/d/x", "x\n", 0o644)
	write("l2/gone", "deleted above\n", 0o644)
	write("l1/top", "top\n", 0o644)
	if err := unix.Mknod(p("l1/gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatalf("whiteout: %v", err)
	}
	t.Cleanup(func() { openTree(p("work")) }) // overlay leaves work/work mode 0
	return Spec{
		Name:     filepath.Base(base),
		Dir:      p("state"),
		Lowers:   []string{p("l1"), p("l2")},
		Upper:    p("upper"),
		Work:     p("work"),
		Target:   p("merged"),
		Features: features(t),
	}
}

// openTree makes every directory under dir accessible to its owner, so
// that the test's cleanup can remove it.
func openTree(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		if err != nil && d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
			openTree(p)
			return filepath.SkipDir
		}
		return nil
	})
}

// startKeeper starts a keeper for spec and stops it when the test ends.
func startKeeper(t testing.TB, spec Spec) *Keeper {
	t.Helper()
	k, err := StartKeeper(context.Background(), spec)
	if err != nil {
		t.Fatalf("StartKeeper: %v", err)
	}
	t.Cleanup(func() {
		if err := StopKeeper(context.Background(), spec.Dir); err != nil {
			t.Errorf("StopKeeper: %v", err)
		}
	})
	return k
}

// result is a finished command with its output.
type result struct {
	ExitStatus
	stdout, stderr string
}

// pipeOut returns a pipe's write end for a command and a function that
// closes it and returns what was written.
func pipeOut(t testing.TB) (*os.File, func() string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		io.Copy(&buf, r)
		r.Close()
		close(done)
	}()
	return w, func() string {
		w.Close()
		<-done
		return buf.String()
	}
}

func testEnv() []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/tmp", "LC_ALL=C"}
}

// execIn runs argv in the keeper of spec and fails the test on a strata
// error.
func execIn(t testing.TB, spec Spec, cmd Command) result {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = testEnv()
	}
	out, stdout := pipeOut(t)
	errw, stderr := pipeOut(t)
	st, err := Exec(context.Background(), spec.Dir, cmd, nil, out, errw)
	res := result{ExitStatus: st, stdout: stdout(), stderr: stderr()}
	if err != nil {
		t.Fatalf("Exec %q: %v", cmd.Argv, err)
	}
	return res
}

func runIn(t testing.TB, ctx context.Context, spec Spec, cmd Command) (result, error) {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = testEnv()
	}
	out, stdout := pipeOut(t)
	errw, stderr := pipeOut(t)
	st, err := Run(ctx, spec, cmd, nil, out, errw)
	return result{ExitStatus: st, stdout: stdout(), stderr: stderr()}, err
}

func sh(script string) Command { return Command{Argv: []string{"sh", "-c", script}} }

// marker is a unique argument for `sleep`, so that the test can find the
// process among all others.
func marker() string { return fmt.Sprintf("1000.%d", rand.Uint32()) }

// procsWith lists the pids of processes whose command line contains arg.
func procsWith(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if string(a) == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// procsInPIDNS lists the live (not zombie) processes in the PID
// namespace ns ("pid:[N]") that the caller may inspect.
func procsInPIDNS(ns string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			if state, _, err := procStat(e.Name()); err == nil && state != 'Z' && state != 'X' {
				pids = append(pids, pid) // a zombie waits for its parent, outside
			}
		}
	}
	return pids
}

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

// statusField reads a field of /proc/PID/status (and of each task).
func statusFields(path, name string) []string {
	var out []string
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+":"); ok {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}
