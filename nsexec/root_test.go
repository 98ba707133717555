package nsexec

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// The image-root tests run on a real image: the test image env (a Debian
// bookworm minbase root with python3, and a layer of test cases above;
// scripts/images.sh) imported into a store of the test's own and its
// layer stack materialized by snapshot's layer cache, as a workspace's
// would be. The package under test never opens the store: only the test
// does.

var (
	imageOnce   sync.Once
	imageLowers []string
	imageErr    error
	imageStore  string
)

// envLayers returns the layer stack of the env test image, in the flavour
// this process mounts (trusted and chowned as real root, user.* rootless),
// imported once per process.
func envLayers(t *testing.T) []string {
	t.Helper()
	imgs := testutil.Images(t)
	features(t)
	imageOnce.Do(func() {
		// One store and layer cache per uid and image build, kept for the
		// other processes of the run (each rootless test is one) and
		// removed by the first process at its end: an import that finds
		// the image there reads no layer.
		// Named by the run (the first process's pid: a rootless child's
		// parent), so that two runs never share or remove each other's.
		run := os.Getpid()
		if stage() == "rootless" {
			run = os.Getppid()
		}
		cacheDir := func(uid int) string {
			return filepath.Join(os.TempDir(), fmt.Sprintf("strata-nsexec-image-%d-%d", run, uid))
		}
		dir := cacheDir(os.Getuid())
		if stage() != "rootless" {
			uid, _ := testUID()
			cleanupDirs = append(cleanupDirs, dir, cacheDir(uid))
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			imageErr = err
			return
		}
		imageStore = filepath.Join(dir, "store")
		s, err := store.Open(imageStore, store.Options{})
		if err != nil {
			imageErr = err
			return
		}
		defer s.Close()
		ctx := context.Background()
		res, err := image.Import(ctx, s, "oci:"+filepath.Join(imgs, "oci")+":env", image.Options{Branch: "env"})
		if err != nil {
			imageErr = fmt.Errorf("import the env image: %w", err)
			return
		}
		flavour := snapshot.FlavourUser
		if RealRoot() {
			flavour = snapshot.FlavourTrusted
		}
		lc := snapshot.NewLayerCache(filepath.Join(dir, "layers"))
		imageLowers, imageErr = lc.Stack(ctx, s, res.Commit, snapshot.LayerOptions{Flavour: flavour, Chown: RealRoot()})
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageLowers
}

// rootSpec is a workspace whose root is the env image: its own upper and
// work, state directory, the host's resolv.conf and hosts.
func rootSpec(t *testing.T) Spec {
	t.Helper()
	lowers := envLayers(t)
	base := t.TempDir()
	for _, d := range []string{"upper", "work", "state"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { openTree(filepath.Join(base, "work")) })
	return Spec{
		Name:     "img-" + filepath.Base(base),
		Dir:      filepath.Join(base, "state"),
		Target:   "/",
		Features: features(t),
		Root: &Root{
			Lowers:  lowers,
			Upper:   filepath.Join(base, "upper"),
			Work:    filepath.Join(base, "work"),
			HostNet: true,
		},
	}
}

// rootEnv is what a harness gives an image's commands: the image's PATH.
func rootEnv() []string {
	return []string{"PATH=/opt/env/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C"}
}

// upperNames lists what an upper directory holds, relative paths.
func upperNames(t *testing.T, upper string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(upper, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == upper {
			return nil
		}
		rel, _ := filepath.Rel(upper, p)
		out = append(out, rel)
		return nil
	})
	return out
}

// TestImageRoot: a keeper with an image root. Its commands see the image
// as / (Debian's os-release, the image's python3), run as uid 0 inside
// with a container's capabilities, get a private /proc of the
// workspace, a minimal /dev, private /tmp, /var/tmp and /dev/shm, the
// host's resolv.conf and hosts read-only, and nothing else of the host
// (its /home, /run, /usr/local, the store, the test's files); what they
// write lands in the root's upper, and no mount point does.
func TestImageRoot(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := rootSpec(t)
		k := startKeeper(t, spec)
		run := func(script string) result {
			t.Helper()
			return execIn(t, spec, Command{Argv: []string{"sh", "-c", script}, Env: rootEnv()})
		}
		for _, tc := range []struct{ name, script, want string }{
			{"uid 0 inside", "id -u; id -g", "0\n0\n"},
			{"the image's python", "/usr/bin/python3 -c 'import sys, sqlite3; print(sys.version_info[:2] >= (3, 11), sys.prefix)'", "True /usr\n"},
			{"Debian's os-release", "grep ^PRETTY_NAME= /etc/os-release", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"},
			{"the image's own layers", "tool x; test ! -e /etc/issue.net && echo gone", "tool x\ngone\n"},
			{"starts at Target", "pwd", "/\n"},
			{"write /opt", "mkdir -p /opt/pkg && echo hi > /opt/pkg/new && cat /opt/pkg/new", "hi\n"},
			{"a private /proc", "test -r /proc/self/status && ls /proc | grep -c '^[0-9]' | awk '{print ($1 < 8)}'", "1\n"},
			{"/proc/sys read-only", "{ echo 1 > /proc/sys/kernel/ns_last_pid; } 2>&1 | grep -o 'Read-only file system'", "Read-only file system\n"},
			{"a minimal /dev", "echo x > /dev/null && head -c1 /dev/zero | wc -c && test -c /dev/full && test -c /dev/urandom && test -L /dev/ptmx && test -d /dev/pts && ls /dev | wc -l", "1\n13\n"},
			{"private /tmp, /var/tmp, /dev/shm", "echo t > /tmp/t && echo v > /var/tmp/v && echo s > /dev/shm/s && cat /tmp/t /var/tmp/v /dev/shm/s && ls -A /tmp", "t\nv\ns\nt\n"},
			{"/sys read-only", "ls /sys/devices/system/cpu >/dev/null && touch /sys/x 2>&1 | grep -o 'Read-only file system'", "Read-only file system\n"},
			{"a container's capabilities", "grep -E '^Cap(Eff|Bnd):' /proc/self/status", fmt.Sprintf("CapEff:\t%016x\nCapBnd:\t%016x\n", uint64(ContainerCaps), uint64(ContainerCaps))},
			{"no mknod of a device", "mknod /tmp/blk b 7 0 2>&1 | grep -o 'Operation not permitted'", "Operation not permitted\n"},
			{"no mount", "python3 -c \"import ctypes, os; l = ctypes.CDLL(None, use_errno=True); print(l.mount(b'none', b'/mnt', b'tmpfs', 0, None), os.strerror(ctypes.get_errno()))\"", "-1 Operation not permitted\n"},
		} {
			if r := run(tc.script); r.Code != 0 || r.stdout != tc.want {
				t.Errorf("%s: %s: %v %q %q; want %q", tc.name, tc.script, r.ExitStatus, r.stdout, r.stderr, tc.want)
			}
		}

		// The host's resolv.conf and hosts, read-only, not in the upper.
		for _, f := range viewFiles {
			want, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if r := run("cat " + f); r.Code != 0 || r.stdout != string(want) {
				t.Errorf("%s inside: %v %q %q; want the host's %q", f, r.ExitStatus, r.stdout, r.stderr, want)
			}
			// Rootless the host's file belongs to an unmapped owner:
			// permissions refuse before the read-only mount does.
			if r := run("echo x >> " + f); r.Code == 0 || !strings.Contains(r.stderr, "Read-only file system") && (RealRoot() || !strings.Contains(r.stderr, "Permission denied")) {
				t.Errorf("writing %s: %v %q", f, r.ExitStatus, r.stderr)
			}
			if b, _ := os.ReadFile(f); string(b) != string(want) {
				t.Fatalf("the host's %s changed", f)
			}
		}

		// Nothing of the host beyond that: its homes, /run, /usr/local,
		// the store, the test's own directory.
		var hidden []string
		for _, d := range []string{"/home", "/run", "/usr/local"} {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				p := filepath.Join(d, e.Name())
				if _, err := os.Stat(filepath.Join(k.Path(), p)); err == nil {
					continue // the image has one too (Debian's /run/lock)
				}
				hidden = append(hidden, p)
			}
		}
		hidden = append(hidden, imageStore, spec.Root.Upper, spec.Dir)
		for _, p := range hidden {
			if r := run("test -e '" + p + "' && echo visible"); r.stdout != "" {
				t.Errorf("host path %s is visible inside the image root", p)
			}
		}
		if r := run("ls /proc/1/root/ 2>&1; cat /proc/1/environ 2>&1"); strings.Count(r.stdout, "Permission denied") != 2 {
			t.Errorf("the keeper's root and environment from a command: %q", r.stdout)
		}

		// Writes land in the root's upper, mount points do not.
		got := upperNames(t, spec.Root.Upper)
		if strings.Join(got, " ") != "opt opt/pkg opt/pkg/new" {
			t.Errorf("the root's upper holds %q; want opt/pkg/new and its directories only", got)
		}
		if b, err := os.ReadFile(filepath.Join(spec.Root.Upper, "opt/pkg/new")); err != nil || string(b) != "hi\n" {
			t.Errorf("upper opt/pkg/new: %q, %v", b, err)
		}
		// Keeper.Path reaches the root from the host.
		if b, err := os.ReadFile(filepath.Join(k.Path(), "etc/os-release")); err != nil || !strings.Contains(string(b), "bookworm") {
			t.Errorf("Keeper.Path: os-release %q, %v", b, err)
		}
		// A sandboxed command (View) runs in the same root.
		if r := execIn(t, spec, Command{Argv: []string{"cat", "/opt/pkg/new"}, Env: rootEnv(), View: true}); r.Code != 0 || r.stdout != "hi\n" {
			t.Errorf("View command: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		// A command's own bind (read-write), in its namespace only; the
		// image has /mnt for it.
		outside := outsideDir(t)
		c := Command{Argv: []string{"sh", "-c", "cat /mnt/secret && echo w > /mnt/w"}, Env: rootEnv(), View: true, Binds: []Bind{{Source: outside, Target: "/mnt", RW: true}}}
		if r := execIn(t, spec, c); r.Code != 0 || r.stdout != "secret\n" {
			t.Errorf("a command's bind: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if b, err := os.ReadFile(filepath.Join(outside, "w")); err != nil || string(b) != "w\n" {
			t.Errorf("a command's read-write bind: %q, %v", b, err)
		}
		if r := run("ls -A /mnt"); r.stdout != "" {
			t.Errorf("another command's bind is in the root: %q", r.stdout)
		}
		c.Binds[0].Target = "/no/such/dir"
		if st, err := Exec(context.Background(), spec.Dir, c, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "the image has no such path") {
			t.Errorf("a command's bind at a path the image lacks: %v, %v; want an error", st, err)
		}
	})
}

// TestImageRootProject: a project on an environment (--root IMAGE --at
// PATH): the workspace's overlay at /testbed, which the image lacks,
// over the image root. Writes under /testbed go to the workspace's upper,
// writes elsewhere to the root's; the mount point is in neither.
func TestImageRootProject(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := rootSpec(t)
		proj := newSpec(t, "")
		spec.Lowers, spec.Upper, spec.Work = proj.Lowers, proj.Upper, proj.Work
		spec.Target = "/testbed"
		startKeeper(t, spec)
		r := execIn(t, spec, Command{Argv: []string{"sh", "-c", "pwd && cat hello && test ! -e gone && echo w > written && pip=/opt/site && mkdir -p $pip && echo env > $pip/mod.py && ls -A / | grep -c testbed"}, Env: rootEnv()})
		if r.Code != 0 || r.stdout != "/testbed\n"+helloText+"1\n" {
			t.Fatalf("project at /testbed: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		if got := strings.Join(upperNames(t, spec.Upper), " "); got != "written" {
			t.Errorf("the workspace's upper holds %q; want written", got)
		}
		if got := strings.Join(upperNames(t, spec.Root.Upper), " "); got != "opt opt/site opt/site/mod.py" {
			t.Errorf("the root's upper holds %q; want opt/site/mod.py", got)
		}
	})
}

// TestImageRootRun: a one-shot run with an image root and a bind given
// for it; the image's users other than root need subordinate ids
// rootless, and as real root a command runs as the image's user.
func TestImageRootRun(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := rootSpec(t)
		outside := outsideDir(t)
		spec.Root.Binds = []Bind{{Source: outside, Target: "/data/in"}}
		r, err := runIn(t, context.Background(), spec, Command{Argv: []string{"sh", "-c", "id -u; cat /data/in/secret; ls /home | wc -l"}, Env: rootEnv()})
		if err != nil || r.Code != 0 || r.stdout != "0\nsecret\n0\n" {
			t.Errorf("run: %v %v %q %q", err, r.ExitStatus, r.stdout, r.stderr)
		}
		if got := upperNames(t, spec.Root.Upper); len(got) != 0 {
			t.Errorf("the root's upper after a run that wrote nothing: %q (the bind's mount point?)", got)
		}
		spec.Root.User = "nobody"
		r, err = runIn(t, context.Background(), spec, Command{Argv: []string{"id"}, Env: rootEnv()})
		if RealRoot() {
			if err != nil || r.Code != 0 || r.stdout != "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\n" {
				t.Errorf("run as nobody: %v %v %q %q", err, r.ExitStatus, r.stdout, r.stderr)
			}
		} else if err == nil || !strings.Contains(err.Error(), "--subids") {
			t.Errorf("run as nobody rootless without subordinate ids: %v %v %q %q; want an error naming --subids", err, r.ExitStatus, r.stdout, r.stderr)
		}
		spec.Root.User = "nosuchuser"
		if _, err := runIn(t, context.Background(), spec, Command{Argv: []string{"id"}, Env: rootEnv()}); err == nil || !strings.Contains(err.Error(), "no such user") {
			t.Errorf("run as a user the image lacks: %v", err)
		}
	})
}

func TestParseUser(t *testing.T) {
	for _, tc := range []struct{ in, user, group string }{
		{"", "root", ""}, {"root", "root", ""}, {"1000", "1000", ""}, {"app:staff", "app", "staff"}, {"0:0", "0", "0"},
	} {
		u, g, err := parseUser(tc.in)
		if err != nil || u != tc.user || g != tc.group {
			t.Errorf("parseUser(%q) = %q %q %v", tc.in, u, g, err)
		}
	}
	for _, bad := range []string{":1", "a:b:c", "a b"} {
		if _, _, err := parseUser(bad); err == nil {
			t.Errorf("parseUser(%q) accepted", bad)
		}
	}
}

// TestZeroFirst: an image root's map from inside a subordinate-id
// namespace puts the caller at 0 and every other id from 1 up, once.
func TestZeroFirst(t *testing.T) {
	// mapAround(1001, 100000+65536) as EnterSubIDs makes it, read back
	// as this namespace's ids.
	outer, err := parseIDMap("      1001       1001          1\n         0     100000       1001\n      1002     101001      64535\n")
	if err != nil {
		t.Fatal(err)
	}
	got := zeroFirst(1001, outer)
	want := []IDRange{{0, 1001, 1}, {1, 0, 1001}, {1002, 1002, 64535}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("zeroFirst = %v; want %v", got, want)
	}
	seen := map[uint32]bool{}
	for _, r := range got {
		for i := uint32(0); i < r.Size; i++ {
			if seen[r.Host+i] {
				t.Fatalf("id %d mapped twice", r.Host+i)
			}
			seen[r.Host+i] = true
		}
	}
	if len(seen) != 65537 {
		t.Errorf("%d ids mapped; want 65537", len(seen))
	}
}

// entryTestRootSubIDs starts the keeper of the spec in the JSON file
// os.Args[1] from a subordinate-id namespace (startMapped, as
// EnterSubIDs would), runs os.Args[2] with sh in it, prints its output
// and stops the keeper.
const entryTestRootSubIDs = "test-root-subids"

func init() {
	Register(entryTestRootSubIDs, func() int {
		if p := os.Getenv(envInit); p != "" && p != "self" {
			initOverride = p
		}
		b, err := os.ReadFile(os.Args[1])
		var spec Spec
		if err == nil {
			err = json.Unmarshal(b, &spec)
		}
		if err == nil {
			_, err = StartKeeper(context.Background(), spec)
		}
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		defer StopKeeper(context.Background(), spec.Dir)
		var out strings.Builder
		w, done := pipeOutPlain(&out)
		st, err := Exec(context.Background(), spec.Dir, Command{Argv: []string{"sh", "-c", os.Args[2]}, Env: rootEnv()}, nil, w, w)
		done()
		fmt.Print(out.String())
		if err != nil || st.Code != 0 {
			fmt.Println("error:", st, err)
			return 1
		}
		return 0
	})
}

// pipeOutPlain is pipeOut without a testing.TB.
func pipeOutPlain(buf *strings.Builder) (*os.File, func()) {
	r, w, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	copied := make(chan struct{})
	go func() {
		b, _ := io.ReadAll(r)
		buf.Write(b)
		r.Close()
		close(copied)
	}()
	return w, func() { w.Close(); <-copied }
}

// TestImageRootSubIDs: rootless with subordinate ids (the keeper started
// from their namespace, as EnterSubIDs does for the CLI), the image's uid
// 0 is the caller and its other ids map to the caller's subordinate
// range: a file a command chowns to 5:6 inside belongs on the host to
// the ids the maps give, and a command runs as the image's user nobody.
func TestImageRootSubIDs(t *testing.T) {
	rootlessOnly(t, func(t *testing.T) {
		m, err := SubIDMaps()
		if err != nil {
			testutil.Skip(t, err.Error())
		}
		spec := rootSpec(t)
		spec.SubIDs = true
		run := func(script string) string {
			t.Helper()
			f := filepath.Join(t.TempDir(), "spec.json")
			b, _ := json.Marshal(spec)
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := Reexec(entryTestRootSubIDs, f, script)
			cmd.Env = os.Environ()
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := startMapped(cmd, m); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%s in the subordinate-id namespace: %v: %s", script, err, out.String())
			}
			return out.String()
		}
		if got := run("id -u; echo x > /opt/owned && chown 5:6 /opt/owned && stat -c '%u %g' /opt/owned"); got != "0\n5 6\n" {
			t.Errorf("chown inside: %q", got)
		}
		// Inner 5 is the outer namespace's 4th id after the caller's
		// (zeroFirst), which is a host id of the range (mapAround).
		hostID := func(maps []IDRange, own uint32, inner uint32) uint32 {
			var outer []IDRange
			for _, r := range maps {
				outer = append(outer, IDRange{Host: r.Inner, Size: r.Size})
			}
			through := func(rs []IDRange, id uint32) uint32 {
				for _, r := range rs {
					if id >= r.Inner && id-r.Inner < r.Size {
						return r.Host + id - r.Inner
					}
				}
				t.Fatalf("id %d is not mapped by %v", id, rs)
				return 0
			}
			return through(maps, through(zeroFirst(own, outer), inner))
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(spec.Root.Upper, "opt/owned"), &st); err != nil {
			t.Fatal(err)
		}
		wantUID, wantGID := hostID(m.UIDs, uint32(os.Getuid()), 5), hostID(m.GIDs, uint32(os.Getgid()), 6)
		if st.Uid != wantUID || st.Gid != wantGID || wantUID == uint32(os.Getuid()) {
			t.Errorf("the upper's file belongs to %d:%d on the host; want %d:%d", st.Uid, st.Gid, wantUID, wantGID)
		}
		spec.Root.User = "nobody"
		if got := run("id -u; id -g"); got != "65534\n65534\n" {
			t.Errorf("as the image's user nobody: %q", got)
		}
	})
}

// TestImageRootSandbox: sandboxed commands in an image root, with the
// policy an image root's agent mode is (docs/images.md: the whole root
// read-write for Landlock, scoped signals and abstract sockets; the agent
// seccomp filter): they install into the root, seccomp still denies new
// namespaces, root keeps ContainerCaps under no_new_privs; NetNone gives
// a private network namespace with only lo, inside the image root.
func TestImageRootSandbox(t *testing.T) {
	both(t, func(t *testing.T) {
		spec := rootSpec(t)
		startKeeper(t, spec)
		_, progs := agentSandbox(t, "/")
		abi, _ := landlock.ABI()
		rs, err := landlock.Plan(landlock.Policy{RW: []string{"/"}, ScopeSignals: true, ScopeAbstractUnix: true}, abi)
		if err != nil {
			t.Fatal(err)
		}
		boxed := func(script string) Command {
			return Command{Argv: []string{"sh", "-c", script}, Env: rootEnv(), View: true, Landlock: rs, Seccomp: progs}
		}
		for _, tc := range []struct{ name, script, want string }{
			{"install into the root", "mkdir -p /opt/venv/lib && echo 'X = 1' > /opt/venv/lib/m.py && mv /opt/venv/lib/m.py /usr/lib/python3/dist-packages/ && cd / && python3 -c 'import m; print(m.X)'", "1\n"},
			{"no new namespaces", "unshare -U true 2>&1 | grep -o 'Operation not permitted'", "Operation not permitted\n"},
			{"status", "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '", fmt.Sprintf("CapEff: %016x\nNoNewPrivs: 1\nSeccomp: 2\n", uint64(ContainerCaps))},
		} {
			if r := execIn(t, spec, boxed(tc.script)); r.Code != 0 || r.stdout != tc.want {
				t.Errorf("%s: %v %q %q; want %q", tc.name, r.ExitStatus, r.stdout, r.stderr, tc.want)
			}
		}
		c := boxed("python3 -c 'import socket; print(socket.if_nameindex())'")
		c.NetNone = true
		if r := execIn(t, spec, c); r.Code != 0 || r.stdout != "[(1, 'lo')]\n" {
			t.Errorf("NetNone in an image root: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
	})
}

// TestImageRootCosts measures an image root against the host view, side
// by side (interleaved, so that load hits both alike): Run of true,
// StartKeeper + StopKeeper, Exec of true into a live keeper. A
// measurement, not an assertion: it runs only with STRATA_NSEXEC_COSTS=1.
//
//	STRATA_NSEXEC_COSTS=1 STRATA_IMAGES=... go test -run TestImageRootCosts -v ./nsexec/
func TestImageRootCosts(t *testing.T) {
	if os.Getenv("STRATA_NSEXEC_COSTS") != "1" {
		t.Skip("a measurement: set STRATA_NSEXEC_COSTS=1")
	}
	both(t, func(t *testing.T) {
		n := 50
		if v, err := strconv.Atoi(os.Getenv("STRATA_NSEXEC_COSTS_N")); err == nil && v > 0 {
			n = v
		}
		ctx := context.Background()
		host := newSpec(t, "")
		img := rootSpec(t)
		pair := func(name string, n int, fn func(s Spec, i int)) {
			t.Helper()
			fn(host, -1)
			fn(img, -1)
			var dh, di []time.Duration
			for i := range n {
				start := time.Now()
				fn(host, i)
				dh = append(dh, time.Since(start))
				start = time.Now()
				fn(img, i)
				di = append(di, time.Since(start))
			}
			slices.Sort(dh)
			slices.Sort(di)
			t.Logf("%-34s host view p50 %6.2f ms  image root p50 %6.2f ms  (%.2fx, n=%d)", name, ms(dh[n/2]), ms(di[n/2]), ms(di[n/2])/ms(dh[n/2]), n)
		}
		ok := func(st ExitStatus, err error) {
			if err != nil || st.Code != 0 {
				t.Fatalf("%v, %v", st, err)
			}
		}
		pair("Run true", n, func(s Spec, _ int) {
			ok(Run(ctx, s, Command{Argv: []string{"true"}, Env: rootEnv()}, nil, nil, nil))
		})
		pair("StartKeeper + StopKeeper", min(n, 30), func(s Spec, _ int) {
			if _, err := StartKeeper(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := StopKeeper(ctx, s.Dir); err != nil {
				t.Fatal(err)
			}
		})
		startKeeper(t, host)
		startKeeper(t, img)
		pair("Exec true into a live keeper", n, func(s Spec, _ int) {
			ok(Exec(ctx, s.Dir, Command{Argv: []string{"true"}, Env: rootEnv()}, nil, nil, nil))
		})
	})
}

// TestRootCodec: a configuration with an image root survives the wire
// (each field of wireRoot, the overlay's too), and every truncation of
// it is refused.
func TestRootCodec(t *testing.T) {
	cfg := &childConfig{Version: protoVersion, Name: "ws", Dir: "/s", Target: "/testbed",
		Mount:  overlayfs.Config{Lowers: []string{"/p1"}, Upper: "/pu", Work: "/pw", UserXattr: true},
		Method: overlayfs.Fsconfig, UserNS: true,
		Root: &wireRoot{Mount: overlayfs.Config{Lowers: []string{"/i1", "/i2"}, Upper: "/u", Work: "/w", UserXattr: true, RedirectDir: true, Volatile: true},
			HostNet: true, Binds: []Bind{{Source: "/h", Target: "/in", RW: true}}, User: "app:staff"}}
	var e encoder
	e.config(cfg)
	d := decoder{b: e.b}
	back, err := d.config()
	if err != nil || !reflect.DeepEqual(back, cfg) {
		t.Errorf("config: %+v, %v;\nwant %+v", back, err, cfg)
	}
	for cut := range len(e.b) {
		d := decoder{b: e.b[:cut]}
		if _, err := d.config(); err == nil {
			t.Fatalf("config cut at %d of %d decoded", cut, len(e.b))
		}
	}
	if n := reflect.TypeOf(wireRoot{}).NumField(); n != 4 {
		t.Errorf("wireRoot has %d fields; the codec (root.go) carries 4: encode the new one", n)
	}
	spec := Spec{Root: &Root{Lowers: []string{"/i"}, Upper: "/u", Work: "/w", User: "1000"}, Volatile: true}
	spec.Features.Euid = 1000
	if r := newWireRoot(&spec); !r.Mount.UserXattr || !r.Mount.Volatile || r.User != "1000" || len(r.Mount.Lowers) != 1 {
		t.Errorf("newWireRoot: %+v", r)
	}
}

// TestImageRootHiddenMountPoints: where an image hides a mount point the
// init layer provides — /etc/resolv.conf a dangling symlink into /run,
// a bind target under a whited-out /srv — the mount point is made in the
// root (its upper) and the mounts still happen; keeper.log says so.
func TestImageRootHiddenMountPoints(t *testing.T) {
	both(t, func(t *testing.T) {
		if _, err := os.Stat("/etc/resolv.conf"); err != nil {
			t.Skip("the host has no /etc/resolv.conf")
		}
		spec := rootSpec(t)
		top := filepath.Join(t.TempDir(), "top")
		if err := os.MkdirAll(filepath.Join(top, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(top, "etc/resolv.conf")); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(top, "srv"), unix.S_IFCHR, 0); err != nil {
			t.Fatalf("whiteout: %v", err)
		}
		// The layer's etc is the image's: the same mode.
		os.Chmod(filepath.Join(top, "etc"), 0o755)
		spec.Root.Lowers = append([]string{top}, spec.Root.Lowers...)
		outside := outsideDir(t)
		spec.Root.Binds = []Bind{{Source: outside, Target: "/srv/data"}}
		startKeeper(t, spec)
		want, _ := os.ReadFile("/etc/resolv.conf")
		r := execIn(t, spec, Command{Argv: []string{"sh", "-c", "cat /etc/resolv.conf && readlink /etc/resolv.conf && cat /srv/data/secret"}, Env: rootEnv()})
		if r.Code != 0 || r.stdout != string(want)+"../run/systemd/resolve/stub-resolv.conf\nsecret\n" {
			t.Errorf("hidden mount points: %v %q %q", r.ExitStatus, r.stdout, r.stderr)
		}
		got := strings.Join(upperNames(t, spec.Root.Upper), " ")
		if got != "run run/systemd run/systemd/resolve run/systemd/resolve/stub-resolv.conf srv srv/data" {
			t.Errorf("the root's upper holds %q; want the two mount points the image hid", got)
		}
		log, _ := os.ReadFile(filepath.Join(spec.Dir, "keeper.log"))
		if strings.Count(string(log), "the image hides the mount point") != 2 {
			t.Errorf("keeper.log does not warn twice:\n%s", log)
		}
	})
}

// TestImageRootFallback: keepers and runs of an image root by
// re-executing the (cgo) running binary instead of strata-init.
func TestImageRootFallback(t *testing.T) {
	both(t, func(t *testing.T) {
		old := initOverride
		initOverride = Self
		t.Cleanup(func() { initOverride = old })
		spec := rootSpec(t)
		startKeeper(t, spec)
		want := fmt.Sprintf("0\nCapEff:\t%016x\n", uint64(ContainerCaps))
		if r := execIn(t, spec, Command{Argv: []string{"sh", "-c", "id -u; grep CapEff: /proc/self/status"}, Env: rootEnv()}); r.stdout != want {
			t.Errorf("Exec: %v %q %q; want %q", r.ExitStatus, r.stdout, r.stderr, want)
		}
		if r, err := runIn(t, context.Background(), spec, Command{Argv: []string{"sh", "-c", "grep -c ^VERSION_CODENAME=bookworm /etc/os-release; exit 9"}, Env: rootEnv()}); err != nil || r.Code != 9 || r.stdout != "1\n" {
			t.Errorf("Run: %v, %v %q %q", r.ExitStatus, err, r.stdout, r.stderr)
		}
	})
}
