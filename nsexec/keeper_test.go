package nsexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKeeper: a keeper mounts the layers and serves commands that see
// the merged view (a lower file, a whiteout), write to the upper
// directory only, and report exit codes like a shell. The host reads
// and writes the same view through Keeper.Path.
func TestKeeper(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		k := startKeeper(t, spec)
		if k.Target != spec.Target {
			t.Errorf("Keeper.Target = %q; want %q", k.Target, spec.Target)
		}
		if k2, err := FindKeeper(spec.Dir); err != nil || k2.PID != k.PID {
			t.Fatalf("FindKeeper = %v, %v; want pid %d", k2, err, k.PID)
		}
		if k2, err := StartKeeper(context.Background(), spec); err != nil || k2.PID != k.PID {
			t.Fatalf("second StartKeeper = %v, %v; want the live keeper %d", k2, err, k.PID)
		}

		if r := execIn(t, spec, Command{Argv: []string{"cat", "hello"}}); r.Code != 0 || r.stdout != helloText {
			t.Errorf("cat hello: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if r := execIn(t, spec, sh("test ! -e gone && test -f top && test -f d/x && pwd")); r.Code != 0 || r.stdout != spec.Target+"\n" {
			t.Errorf("merged view: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}

		// Written inside, read from the host through the keeper, stored
		// in the upper directory only.
		if r := execIn(t, spec, sh("echo written > new && mkdir -p d/sub && echo y > d/sub/y")); r.Code != 0 {
			t.Fatalf("write: %v %q", r.ExitStatus, r.stderr)
		}
		if b, err := os.ReadFile(filepath.Join(k.Path(), "new")); err != nil || string(b) != "written\n" {
			t.Errorf("host read through %s: %q, %v", k.Path(), b, err)
		}
		if b, err := os.ReadFile(filepath.Join(spec.Upper, "new")); err != nil || string(b) != "written\n" {
			t.Errorf("upper/new: %q, %v", b, err)
		}
		for _, l := range spec.Lowers {
			if _, err := os.Lstat(filepath.Join(l, "new")); err == nil {
				t.Errorf("new appeared in lower %s", l)
			}
		}
		if err := os.WriteFile(filepath.Join(k.Path(), "from-host"), []byte("host\n"), 0o644); err != nil {
			t.Fatalf("host write through %s: %v", k.Path(), err)
		}
		if r := execIn(t, spec, Command{Argv: []string{"cat", "from-host"}}); r.stdout != "host\n" {
			t.Errorf("host write not seen inside: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}

		// Exit codes like a shell's.
		if r := execIn(t, spec, sh("exit 7")); r.ExitStatus != (ExitStatus{Code: 7}) {
			t.Errorf("exit 7: %v", r.ExitStatus)
		}
		if r := execIn(t, spec, Command{Argv: []string{"no-such-command-xyz"}}); r.Code != 127 || !strings.Contains(r.stderr, "strata: no-such-command-xyz: command not found") {
			t.Errorf("missing command: %v %q", r.ExitStatus, r.stderr)
		}
		if r := execIn(t, spec, Command{Argv: []string{"./no-such-file"}}); r.Code != 127 || !strings.Contains(r.stderr, "No such file or directory") {
			t.Errorf("missing file: %v %q", r.ExitStatus, r.stderr)
		}
		if r := execIn(t, spec, Command{Argv: []string{"./hello"}}); r.Code != 126 || !strings.Contains(r.stderr, "strata: ./hello: Permission denied") {
			t.Errorf("non-executable file: %v %q", r.ExitStatus, r.stderr)
		}
		if r := execIn(t, spec, Command{Argv: []string{"d"}, Env: []string{"PATH="}}); r.Code != 127 {
			t.Errorf("directory in PATH: %v %q", r.ExitStatus, r.stderr)
		}
		// A script without #! runs with /bin/sh, as execvp does.
		if r := execIn(t, spec, sh("printf 'echo script ran\\nexit 3\\n' > s && chmod +x s && ./s")); r.Code != 3 || r.stdout != "script ran\n" {
			t.Errorf("script without #!: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}

		// The namespace: a private /proc and /tmp, the caller's identity,
		// and no capabilities for the command when rootless.
		r := execIn(t, spec, sh(`echo $$; echo $(ls -A /tmp); id -u; grep CapEff /proc/self/status`))
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.Code != 0 || len(lines) != 4 {
			t.Fatalf("namespace probe: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if pid := lines[0]; len(pid) > 3 {
			t.Errorf("command pid %s: not in a new PID namespace", pid)
		}
		// The target is under /tmp here: the private /tmp holds only
		// the path to it.
		want := ""
		if rel, ok := strings.CutPrefix(spec.Target, "/tmp/"); ok {
			want, _, _ = strings.Cut(rel, "/")
		}
		if lines[1] != want {
			t.Errorf("/tmp holds %q; want a private /tmp with only %q", lines[1], want)
		}
		if lines[2] != itoa(os.Getuid()) {
			t.Errorf("id -u = %s; want %d", lines[2], os.Getuid())
		}
		capEff := strings.TrimSpace(strings.TrimPrefix(lines[3], "CapEff:"))
		if RealRoot() {
			if capEff == "0000000000000000" {
				t.Errorf("root's command has no capabilities")
			}
		} else if capEff != "0000000000000000" {
			t.Errorf("rootless command has capabilities %s", capEff)
		}
	})
}

// TestConcurrentExec: two commands run at once in one keeper and see each
// other's writes: one mount, served concurrently.
func TestConcurrentExec(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		script := func(mine, theirs string) Command {
			return sh("echo " + mine + " > " + mine + ".tmp && mv " + mine + ".tmp " + mine + "; i=0; while [ ! -e " + theirs + " ]; do i=$((i+1)); [ $i -gt 500 ] && exit 1; sleep 0.01; done; cat " + theirs)
		}
		var wg sync.WaitGroup
		res := make([]result, 2)
		for i, c := range []Command{script("a", "b"), script("b", "a")} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = execIn(t, spec, c)
			}()
		}
		wg.Wait()
		if res[0].Code != 0 || res[0].stdout != "b\n" || res[1].Code != 0 || res[1].stdout != "a\n" {
			t.Errorf("concurrent commands: %v %q %q; %v %q %q", res[0].ExitStatus, res[0].stdout, res[0].stderr, res[1].ExitStatus, res[1].stdout, res[1].stderr)
		}
	})
}

// TestExecNotRunning: Exec and FindKeeper without a keeper.
func TestExecNotRunning(t *testing.T) {
	dir := t.TempDir()
	if _, err := FindKeeper(dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("FindKeeper = %v; want ErrNotRunning", err)
	}
	if _, err := Exec(context.Background(), dir, Command{Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Exec = %v; want ErrNotRunning", err)
	}
	if err := StopKeeper(context.Background(), dir); err != nil {
		t.Errorf("StopKeeper without a keeper: %v", err)
	}
}

// TestStopKeeper: after StopKeeper no process of the workspace is left,
// not even one started in the background, and the keeper's files are gone.
func TestStopKeeper(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		k, err := StartKeeper(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := os.Readlink("/proc/" + itoa(k.PID) + "/ns/pid")
		if err != nil {
			t.Fatal(err)
		}
		mark := marker()
		if r := execIn(t, spec, sh("sleep "+mark+" >/dev/null 2>&1 &")); r.Code != 0 {
			t.Fatalf("background sleep: %v %q", r.ExitStatus, r.stderr)
		}
		if !waitFor(5*time.Second, func() bool { return len(procsWith(mark)) == 1 }) {
			t.Fatalf("background sleep %s not found", mark)
		}
		if n := len(procsInPIDNS(ns)); n < 2 {
			t.Errorf("%d processes in the workspace's PID namespace; want the keeper and sleep", n)
		}
		start := time.Now()
		if err := StopKeeper(context.Background(), spec.Dir); err != nil {
			t.Fatal(err)
		}
		t.Logf("StopKeeper took %v", time.Since(start))
		if pids := procsInPIDNS(ns); len(pids) > 0 {
			t.Errorf("processes %v still in the workspace's PID namespace", pids)
		}
		if pids := procsWith(mark); len(pids) > 0 {
			t.Errorf("sleep %v survived", pids)
		}
		if _, err := FindKeeper(spec.Dir); !errors.Is(err, ErrNotRunning) {
			t.Errorf("FindKeeper after stop = %v", err)
		}
		for _, f := range []string{sockName, infoName} {
			if _, err := os.Lstat(filepath.Join(spec.Dir, f)); err == nil {
				t.Errorf("%s left behind", f)
			}
		}
		if err := StopKeeper(context.Background(), spec.Dir); err != nil {
			t.Errorf("second StopKeeper: %v", err)
		}
	})
}

// TestKeeperKilled: a keeper killed with SIGKILL is detected (its lock is
// free), its leftovers do not confuse Exec, and StartKeeper replaces it;
// the upper directory keeps what was written.
func TestKeeperKilled(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		k := startKeeper(t, spec)
		if r := execIn(t, spec, sh("echo kept > kept")); r.Code != 0 {
			t.Fatal(r)
		}
		if err := unix.Kill(k.PID, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if !waitFor(5*time.Second, func() bool {
			_, err := FindKeeper(spec.Dir)
			return errors.Is(err, ErrNotRunning)
		}) {
			t.Fatal("FindKeeper still finds the killed keeper")
		}
		if _, err := os.Lstat(filepath.Join(spec.Dir, infoName)); err != nil {
			t.Logf("keeper.json: %v", err)
		}
		if _, err := Exec(context.Background(), spec.Dir, Command{Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, ErrNotRunning) {
			t.Errorf("Exec into a killed keeper = %v; want ErrNotRunning", err)
		}
		k2, err := StartKeeper(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if k2.PID == k.PID {
			t.Errorf("StartKeeper returned the dead keeper %d", k.PID)
		}
		if r := execIn(t, spec, Command{Argv: []string{"cat", "kept"}}); r.stdout != "kept\n" {
			t.Errorf("after restart: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
	})
}

// TestStartKeeperConcurrent: concurrent StartKeeper calls for one
// workspace start one keeper.
func TestStartKeeperConcurrent(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		t.Cleanup(func() { StopKeeper(context.Background(), spec.Dir) })
		var wg sync.WaitGroup
		pids := make([]int, 6)
		errs := make([]error, 6)
		for i := range pids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := StartKeeper(context.Background(), spec)
				errs[i] = err
				if err == nil {
					pids[i] = k.PID
				}
			}()
		}
		wg.Wait()
		for i := range pids {
			if errs[i] != nil || pids[i] != pids[0] {
				t.Errorf("StartKeeper %d: pid %d, %v; want pid %d", i, pids[i], errs[i], pids[0])
			}
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
