package workspace

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/store"
)

// BackendOverlay is the default backend: an upper and work directory over
// the base commit's layer stack, mounted with kernel OverlayFS.
const BackendOverlay = "overlay"

// Record is a workspace's registry record: the registry's columns
// (store.Workspace) and the lifecycle's own fields, which the registry
// keeps as JSON in its Extra column. This type is the only reader and
// writer of that JSON.
type Record struct {
	Name      string   `json:"-"`
	Branch    string   `json:"-"`
	Base      store.ID `json:"-"` // the commit the workspace's branch state sits on
	Dir       string   `json:"-"` // its state directory (derived from the layout on Load)
	CreatedNs int64    `json:"-"`

	// Backend makes the writable tree (Backend); "" in records written
	// before backends existed, which Load reads as BackendOverlay.
	Backend string `json:"backend,omitempty"`
	// Upper and Work are the overlay's directories: in Dir (upper,
	// upper.RANDOM after a reset), or in the tmpfs directory.
	Upper string `json:"upper"`
	Work  string `json:"work"`
	// Tmpfs keeps upper and work on /dev/shm (lost at reboot).
	Tmpfs bool `json:"tmpfs,omitempty"`
	// SubIDs maps the user's subordinate ids in the workspace.
	SubIDs bool `json:"subids,omitempty"`
	// Source is where the base's tree came from (store.Commit.Source):
	// where the workspace is mounted.
	Source string `json:"source,omitempty"`
	// CreatedBranch: the branch was made for this workspace (ws rm
	// deletes it when it gained no commits).
	CreatedBranch bool `json:"created_branch,omitempty"`
	// Fork is the commit the workspace was forked from.
	Fork string `json:"fork,omitempty"`
	// MountBase is the commit whose layer stack the upper sits on. It
	// stays put while the upper holds anything, even when commits move
	// Base: the upper's whiteouts, opaque dirs and redirects are relative
	// to this stack (docs/workspaces.md, "Commits").
	MountBase string `json:"mount_base,omitempty"`
	// FromBranch is the branch the workspace was forked from, which
	// promote merges into by default.
	FromBranch string `json:"from_branch,omitempty"`
	// Root, when set, makes the workspace image-rooted (root.go): an
	// image's layers are its /. Records without it are on the host view.
	Root *Root `json:"root,omitempty"`
}

// MountBaseID is the commit whose stack the workspace's upper sits on.
func (r *Record) MountBaseID() store.ID {
	if id, err := store.ParseID(r.MountBase); err == nil {
		return id
	}
	return r.Base
}

// ForkID is the commit the workspace was forked from (its base when the
// record does not say).
func (r *Record) ForkID() store.ID {
	if id, err := store.ParseID(r.Fork); err == nil {
		return id
	}
	return r.Base
}

// Row is the registry row of the record.
func (r *Record) Row() (*store.Workspace, error) {
	extra, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return &store.Workspace{Name: r.Name, Branch: r.Branch, Base: r.Base, Dir: r.Dir, CreatedNs: r.CreatedNs, Extra: extra}, nil
}

// FromRow reads a registry row (its Extra as the lifecycle's fields) and
// derives its paths from the layout l (Relocate).
func FromRow(l layout.Layout, w *store.Workspace) (*Record, error) {
	rec := &Record{Name: w.Name, Branch: w.Branch, Base: w.Base, Dir: w.Dir, CreatedNs: w.CreatedNs}
	var err error
	if len(w.Extra) > 0 {
		if jerr := json.Unmarshal(w.Extra, rec); jerr != nil {
			err = fmt.Errorf("workspace %q: registry record: %w", w.Name, jerr)
		}
	}
	if rec.Backend == "" {
		rec.Backend = BackendOverlay
	}
	rec.relocate(l)
	return rec, err
}

// relocate derives a workspace's on-disk paths from the store's current
// location, so that a store moved on disk keeps working. Only tmpfs
// uppers, which live outside the store, keep their recorded paths.
func (r *Record) relocate(l layout.Layout) {
	r.Dir = l.Workspace(r.Name)
	if !r.Tmpfs {
		r.Upper = layout.Relocate(r.Dir, r.Upper, layout.Upper)
		r.Work = layout.Relocate(r.Dir, r.Work, layout.Work)
	}
	if r.Root != nil {
		r.relocateRoot()
	}
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// Load reads the record of workspace name. A missing one is
// store.ErrNotFound, saying where to look.
func Load(tx *store.Tx, l layout.Layout, name string) (*Record, error) {
	w, err := tx.Workspace(name)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("workspace %q: %w (see `strata ws list`)", name, store.ErrNotFound)
		}
		return nil, err
	}
	return FromRow(l, w)
}

// Save writes rec into the registry (creating or replacing its row).
func Save(tx *store.Tx, rec *Record) error {
	row, err := rec.Row()
	if err != nil {
		return err
	}
	return tx.PutWorkspace(row)
}

// List reads every workspace's record. A record whose fields cannot be
// read is listed with the registry's columns only.
func List(tx *store.Tx, l layout.Layout) ([]Record, error) {
	rows, err := tx.Workspaces()
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(rows))
	for i := range rows {
		rec, _ := FromRow(l, &rows[i])
		out = append(out, *rec)
	}
	return out, nil
}
