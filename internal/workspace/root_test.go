package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// TestNewRoot: what a new image-rooted workspace's commands get, decided
// from the image config and the flags — PATH when the config has none,
// HOME from the image's /etc/passwd for its user, --env over the config,
// the working directory (relative --cwd from it), the project directory
// that diff and commit cover — and the flags refused before anything is
// made.
func TestNewRoot(t *testing.T) {
	m := testManager(t)
	img := t.TempDir()
	write(t, filepath.Join(img, "etc/passwd"), "root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/home/app:/bin/sh\nnohome:x:1001:1001::relative:/bin/sh\n")
	_, c := commitDir(t, m, img)
	ctx := context.Background()
	id := store.ID{1}
	for _, tc := range []struct {
		name    string
		opts    RootOptions
		want    Root
		wantErr string
	}{
		{name: "instance image", opts: RootOptions{Config: ImageConfig{Env: []string{"PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8"}, WorkingDir: "/testbed"}},
			want: Root{Cwd: "/testbed", Project: "/testbed", Env: []string{"PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8", "HOME=/root"}}},
		{name: "no PATH, no WorkingDir", opts: RootOptions{},
			want: Root{Cwd: "/", Project: "/", Env: []string{defaultPath, "HOME=/root"}}},
		{name: "user by name", opts: RootOptions{Config: ImageConfig{User: "app"}},
			want: Root{Cwd: "/", Project: "/", User: "app", Env: []string{defaultPath, "HOME=/home/app"}}},
		{name: "user by uid:gid", opts: RootOptions{Config: ImageConfig{User: "1000:1000"}},
			want: Root{Cwd: "/", Project: "/", User: "1000:1000", Env: []string{defaultPath, "HOME=/home/app"}}},
		{name: "user without a usable home", opts: RootOptions{Config: ImageConfig{User: "nohome"}},
			want: Root{Cwd: "/", Project: "/", User: "nohome", Env: []string{defaultPath, "HOME=/"}}},
		{name: "--env over the config, HOME given", opts: RootOptions{Config: ImageConfig{Env: []string{"LANG=C", "PATH=/bin"}}, Env: []string{"LANG=de_DE.UTF-8", "HOME=/work"}},
			want: Root{Cwd: "/", Project: "/", Env: []string{"LANG=de_DE.UTF-8", "PATH=/bin", "HOME=/work"}}},
		{name: "relative --cwd", opts: RootOptions{Config: ImageConfig{WorkingDir: "/testbed/"}, Cwd: "src/../pkg"},
			want: Root{Cwd: "/testbed/pkg", Project: "/testbed/pkg", Env: []string{defaultPath, "HOME=/root"}}},
		{name: "--scope all", opts: RootOptions{Config: ImageConfig{WorkingDir: "/testbed"}, Scope: ScopeAll},
			want: Root{Cwd: "/testbed", Project: "/", Env: []string{defaultPath, "HOME=/root"}}},
		{name: "a project on an environment", opts: RootOptions{Image: id, At: "/testbed/", Config: ImageConfig{WorkingDir: "/srv"}},
			want: Root{Image: id.String(), At: "/testbed", Cwd: "/testbed", Env: []string{defaultPath, "HOME=/root"}}},
		{name: "--at without --root", opts: RootOptions{At: "/testbed"}, wantErr: "--at needs --root"},
		{name: "--at /", opts: RootOptions{Image: id, At: "/"}, wantErr: "cannot be the image's /"},
		{name: "--at relative", opts: RootOptions{Image: id, At: "testbed"}, wantErr: "absolute"},
		{name: "--at ..", opts: RootOptions{Image: id, At: "/a/../b"}, wantErr: "no .."},
		{name: "--at under /tmp", opts: RootOptions{Image: id, At: "/tmp/p"}, wantErr: "mounted over by the root"},
		{name: "--scope all on an environment", opts: RootOptions{Image: id, At: "/p", Scope: ScopeAll}, wantErr: "records the project only"},
		{name: "bad scope", opts: RootOptions{Scope: "everything"}, wantErr: "want project or all"},
		{name: "bad --env", opts: RootOptions{Env: []string{"NOEQUALS"}}, wantErr: "want K=V"},
		{name: "missing --ro", opts: RootOptions{RO: []string{"/nonexistent/strata-test"}}, wantErr: "--ro /nonexistent/strata-test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := m.NewRoot(ctx, c.Tree, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("err %v; want one saying %q (invalid argument)", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Image != tc.want.Image || r.At != tc.want.At || r.Cwd != tc.want.Cwd || r.Project != tc.want.Project || r.User != tc.want.User || !slices.Equal(r.Env, tc.want.Env) {
				t.Errorf("root %+v\nwant %+v", *r, tc.want)
			}
		})
	}
	// --ro and --rw: host paths, at the same path inside.
	dir := t.TempDir()
	r, err := m.NewRoot(ctx, c.Tree, RootOptions{RO: []string{dir}, RW: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Bind{{Source: dir, Target: dir}, {Source: dir, Target: dir, RW: true}}; !slices.Equal(r.Binds, want) {
		t.Errorf("binds %v; want %v", r.Binds, want)
	}
}

// TestRootTargetScope: where an image-rooted workspace appears (ws path,
// the keeper's target) and which of its upper's changes its diff and
// commits record.
func TestRootTargetScope(t *testing.T) {
	own := &Root{Project: "/testbed", Cwd: "/testbed"}
	all := &Root{Project: "/", Cwd: "/testbed"}
	env := &Root{Image: store.ID{1}.String(), At: "/testbed", Cwd: "/testbed"}
	if own.Target() != "/testbed" || all.Target() != "/" || env.Target() != "/testbed" {
		t.Errorf("targets %q %q %q", own.Target(), all.Target(), env.Target())
	}
	if !own.scoped() || all.scoped() || env.scoped() || (*Root)(nil).scoped() {
		t.Errorf("scoped: own %v all %v env %v", own.scoped(), all.scoped(), env.scoped())
	}
	cs := []snapshot.UpperChange{{Path: "root/.cache"}, {Path: "testbed"}, {Path: "testbed/a.py"}, {Path: "testbed2/x"}, {Path: "tmp"}}
	var got []string
	for _, c := range scopeChanges(cs, own.projectRel()) {
		got = append(got, c.Path)
	}
	if want := []string{"testbed", "testbed/a.py"}; !slices.Equal(got, want) {
		t.Errorf("in scope %v; want %v", got, want)
	}
	if n := len(scopeChanges(cs, all.projectRel())); n != len(cs) {
		t.Errorf("scope all kept %d of %d", n, len(cs))
	}
}

// TestRootIDMaps: an image root's ids to this process's and back, as
// layers are written (toHost) and uppers read (toInner): the maps
// nsexec's nested namespace uses (0 the caller, the namespace's other
// ids from 1 up).
func TestRootIDMaps(t *testing.T) {
	// A subordinate-id namespace of uid 1000 with 65536 ids: the nested
	// map lays 0..999 on 1..1000 and 1001.. on 1001...
	uids := []nsexec.IDRange{{Inner: 0, Host: 1000, Size: 1}, {Inner: 1, Host: 0, Size: 1000}, {Inner: 1001, Host: 1001, Size: 64535}}
	for _, tc := range []struct{ inner, host uint32 }{{0, 1000}, {1, 0}, {1000, 999}, {1001, 1001}, {65535, 65535}} {
		if h := toHost(uids, tc.inner); h != tc.host {
			t.Errorf("toHost(%d) = %d; want %d", tc.inner, h, tc.host)
		}
		if i := toInner(uids, tc.host); i != tc.inner {
			t.Errorf("toInner(%d) = %d; want %d", tc.host, i, tc.inner)
		}
	}
	// An id the map lacks: written as the caller (root inside), read as
	// itself.
	if h := toHost(uids, 70000); h != 1000 {
		t.Errorf("toHost(unmapped) = %d; want the caller", h)
	}
	if i := toInner(uids, 70000); i != 70000 {
		t.Errorf("toInner(unmapped) = %d", i)
	}
	a := &nsexec.IDMaps{UIDs: uids, GIDs: uids}
	b := &nsexec.IDMaps{UIDs: uids[:1], GIDs: uids[:1]}
	if ka, kb := mapsKey(a), mapsKey(b); ka == kb || !strings.HasPrefix(ka, "ids") || ka != mapsKey(a) {
		t.Errorf("keys %q %q", ka, kb)
	}
}

// TestRootFile: an image-rooted workspace's state directory holds what
// its commands get (read by exec without the store); a host-view
// workspace has none.
func TestRootFile(t *testing.T) {
	m := testManager(t)
	dir := t.TempDir()
	if _, ok, err := readRootFile(dir); ok || err != nil {
		t.Fatalf("no root file: %v %v", ok, err)
	}
	r := &Root{Cwd: "/testbed", Env: []string{"PATH=/bin", "HOME=/root"}}
	if err := writeRootFile(dir, r); err != nil {
		t.Fatal(err)
	}
	rf, ok, err := readRootFile(dir)
	if err != nil || !ok || rf.Cwd != "/testbed" || !slices.Equal(rf.Env, r.Env) {
		t.Fatalf("root file %+v %v %v", rf, ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, layout.RootConfig), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readRootFile(dir); err == nil {
		t.Error("a garbled root file was read")
	}
	_ = m
}

// TestRootCommand: a command of an image root gets the image's
// environment, never the caller's; starts in the working directory
// (--cwd relative to it); its --ro/--rw binds; a sandbox policy over the
// whole root.
func TestRootCommand(t *testing.T) {
	m := testManager(t)
	t.Setenv("STRATA_HOST_ONLY", "1")
	t.Setenv("TERM", "xterm-test")
	rf := &rootFile{Cwd: "/testbed", Env: []string{"PATH=/usr/bin", "HOME=/root"}}
	dir := t.TempDir()
	cmd, err := m.rootCommand(rf, CommandOptions{Argv: []string{"true"}, Env: []string{"HOME=/tmp/h", "X=1"}, Cwd: "pkg", TTY: true,
		Sandbox: SandboxOptions{RO: []string{dir}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/usr/bin", "HOME=/tmp/h", "X=1", "TERM=xterm-test"}; !slices.Equal(cmd.Env, want) {
		t.Errorf("env %v; want %v", cmd.Env, want)
	}
	if cmd.Dir != "/testbed/pkg" || !cmd.View || cmd.Policy == nil || cmd.Policy.Target != "/" || cmd.Policy.Strict || cmd.NetNone {
		t.Errorf("command %+v policy %+v", cmd, cmd.Policy)
	}
	if want := []Bind{{Source: dir, Target: dir}}; !slices.Equal(cmd.Binds, want) {
		t.Errorf("binds %v", cmd.Binds)
	}
	// --sandbox none: no policy; a bind still takes a namespace of its own.
	cmd, err = m.rootCommand(rf, CommandOptions{Argv: []string{"true"}, Cwd: "/abs", Sandbox: SandboxOptions{Mode: SandboxNone, RW: []string{dir}}})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Policy != nil || !cmd.View || cmd.Dir != "/abs" || len(cmd.Binds) != 1 || !cmd.Binds[0].RW || hasEnv(cmd.Env, "TERM") {
		t.Errorf("--sandbox none: %+v", cmd)
	}
	cmd, err = m.rootCommand(rf, CommandOptions{Argv: []string{"true"}, Sandbox: SandboxOptions{Mode: SandboxNone}})
	if err != nil || cmd.View || cmd.Dir != "/testbed" {
		t.Errorf("--sandbox none without binds: %+v %v", cmd, err)
	}
	cmd, err = m.rootCommand(rf, CommandOptions{Argv: []string{"true"}, Sandbox: SandboxOptions{Mode: SandboxStrict}})
	if err != nil || !cmd.NetNone || !cmd.Policy.Strict {
		t.Errorf("strict: %+v %v", cmd, err)
	}
	for _, o := range []SandboxOptions{{Net: "bogus"}, {Mode: "bogus"}, {Mode: SandboxStrict, Net: NetHost}, {Mode: SandboxNone, AllowConnect: []uint16{80}}, {RO: []string{"/nonexistent/x"}}} {
		if _, err := m.rootCommand(rf, CommandOptions{Argv: []string{"true"}, Sandbox: o}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: err %v; want invalid argument", o, err)
		}
	}
}

// TestRootRecord: a record with a root round-trips through the registry
// row, its root upper relocated with the store; a record written before
// roots existed has none.
func TestRootRecord(t *testing.T) {
	l := layout.New("/new/home")
	rec := &Record{Name: "p", Dir: "/old/home/workspaces/p", Upper: "/old/home/workspaces/p/upper", Work: "/old/home/workspaces/p/work",
		Root: &Root{Image: store.ID{7}.String(), At: "/testbed", Upper: "/old/home/workspaces/p/upper.root.abc", Work: "/old/home/workspaces/p/work.root.abc", Cwd: "/testbed", Env: []string{"A=1"}}}
	row, err := rec.Row()
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromRow(l, row)
	if err != nil {
		t.Fatal(err)
	}
	if got.Root == nil || got.Root.Upper != "/new/home/workspaces/p/upper.root.abc" || got.Root.Work != "/new/home/workspaces/p/work.root.abc" ||
		got.Root.ImageID() != (store.ID{7}) || !got.Root.OnEnv() || got.Root.Env[0] != "A=1" {
		t.Errorf("root %+v", got.Root)
	}
	var extra map[string]any
	if err := json.Unmarshal(row.Extra, &extra); err != nil {
		t.Fatal(err)
	}
	if _, ok := extra["root"]; !ok {
		t.Errorf("extra %s has no root", row.Extra)
	}
	old := &store.Workspace{Name: "o", Extra: []byte(`{"upper":"/h/workspaces/o/upper","work":"/h/workspaces/o/work"}`)}
	if r, err := FromRow(l, old); err != nil || r.Root != nil {
		t.Errorf("legacy record: root %+v, %v", r.Root, err)
	}
}

// TestRootSwitch: a reset of a project on an environment makes a fresh
// root upper beside the old one, recorded by Apply, the old removed by
// Done; Discard removes the fresh one.
func TestRootSwitch(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, layout.RootUpper)
	if err := os.MkdirAll(filepath.Join(old, "opt"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := &Record{Root: &Root{Image: store.ID{1}.String(), At: "/p", Upper: old, Work: filepath.Join(dir, layout.RootWork)}}
	for _, keep := range []bool{false, true} {
		sw := &Switch{}
		if err := switchRoot(rec, sw); err != nil {
			t.Fatal(err)
		}
		if sw.rootUpper == old || !strings.HasPrefix(filepath.Base(sw.rootUpper), layout.RootUpper+".") || !DirEmpty(sw.rootUpper) {
			t.Fatalf("fresh root upper %q", sw.rootUpper)
		}
		if !keep {
			sw.Discard()
			if _, err := os.Stat(sw.rootUpper); err == nil {
				t.Error("Discard left the fresh root upper")
			}
			continue
		}
		cur := *rec
		r := *rec.Root
		cur.Root = &r
		sw.Apply(&cur, store.ID{2})
		sw.Done()
		if cur.Root.Upper != sw.rootUpper {
			t.Errorf("applied root upper %q", cur.Root.Upper)
		}
		if _, err := os.Stat(old); err == nil {
			t.Error("Done left the old root upper")
		}
	}
	if !layout.IsUpperOrWork(filepath.Base(old)) {
		t.Error("a root upper is not swept as an upper")
	}
}

// TestRemoveStaleRoot: gc's sweep of uppers no record names keeps a
// project-on-environment workspace's root upper and work, and removes
// the root upper a reset replaced.
func TestRemoveStaleRoot(t *testing.T) {
	dir := t.TempDir()
	l := layout.New(filepath.Join(dir, "store")).WithShm(filepath.Join(dir, "shm"))
	m := &Manager{Layout: l}
	a := l.Workspace("a")
	mk := func(name string) string {
		p := filepath.Join(a, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rec := Record{Name: "a", Dir: a, Upper: mk("upper"), Work: mk("work"),
		Root: &Root{Image: store.ID{1}.String(), At: "/p", Upper: mk("upper.root.new"), Work: mk("work.root.new")}}
	oldU, oldW := mk("upper.root"), mk("work.root")
	got := m.removeStale([]Record{rec}, time.Now().Add(StaleAfter+time.Minute))
	slices.Sort(got)
	if want := []string{oldU, oldW}; !slices.Equal(got, want) {
		t.Errorf("removed %q; want %q", got, want)
	}
	for _, p := range []string{rec.Root.Upper, rec.Root.Work, rec.Upper, rec.Work} {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
}
