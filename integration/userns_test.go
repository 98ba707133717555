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
			Unshare string `json:"unshare"`
			Seccomp int    `json:"seccomp"`
		} `json:"probe"`
	} `json:"userns"`
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
func TestDoctorUserNSDenied(t *testing.T) {
	strata := bin(t)
	h := newHome(t)
	args := []string{strata, "--home", h.dir, "doctor", "--json"}

	d, code, _ := runDoctor(t, exec.Command(args[0], args[1:]...))
	if d.UserNS.Cause != "" || d.UserNS.Probe.Unshare != "" {
		t.Fatalf("unrestricted: cause %q (%s), exit %d", d.UserNS.Cause, d.UserNS.Detail, code)
	}

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
