//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/seccomp"
)

// Denying user namespaces the way real hosts do, for a command this test
// starts (root may not change the host's user.max_user_namespaces here):
//
//   - inside `bwrap --unshare-user --disable-userns` (Debian's bubblewrap):
//     a nested user namespace then fails with ENOSPC, as under
//     user.max_user_namespaces=0;
//   - under a seccomp filter that refuses CLONE_NEWUSER, as container
//     runtimes' default profiles do (strata's agent preset): the test
//     binary re-executes itself as a launcher (envSeccompExec) that loads
//     the filter and execs the command.

// envSeccompExec=1 makes the test binary the launcher: it execs its
// arguments under the filter.
const envSeccompExec = "STRATA_IT_SECCOMP_EXEC"

func init() {
	if os.Getenv(envSeccompExec) != "1" || len(os.Args) < 2 {
		return
	}
	os.Unsetenv(envSeccompExec)
	args := os.Args[1:]
	f, err := seccomp.Plan(seccomp.Agent(), runtime.GOARCH)
	if err == nil {
		err = seccomp.Apply(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "seccomp launcher: %v\n", err)
		os.Exit(125)
	}
	err = syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintf(os.Stderr, "seccomp launcher: exec %s: %v\n", args[0], err)
	os.Exit(127)
}

// underSeccomp returns a command that runs argv under strata's own agent
// filter, which refuses unshare and clone with CLONE_NEWUSER (EPERM) and
// clone3 (ENOSYS), as container runtimes' default profiles do (and mount,
// as they do too).
func underSeccomp(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = append(os.Environ(), envSeccompExec+"=1")
	return cmd
}

// underBwrap returns a command that runs argv inside bubblewrap with user
// namespaces denied to it: everything of the host visible as it is.
func underBwrap(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	bwrap := testutil.LookPath(t, "bwrap")
	return exec.Command(bwrap, append([]string{"--unshare-user", "--disable-userns", "--dev-bind", "/", "/", "--"}, argv...)...)
}

type doctorJSON struct {
	Checks []struct {
		Name string   `json:"name"`
		OK   bool     `json:"ok"`
		Fix  []string `json:"fix"`
	} `json:"checks"`
	UserNS struct {
		Cause  string   `json:"cause"`
		Detail string   `json:"detail"`
		Fix    []string `json:"fix"`
		Probe  struct {
			Unshare                 string `json:"unshare"`
			Seccomp                 int    `json:"seccomp"`
			MaxUserNamespaces       int    `json:"max_user_namespaces"`
			UnprivilegedUsernsClone int    `json:"unprivileged_userns_clone"`
			AppArmorRestrict        int    `json:"apparmor_restrict_unprivileged_userns"`
		} `json:"probe"`
	} `json:"userns"`
	Backend      string `json:"backend"`
	NoNamespaces []struct {
		What   string `json:"what"`
		Status string `json:"status"`
	} `json:"no_namespaces"`
}

func runDoctor(t *testing.T, cmd *exec.Cmd) (doctorJSON, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	var d doctorJSON
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatalf("doctor --json: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	return d, code, errb.String()
}

// TestDoctorUserNSDenied: `strata doctor` tells the real causes apart, in
// both passes: unrestricted, user namespaces work; inside bwrap
// --disable-userns the cause is the namespace limit (ENOSPC) with its fix;
// under a seccomp filter refusing CLONE_NEWUSER it is seccomp (EPERM,
// Seccomp: 2) with its fix. Both name the namespace-free backends and exit
// 1 (a required check failed).
//
// The sysctls doctor reports are the real ones, read where it runs (the
// host's, or the bwrap sandbox's own user namespace's); and doctor says
// which backend `--backend auto` takes: overlay where user namespaces
// work, copy where they are denied on this test's store (TMPDIR, which
// cannot clone files).
//
// In the pass that runs with user namespaces denied (scripts/integration.sh,
// STRATA_TEST_USERNS_DENIED) doctor runs as it is, and must name that
// pass's cause.
func TestDoctorUserNSDenied(t *testing.T) {
	strata := bin(t)
	h := newHome(t)
	args := []string{strata, "--home", h.dir, "doctor", "--json"}
	sysctls := func(t *testing.T, d doctorJSON) {
		t.Helper()
		p := d.UserNS.Probe
		for _, s := range []struct {
			file string
			got  int
		}{
			{"/proc/sys/user/max_user_namespaces", p.MaxUserNamespaces},
			{"/proc/sys/kernel/unprivileged_userns_clone", p.UnprivilegedUsernsClone},
			{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", p.AppArmorRestrict},
		} {
			want := -1
			if b, err := os.ReadFile(s.file); err == nil {
				fmt.Sscan(string(b), &want)
			}
			if s.got != want {
				t.Errorf("doctor reports %s = %d; the file says %d", s.file, s.got, want)
			}
		}
	}
	if denied := deniedPass(); denied != "" {
		d, code, _ := runDoctor(t, exec.Command(args[0], args[1:]...))
		cause := map[string]string{"bwrap": "max_user_namespaces", "seccomp": "seccomp"}[denied]
		if d.UserNS.Cause != cause || code != 1 || d.Backend != "copy" {
			t.Errorf("denied by %s: cause %q (%s), exit %d, backend %q", denied, d.UserNS.Cause, d.UserNS.Detail, code, d.Backend)
		}
		sysctls(t, d)
		return
	}

	d, code, _ := runDoctor(t, exec.Command(args[0], args[1:]...))
	if d.UserNS.Cause != "" || d.UserNS.Probe.Unshare != "" {
		t.Fatalf("unrestricted: cause %q (%s), exit %d", d.UserNS.Cause, d.UserNS.Detail, code)
	}
	if d.Backend != "overlay" {
		t.Errorf("unrestricted: auto would choose %q", d.Backend)
	}
	sysctls(t, d)

	check := func(t *testing.T, d doctorJSON, code int, cause, unshare, fix string) {
		t.Helper()
		if d.UserNS.Cause != cause || d.UserNS.Probe.Unshare != unshare {
			t.Errorf("cause %q, unshare %q; want %q, %q (%s)", d.UserNS.Cause, d.UserNS.Probe.Unshare, cause, unshare, d.UserNS.Detail)
		}
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		found := false
		for _, c := range d.Checks {
			if c.Name == "user namespaces" {
				found = true
				all := strings.Join(c.Fix, "\n")
				if c.OK || !strings.Contains(all, fix) || !strings.Contains(all, "reflink or copy backend") {
					t.Errorf("check: ok %v, fix %q", c.OK, c.Fix)
				}
			}
		}
		if !found {
			t.Error("no user namespaces check")
		}
		// What a workspace without namespaces gets instead, on this
		// kernel (Landlock ABI 7).
		statuses := map[string]string{}
		for _, it := range d.NoNamespaces {
			statuses[it.What] = it.Status
		}
		if statuses["filesystem fence"] != "enforced" || statuses["host unix sockets"] != "refused" || statuses["PID namespace"] != "not enforced" {
			t.Errorf("no_namespaces: %v", statuses)
		}
		if d.Backend != "copy" {
			t.Errorf("auto would choose %q on TMPDIR, want copy", d.Backend)
		}
	}
	t.Run("bwrap --disable-userns", func(t *testing.T) {
		d, code, _ := runDoctor(t, underBwrap(t, args...))
		check(t, d, code, "max_user_namespaces", "ENOSPC", "bwrap without --disable-userns")

	})
	t.Run("seccomp refusing CLONE_NEWUSER", func(t *testing.T) {
		d, code, _ := runDoctor(t, underSeccomp(t, args...))
		check(t, d, code, "seccomp", "EPERM", "seccomp")
		if d.UserNS.Probe.Seccomp != 2 {
			t.Errorf("Seccomp %d, want 2", d.UserNS.Probe.Seccomp)
		}
	})
}
