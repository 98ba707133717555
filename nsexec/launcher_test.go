package nsexec

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stratafs/strata/internal/sandbox"
)

// TestSandboxLauncher: sandboxed commands in the keeper's view are
// started from one launcher per policy (the keeper's log says when it
// starts one), and each is sandboxed exactly as one started on a thread
// of its own: Landlock denies a file outside the workspace, seccomp
// denies unshare -U, capabilities are dropped, the view hides the host —
// the first time, from the launcher after it, and with many at once.
// Commands that need more than the keeper's view, or a network namespace
// of their own, keep their own thread and are sandboxed all the same; an
// unsandboxed command after them is not.
func TestSandboxLauncher(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		agentSandbox(t, spec.Target) // the capability gates
		outside := outsideDir(t)
		os.Chmod(outside, 0o755)
		secret := filepath.Join(outside, "secret")
		if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		launched := func() int {
			b, _ := os.ReadFile(filepath.Join(spec.Dir, "keeper.log"))
			return strings.Count(string(b), "sandbox: a launcher")
		}
		boxed := func(c Command) Command {
			c.View, c.Policy = true, &sandbox.Request{Target: spec.Target, Tmp: "/tmp"}
			return c
		}
		check := func(t *testing.T, name string, box func(Command) Command) {
			t.Helper()
			if r := execIn(t, spec, box(Command{Argv: []string{"cat", "/proc/1/root" + secret}})); r.Code == 0 {
				t.Errorf("%s: read the host through /proc/1/root: %v %q", name, r.ExitStatus, r.stdout)
			}
			if r := execIn(t, spec, box(Command{Argv: []string{"cat", secret}})); r.Code == 0 || !strings.Contains(r.stderr, "No such file") {
				t.Errorf("%s: a host file outside the view: %v %q %q", name, r.ExitStatus, r.stdout, r.stderr)
			}
			if r := execIn(t, spec, box(sh("echo inside > w && cat w"))); r.Code != 0 || r.stdout != "inside\n" {
				t.Errorf("%s: the workspace: %v %q %q", name, r.ExitStatus, r.stdout, r.stderr)
			}
			if r := execIn(t, spec, box(Command{Argv: []string{"unshare", "-U", "true"}})); r.Code == 0 || !strings.Contains(r.stderr, "Operation not permitted") {
				t.Errorf("%s: seccomp: unshare -U: %v %q", name, r.ExitStatus, r.stderr)
			}
			if r := execIn(t, spec, box(sh("grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters|CapEff):' /proc/self/status | tr -s '\t' ' '"))); !strings.HasPrefix(r.stdout, "CapEff: ") ||
				!strings.Contains(r.stdout, "NoNewPrivs: 1\nSeccomp: 2\nSeccomp_filters: 1\n") || strings.Contains(r.stdout, "CapEff: 000001ffffffffff") {
				t.Errorf("%s: status: %q %q", name, r.stdout, r.stderr)
			}
			if r := execIn(t, spec, box(Command{Argv: []string{"no-such-command"}})); r.Code != 127 {
				t.Errorf("%s: a missing command: %v", name, r.ExitStatus)
			}
			if r := execIn(t, spec, box(Command{Argv: []string{"pwd"}, Dir: "/tmp"})); r.stdout != "/tmp\n" {
				t.Errorf("%s: --cwd: %q %q", name, r.stdout, r.stderr)
			}
		}
		for i := range 2 {
			check(t, "launched", boxed)
			if n := launched(); n != 1 {
				t.Fatalf("round %d: %d launchers; want 1", i, n)
			}
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := execIn(t, spec, boxed(Command{Argv: []string{"unshare", "-U", "true"}})); r.Code == 0 {
					t.Errorf("concurrent: unshare -U ran")
				}
			}()
		}
		wg.Wait()
		// Its own thread: a bind the keeper's view lacks; --net none.
		own := func(c Command) Command {
			c = boxed(c)
			c.Binds = []Bind{{Source: outside, Target: "/mnt"}}
			c.Policy.RO = []string{"/mnt"}
			return c
		}
		check(t, "own view", own)
		if r := execIn(t, spec, own(Command{Argv: []string{"cat", "/mnt/secret"}})); r.stdout != "secret\n" {
			t.Errorf("own view: its bind: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		netNone := func(c Command) Command { c = boxed(c); c.NetNone = true; return c }
		check(t, "net none", netNone)
		if n := launched(); n != 1 {
			t.Errorf("%d launchers after commands that need their own thread; want 1", n)
		}
		if r := execIn(t, spec, Command{Argv: []string{"unshare", "-U", "true"}}); r.Code != 0 {
			t.Errorf("unsandboxed unshare -U after sandboxed commands: %v %q", r.ExitStatus, r.stderr)
		}
	})
}
