package strata

import (
	"context"
	"fmt"
	"strings"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/store"
)

// Branch is a branch and the commit it points at.
type Branch struct {
	Name      string   `json:"name"`
	Commit    store.ID `json:"commit"`
	Message   string   `json:"message"`
	TimeNs    int64    `json:"time_ns"`
	Workspace string   `json:"workspace,omitempty"` // the workspace bound to it, if any
}

// Branches lists branches sorted by name.
func (r *Repo) Branches(ctx context.Context) ([]Branch, error) {
	var out []Branch
	err := r.view(ctx, func(tx *store.Tx) error {
		refs, err := tx.Refs("")
		if err != nil {
			return err
		}
		wss, err := tx.Workspaces()
		if err != nil {
			return err
		}
		bound := map[string]string{}
		for _, w := range wss {
			bound[w.Branch] = w.Name
		}
		for _, ref := range refs {
			if strings.HasPrefix(ref.Name, image.LayerRefPrefix) || strings.HasPrefix(ref.Name, rootRefPrefix) {
				continue // an image layer's index entry, not a branch
			}
			b := Branch{Name: ref.Name, Commit: ref.Commit, Workspace: bound[ref.Name]}
			if c, err := tx.Commit(ref.Commit); err == nil {
				b.Message, b.TimeNs = firstLine(c.Message), c.TimeNs
			}
			out = append(out, b)
		}
		return nil
	})
	return out, err
}

// CreateBranch creates name at the commit from resolves to. It fails with
// ErrExists when the branch exists.
func (r *Repo) CreateBranch(ctx context.Context, name, from string) (store.ID, error) {
	if err := store.ValidateBranchName(name); err != nil {
		return store.ZeroID, err
	}
	if from == "" {
		from = DefaultBranch
	}
	var id store.ID
	err := r.update(ctx, func(tx *store.Tx) error {
		var err error
		if id, err = resolve(tx, from); err != nil {
			return err
		}
		if _, err := tx.Ref(name); err == nil {
			return fmt.Errorf("branch %q: %w", name, ErrExists)
		} else if !isNotFound(err) {
			return err
		}
		if err := tx.SetRef(name, store.ZeroID, id); err != nil {
			return err
		}
		return tx.AppendOp(store.Op{Kind: "branch-create", Ref: name, New: id, Detail: from})
	})
	return id, err
}

// DeleteBranch deletes a branch. A branch bound to a workspace cannot be
// deleted while the workspace exists (its commits move that branch), even
// with force. A branch workspaces were forked from (where promote merges
// them by default, and where `branch create` starts) is refused too,
// naming them, unless force. Either refusal is ErrConflict and changes
// nothing. The commit stays reachable through the operation log until
// gc's prune window passes.
func (r *Repo) DeleteBranch(ctx context.Context, name string, force bool) (store.ID, error) {
	var old store.ID
	err := r.update(ctx, func(tx *store.Tx) error {
		var err error
		if old, err = tx.Ref(name); err != nil {
			return fmt.Errorf("branch %q: %w", name, err)
		}
		wss, err := workspace.List(tx, r.layout)
		if err != nil {
			return err
		}
		var bound, forked []string
		for _, w := range wss {
			switch {
			case w.Branch == name:
				bound = append(bound, w.Name)
			case w.FromBranch == name:
				forked = append(forked, w.Name)
			}
		}
		if len(bound) > 0 {
			return fmt.Errorf("branch %q is bound to workspace(s) %s (remove them with `strata ws rm` first; --force does not override this): %w",
				name, strings.Join(bound, ", "), ErrConflict)
		}
		if len(forked) > 0 && !force {
			return fmt.Errorf("workspace(s) %s were forked from branch %q and promote into it (pass --force to delete it anyway): %w",
				strings.Join(forked, ", "), name, ErrConflict)
		}
		if err := tx.SetRef(name, old, store.ZeroID); err != nil {
			return err
		}
		return tx.AppendOp(store.Op{Kind: "branch-delete", Ref: name, Old: old})
	})
	return old, err
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
