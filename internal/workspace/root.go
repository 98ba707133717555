package workspace

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Image roots (docs/images.md, "Image roots"): a workspace or run whose /
// is a container image's layer stack instead of the host view. Two shapes:
//
//   - image-rooted: the workspace is the root. Its base is an image
//     commit (or a commit made on one), its layer stack is /, its upper
//     is the root's upper; diff and commit cover its project directory
//     (the image's working directory) or, with scope all, everything.
//   - a project on an environment (--root IMAGE --at PATH): the workspace
//     is a project branch mounted at PATH over the image's root, whose
//     own writes go to a second upper (the root upper) that is never
//     committed and is discarded by reset.
//
// Either way this is the overlay backend with a root: the record says so
// (Record.Root), the spec builder gives nsexec.Spec.Root, and commands get
// the image's environment instead of the caller's.

// Scopes of an image-rooted workspace's diff and commits.
const (
	ScopeProject = "project" // the project directory (the image's working directory)
	ScopeAll     = "all"     // the whole root
)

// defaultPath is PATH when an image's config sets none (Docker's and
// podman's default).
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Root is an image-rooted workspace's root, kept in its record.
type Root struct {
	// Image is the commit whose layer stack is / under a project mounted
	// at At (--root IMAGE --at PATH); "" when the workspace is its own
	// root (its mount base's stack is /).
	Image string `json:"image,omitempty"`
	At    string `json:"at,omitempty"`
	// Upper and Work are the root's own upper and work (with Image): the
	// environment's writes, beside the project's upper.
	Upper string `json:"upper,omitempty"`
	Work  string `json:"work,omitempty"`
	// Project is the directory inside the root that diff and commit of a
	// workspace that is its own root cover ("/": everything).
	Project string `json:"project,omitempty"`
	// Cwd, Env and User are what commands get: the image config's
	// WorkingDir, Env (with PATH and HOME) and User, with --cwd and --env.
	Cwd  string   `json:"cwd"`
	Env  []string `json:"env,omitempty"`
	User string   `json:"user,omitempty"`
	// Binds are host paths every command sees (ws create --ro/--rw).
	Binds []Bind `json:"binds,omitempty"`
	// Source names the image (its import source), for ws list and show.
	Source string `json:"source,omitempty"`
}

// OnEnv reports whether the workspace is a project on an environment.
func (r *Root) OnEnv() bool { return r != nil && r.Image != "" }

// ImageID is the environment's commit (OnEnv).
func (r *Root) ImageID() store.ID {
	id, _ := store.ParseID(r.Image)
	return id
}

// Target is where the workspace appears inside its root: the project's
// mount point, or the project directory.
func (r *Root) Target() string {
	if r.OnEnv() {
		return r.At
	}
	if r.Project != "" {
		return r.Project
	}
	return "/"
}

// scoped reports whether diff and commit cover less than the whole tree
// (a workspace that is its own root, with a project directory).
func (r *Root) scoped() bool {
	return r != nil && !r.OnEnv() && r.Project != "" && r.Project != "/"
}

// projectRel is the project directory relative to the root ("" for all).
func (r *Root) projectRel() string {
	if !r.scoped() {
		return ""
	}
	return strings.TrimPrefix(r.Project, "/")
}

// ImageConfig is what an image's config says about running it (the
// image package's Config, the part that applies to commands).
type ImageConfig struct {
	Env        []string
	WorkingDir string
	User       string
	Source     string
}

// RootOptions describe the root of a new image-rooted workspace or run.
type RootOptions struct {
	// Image is the environment commit under a project mounted at At
	// (--root IMAGE --at PATH); zero when the workspace is its own root.
	Image store.ID
	At    string
	// Config is the image's config (of Image, or of the workspace's base).
	Config ImageConfig
	// Env ("K=V") and Cwd override the config's; Cwd may be relative to
	// the working directory.
	Env []string
	Cwd string
	// Scope is ScopeProject (default) or ScopeAll.
	Scope string
	// RO and RW are host paths bound into the root for every command.
	RO, RW []string
}

// Reserved mount points of a root: a project mounted under one of them
// would be hidden by what the root mounts there.
var rootReserved = []string{"/proc", "/sys", "/dev", "/tmp", "/var/tmp"}

// cleanAbs checks that p is an absolute path inside a root and returns it
// cleaned.
func cleanAbs(what, p string) (string, error) {
	if !path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", Invalidf("%s %q: want an absolute path inside the image", what, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", Invalidf("%s %q: no .. please", what, p)
		}
	}
	return path.Clean(p), nil
}

// NewRoot decides the root of a new image-rooted workspace (or run) from
// opts: checks the paths, and computes what commands get — the config's
// Env, with PATH if it has none and HOME from the image's /etc/passwd
// (the tree of rootTree; "/root" for root when it has none), then
// opts.Env; the working directory; the project directory. Nothing is
// written.
func (m *Manager) NewRoot(ctx context.Context, rootTree store.ID, opts RootOptions) (*Root, error) {
	r := &Root{User: opts.Config.User, Source: opts.Config.Source}
	if !opts.Image.IsZero() {
		at, err := cleanAbs("--at", opts.At)
		if err != nil {
			return nil, err
		}
		if at == "/" {
			return nil, Invalidf("--at /: the project cannot be the image's /; name a directory (e.g. /testbed)")
		}
		for _, res := range rootReserved {
			if within(at, res) {
				return nil, Invalidf("--at %s: %s is mounted over by the root (its own %s); choose another directory", at, res, res)
			}
		}
		r.Image, r.At = opts.Image.String(), at
	} else if opts.At != "" {
		return nil, Invalidf("--at needs --root IMAGE (the project is mounted at --at over the image)")
	}
	base := r.At
	if base == "" {
		base = "/"
		if wd := opts.Config.WorkingDir; wd != "" {
			var err error
			if base, err = cleanAbs("the image's WorkingDir", wd); err != nil {
				return nil, err
			}
		}
	}
	r.Cwd = base
	if opts.Cwd != "" {
		c := opts.Cwd
		if !path.IsAbs(c) {
			c = path.Join(base, c)
		}
		var err error
		if r.Cwd, err = cleanAbs("--cwd", c); err != nil {
			return nil, err
		}
	}
	switch opts.Scope {
	case "", ScopeProject:
		if !r.OnEnv() {
			r.Project = r.Cwd
		}
	case ScopeAll:
		if r.OnEnv() {
			return nil, Invalidf("--scope all: a project on an environment (--root) records the project only; fork the image itself (--from IMAGE) to record the whole root")
		}
		r.Project = "/"
	default:
		return nil, Invalidf("--scope %q: want project or all", opts.Scope)
	}
	for _, kv := range opts.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, Invalidf("--env %q: want K=V", kv)
		}
	}
	env := append([]string(nil), opts.Config.Env...)
	if !hasEnv(env, "PATH") {
		env = append(env, defaultPath)
	}
	if !hasEnv(env, "HOME") && !hasEnv(opts.Env, "HOME") {
		env = append(env, "HOME="+m.imageHome(ctx, rootTree, opts.Config.User))
	}
	r.Env = mergeEnv(env, opts.Env)
	for _, set := range []struct {
		paths []string
		rw    bool
	}{{opts.RO, false}, {opts.RW, true}} {
		for _, p := range set.paths {
			b, err := hostBind(p, set.rw)
			if err != nil {
				return nil, err
			}
			r.Binds = append(r.Binds, b)
		}
	}
	return r, nil
}

// hostBind checks a host path given with --ro/--rw for a root: it must
// exist; it appears at the same path inside.
func hostBind(p string, rw bool) (Bind, error) {
	flag := "--ro"
	if rw {
		flag = "--rw"
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return Bind{}, err
	}
	if _, err := os.Stat(abs); err != nil {
		return Bind{}, Invalidf("%s %s: %v", flag, p, err)
	}
	return Bind{Source: abs, Target: abs, RW: rw}, nil
}

// imageHome is the home directory of user (an image config's User) in the
// image whose tree is tree, as podman sets HOME: the /etc/passwd entry's,
// "/root" for root without one, "/" otherwise.
func (m *Manager) imageHome(ctx context.Context, tree store.ID, user string) string {
	name, _, _ := strings.Cut(user, ":")
	if name == "" {
		name = "0"
	}
	fallback := "/"
	if name == "0" || name == "root" {
		fallback = "/root"
	}
	st, err := m.DB()
	if err != nil || tree.IsZero() {
		return fallback
	}
	e, err := snapshot.Lookup(ctx, st, tree, "etc/passwd")
	if err != nil || e.Type != store.TypeFile || e.Size > 4<<20 {
		return fallback
	}
	var buf bytes.Buffer
	if _, err := st.ReadContentTo(ctx, e.Content, &buf); err != nil {
		return fallback
	}
	if h := passwdHome(buf.Bytes(), name); h != "" {
		return h
	}
	return fallback
}

// passwdHome finds the home of user (a name or a uid) in /etc/passwd.
func passwdHome(passwd []byte, user string) string {
	_, numErr := strconv.ParseUint(user, 10, 32)
	sc := bufio.NewScanner(bytes.NewReader(passwd))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 7 {
			continue
		}
		if f[0] == user || numErr == nil && f[2] == user {
			if path.IsAbs(f[5]) {
				return f[5]
			}
			return ""
		}
	}
	return ""
}

// rootFile is what commands of an image-rooted workspace get by default,
// kept in its state directory (layout.RootConfig) so that exec into a
// live keeper needs no store: written when the workspace is made, never
// changed (the record holds the same).
type rootFile struct {
	Cwd string   `json:"cwd"`
	Env []string `json:"env"`
}

// writeRootFile writes rec's root file into dir (the state directory
// being made).
func writeRootFile(dir string, r *Root) error {
	b, err := json.Marshal(rootFile{Cwd: r.Cwd, Env: r.Env})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, layout.RootConfig), b, 0o600)
}

// readRootFile reads the root file of the workspace directory dir; false
// for a workspace on the host view.
func readRootFile(dir string) (*rootFile, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, layout.RootConfig))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var rf rootFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, false, fmt.Errorf("%s: %w", filepath.Join(dir, layout.RootConfig), err)
	}
	return &rf, true, nil
}

// IsRoot reports whether workspace name is image-rooted (from its state
// directory: no store needed).
func (m *Manager) IsRoot(name string) bool {
	_, ok, _ := readRootFile(m.Layout.Workspace(name))
	return ok
}

// prepareRoot lays out what a new image-rooted workspace keeps besides
// the overlay backend's upper and work, in its state directory being made
// in tmp: the root upper and work of a project on an environment (beside
// the project's upper) and the root file.
func prepareRoot(rec *Record, tmp string) error {
	r := rec.Root
	if r.OnEnv() {
		dir, tdir := rec.Dir, tmp
		if rec.Tmpfs {
			dir = filepath.Dir(rec.Upper)
			tdir = dir
		}
		r.Upper, r.Work = filepath.Join(dir, layout.RootUpper), filepath.Join(dir, layout.RootWork)
		if err := mkdirs(0o700, filepath.Join(tdir, layout.RootUpper), filepath.Join(tdir, layout.RootWork)); err != nil {
			return err
		}
	}
	return writeRootFile(tmp, r)
}

// relocateRoot derives the root upper's paths from the store's location.
func (r *Record) relocateRoot() {
	if !r.Root.OnEnv() || r.Tmpfs {
		return
	}
	r.Root.Upper = layout.Relocate(r.Dir, r.Root.Upper, layout.RootUpper)
	r.Root.Work = layout.Relocate(r.Dir, r.Root.Work, layout.RootWork)
}

// rootLayerOptions are the layer cache's options for an image's stack:
// as real root the image's owners (trusted flavour); rootless, the
// caller's (user flavour), or with subordinate ids the image's ids as
// the subordinate-id namespace holds them (a flavour of its own), so that
// a file of uid 1000 in the image is uid 1000 inside.
func (m *Manager) rootLayerOptions(subIDs bool) (snapshot.LayerOptions, error) {
	opts, err := m.layerOptions()
	if err != nil {
		return opts, err
	}
	if !subIDs || nsexec.RealRoot() {
		return opts, nil
	}
	maps, err := nsexec.RootIDMaps(true)
	if err != nil {
		return opts, err
	}
	opts.Chown = true
	opts.Owners = &snapshot.OwnerMap{Key: mapsKey(maps), Map: func(uid, gid uint32) (uint32, uint32) {
		return toHost(maps.UIDs, uid), toHost(maps.GIDs, gid)
	}}
	return opts, nil
}

// mapsKey names a pair of id maps (a layer flavour's directory).
func mapsKey(m *nsexec.IDMaps) string {
	h := sha256.New()
	for _, rs := range [][]nsexec.IDRange{m.UIDs, m.GIDs} {
		for _, r := range rs {
			fmt.Fprintf(h, "%d %d %d\n", r.Inner, r.Host, r.Size)
		}
		h.Write([]byte("-\n"))
	}
	return "ids" + hex.EncodeToString(h.Sum(nil))[:16]
}

// toHost maps an id of the root to this process's: its range's, or, for
// an id the maps lack, the one 0 maps to (the caller: what an unmapped
// owner shows as inside).
func toHost(rs []nsexec.IDRange, id uint32) uint32 {
	for _, r := range rs {
		if id >= r.Inner && id-r.Inner < r.Size {
			return r.Host + (id - r.Inner)
		}
	}
	return toHost0(rs)
}

func toHost0(rs []nsexec.IDRange) uint32 {
	for _, r := range rs {
		if r.Inner == 0 {
			return r.Host
		}
	}
	return uint32(os.Getuid())
}

// toInner maps an id of this process to the root's (unmapped: as is).
func toInner(rs []nsexec.IDRange, id uint32) uint32 {
	for _, r := range rs {
		if id >= r.Host && id-r.Host < r.Size {
			return r.Inner + (id - r.Host)
		}
	}
	return id
}

// RootOwners returns how the owners of an image root's upper on disk map
// to the image's ids (nil: the same), for recording them.
func RootOwners(subIDs bool) (func(uid, gid uint32) (uint32, uint32), error) {
	maps, err := nsexec.RootIDMaps(subIDs)
	if err != nil || maps == nil {
		return nil, err
	}
	return func(uid, gid uint32) (uint32, uint32) {
		return toInner(maps.UIDs, uid), toInner(maps.GIDs, gid)
	}, nil
}

// rootStack returns the layer stack of commit as an image root's lowers.
func (m *Manager) rootStack(ctx context.Context, commit store.ID, subIDs bool) ([]string, error) {
	st, err := m.DB()
	if err != nil {
		return nil, err
	}
	opts, err := m.rootLayerOptions(subIDs)
	if err != nil {
		return nil, err
	}
	return m.LayerCache().Stack(ctx, st, commit, opts)
}

// upperStack is the stack workspace rec's upper sits on, as its keeper
// mounts it: an image's (rootStack) when the workspace is its own root.
func (m *Manager) upperStack(ctx context.Context, rec *Record) ([]string, error) {
	if rec.Root != nil && !rec.Root.OnEnv() {
		return m.rootStack(ctx, rec.MountBaseID(), rec.SubIDs)
	}
	return m.LayerStack(ctx, rec.MountBaseID())
}

// populateRoot makes an image-rooted workspace's stacks ready.
func (m *Manager) populateRoot(ctx context.Context, rec *Record) error {
	if _, err := m.upperStack(ctx, rec); err != nil {
		return err
	}
	if rec.Root.OnEnv() {
		if _, err := m.rootStack(ctx, rec.Root.ImageID(), rec.SubIDs); err != nil {
			return err
		}
	}
	return nil
}

// readyUpper makes upper and work (a tmpfs workspace loses them at
// reboot) and gives an empty upper the top layer's root attributes: the
// merged root shows the upper root's, which would otherwise read as a
// change (mode 0700, a new mtime).
func readyUpper(upper, work string, lowers []string) error {
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if DirEmpty(upper) && len(lowers) > 0 {
		return CopyDirAttrs(lowers[0], upper)
	}
	return nil
}

// rootSpec builds the keeper spec of an image-rooted workspace: its root
// from the image's stack, no host view binds (the image has its own
// system), the workspace's binds into the root.
func (m *Manager) rootSpec(ctx context.Context, rec *Record) (nsexec.Spec, error) {
	feat, err := m.Features(ctx)
	if err != nil {
		return nsexec.Spec{}, err
	}
	lowers, err := m.upperStack(ctx, rec)
	if err != nil {
		return nsexec.Spec{}, err
	}
	if err := readyUpper(rec.Upper, rec.Work, lowers); err != nil {
		return nsexec.Spec{}, err
	}
	r := rec.Root
	spec := nsexec.Spec{
		Name: rec.Name, Dir: rec.Dir, Target: r.Target(), Features: feat,
		Volatile: rec.Tmpfs, SubIDs: rec.SubIDs,
		Root: &nsexec.Root{Lowers: lowers, Upper: rec.Upper, Work: rec.Work, HostNet: true, User: r.User, Binds: r.Binds},
	}
	if r.OnEnv() {
		rl, err := m.rootStack(ctx, r.ImageID(), rec.SubIDs)
		if err != nil {
			return nsexec.Spec{}, err
		}
		if err := readyUpper(r.Upper, r.Work, rl); err != nil {
			return nsexec.Spec{}, err
		}
		spec.Lowers, spec.Upper, spec.Work = lowers, rec.Upper, rec.Work
		spec.Root.Lowers, spec.Root.Upper, spec.Root.Work = rl, r.Upper, r.Work
	}
	return spec, nil
}

// rootCommand builds a command of an image root: the image's environment
// (rf.Env) with opts.Env on top — never the caller's —, started in rf.Cwd
// (a relative --cwd is relative to it), with --ro/--rw bound into the
// root. The mount namespace is the file fence there, so a sandbox mode
// adds Landlock's scoping and the network rules on top of a root that is
// all the command's (docs/images.md, "Sandbox modes in an image root"),
// and the seccomp deny list.
func (m *Manager) rootCommand(rf *rootFile, opts CommandOptions) (nsexec.Command, error) {
	if len(opts.Argv) == 0 {
		return nsexec.Command{}, fmt.Errorf("no command given")
	}
	cwd := rf.Cwd
	if opts.Cwd != "" {
		cwd = opts.Cwd
		if !path.IsAbs(cwd) {
			cwd = path.Join(rf.Cwd, cwd)
		}
	}
	env := mergeEnv(append([]string(nil), rf.Env...), opts.Env)
	if opts.TTY && !hasEnv(env, "TERM") {
		if t, ok := os.LookupEnv("TERM"); ok {
			env = append(env, "TERM="+t)
		}
	}
	cmd := nsexec.Command{Argv: opts.Argv, Env: env, Dir: path.Clean(cwd), TTY: opts.TTY}
	o := opts.Sandbox
	mode := o.Mode
	if mode == "" {
		mode = SandboxAgent
	}
	switch o.Net {
	case "", NetHost:
		cmd.NetNone = mode == SandboxStrict
	case NetNone:
		cmd.NetNone = true
	default:
		return nsexec.Command{}, Invalidf("--net %q: want host or none", o.Net)
	}
	if mode == SandboxStrict && o.Net == NetHost {
		return nsexec.Command{}, Invalidf("--sandbox strict implies --net none; --net host contradicts it")
	}
	for _, set := range []struct {
		paths []string
		rw    bool
	}{{o.RO, false}, {o.RW, true}} {
		for _, p := range set.paths {
			b, err := hostBind(p, set.rw)
			if err != nil {
				return nsexec.Command{}, err
			}
			cmd.Binds = append(cmd.Binds, b)
		}
	}
	// A command's binds take a namespace of its own (nsexec: View).
	cmd.View = len(cmd.Binds) > 0
	switch mode {
	case SandboxNone:
		if len(o.AllowConnect)+len(o.AllowBind) > 0 || o.RequireABI > 0 {
			return nsexec.Command{}, Invalidf("--allow-connect, --allow-bind and --sandbox-require-abi need a sandbox; --sandbox none has none")
		}
		return cmd, nil
	case SandboxAgent, SandboxStrict:
	default:
		return nsexec.Command{}, Invalidf("--sandbox %q: want agent, strict or none", mode)
	}
	cmd.View = true
	cmd.Policy = &sandbox.Request{
		Strict: mode == SandboxStrict, Target: "/", Tmp: "/tmp",
		ConnectTCP: o.AllowConnect, BindTCP: o.AllowBind, RequireABI: o.RequireABI,
	}
	warn := o.Warn
	if warn == nil {
		warn = func(string) {}
	}
	cmd.Warn = func(w string) { warn("sandbox: " + w) }
	return cmd, nil
}

// scopeChanges keeps the changes of an image-rooted workspace that lie in
// its project directory rel ("" keeps all): what its diff and commits
// record. The rest (a pip cache in /root, /var/log) stays in its upper,
// like a project-on-environment workspace's root upper.
func scopeChanges(cs []snapshot.UpperChange, rel string) []snapshot.UpperChange {
	if rel == "" {
		return cs
	}
	out := cs[:0:0]
	for _, c := range cs {
		if inScope(c.Path, rel) {
			out = append(out, c)
		}
	}
	return out
}

// inScope reports whether the upper path p lies in the project directory
// rel (both relative to the root).
func inScope(p, rel string) bool {
	return rel == "" || p == rel || strings.HasPrefix(p, rel+"/")
}

// readOptions are what reading rec's upper into a tree needs besides the
// upper: the stack it sits on, how its owners map, its scope.
type readOptions struct {
	lowers []string
	owners func(uid, gid uint32) (uint32, uint32)
	scope  string
}

func (m *Manager) readOptionsOf(ctx context.Context, rec *Record) (readOptions, error) {
	lowers, err := m.upperStack(ctx, rec)
	if err != nil {
		return readOptions{}, err
	}
	ro := readOptions{lowers: lowers}
	if rec.Root != nil && !rec.Root.OnEnv() {
		if ro.owners, err = RootOwners(rec.SubIDs); err != nil {
			return readOptions{}, err
		}
		ro.scope = rec.Root.projectRel()
	}
	return ro, nil
}

// uncommittedScope is Uncommitted of an image-rooted workspace with a
// project directory: only the entries in it count.
func uncommittedScope(rec *Record, idx *committedIndex, cur *upperState) (bool, int64) {
	rel := rec.Root.projectRel()
	var n int64
	dirty := false
	count := func(p string) {
		if !inScope(p, rel) {
			return
		}
		dirty = true
		if e, ok := cur.entries[p]; ok && e.Mode&0o170000 == 0o100000 {
			n += e.Size
		}
	}
	if idx == nil {
		for p := range cur.entries {
			count(p)
		}
	} else {
		for p := range idx.dirtySince(cur) {
			count(p)
		}
	}
	return dirty, n
}

// switchRoot makes a fresh root upper and work for a project on an
// environment being reset: the environment's writes are discarded with
// the project's changes (a rebase keeps them: it carries the changes).
func switchRoot(rec *Record, sw *Switch) error {
	if !rec.Root.OnEnv() {
		return nil
	}
	dir := filepath.Dir(rec.Root.Upper)
	nu, nw := layout.FreshRootUpper(dir, RandomHex(6))
	if err := mkdirs(0o700, nu, nw); err != nil {
		_ = RemoveAll(nu)
		return err
	}
	sw.rootUpper, sw.rootWork = nu, nw
	sw.oldRootUpper, sw.oldRootWork = rec.Root.Upper, rec.Root.Work
	return nil
}

// CheckRootSubIDs fails with ErrNeedSubIDNS when an image root that maps
// subordinate ids is being made outside their namespace: its layers are
// written with the image's ids as that namespace holds them, so the
// caller starts over from there (nsexec.EnterSubIDs) before anything is
// made.
func CheckRootSubIDs(subIDs bool) error {
	if subIDs && nsexec.NeedSubIDNS() {
		return fmt.Errorf("an image root with subordinate ids is prepared from their user namespace: %w", nsexec.ErrNeedSubIDNS)
	}
	return nil
}
