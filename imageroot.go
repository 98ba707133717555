package strata

import (
	"context"
	"fmt"
	"strings"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/store"
)

// Image-rooted workspaces and runs (docs/images.md, "Image roots"): which
// commits are images, and what a workspace or run of one is given.

// rootRefPrefix names the refs that keep the environment of a project
// on an environment (--root IMAGE --at PATH): ROOTREFPREFIX + the
// workspace's name. A ref is what gc keeps; `strata branch` does not list
// them.
const rootRefPrefix = "ws-roots/"

// maxImageWalk bounds the walk from a commit down to the image commit it
// was made on (a workspace's commits on an image, each a step).
const maxImageWalk = 1 << 16

// imageSourcePrefix starts the Source of an image commit and of every
// commit made on one (commit, promote and rebase keep their base's).
const imageSourcePrefix = "image:"

// imageConfigOf returns the config of the image commit c (id) was made on
// — c itself, or the nearest first-parent ancestor whose message holds
// one — or nil when c is not rooted in an image: its source says it did
// not come from one, or the image is a pushed snapshot of a project
// (image.Config.IsRoot).
func imageConfigOf(tx *store.Tx, c *store.Commit) (*image.Config, error) {
	if !strings.HasPrefix(c.Source, imageSourcePrefix) {
		return nil, nil
	}
	for i := 0; i < maxImageWalk; i++ {
		cfg, err := image.ConfigFromMessage(c.Message)
		if err != nil {
			return nil, err
		}
		if cfg != nil {
			if !cfg.IsRoot() {
				return nil, nil
			}
			return cfg, nil
		}
		if len(c.Parents) == 0 {
			return nil, nil
		}
		if c, err = tx.Commit(c.Parents[0]); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// rootRequest is what a user asked of a workspace's or run's root.
type rootRequest struct {
	Root, At, Scope, Cwd string // --root, --at, --scope, --cwd
	Env, RO, RW          []string
}

func (q rootRequest) empty() bool {
	return q.Root == "" && q.At == "" && q.Scope == "" && q.Cwd == "" && len(q.Env)+len(q.RO)+len(q.RW) == 0
}

// resolveRoot decides, in tx, whether a workspace or run of base (commit
// bc) is image-rooted: with --root, a project on that environment; when
// base is an image (or a commit made on one), the image itself; otherwise
// not (nil). It returns the options of the root and the tree whose
// /etc/passwd gives HOME.
func resolveRoot(tx *store.Tx, bc *store.Commit, q rootRequest) (*workspace.RootOptions, store.ID, error) {
	ro := &workspace.RootOptions{At: q.At, Env: q.Env, Cwd: q.Cwd, Scope: q.Scope, RO: q.RO, RW: q.RW}
	config := func(cfg *image.Config) workspace.ImageConfig {
		return workspace.ImageConfig{Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User, Source: cfg.Source}
	}
	if q.Root != "" {
		img, err := resolve(tx, q.Root)
		if err != nil {
			return nil, store.ZeroID, fmt.Errorf("--root: %w", err)
		}
		ic, err := tx.Commit(img)
		if err != nil {
			return nil, store.ZeroID, err
		}
		cfg, err := imageConfigOf(tx, ic)
		if err != nil {
			return nil, store.ZeroID, err
		}
		if cfg == nil {
			return nil, store.ZeroID, invalidf("--root %s: %s is not an image (import one with `strata import --image` or `strata pull`)", q.Root, img.Short())
		}
		if q.At == "" {
			return nil, store.ZeroID, invalidf("--root %s needs --at PATH: where the project appears in the image (e.g. --at /testbed)", q.Root)
		}
		ro.Image, ro.Config = img, config(cfg)
		return ro, ic.Tree, nil
	}
	cfg, err := imageConfigOf(tx, bc)
	if err != nil {
		return nil, store.ZeroID, err
	}
	if cfg == nil {
		switch {
		case q.At != "":
			return nil, store.ZeroID, invalidf("--at needs --root IMAGE: the image the project is mounted in")
		case !q.empty():
			return nil, store.ZeroID, invalidf("--scope, --env, --cwd, --ro and --rw of a new workspace apply to image-rooted ones; %s is not an image (give them to exec instead)", bc.Tree.Short())
		}
		return nil, store.ZeroID, nil
	}
	ro.Config = config(cfg)
	return ro, bc.Tree, nil
}

// WorkspaceRoot describes an image-rooted workspace's root (Workspace).
type WorkspaceRoot struct {
	Image   string   `json:"image,omitempty"` // the image's source, as imported
	Env     store.ID `json:"env,omitempty"`   // the environment commit under a project (--root)
	At      string   `json:"at,omitempty"`
	Project string   `json:"project,omitempty"` // what diff and commit cover ("/": everything)
	Cwd     string   `json:"cwd"`
	User    string   `json:"user,omitempty"`
}

func describeRoot(r *workspace.Root) *WorkspaceRoot {
	if r == nil {
		return nil
	}
	out := &WorkspaceRoot{Image: r.Source, At: r.At, Project: r.Project, Cwd: r.Cwd, User: r.User}
	if r.OnEnv() {
		out.Env = r.ImageID()
	}
	return out
}

// setRootRef points workspace name's root ref at its environment commit
// (inside the workspace's create transaction), replacing a leftover.
func setRootRef(tx *store.Tx, name string, rec *workspace.Record) error {
	if !rec.Root.OnEnv() {
		return nil
	}
	ref := rootRefPrefix + name
	old, err := tx.Ref(ref)
	if err != nil && !isNotFound(err) {
		return err
	}
	return tx.SetRef(ref, old, rec.Root.ImageID())
}

// dropRootRef deletes workspace name's root ref, if any (inside ws rm's
// transaction).
func dropRootRef(tx *store.Tx, name string) error {
	ref := rootRefPrefix + name
	old, err := tx.Ref(ref)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return tx.SetRef(ref, old, store.ZeroID)
}

// checkImageReset refuses to move an image-rooted workspace (its own
// root) onto a commit that is not an image: its / would be a project.
func (r *Repo) checkImageReset(ctx context.Context, rec *workspace.Record, target store.ID) error {
	if rec.Root == nil || rec.Root.OnEnv() || target == rec.Base {
		return nil
	}
	return r.view(ctx, func(tx *store.Tx) error {
		c, err := tx.Commit(target)
		if err != nil {
			return err
		}
		cfg, err := imageConfigOf(tx, c)
		if err != nil {
			return err
		}
		if cfg == nil {
			return invalidf("workspace %q is rooted in an image; %s is not one: nothing changed", rec.Name, target.Short())
		}
		return nil
	})
}
