//go:build integration

package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
)

// podman is Debian's podman for one test: its storage (root, runroot),
// runtime directory and configuration live in the test's temporary
// directory, so nothing is shared with other tests or the user's own
// containers, and all of it is removed at the end. As root it runs
// rootful containers; as the test user, rootless ones (user namespace
// from /etc/subuid and /etc/subgid through newuidmap, kernel overlay in
// the user namespace).
type podman struct {
	t     testing.TB
	exe   string
	flags []string
	env   []string
	xdg   string
}

func newPodman(t testing.TB) *podman {
	t.Helper()
	exe := testutil.LookPath(t, "podman")
	// runc, not Debian 12's default crun: crun 1.8 refuses a hybrid
	// cgroup v1 + v2 hierarchy ("cgroups in hybrid mode not supported"),
	// which this kind of machine has; runc runs on both.
	testutil.LookPath(t, "runc")
	dir := t.TempDir()
	// Rootless podman refuses a runroot longer than 50 characters (its
	// sockets' paths must fit in sun_path): the runroot and the runtime
	// directory go in a short directory of /tmp.
	short, err := os.MkdirTemp("/tmp", "pm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(short) })
	p := &podman{t: t, exe: exe, xdg: filepath.Join(short, "xdg")}
	for _, d := range []string{p.xdg, filepath.Join(dir, "config")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p.flags = []string{
		"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(short, "run"),
		"--storage-driver", "overlay", "--runtime", "runc",
		"--cgroup-manager", "cgroupfs", // no systemd session here
		"--events-backend", "none",
	}
	p.env = append(os.Environ(), "XDG_RUNTIME_DIR="+p.xdg, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	// Registered after t.TempDir, so it runs before the directory is
	// removed: rootless storage holds files of subordinate ids that only
	// podman (in its user namespace) can remove.
	t.Cleanup(p.cleanup)
	return p
}

// run runs podman with the test's storage; it returns stdout, and fails
// the test on an error.
func (p *podman) run(args ...string) string {
	p.t.Helper()
	cmd := exec.Command(p.exe, append(append([]string{}, p.flags...), args...)...)
	cmd.Env = p.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// runImage runs script in a fresh container of image (pulled over plain
// HTTP from the test's registry), without a network.
func (p *podman) runImage(image, script string) string {
	p.t.Helper()
	// Explicit limits: root's podman raises RLIMIT_NOFILE and NPROC to
	// 1048576 by default, which a root without CAP_SYS_RESOURCE (as in
	// some CI containers) may not do.
	return p.run("run", "--rm", "--network", "none", "--tls-verify=false",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		image, "sh", "-c", script)
}

func (p *podman) cleanup() {
	cmd := exec.Command(p.exe, append(append([]string{}, p.flags...), "system", "reset", "--force")...)
	cmd.Env = p.env
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Errorf("podman system reset: %v\n%s", err, out)
	}
	// Rootless podman keeps a pause process holding its user namespace;
	// it must not outlive the test.
	if b, err := os.ReadFile(filepath.Join(p.xdg, "libpod", "tmp", "pause.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
