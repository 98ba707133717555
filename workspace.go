package strata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/store"
)

// wsBranchPrefix names the branch a workspace gets by default.
const wsBranchPrefix = "ws/"

// ErrNotRunning: the workspace has no live keeper.
var ErrNotRunning = workspace.ErrNotRunning

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
	// Root (an image ref) and At make the workspace a project on an
	// environment: From's tree mounted at At over the image's root.
	// Without Root, a workspace forked from an image commit is
	// image-rooted by itself. See docs/images.md, "Image roots".
	Root, At string
	// Scope of an image-rooted workspace's diff and commits:
	// "project" (its working directory; default) or "all".
	Scope string
	// Env ("K=V") and Cwd override the image config's for every command
	// of an image-rooted workspace; RO and RW are host paths bound into
	// its root.
	Env    []string
	Cwd    string
	RO, RW []string
	// KeeperSpec writes the keeper's spec file at create, so that the
	// strata front's first exec starts the keeper without the store
	// (docs/hotpath.md); the CLI sets it. Without it the first keeper
	// start writes the file.
	KeeperSpec bool
	// Backend makes the workspace's writable tree: "overlay", "reflink",
	// "copy" or "auto" (backend.go); "" is the store's default
	// (`strata init --backend`), auto when it has none.
	Backend string
	// Warn receives what the caller should know of the choice (auto
	// choosing copy names its cost).
	Warn func(msg string)
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
	// Root describes an image-rooted workspace's root.
	Root    *WorkspaceRoot `json:"root,omitempty"`
	Backend string         `json:"backend"` // overlay, reflink or copy
}

// ValidateWorkspaceName checks a workspace name: 1-64 letters, digits, '.',
// '_' or '-', not starting with a punctuation character.
func ValidateWorkspaceName(name string) error {
	if !layout.ValidName(name) {
		return fmt.Errorf("workspace name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit: %w", name, ErrInvalidName)
	}
	// `diff main`, `apply HEAD`: these always name the ref, never a
	// workspace (other names: a workspace wins over a branch).
	if name == DefaultBranch || name == "HEAD" {
		return fmt.Errorf("workspace name %q is reserved: it reads as a ref (`strata diff %s`); pick another: %w", name, name, ErrInvalidName)
	}
	return nil
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
	if err := workspace.CheckSubIDs(opts.SubIDs); err != nil {
		return nil, err
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	// Resolve the base first, so that a bad ref costs nothing on disk.
	var base store.ID
	var source, fromBranch string
	var rootOpts *workspace.RootOptions
	var rootTree store.ID
	var baseStats store.CommitStats
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
		rootOpts, rootTree, err = resolveRoot(tx, c, rootRequest{Root: opts.Root, At: opts.At, Scope: opts.Scope, Cwd: opts.Cwd, Env: opts.Env, RO: opts.RO, RW: opts.RW})
		baseStats = c.Stats
		return err
	}); err != nil {
		return nil, err
	}
	var root *workspace.Root
	var backend string
	if rootOpts != nil {
		// An image root is an overlay stack: the image's layers under
		// the project's; it has no reflink or copy form.
		if backend, err = rootBackend(opts.Backend); err != nil {
			return nil, err
		}
		if root, err = r.ws.NewRoot(ctx, rootTree, *rootOpts); err != nil {
			return nil, err
		}
		if err := workspace.CheckRootSubIDs(opts.SubIDs); err != nil {
			return nil, err
		}
	} else if backend, err = r.chooseBackend(ctx, opts.Backend, baseStats, opts.Warn); err != nil {
		return nil, err
	}

	// Lay out the state directory atomically, then materialize the
	// layer stack before the workspace is registered, so that the first
	// exec only mounts, and so that a create that cannot (no space for
	// the layers) leaves nothing registered: it fully succeeds or
	// changes nothing.
	rec := &workspace.Record{
		Name: name, Branch: branch, Base: base, CreatedNs: time.Now().UnixNano(),
		Backend: backend, Tmpfs: opts.Tmpfs, SubIDs: opts.SubIDs, Source: source,
		CreatedBranch: createBranch, Fork: base.String(), MountBase: base.String(), FromBranch: fromBranch,
		Root: root,
	}
	undo, err := r.ws.Create(ctx, rec)
	if err != nil {
		return nil, err
	}
	if err := r.ws.Populate(ctx, rec); err != nil {
		undo()
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return nil, r.noSpace(fmt.Sprintf("ws create %s: nothing created: writing its layers: %v", name, err))
		}
		return nil, fmt.Errorf("workspace %q: nothing created: %w", name, err)
	}
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
		if err := setRootRef(tx, name, rec); err != nil {
			return err
		}
		if err := workspace.Save(tx, rec); err != nil {
			return err
		}
		return tx.AppendOp(store.Op{Kind: "ws-create", Ref: branch, New: base, Detail: name})
	})
	if err != nil {
		undo()
		return nil, err
	}
	if opts.KeeperSpec && backend == workspace.BackendOverlay && root == nil {
		// What its keeper will mount, for the front's first exec (a
		// cache: without it that exec goes through strata-core).
		_ = r.ws.WriteSpec(ctx, rec)
	}
	// Created: it holds nothing its base does not (and finding that out
	// would scan a reflink or copy tree, one lstat per entry).
	return r.describeState(rec), nil
}

func randomHex(n int) string { return workspace.RandomHex(n) }

// describe turns a workspace's record into a Workspace, with its live
// state and the size of its changes.
func (r *Repo) describe(rec *workspace.Record) *Workspace {
	out := r.describeState(rec)
	_, out.Changes = r.ws.Uncommitted(rec)
	return out
}

// describeState is describe without the changes.
func (r *Repo) describeState(rec *workspace.Record) *Workspace {
	out := &Workspace{
		Name: rec.Name, Branch: rec.Branch, Base: rec.Base, Dir: rec.Dir, Upper: rec.Upper,
		Tmpfs: rec.Tmpfs, SubIDs: rec.SubIDs, Source: rec.Source, State: "stopped", CreatedNs: rec.CreatedNs,
		Root:    describeRoot(rec.Root),
		Backend: rec.Backend,
	}
	if k := workspace.Running(rec.Dir); k != nil {
		out.State, out.PID, out.Path = "running", k.PID, k.Path()
	}
	return out
}

// loadWorkspace reads a workspace's record (resuming processes a killed
// commit left stopped).
func (r *Repo) loadWorkspace(ctx context.Context, name string) (*workspace.Record, error) {
	return r.ws.Load(ctx, name)
}

// Workspaces lists every workspace with its state.
func (r *Repo) Workspaces(ctx context.Context) ([]Workspace, error) {
	recs, err := r.ws.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Workspace, 0, len(recs))
	for i := range recs {
		out = append(out, *r.describe(&recs[i]))
	}
	return out, nil
}

// WorkspaceInfo describes one workspace.
func (r *Repo) WorkspaceInfo(ctx context.Context, name string) (*Workspace, error) {
	rec, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.describe(rec), nil
}

// keeper returns the workspace's live keeper, starting one if needed.
func (r *Repo) keeper(ctx context.Context, name string) (*workspace.Keeper, error) {
	if err := ValidateWorkspaceName(name); err != nil {
		return nil, err
	}
	return r.ws.Keeper(ctx, name)
}

// WorkspacePath returns a host path where the workspace's merged view can
// be read and written (the keeper's /proc/PID/root view), starting its
// keeper if needed. It stays valid while the keeper runs.
func (r *Repo) WorkspacePath(ctx context.Context, name string) (string, error) {
	if err := ValidateWorkspaceName(name); err != nil {
		return "", err
	}
	// A reflink or copy workspace's tree is a directory of its own.
	return r.ws.Path(ctx, name)
}

// StopWorkspace ends every process in the workspace and unmounts it; the
// changes stay in its upper directory.
func (r *Repo) StopWorkspace(ctx context.Context, name string) error {
	rec, err := r.loadWorkspace(ctx, name)
	if err != nil {
		return err
	}
	return workspace.Stop(ctx, rec.Dir)
}

// leftoverAge is how long an unregistered workspace directory stays
// untouched before ws rm --force takes it for a killed create's.
var leftoverAge = 10 * time.Second

// removeLeftover removes the directory of a workspace that was never
// registered — what a create killed between making its directory and
// recording it leaves, which blocks a create of the same name — unless
// it changed in the last leftoverAge (a create may be finishing). It
// reports whether there was one.
func (r *Repo) removeLeftover(ctx context.Context, name string) bool {
	if ValidateWorkspaceName(name) != nil {
		return false
	}
	return r.ws.RemoveLeftover(ctx, name, leftoverAge)
}

// RemoveWorkspace stops a workspace and deletes it with its uncommitted
// changes. Without force it refuses when there are any. The workspace's
// branch is deleted too when strata made it and it gained no commits;
// otherwise it stays. With force, the unregistered directory a killed
// create left under the name is removed too.
func (r *Repo) RemoveWorkspace(ctx context.Context, name string, force bool) error {
	rec, err := r.loadWorkspace(ctx, name)
	if err != nil {
		if force && isNotFound(err) && r.removeLeftover(ctx, name) {
			return nil
		}
		return err
	}
	if dirty := !force && r.ws.Dirty(rec); dirty { // a reflink tree's check scans it: not with --force
		return fmt.Errorf("workspace %q has uncommitted changes (%s): commit them, or remove it with --force to discard them: %w",
			name, rec.Upper, ErrConflict)
	}
	workspace.InvalidateSpec(rec.Dir) // no front starts it while it goes
	if err := workspace.Stop(ctx, rec.Dir); err != nil {
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
		_ = r.ws.DropChanges(rec)
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
		if err := dropRootRef(tx, name); err != nil {
			return err
		}
		if rec.CreatedBranch {
			fork, _ := store.ParseID(rec.Fork)
			if head, err := tx.Ref(rec.Branch); err == nil && head == fork {
				if err := tx.SetRef(rec.Branch, head, store.ZeroID); err != nil {
					return err
				}
				if err := tx.AppendOp(store.Op{Kind: "branch-delete", Ref: rec.Branch, Old: head, Detail: "ws rm " + name}); err != nil {
					return err
				}
			}
		}
		return tx.AppendOp(store.Op{Kind: "ws-rm", Ref: rec.Branch, Old: rec.Base, Detail: name})
	})
	if err != nil {
		return err
	}
	// The registry no longer names it: what remains on disk is garbage,
	// removed now or by the next gc.
	return r.ws.Remove(rec)
}
