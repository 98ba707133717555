package strata

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Layout of the store directory that belongs to workspaces.
const (
	workspacesDir = "workspaces"
	layersDir     = "layers"
	featuresFile  = "features.json"
	// wsBranchPrefix names the branch a workspace gets by default.
	wsBranchPrefix = "ws/"
)

// ErrNotRunning: the workspace has no live keeper.
var ErrNotRunning = nsexec.ErrNotRunning

// WorkspaceOptions tune CreateWorkspace.
type WorkspaceOptions struct {
	// From is the ref to fork (default main). With an existing Branch,
	// the workspace starts at that branch's head and From must be empty.
	From string
	// Branch binds the workspace to this branch; default ws/NAME, created.
	Branch string
	// Tmpfs keeps upper and work on a tmpfs (/dev/shm): fast, and lost at
	// reboot.
	Tmpfs bool
	// SubIDs maps the user's subordinate ids (/etc/subuid, /etc/subgid)
	// in the workspace besides its own: commands may chown files to them
	// and become them (nsexec.Spec.SubIDs). Rootless, starting it and
	// reading its changes then need their user namespace: the caller
	// runs nsexec.EnterSubIDs first, as the strata CLI does.
	SubIDs bool
}

// Workspace describes a workspace.
type Workspace struct {
	Name      string   `json:"name"`
	Branch    string   `json:"branch"`
	Base      store.ID `json:"base"`
	Dir       string   `json:"dir"`
	Upper     string   `json:"upper"`
	Tmpfs     bool     `json:"tmpfs"`
	SubIDs    bool     `json:"subids,omitempty"`
	Source    string   `json:"source,omitempty"` // where the commit was imported from
	State     string   `json:"state"`            // running or stopped
	PID       int      `json:"pid,omitempty"`    // the keeper, when running
	Path      string   `json:"path,omitempty"`   // host path of the merged view, when running
	Changes   int64    `json:"changes_bytes"`    // bytes in the upper directory
	CreatedNs int64    `json:"created_ns"`
}

// wsExtra is what the registry keeps beyond store.Workspace's fields.
type wsExtra struct {
	Upper   string `json:"upper"`
	Work    string `json:"work"`
	Tmpfs   bool   `json:"tmpfs,omitempty"`
	SubIDs  bool   `json:"subids,omitempty"`
	Source  string `json:"source,omitempty"`
	Created bool   `json:"created_branch,omitempty"` // the branch was made for this workspace
	Fork    string `json:"fork,omitempty"`           // the commit it was forked from
	// MountBase is the commit whose layer stack the upper sits on. It
	// stays put while the upper holds anything, even when commits move
	// Base: the upper's whiteouts, opaque dirs and redirects are relative
	// to this stack (docs/workspaces.md, "Commits").
	MountBase string `json:"mount_base,omitempty"`
	// FromBranch is the branch the workspace was forked from, which
	// promote merges into by default.
	FromBranch string `json:"from_branch,omitempty"`
}

// mountBase is the commit whose stack a workspace's upper sits on.
func (x wsExtra) mountBase(w *store.Workspace) store.ID {
	if id, err := store.ParseID(x.MountBase); err == nil {
		return id
	}
	return w.Base
}

// ValidateWorkspaceName checks a workspace name: 1-64 letters, digits, '.',
// '_' or '-', not starting with a punctuation character.
func ValidateWorkspaceName(name string) error {
	ok := len(name) >= 1 && len(name) <= 64 && isAlnum(name[0])
	for i := 1; ok && i < len(name); i++ {
		c := name[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == '-'
	}
	if !ok || strings.HasSuffix(name, ".lock") || strings.Contains(name, "..") {
		return fmt.Errorf("workspace name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit: %w", name, ErrInvalidName)
	}
	// `diff main`, `apply HEAD`: these always name the ref, never a
	// workspace (other names: a workspace wins over a branch).
	if name == DefaultBranch || name == "HEAD" {
		return fmt.Errorf("workspace name %q is reserved: it reads as a ref (`strata diff %s`); pick another: %w", name, name, ErrInvalidName)
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func (r *Repo) wsDir(name string) string { return filepath.Join(r.home, workspacesDir, name) }

// tmpfsRoot is where --tmpfs workspaces keep upper and work: a per-user,
// per-store directory on /dev/shm.
func (r *Repo) tmpfsRoot() string {
	sum := sha256.Sum256([]byte(r.home))
	return filepath.Join("/dev/shm", fmt.Sprintf("strata-%d", os.Getuid()), hex.EncodeToString(sum[:6]))
}

// tmpfsOwner, in a store's tmpfs directory, names the store: a sweep
// removes the directory — kept tmpfs workspaces, dead runs — once the
// store is gone (cleanRuns).
const tmpfsOwner = "store"

// markTmpfsRoot creates the store's tmpfs directory, naming the store.
func (r *Repo) markTmpfsRoot() error {
	root := r.tmpfsRoot()
	marker := filepath.Join(root, tmpfsOwner)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	return writeFileAtomic(marker, []byte(r.home), false)
}

// CreateWorkspace makes a workspace on a new branch (ws/NAME by default)
// forked from opts.From. An empty name gets a generated one.
func (r *Repo) CreateWorkspace(ctx context.Context, name string, opts WorkspaceOptions) (*Workspace, error) {
	if name == "" {
		name = "w" + randomHex(4)
	}
	if err := ValidateWorkspaceName(name); err != nil {
		return nil, err
	}
	branch := opts.Branch
	if branch == "" {
		branch = wsBranchPrefix + name
	}
	if err := store.ValidateBranchName(branch); err != nil {
		return nil, err
	}
	if err := checkSubIDs(opts.SubIDs); err != nil {
		return nil, err
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	// Resolve the base first, so that a bad ref costs nothing on disk.
	var base store.ID
	var source, fromBranch string
	createBranch := true
	if err := st.View(ctx, func(tx *store.Tx) error {
		if _, err := tx.Workspace(name); err == nil {
			return fmt.Errorf("workspace %q: %w", name, ErrExists)
		} else if !isNotFound(err) {
			return err
		}
		head, err := tx.Ref(branch)
		switch {
		case err == nil && opts.Branch == "":
			return fmt.Errorf("branch %q already exists (a workspace of that name was removed?); pass --branch %s to work on it: %w", branch, branch, ErrExists)
		case err == nil && opts.From != "":
			return fmt.Errorf("branch %q exists; --from cannot move it (omit --from to start at its head): %w", branch, ErrConflict)
		case err == nil:
			base, createBranch = head, false
		case isNotFound(err):
			from := opts.From
			if from == "" {
				from = DefaultBranch
			}
			if base, err = resolve(tx, from); err != nil {
				return err
			}
			if _, err := tx.Ref(from); err == nil {
				fromBranch = from
			}
		default:
			return err
		}
		c, err := tx.Commit(base)
		if err != nil {
			return err
		}
		source = c.Source
		return nil
	}); err != nil {
		return nil, err
	}

	// Lay out the state directory atomically: a temp dir renamed into
	// place, removed again if the registry refuses the workspace.
	parent := filepath.Join(r.home, workspacesDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-"+name+"-")
	if err != nil {
		return nil, err
	}
	dir := r.wsDir(name)
	x := wsExtra{Tmpfs: opts.Tmpfs, SubIDs: opts.SubIDs, Source: source, Created: createBranch, Fork: base.String(), MountBase: base.String(), FromBranch: fromBranch}
	if opts.Tmpfs {
		if err := r.markTmpfsRoot(); err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("workspace %q: tmpfs: %w", name, err)
		}
		tdir := filepath.Join(r.tmpfsRoot(), name)
		_ = os.RemoveAll(tdir) // a leftover of a removed workspace of that name
		if err := mkdirs(0o700, filepath.Join(tdir, "upper"), filepath.Join(tdir, "work")); err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("workspace %q: tmpfs: %w", name, err)
		}
		x.Upper, x.Work = filepath.Join(tdir, "upper"), filepath.Join(tdir, "work")
	} else {
		if err := mkdirs(0o700, filepath.Join(tmp, "upper"), filepath.Join(tmp, "work")); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		x.Upper, x.Work = filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	}
	if err := os.Mkdir(filepath.Join(tmp, "merged"), 0o700); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, fs.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
			return nil, fmt.Errorf("workspace %q: %s exists (left by a crash? remove it with `strata ws rm --force %s`): %w", name, dir, name, ErrExists)
		}
		return nil, err
	}
	undo := func() {
		_ = removeAll(dir)
		if opts.Tmpfs {
			_ = removeAll(filepath.Dir(x.Upper))
		}
	}
	// Materialize the layer stack before the workspace is registered, so
	// that the first exec only mounts, and so that a create that cannot
	// (no space for the layers) leaves nothing registered: it fully
	// succeeds or changes nothing.
	if _, err := r.layerStack(ctx, base); err != nil {
		undo()
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return nil, r.noSpace(fmt.Sprintf("ws create %s: nothing created: writing its layers: %v", name, err))
		}
		return nil, fmt.Errorf("workspace %q: nothing created: %w", name, err)
	}
	extra, _ := json.Marshal(x)
	rec := &store.Workspace{Name: name, Branch: branch, Base: base, Dir: dir, CreatedNs: time.Now().UnixNano(), Extra: extra}
	err = st.Update(ctx, func(tx *store.Tx) error {
		if _, err := tx.Workspace(name); err == nil {
			return fmt.Errorf("workspace %q: %w", name, ErrExists)
		}
		if createBranch {
			if err := tx.SetRef(branch, store.ZeroID, base); err != nil {
				return fmt.Errorf("branch %q: %w", branch, err)
			}
			if err := tx.AppendOp(store.Op{Kind: "branch-create", Ref: branch, New: base, Detail: "ws create " + name}); err != nil {
				return err
			}
		}
		if err := tx.PutWorkspace(rec); err != nil {
			return err
		}
		return tx.AppendOp(store.Op{Kind: "ws-create", Ref: branch, New: base, Detail: name})
	})
	if err != nil {
		undo()
		return nil, err
	}
	return r.describe(rec, x), nil
}

func mkdirs(perm fs.FileMode, dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, perm); err != nil {
			return err
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// describe turns a registry row into a Workspace, with its live state.
func (r *Repo) describe(w *store.Workspace, x wsExtra) *Workspace {
	out := &Workspace{
		Name: w.Name, Branch: w.Branch, Base: w.Base, Dir: w.Dir, Upper: x.Upper,
		Tmpfs: x.Tmpfs, SubIDs: x.SubIDs, Source: x.Source, State: "stopped", CreatedNs: w.CreatedNs,
	}
	if k, err := nsexec.FindKeeper(w.Dir); err == nil {
		out.State, out.PID, out.Path = "running", k.PID, k.Path()
	}
	_, out.Changes = r.uncommitted(w, x)
	return out
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// loadWorkspace reads a workspace's registry row.
func (r *Repo) loadWorkspace(ctx context.Context, name string) (*store.Workspace, wsExtra, error) {
	var w *store.Workspace
	var x wsExtra
	err := r.view(ctx, func(tx *store.Tx) error {
		var err error
		w, err = tx.Workspace(name)
		if isNotFound(err) {
			return fmt.Errorf("workspace %q: %w (see `strata ws list`)", name, ErrNotFound)
		}
		return err
	})
	if err != nil {
		return nil, x, err
	}
	if len(w.Extra) > 0 {
		if err := json.Unmarshal(w.Extra, &x); err != nil {
			return nil, x, fmt.Errorf("workspace %q: registry record: %w", name, err)
		}
	}
	r.relocate(w, &x)
	// Processes a killed commit left stopped resume with the next
	// command on the workspace (README, commit).
	nsexec.ThawStale(w.Dir)
	return w, x, nil
}

// relocate derives a workspace's on-disk paths from the store's current
// location, so that a store moved on disk keeps working. Only tmpfs
// uppers, which live outside the store, keep their recorded paths.
func (r *Repo) relocate(w *store.Workspace, x *wsExtra) {
	w.Dir = r.wsDir(w.Name)
	if !x.Tmpfs {
		// A reset moves a workspace to a fresh upper.<random> (Reset).
		upper, work := "upper", "work"
		if b := filepath.Base(x.Upper); x.Upper != "" && strings.HasPrefix(b, "upper.") {
			upper = b
		}
		if b := filepath.Base(x.Work); x.Work != "" && strings.HasPrefix(b, "work.") {
			work = b
		}
		x.Upper, x.Work = filepath.Join(w.Dir, upper), filepath.Join(w.Dir, work)
	}
}

// Workspaces lists every workspace with its state.
func (r *Repo) Workspaces(ctx context.Context) ([]Workspace, error) {
	var rows []store.Workspace
	if err := r.view(ctx, func(tx *store.Tx) error {
		var err error
		rows, err = tx.Workspaces()
		return err
	}); err != nil {
		return nil, err
	}
	out := make([]Workspace, 0, len(rows))
	for i := range rows {
		var x wsExtra
		_ = json.Unmarshal(rows[i].Extra, &x)
		r.relocate(&rows[i], &x)
		out = append(out, *r.describe(&rows[i], x))
	}
	return out, nil
}

// WorkspaceInfo describes one workspace.
func (r *Repo) WorkspaceInfo(ctx context.Context, name string) (*Workspace, error) {
	w, x, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.describe(w, x), nil
}

// layerStack returns the layer directories of commit, materializing the
// missing ones, in the flavour this process mounts with.
func (r *Repo) layerStack(ctx context.Context, commit store.ID) ([]string, error) {
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	flavour := "user"
	if nsexec.RealRoot() {
		flavour = "trusted"
	}
	depth, err := r.MaxLayers()
	if err != nil {
		return nil, err
	}
	lc := snapshot.NewLayerCache(filepath.Join(r.home, layersDir))
	return lc.Stack(ctx, st, commit, snapshot.LayerOptions{Flavour: flavour, Chown: nsexec.RealRoot(), MaxDepth: depth})
}

// features returns the overlay features of this kernel for this user,
// probed once in a throwaway namespace and cached in the store directory.
func (r *Repo) features(ctx context.Context) (overlayfs.Features, error) {
	key, err := overlayfs.CurrentKey()
	if err != nil {
		return overlayfs.Features{}, err
	}
	// The probe runs where workspaces mount: in a user namespace mapping
	// the caller to itself (so the euid is the caller's), or as real root.
	key.UserNS = !nsexec.RealRoot()
	cache := filepath.Join(r.home, featuresFile)
	if f, ok, _ := overlayfs.LoadFeatures(cache, key); ok {
		return f, nil
	}
	scratch, err := os.MkdirTemp(r.home, ".probe-")
	if err != nil {
		return overlayfs.Features{}, err
	}
	defer os.RemoveAll(scratch)
	f, err := nsexec.ProbeOverlay(ctx, scratch, !nsexec.RealRoot())
	if err != nil {
		return f, err
	}
	if !f.Overlay {
		return f, fmt.Errorf("the kernel refuses overlay mounts here: %s; see `strata doctor`: %w", f.Errors["overlay"], ErrUnsupported)
	}
	f.Key = key
	_ = overlayfs.SaveFeatures(cache, f)
	return f, nil
}

// spec builds what a keeper needs for a workspace.
func (r *Repo) spec(ctx context.Context, w *store.Workspace, x wsExtra) (nsexec.Spec, error) {
	lowers, err := r.layerStack(ctx, x.mountBase(w))
	if err != nil {
		return nsexec.Spec{}, err
	}
	feat, err := r.features(ctx)
	if err != nil {
		return nsexec.Spec{}, err
	}
	for _, d := range []string{x.Upper, x.Work} {
		// A tmpfs workspace loses its upper at reboot; start empty again.
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nsexec.Spec{}, err
		}
	}
	if dirEmpty(x.Upper) && len(lowers) > 0 {
		// The merged root shows the upper root's attributes: give it the
		// top layer's, or the workspace root would differ from the commit
		// (mode 0700, a new mtime) and read as a change.
		if err := copyDirAttrs(lowers[0], x.Upper); err != nil {
			return nsexec.Spec{}, err
		}
	}
	// The keeper's view holds the store's defaults and the toolchains of
	// this process's PATH, which a sandboxed exec usually asks for too
	// (a command that asks for more gets a view of its own).
	vp, err := r.viewBinds(os.Environ(), nil)
	if err != nil {
		return nsexec.Spec{}, err
	}
	return nsexec.Spec{
		View:     vp.Binds,
		Name:     w.Name,
		Dir:      w.Dir,
		Lowers:   lowers,
		Upper:    x.Upper,
		Work:     x.Work,
		Target:   mountTarget(w.Dir, x.Source),
		Features: feat,
		Volatile: x.Tmpfs,
		Binds:    gitBinds(x.Source),
		SubIDs:   x.SubIDs,
	}, nil
}

// mountTarget is where a workspace appears inside its namespace: at the
// directory its commit was imported from, so that absolute paths in the
// project (.venv scripts, shebangs, configs) keep working — when that is
// an existing directory; otherwise at DIR/merged.
func mountTarget(dir, source string) string {
	source = sourceDir(source)
	if source != "" && filepath.IsAbs(source) {
		if fi, err := os.Stat(source); err == nil && fi.IsDir() {
			return filepath.Clean(source)
		}
	}
	return filepath.Join(dir, "merged")
}

// keeper returns the workspace's live keeper, starting one if needed.
func (r *Repo) keeper(ctx context.Context, name string) (*nsexec.Keeper, error) {
	if err := ValidateWorkspaceName(name); err != nil {
		return nil, err
	}
	if k, err := nsexec.FindKeeper(r.wsDir(name)); err == nil {
		nsexec.ThawStale(r.wsDir(name))
		return k, nil
	}
	w, x, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return nil, err
	}
	// gc must not evict a layer between computing the stack and mounting
	// it; once mounted, the workspace's bases keep its layers.
	unlock, err := r.layerLock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	spec, err := r.spec(ctx, w, x)
	if err != nil {
		return nil, err
	}
	return nsexec.StartKeeper(ctx, spec)
}

// WorkspacePath returns a host path where the workspace's merged view can
// be read and written (the keeper's /proc/PID/root view), starting its
// keeper if needed. It stays valid while the keeper runs.
func (r *Repo) WorkspacePath(ctx context.Context, name string) (string, error) {
	k, err := r.keeper(ctx, name)
	if err != nil {
		return "", err
	}
	return k.Path(), nil
}

// StopWorkspace ends every process in the workspace and unmounts it; the
// changes stay in its upper directory.
func (r *Repo) StopWorkspace(ctx context.Context, name string) error {
	if _, _, err := r.loadWorkspace(ctx, name); err != nil {
		return err
	}
	err := nsexec.StopKeeper(ctx, r.wsDir(name))
	if errors.Is(err, nsexec.ErrNotRunning) {
		return nil
	}
	return err
}

// removeLeftover removes the directory of a workspace that was never
// registered — what a create killed between making its directory and
// recording it leaves, which blocks a create of the same name — unless
// it changed in the last ten seconds (a create may be finishing). It
// reports whether there was one.
// leftoverAge is how long an unregistered workspace directory stays
// untouched before ws rm --force takes it for a killed create's.
var leftoverAge = 10 * time.Second

func (r *Repo) removeLeftover(ctx context.Context, name string) bool {
	if ValidateWorkspaceName(name) != nil {
		return false
	}
	dir := r.wsDir(name)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || recentlyChanged(dir, leftoverAge) {
		return false
	}
	_ = nsexec.StopKeeper(ctx, dir)
	return removeAll(dir) == nil
}

// RemoveWorkspace stops a workspace and deletes it with its uncommitted
// changes. Without force it refuses when there are any. The workspace's
// branch is deleted too when strata made it and it gained no commits;
// otherwise it stays. With force, the unregistered directory a killed
// create left under the name is removed too.
func (r *Repo) RemoveWorkspace(ctx context.Context, name string, force bool) error {
	w, x, err := r.loadWorkspace(ctx, name)
	if err != nil {
		if force && isNotFound(err) && r.removeLeftover(ctx, name) {
			return nil
		}
		return err
	}
	if dirty, _ := r.uncommitted(w, x); !force && dirty {
		return fmt.Errorf("workspace %q has uncommitted changes (%s): commit them, or remove it with --force to discard them: %w",
			name, x.Upper, ErrConflict)
	}
	if err := nsexec.StopKeeper(ctx, w.Dir); err != nil && !errors.Is(err, nsexec.ErrNotRunning) {
		return err
	}
	if st, err := r.db(); err == nil && st.Full() {
		// A full filesystem: the registry cannot be written until space
		// is freed. With --force the changes are being discarded anyway:
		// they go first, which frees their space when the upper is on
		// the store's filesystem.
		if !force {
			return r.noSpace(fmt.Sprintf("ws rm %s", name))
		}
		_ = removeAll(x.Upper)
		_ = removeAll(x.Work)
		if st, err := r.reopen(); err != nil {
			return err
		} else if st.Full() {
			return r.noSpace(fmt.Sprintf("ws rm %s: its changes were removed but its record remains (run it again once there is space)", name))
		}
	}
	err = r.update(ctx, func(tx *store.Tx) error {
		if err := tx.DeleteWorkspace(name); err != nil {
			return err
		}
		if x.Created {
			fork, _ := store.ParseID(x.Fork)
			if head, err := tx.Ref(w.Branch); err == nil && head == fork {
				if err := tx.SetRef(w.Branch, head, store.ZeroID); err != nil {
					return err
				}
				if err := tx.AppendOp(store.Op{Kind: "branch-delete", Ref: w.Branch, Old: head, Detail: "ws rm " + name}); err != nil {
					return err
				}
			}
		}
		return tx.AppendOp(store.Op{Kind: "ws-rm", Ref: w.Branch, Old: w.Base, Detail: name})
	})
	if err != nil {
		return err
	}
	// The registry no longer names it: what remains on disk is garbage,
	// removed now or by the next gc.
	if x.Tmpfs {
		_ = removeAll(filepath.Dir(x.Upper))
	}
	return removeAll(w.Dir)
}

// checkSubIDs fails, saying what is missing, when a workspace asks for
// subordinate ids the user does not have. Real root needs none.
func checkSubIDs(want bool) error {
	if !want || nsexec.RealRoot() {
		return nil
	}
	_, err := nsexec.SubIDMaps()
	return err
}

// needSubIDNS fails when work on a workspace that maps subordinate ids
// (starting it, reading its changes) is attempted outside their user
// namespace.
func needSubIDNS(name string, x wsExtra) error {
	if x.SubIDs && nsexec.NeedSubIDNS() {
		return fmt.Errorf("workspace %q maps subordinate ids: its changes are read from their user namespace (call nsexec.EnterSubIDs first; the strata command does): %w", name, nsexec.ErrNeedSubIDNS)
	}
	return nil
}

func dirEmpty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return true
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}

// removeAll removes a tree that may hold read-only directories (an upper
// copied from a read-only lower, a workdir the kernel made mode 0), and
// files of subordinate ids (nsexec.RemoveAll).
func removeAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		} else if err != nil {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return nsexec.RemoveAll(dir)
}

// copyDirAttrs gives dst the permission bits and times of src.
func copyDirAttrs(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return err
	}
	if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.UtimesNano(dst, []unix.Timespec{st.Atim, st.Mtim})
}
