package nsexec

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// outsideDir makes a directory outside the workspace and /tmp (which is
// private inside) holding a file "secret", readable by everyone.
func outsideDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "strata-nsexec-view-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	if err := os.WriteFile(filepath.Join(d, "secret"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// topLevel lists / as a command sees it.
func topLevel(t testing.TB, out string) []string {
	t.Helper()
	return strings.Fields(out)
}

// TestView: a command with View sees the assembled root — the system
// directories, the workspace, private /tmp and /var/tmp, a minimal /dev,
// /proc and /sys — and nothing else of the host; binds of the spec are in
// it, a command's own binds only in its own view; the keeper (pid 1) is
// out of reach; commands without View still see the host; Keeper.Path
// still works from the host.
func TestView(t *testing.T) {
	both(t, func(t *testing.T) {
		outside := outsideDir(t)
		spare := outsideDir(t)
		spec := newSpec(t, "")
		spec.View = []Bind{{Source: spare, Target: spare}}
		k := startKeeper(t, spec)
		view := func(c Command) Command {
			c.View = true
			c.Binds = append(c.Binds, spec.View...)
			return c
		}

		r := execIn(t, spec, view(sh("ls -A /")))
		got := topLevel(t, r.stdout)
		first := strings.Split(strings.TrimPrefix(spec.Target, "/"), "/")[0]
		allowed := []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "tmp", "var", "dev", "proc", "sys", first, strings.Split(strings.TrimPrefix(spare, "/"), "/")[0]}
		for _, name := range got {
			if !slices.Contains(allowed, name) {
				t.Errorf("/ in the view holds %q: %v", name, got)
			}
		}
		for _, want := range []string{"usr", "etc", "tmp", "dev", "proc"} {
			if !slices.Contains(got, want) {
				t.Errorf("/ in the view lacks %s: %v", want, got)
			}
		}
		for _, tc := range []struct {
			name, script, want string
		}{
			{"host path", "cat " + outside + "/secret", "No such file or directory"},
			{"host home", "ls /home /root", "No such file or directory"},
			{"host /run", "ls /run", "No such file or directory"},
			{"keeper's root", "ls /proc/1/root/", "Permission denied"},
			{"keeper's descriptors", "ls -l /proc/1/fd/", "Permission denied"},
			{"dot-dot out of the workspace", "cd " + spec.Target + "/../../../../.. && ls -A . | grep -c var/tmp || ls " + outside, "No such file or directory"},
			{"write the system", "touch /usr/strata-x", "Read-only file system"},
			{"write the view's root", "mkdir /strata-x", "Read-only file system"},
			{"write /proc", "echo 3 > /proc/sys/vm/drop_caches", "Read-only file system"},
			{"write a spec bind", "touch " + spare + "/x", "Read-only file system"},
		} {
			r := execIn(t, spec, view(sh(tc.script)))
			if r.Code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s: %s: %v %q %q; want %q", tc.name, tc.script, r.ExitStatus, r.stdout, r.stderr, tc.want)
			}
		}
		for _, tc := range []struct{ name, script string }{
			{"workspace", "cat hello >/dev/null && echo w > written && test -f written && pwd | grep -qx " + spec.Target},
			{"private tmp and var/tmp", "echo t > /tmp/t && echo v > /var/tmp/v && cat /tmp/t /var/tmp/v"},
			{"devices", "echo x > /dev/null && head -c1 /dev/zero | wc -c && head -c4 /dev/urandom >/dev/null && test -c /dev/full && test -L /dev/ptmx && test -d /dev/pts && ls /dev/fd/ >/dev/null"},
			{"dev/shm", "echo s > /dev/shm/s && cat /dev/shm/s"},
			{"proc and sys", "test -r /proc/self/status && test -d /proc/1 && ls /sys/devices/system/cpu >/dev/null"},
			{"resolv.conf and hosts", "test -r /etc/hosts && { test ! -e /etc/resolv.conf || cat /etc/resolv.conf >/dev/null; }"},
			{"spec bind", "cat " + spare + "/secret"},
		} {
			if r := execIn(t, spec, view(sh(tc.script))); r.Code != 0 {
				t.Errorf("%s: %s: %v %q %q", tc.name, tc.script, r.ExitStatus, r.stdout, r.stderr)
			}
		}
		// The same /tmp as the host view's commands, and the same workspace.
		if r := execIn(t, spec, sh("cat /tmp/t written")); r.stdout != "t\nw\n" {
			t.Errorf("host view after the view wrote: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if b, err := os.ReadFile(filepath.Join(k.Path(), "written")); err != nil || string(b) != "w\n" {
			t.Errorf("Keeper.Path after the view wrote: %q, %v", b, err)
		}
		// A command's own bind, read-only and read-write: in its view only.
		own := view(Command{Argv: []string{"sh", "-c", "cat " + outside + "/secret && ! touch " + outside + "/x 2>/dev/null && ls " + spec.Target + " /var/tmp/v >/dev/null"}})
		own.Binds = append(own.Binds, Bind{Source: outside, Target: outside})
		if r := execIn(t, spec, own); r.Code != 0 || r.stdout != "secret\n" {
			t.Errorf("a command's read-only bind: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		rw := view(sh("echo rw > " + outside + "/rw"))
		rw.Binds = append(rw.Binds, Bind{Source: outside, Target: outside, RW: true})
		if r := execIn(t, spec, rw); r.Code != 0 {
			t.Errorf("a command's read-write bind: %v %q", r.ExitStatus, r.stderr)
		} else if b, _ := os.ReadFile(filepath.Join(outside, "rw")); string(b) != "rw\n" {
			t.Errorf("a command's read-write bind: the host file holds %q", b)
		}
		if r := execIn(t, spec, view(sh("cat "+outside+"/secret"))); !strings.Contains(r.stderr, "No such file or directory") {
			t.Errorf("another command's bind leaked into the view: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		// Without View: the host, as before.
		if r := execIn(t, spec, Command{Argv: []string{"cat", outside + "/secret"}}); r.Code != 0 {
			t.Errorf("host view: %v %q", r.ExitStatus, r.stderr)
		}
		// Capabilities: none rootless; a container's set as real root.
		// (Rootless the bounding set stays: an execve as the user's uid
		// cannot gain from it.)
		r = execIn(t, spec, view(sh("grep -E 'Cap(Eff|Bnd)' /proc/self/status; mknod /var/tmp/blk b 7 0")))
		want := "CapEff:\t0000000000000000"
		if RealRoot() {
			want = fmt.Sprintf("CapEff:\t%016x\nCapBnd:\t%016x", uint64(ContainerCaps), uint64(ContainerCaps))
		}
		if !strings.Contains(r.stdout, want) {
			t.Errorf("capabilities in the view: %q; want %q", r.stdout, want)
		}
		if r.Code == 0 || !strings.Contains(r.stderr, "Operation not permitted") {
			t.Errorf("mknod of a block device in the view: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
	})
}

// TestViewTTY: a pty from the view's devpts (OpenPTY) is the command's
// controlling terminal, named in the view.
func TestViewTTY(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		startKeeper(t, spec)
		master, slave, err := OpenPTY(spec.Dir)
		if err != nil {
			t.Fatalf("OpenPTY: %v", err)
		}
		defer master.Close()
		var out strings.Builder
		done := make(chan struct{})
		go func() {
			io.Copy(&out, master)
			close(done)
		}()
		st, err := Exec(context.Background(), spec.Dir, Command{Argv: []string{"sh", "-c", "tty; test -c /dev/tty && echo >/dev/tty via-ctty"}, Env: testEnv(), TTY: true, View: true}, slave, slave, slave)
		slave.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the pty did not close")
		}
		if err != nil || st.Code != 0 {
			t.Fatalf("Exec TTY in the view: %v, %v: %q", st, err, out.String())
		}
		if !strings.Contains(out.String(), "/dev/pts/") || !strings.Contains(out.String(), "via-ctty") {
			t.Errorf("tty in the view: %q; want /dev/pts/N and via-ctty", out.String())
		}
	})
}

// TestRunView: a one-shot run with View sees the assembled root with its
// binds, and not the host.
func TestRunView(t *testing.T) {
	both(t, func(t *testing.T) {
		outside := outsideDir(t)
		hidden := outsideDir(t)
		spec := newSpec(t, "")
		cmd := sh("cat hello " + outside + "/secret && ! ls " + hidden + " && ! ls /home && ! ls /proc/1/root/")
		cmd.View, cmd.Binds = true, []Bind{{Source: outside, Target: outside}}
		r, err := runIn(t, context.Background(), spec, cmd)
		if err != nil || r.Code != 0 || r.stdout != helloText+"secret\n" {
			t.Errorf("run in a view: %v, %v %q %q", err, r.ExitStatus, r.stdout, r.stderr)
		}
	})
}

// TestViewFD: the keeper is not dumpable and its descriptors (the host's
// namespaces) are out of reach of its commands, also without View.
func TestViewFD(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := newSpec(t, "")
		k := startKeeper(t, spec)
		// From the host, the keeper's root stays reachable (ws path).
		if _, err := os.ReadDir(k.Path()); err != nil {
			t.Errorf("Keeper.Path from the host: %v", err)
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/"+itoa(k.PID)+"/root/", &st); err != nil {
			t.Errorf("keeper's root from the host: %v", err)
		}
		c := sh("grep -c . /proc/1/environ")
		if RealRoot() {
			c.View = true // root without a view keeps CAP_SYS_PTRACE
		}
		if r := execIn(t, spec, c); r.Code == 0 || !strings.Contains(r.stderr, "Permission denied") {
			t.Errorf("keeper's environ from a command: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
	})
}
