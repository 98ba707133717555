package snapshot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// The ApplyUpper conformance suite: for each kind of change, a real
// overlay is mounted over the layer stack of a base commit (two layers:
// the delta of the base from its parent, and the parent's full layer),
// the change is made in the merged view, the overlay is unmounted,
// overlayfs.Changes reads the upper directory, ApplyUpper turns it into a
// tree, and the tree materialized must equal the merged view (mounted
// again) byte for byte and in metadata. One child process, in new
// namespaces, runs every case.

// confJobEnv names the JSON job of the namespace child.
const confJobEnv = "STRATA_TEST_APPLYUPPER_JOB"

type confJob struct {
	Store   string
	Lowers  []string
	Base    store.ID
	Stats   store.CommitStats
	Flavour string
	Root    bool
	Scratch string
	Xattrs  bool
}

const confT0 = int64(1_600_000_000_123_456_789)

var confT1 = time.Unix(1_650_000_000, 987_654_321)

// confBase builds the base commit: a parent commit, then the base with
// some deletions and an addition, so that the stack has a delta layer
// with whiteouts over a full layer.
func confBase(t *testing.T, s *store.Store, src string, xattrs bool) (commit store.ID, res *snapshot.ImportResult) {
	t.Helper()
	f := func(p, data string) snapshottest.Entry {
		return snapshottest.Entry{Path: p, Kind: snapshottest.File, Data: []byte(data), MtimeNs: confT0}
	}
	d := func(p string, mode uint32) snapshottest.Entry {
		return snapshottest.Entry{Path: p, Kind: snapshottest.Dir, Mode: mode, MtimeNs: confT0}
	}
	big := bytes.Repeat([]byte("a line of a large text file, long enough to be chunked\n"), 4000)
	es := []snapshottest.Entry{
		f("file", "hello\n"),
		d("dir", 0), f("dir/a", "a\n"), f("dir/b", "b\n"), f("dir/k", "kept\n"), d("dir/sub", 0), f("dir/sub/c", "c\n"),
		d("empty", 0),
		{Path: "link", Kind: snapshottest.Symlink, Target: "file", MtimeNs: confT0},
		f("hl1", "hl\n"), {Path: "hl2", Kind: snapshottest.Hardlink, Target: "hl1"},
		d("grp", 0), f("grp/a", "group\n"),
		{Path: "grp/b", Kind: snapshottest.Hardlink, Target: "grp/a"},
		{Path: "grp/c", Kind: snapshottest.Hardlink, Target: "grp/a"},
		f("del\nme", "nl\n"), f("\xff\xfebad", "bad name\n"),
		d("ro", 0o555), {Path: "ro/inside", Kind: snapshottest.File, Data: []byte("ro\n"), Mode: 0o444, MtimeNs: confT0},
		{Path: "big", Kind: snapshottest.File, Data: big, MtimeNs: confT0},
		{Path: "fifo0", Kind: snapshottest.FIFO, MtimeNs: confT0},
		f("gone", "deleted by the base\n"), d("olddir", 0), f("olddir/x", "x\n"),
		d("deep", 0), d("deep/1", 0), d("deep/1/2", 0), d("deep/1/2/3", 0), f("deep/1/2/3/leaf", "leaf\n"),
	}
	if xattrs {
		es = append(es, snapshottest.Entry{Path: "attrs", Kind: snapshottest.File, Data: []byte("x\n"), MtimeNs: confT0,
			Xattrs: map[string][]byte{"user.keep": []byte("1"), "user.gone": []byte("2")}})
	}
	snapshottest.Build(t, src, es)
	parent, _ := importWithParents(t, s, src)
	must(t, os.Remove(filepath.Join(src, "gone")))
	must(t, os.RemoveAll(filepath.Join(src, "olddir")))
	must(t, os.WriteFile(filepath.Join(src, "added-in-base"), []byte("new in the base\n"), 0o644))
	must(t, os.Chtimes(filepath.Join(src, "added-in-base"), time.Unix(0, confT0), time.Unix(0, confT0)))
	return importWithParents(t, s, src, parent)
}

// importWithParents imports dir and commits it with parents.
func importWithParents(t testing.TB, s *store.Store, dir string, parents ...store.ID) (store.ID, *snapshot.ImportResult) {
	t.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "import "+dir)
	must(t, err)
	defer w.Abort()
	res, err := snapshot.Import(ctx, s, w, dir, snapshot.ImportOptions{})
	must(t, err)
	var c store.ID
	must(t, w.Finish(func(tx *store.Tx) error {
		c, err = tx.PutCommit(&store.Commit{Tree: res.Tree, Parents: parents, TimeNs: time.Now().UnixNano(), Stats: res.Stats})
		return err
	}))
	return c, res
}

// confCase is one change made in the merged view m.
type confCase struct {
	name  string
	only  string // "root": real root only (redirect_dir, chown)
	op    func(t *testing.T, m string)
	check func(t *testing.T, base store.ID, res *snapshot.ApplyResult)
	// ignore leaves paths out of the comparison (a socket, which a tree
	// does not record).
	ignore []string
}

func confCases() []confCase {
	write := func(t *testing.T, p, s string) { must(t, os.WriteFile(p, []byte(s), 0o644)) }
	appendTo := func(t *testing.T, p, s string) {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.WriteString(s)
		must(t, err)
		must(t, f.Close())
	}
	readNone := func(t *testing.T, _ store.ID, res *snapshot.ApplyResult) {
		if res.FilesRead != 0 {
			t.Errorf("read %d files; ContentEqual said equal", res.FilesRead)
		}
	}
	same := func(t *testing.T, base store.ID, res *snapshot.ApplyResult) {
		if res.Tree != base || res.FilesRead != 0 {
			t.Errorf("tree %s (base %s), %d files read: want the base, unread", res.Tree.Short(), base.Short(), res.FilesRead)
		}
	}
	return []confCase{
		{name: "add modify delete files", op: func(t *testing.T, m string) {
			write(t, m+"/dir/new", "new\n")
			appendTo(t, m+"/dir/a", "more\n")
			must(t, os.Remove(m+"/dir/b"))
			write(t, m+"/added", "added\n")
		}},
		{name: "delete a dir tree", op: func(t *testing.T, m string) { must(t, os.RemoveAll(m+"/dir")) }},
		{name: "file to dir", op: func(t *testing.T, m string) {
			must(t, os.Remove(m+"/file"))
			must(t, os.Mkdir(m+"/file", 0o750))
			write(t, m+"/file/x", "x\n")
		}},
		{name: "dir to file", op: func(t *testing.T, m string) {
			must(t, os.RemoveAll(m+"/dir"))
			write(t, m+"/dir", "now a file\n")
		}},
		{name: "file to symlink", op: func(t *testing.T, m string) {
			must(t, os.Remove(m+"/file"))
			must(t, os.Symlink("/etc/passwd", m+"/file"))
		}},
		{name: "symlink retarget", op: func(t *testing.T, m string) {
			must(t, os.Remove(m+"/link"))
			must(t, os.Symlink("dir/sub", m+"/link"))
		}},
		{name: "opaque dir", op: func(t *testing.T, m string) {
			must(t, os.RemoveAll(m+"/dir"))
			must(t, os.Mkdir(m+"/dir", 0o755))
			write(t, m+"/dir/new", "")
		}},
		{name: "chmod only", check: readNone, op: func(t *testing.T, m string) {
			must(t, os.Chmod(m+"/file", 0o600))
			must(t, os.Chmod(m+"/dir", 0o700))
			must(t, os.Chmod(m+"/dir/b", 0o4755))
		}},
		{name: "chown only", only: "root", check: readNone, op: func(t *testing.T, m string) {
			must(t, os.Lchown(m+"/file", 1234, 5678))
			must(t, os.Lchown(m+"/link", 4321, 8765))
			must(t, os.Lchown(m+"/dir", 1000, 1000))
		}},
		{name: "touch only", check: readNone, op: func(t *testing.T, m string) {
			must(t, os.Chtimes(m+"/file", confT1, confT1))
			must(t, os.Chtimes(m+"/big", confT1, confT1))
			must(t, os.Chtimes(m+"/dir/sub", confT1, confT1))
		}},
		{name: "xattrs set and removed", op: func(t *testing.T, m string) {
			if _, err := os.Lstat(m + "/attrs"); err != nil {
				testutil.Skip(t, "no user xattrs on this file system")
			}
			must(t, unix.Lsetxattr(m+"/attrs", "user.new", []byte("3"), 0))
			must(t, unix.Lremovexattr(m+"/attrs", "user.gone"))
			must(t, unix.Lsetxattr(m+"/dir/a", "user.k", []byte("v\x00binary"), 0))
			must(t, unix.Lsetxattr(m+"/dir", "user.d", nil, 0))
		}},
		{name: "copied up unchanged", check: same, op: func(t *testing.T, m string) {
			f, err := os.OpenFile(m+"/file", os.O_RDWR, 0)
			must(t, err)
			must(t, f.Close())
			must(t, os.Chmod(m+"/dir/a", 0o600))
			must(t, os.Chmod(m+"/dir/a", 0o644))
			must(t, os.WriteFile(m+"/big", mustRead(t, m+"/big"), 0o644))
			must(t, os.Chtimes(m+"/big", time.Unix(0, confT0), time.Unix(0, confT0)))
		}},
		{name: "new hardlinks", op: func(t *testing.T, m string) {
			write(t, m+"/n1", "linked\n")
			must(t, os.Link(m+"/n1", m+"/n2"))
			must(t, os.Link(m+"/n1", m+"/dir/n0"))
		}},
		{name: "hardlink to a lower file", op: func(t *testing.T, m string) {
			must(t, os.Link(m+"/file", m+"/file2"))
		}},
		{
			// hl1 is copied up with the metadata and link count it had
			// beneath (2): Changes does not report it, only x.
			name: "hardlink to a member of a lower group", op: func(t *testing.T, m string) {
				must(t, os.Link(m+"/hl1", m+"/x"))
			},
		},
		{name: "modify one member of a lower group", op: func(t *testing.T, m string) {
			appendTo(t, m+"/grp/a", "changed\n")
		}},
		{name: "delete the key member of a lower group", op: func(t *testing.T, m string) {
			must(t, os.Remove(m+"/grp/a"))
			must(t, os.Remove(m+"/hl2"))
		}},
		{name: "empty dirs", op: func(t *testing.T, m string) {
			must(t, os.Mkdir(m+"/newempty", 0o711))
			must(t, os.Remove(m+"/empty"))
		}},
		{name: "delete then re-create", op: func(t *testing.T, m string) {
			must(t, os.Remove(m+"/file"))
			write(t, m+"/file", "hello\n")
			must(t, os.RemoveAll(m+"/dir/sub"))
			must(t, os.Mkdir(m+"/dir/sub", 0o755))
		}},
		{name: "newline and invalid UTF-8 names", op: func(t *testing.T, m string) {
			write(t, m+"/new\nline", "x")
			must(t, os.Mkdir(m+"/\xff\xfe dir", 0o755))
			write(t, m+"/\xff\xfe dir/\x80", "")
			must(t, os.Remove(m+"/del\nme"))
			appendTo(t, m+"/\xff\xfebad", "more")
		}},
		{name: "fifo and socket", ignore: []string{"sock"}, op: func(t *testing.T, m string) {
			must(t, unix.Mkfifo(m+"/fifo", 0o640))
			must(t, os.Remove(m+"/fifo0"))
			l, err := net.Listen("unix", m+"/sock")
			must(t, err)
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			must(t, l.Close())
		}},
		{name: "device nodes", only: "root", op: func(t *testing.T, m string) {
			must(t, unix.Mknod(m+"/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
			must(t, unix.Mknod(m+"/loop", unix.S_IFBLK|0o660, int(unix.Mkdev(7, 200))))
			must(t, os.Remove(m+"/file"))
			must(t, unix.Mknod(m+"/file", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5))))
		}},
		{name: "change inside a read-only dir", op: func(t *testing.T, m string) {
			must(t, os.Chmod(m+"/ro", 0o755))
			must(t, os.Chmod(m+"/ro/inside", 0o644))
			write(t, m+"/ro/inside", "changed\n")
			must(t, os.Chmod(m+"/ro/inside", 0o444))
			must(t, os.Chmod(m+"/ro", 0o555))
		}},
		{name: "large file", op: func(t *testing.T, m string) {
			b := mustRead(t, m+"/big")
			copy(b[100_000:], "an edit in the middle\n")
			must(t, os.WriteFile(m+"/big", b, 0o644))
		}},
		{name: "deep change and base layer entries", op: func(t *testing.T, m string) {
			write(t, m+"/deep/1/2/3/leaf", "changed leaf\n")
			appendTo(t, m+"/added-in-base", "more\n")
			write(t, m+"/gone", "back\n")
			must(t, os.Mkdir(m+"/olddir", 0o755))
		}},
		{name: "rename a file", op: func(t *testing.T, m string) {
			must(t, os.Rename(m+"/dir/a", m+"/dir/a2"))
			must(t, os.Rename(m+"/file", m+"/dir/sub/file"))
		}},
		{name: "mv a lower dir", op: func(t *testing.T, m string) {
			if out, err := exec.Command("mv", m+"/dir", m+"/dir2").CombinedOutput(); err != nil {
				t.Fatalf("mv: %v: %s", err, out)
			}
		}},
		{name: "rename a lower dir (redirect)", only: "root", op: func(t *testing.T, m string) {
			must(t, os.Rename(m+"/dir", m+"/dir2"))
		}},
		{name: "rename a lower dir and change inside", only: "root", op: func(t *testing.T, m string) {
			must(t, os.Rename(m+"/dir", m+"/dir2"))
			appendTo(t, m+"/dir2/a", "more\n")
			must(t, os.Remove(m+"/dir2/b"))
			must(t, os.RemoveAll(m+"/dir2/sub"))
			must(t, os.Mkdir(m+"/dir2/sub", 0o755))
			write(t, m+"/dir2/sub/new", "n\n")
		}},
		{name: "move a lower dir into a new dir and a group's dir", only: "root", op: func(t *testing.T, m string) {
			must(t, os.Mkdir(m+"/n", 0o755))
			must(t, os.Rename(m+"/dir", m+"/n/d"))
			must(t, os.Rename(m+"/grp", m+"/agrp"))
		}},
		{name: "rename a lower dir over another", only: "root", op: func(t *testing.T, m string) {
			must(t, os.RemoveAll(m+"/empty"))
			must(t, os.Rename(m+"/dir", m+"/empty"))
		}},
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return b
}

// TestApplyUpperConformanceRootless: the rootless path, in a new user and
// mount namespace with the caller mapped to root, user.overlay.* markers.
func TestApplyUpperConformanceRootless(t *testing.T) {
	runConformance(t, "rootless")
}

// TestApplyUpperConformanceUnprivileged: the rootless path as an
// unprivileged user (uid 1000 when the tests run as root), mapped to
// itself in the user namespace with the namespace's capabilities kept as
// ambient ones, as nsexec runs workspaces.
func TestApplyUpperConformanceUnprivileged(t *testing.T) {
	if os.Getenv(confJobEnv) == "" && os.Geteuid() == 0 {
		asUID1000(t)
		return
	}
	runConformance(t, "uidmap")
}

// TestApplyUpperConformanceRoot: real root, trusted.overlay.* markers,
// redirect_dir=on (renamed lower directories), owners applied.
func TestApplyUpperConformanceRoot(t *testing.T) {
	if os.Getenv(confJobEnv) == "" {
		testutil.AsRoot(t)
	}
	runConformance(t, "root")
}

func runConformance(t *testing.T, mode string) {
	if spec := os.Getenv(confJobEnv); spec != "" {
		confChild(t, spec)
		return
	}
	root := mode == "root"
	tmp := t.TempDir()
	snapshottest.Writable(t, tmp)
	s, err := store.Open(filepath.Join(tmp, "store"), store.Options{})
	must(t, err)
	defer s.Close()
	src := filepath.Join(tmp, "src")
	xattrs := snapshottest.Probe(tmp).Xattrs
	commit, res := confBase(t, s, src, xattrs)
	opts := snapshot.LayerOptions{Flavour: snapshot.FlavourUser}
	if root {
		opts = snapshot.LayerOptions{Flavour: snapshot.FlavourTrusted, Chown: true}
	}
	cache := snapshot.NewLayerCache(filepath.Join(tmp, "layers"))
	lowers, err := cache.Stack(context.Background(), s, commit, opts)
	must(t, err)
	if len(lowers) != 2 {
		t.Fatalf("stack of %d layers, want 2", len(lowers))
	}
	job := confJob{Store: filepath.Join(tmp, "store"), Lowers: lowers, Base: res.Tree, Stats: res.Stats,
		Flavour: opts.Flavour, Root: root, Scratch: filepath.Join(tmp, "scratch"), Xattrs: xattrs}
	must(t, os.Mkdir(job.Scratch, 0o755))
	b, err := json.Marshal(job)
	must(t, err)
	spec := filepath.Join(tmp, "job.json")
	must(t, os.WriteFile(spec, b, 0o644))
	s.Close()

	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(self, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), confJobEnv+"="+spec)
	cmd.Dir = "/"
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	switch mode {
	case "rootless":
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	case "uidmap":
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		attr.AmbientCaps = allCaps()
	}
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		testutil.Skip(t, "cannot create the namespaces to mount overlay: "+err.Error())
	}
	switch {
	case err != nil:
		t.Fatalf("namespace child: %v\n%s", err, out)
	case bytes.Contains(out, []byte("--- SKIP: "+t.Name()+" ")):
		testutil.Skip(t, "namespace child skipped:\n"+string(out))
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name())):
		t.Fatalf("namespace child ran no test:\n%s", out)
	case testing.Verbose():
		t.Logf("namespace child:\n%s", out)
	}
	reportChildSkips(t, out)
}

// reportChildSkips passes on the skips of a re-executed child's subtests:
// the parent passed, but not every case ran, and a skip in the child must
// not read as a pass (under STRATA_TEST_NO_SKIP=1 the child fails anyway).
func reportChildSkips(t *testing.T, out []byte) {
	t.Helper()
	var skipped []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "--- SKIP: ") {
			skipped = append(skipped, strings.TrimSpace(line))
		}
	}
	if len(skipped) > 0 {
		testutil.Skip(t, "the child skipped cases:\n"+strings.Join(skipped, "\n")+"\n"+string(out))
	}
}

// allCaps lists every capability this kernel knows (as nsexec's
// SetUserNS keeps them ambient).
func allCaps() []uintptr {
	last := unix.CAP_LAST_CAP
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			last = n
		}
	}
	caps := make([]uintptr, 0, last+1)
	for c := 0; c <= last; c++ {
		caps = append(caps, uintptr(c))
	}
	return caps
}

// asUID1000 runs the current test again as uid/gid 1000 (no passwd entry
// needed) through setpriv, from a copy of the test binary that uid can
// execute.
func asUID1000(t *testing.T) {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "setpriv(1) is missing: cannot drop to uid 1000")
		return
	}
	self, err := os.Executable()
	must(t, err)
	tmp, err := os.MkdirTemp("", "snapshot-uid1000-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	must(t, os.Chmod(tmp, 0o777))
	bin := filepath.Join(tmp, "snapshot.test")
	data, err := os.ReadFile(self)
	must(t, err)
	must(t, os.WriteFile(bin, data, 0o755))
	cmd := exec.Command(setpriv, "--reuid=1000", "--regid=1000", "--clear-groups", "--",
		bin, "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "HOME="+tmp)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid 1000: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("--- SKIP: "+t.Name()+" ")) {
		testutil.Skip(t, "skipped as uid 1000:\n"+string(out))
	}
	if testing.Verbose() {
		t.Logf("as uid 1000:\n%s", out)
	}
	reportChildSkips(t, out)
}

// confChild runs every case in the namespaces it was started in.
func confChild(t *testing.T, spec string) {
	b, err := os.ReadFile(spec)
	must(t, err)
	var job confJob
	must(t, json.Unmarshal(b, &job))
	must(t, unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
	feat, err := overlayfs.Probe(job.Scratch)
	must(t, err)
	if !feat.Overlay {
		testutil.Skip(t, fmt.Sprintf("overlay not mountable here: %v", feat.Errors))
	}
	if job.Root && !feat.RedirectDir {
		t.Fatalf("real root without redirect_dir: %v", feat.Errors)
	}
	s, err := store.Open(job.Store, store.Options{})
	must(t, err)
	defer s.Close()
	var rootSt unix.Stat_t
	must(t, unix.Stat(job.Lowers[0], &rootSt))
	t.Logf("euid %d, flavour %s, %s, lowers %d", os.Geteuid(), job.Flavour, feat.Method(), len(job.Lowers))
	for i, c := range confCases() {
		if c.only == "root" && !job.Root {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			confRun(t, s, job, feat, &rootSt, filepath.Join(job.Scratch, fmt.Sprintf("c%02d", i)), c)
		})
	}
}

func confRun(t *testing.T, s *store.Store, job confJob, feat overlayfs.Features, rootSt *unix.Stat_t, dir string, c confCase) {
	ctx := context.Background()
	upper, work, mnt, mat := dir+"/upper", dir+"/work", dir+"/m", dir+"/mat"
	for _, d := range []string{upper, work, mnt} {
		must(t, os.MkdirAll(d, 0o755))
	}
	// The upper root is the merged root: the lower root's attributes.
	must(t, os.Chmod(upper, os.FileMode(rootSt.Mode&0o777)))
	must(t, unix.UtimesNano(upper, []unix.Timespec{rootSt.Mtim, rootSt.Mtim}))
	cfg := overlayfs.DefaultConfig(job.Lowers, upper, work, feat)
	if job.Root != cfg.RedirectDir {
		t.Fatalf("redirect_dir %v as root %v", cfg.RedirectDir, job.Root)
	}
	must(t, overlayfs.Mount(mnt, cfg, feat))
	mounted := true
	defer func() {
		if mounted {
			overlayfs.Unmount(mnt, true)
		}
	}()
	c.op(t, mnt)
	must(t, overlayfs.Unmount(mnt, false))
	mounted = false

	changes, err := overlayfs.Changes(upper, job.Lowers, cfg.Flavour())
	must(t, err)
	ucs := toUpperChanges(changes)
	w, err := s.NewWriter(ctx, "commit "+c.name)
	must(t, err)
	defer w.Abort()
	var warned []string
	res, err := snapshot.ApplyUpper(ctx, s, w, job.Base, ucs, snapshot.ApplyOptions{
		StatCacheRoot: upper, BaseStats: &job.Stats,
		Warn: func(p, msg string) { warned = append(warned, p+": "+msg) },
	})
	if err != nil {
		t.Fatalf("ApplyUpper: %v\nchanges: %s", err, describe(changes))
	}
	must(t, w.Finish(func(tx *store.Tx) error {
		_, err := tx.PutCommit(&store.Commit{Tree: res.Tree, TimeNs: time.Now().UnixNano(), Stats: res.Stats})
		return err
	}))
	for _, msg := range warned {
		if !strings.HasPrefix(msg, "sock: ") {
			t.Errorf("unexpected warning: %s", msg)
		}
	}
	if c.check != nil {
		c.check(t, job.Base, res)
	}
	// Stats counted from the base's and the change must be the tree's.
	var want store.CommitStats
	must(t, snapshot.Walk(ctx, s, res.Tree, func(_ string, e *store.TreeEntry) error {
		switch e.Type {
		case store.TypeFile:
			want.Files++
			want.Bytes += e.Size
		case store.TypeDir:
			want.Dirs++
		default:
			want.Other++
		}
		return nil
	}))
	if res.Stats != want {
		t.Errorf("stats %+v, the tree has %+v", res.Stats, want)
	}

	must(t, snapshot.Materialize(ctx, s, res.Tree, mat, snapshot.MaterializeOptions{Chown: job.Root}))
	// The merged view again, to compare with.
	must(t, overlayfs.Mount(mnt, cfg, feat))
	defer overlayfs.Unmount(mnt, true)
	var opts []snapshottest.Option
	if len(c.ignore) > 0 {
		ignore := c.ignore
		opts = append(opts, snapshottest.Ignore(func(rel string) bool {
			for _, p := range ignore {
				if rel == p {
					return true
				}
			}
			return false
		}))
	}
	diffs, err := snapshottest.Differences(mnt, mat, opts...)
	must(t, err)
	for _, d := range diffs {
		t.Errorf("materialized commit differs from the merged view: %s", d)
	}
	if len(diffs) > 0 {
		t.Logf("changes: %s", describe(changes))
	}
	must(t, overlayfs.Unmount(mnt, false))
}

// toUpperChanges converts what overlayfs reports into ApplyUpper's input,
// as the root package does.
func toUpperChanges(cs []overlayfs.Change) []snapshot.UpperChange {
	out := make([]snapshot.UpperChange, 0, len(cs))
	for _, c := range cs {
		u := snapshot.UpperChange{Path: c.Path, Opaque: c.Opaque, RedirectFrom: c.RedirectFrom, UpperPath: c.UpperPath}
		switch c.Kind {
		case overlayfs.Added:
			u.Kind = snapshot.UpperAdded
		case overlayfs.Modified:
			u.Kind = snapshot.UpperModified
			if c.Stat.Mode.IsRegular() {
				u.ContentEqual = c.ContentEqual
			}
		case overlayfs.Deleted:
			u.Kind = snapshot.UpperDeleted
		case overlayfs.Replaced:
			u.Kind = snapshot.UpperReplaced
		}
		out = append(out, u)
	}
	return out
}

func describe(cs []overlayfs.Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n\t%q %v", c.Path, c.Kind)
		if c.Kind == overlayfs.Modified {
			fmt.Fprintf(&b, " diff=%v", c.Diff)
		}
		if c.Opaque {
			b.WriteString(" opaque")
		}
		if c.RedirectFrom != "" {
			fmt.Fprintf(&b, " redirect=%q", c.RedirectFrom)
		}
		if c.Kind != overlayfs.Deleted {
			fmt.Fprintf(&b, " %v nlink=%d", c.Stat.Mode.Type(), c.Stat.Nlink)
		}
	}
	return b.String()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
