package strata

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Settings are a store's settings: they hold for every process that uses
// the store, so that all of them agree (gc keeps the layers that the
// stacks of the others need).
type Settings struct {
	// MaxLayers is the deepest layer stack a workspace mounts: a commit
	// with more layers below it gets one flattened layer instead (built
	// once, cached like the others). 0 means snapshot.DefaultMaxDepth (64).
	MaxLayers int `json:"max_layers,omitempty"`
	// ViewRO and ViewRW are host paths every sandboxed command of the
	// store sees, read-only and read-write (`strata init --ro PATH`,
	// `--rw PATH`): toolchains and caches under a home directory that
	// PATH does not reveal (the view's defaults, internal/workspace/view.go). Keepers build
	// them into their view once; an exec's own --ro costs a view of its
	// own.
	ViewRO []string `json:"view_ro,omitempty"`
	ViewRW []string `json:"view_rw,omitempty"`
	// Backend is the backend of workspaces and runs that name none
	// (`strata init --backend`; backend.go); "" is auto.
	Backend string `json:"backend,omitempty"`
}

// maxLayersLimit bounds MaxLayers: overlayfs takes at most 500 lower
// layers (OVL_MAX_STACK).
const maxLayersLimit = 500

// Settings returns the store's settings (defaults where unset).
func (r *Repo) Settings() (Settings, error) {
	r.settingsOnce.Do(func() {
		// One reader of the file for the CLI's two sides (the front
		// reads it too, for the view's defaults).
		s, err := workspace.ReadSettings(r.layout.Settings())
		r.settings, r.settingsErr = Settings(s), err
	})
	return r.settings, r.settingsErr
}

// MaxLayers is the store's layer stack limit: Settings().MaxLayers, or
// snapshot.DefaultMaxDepth when unset.
func (r *Repo) MaxLayers() (int, error) {
	s, err := r.Settings()
	if err != nil {
		return 0, err
	}
	if s.MaxLayers <= 0 {
		return snapshot.DefaultMaxDepth, nil
	}
	return s.MaxLayers, nil
}

// SetMaxLayers changes the store's layer stack limit (1-500). Lowering it
// while workspaces exist is refused: gc keeps the layers the limit says a
// stack can use, and a running workspace may have mounted a deeper one.
func (r *Repo) SetMaxLayers(ctx context.Context, n int) error {
	if n < 1 || n > maxLayersLimit {
		return invalidf("max layers %d: want 1 to %d (overlayfs stacks at most %d layers)", n, maxLayersLimit, maxLayersLimit)
	}
	cur, err := r.MaxLayers()
	if err != nil {
		return err
	}
	if n == cur {
		return nil
	}
	if n < cur {
		var wss []store.Workspace
		if err := r.view(ctx, func(tx *store.Tx) error {
			var err error
			wss, err = tx.Workspaces()
			return err
		}); err != nil {
			return err
		}
		if len(wss) > 0 {
			return fmt.Errorf("max layers: lowering %d to %d while %d workspaces exist could evict layers they have mounted; remove them first: %w", cur, n, len(wss), ErrConflict)
		}
	}
	s, _ := r.Settings()
	s.MaxLayers = n
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := workspace.WriteFileAtomic(r.layout.Settings(), append(b, '\n'), true); err != nil {
		return fmt.Errorf("max layers: %w", err)
	}
	r.settings = s
	return nil
}

// SetViewDefaults changes the store's default view binds: it adds ro and
// rw (absolute paths that exist, neither holding the store nor lying in
// it; a path moves between the lists), and removes forget from either.
func (r *Repo) SetViewDefaults(ro, rw, forget []string) error {
	s, err := r.Settings()
	if err != nil {
		return err
	}
	drop := func(list []string, p string) []string {
		return slices.DeleteFunc(slices.Clone(list), func(x string) bool { return x == p })
	}
	for _, p := range forget {
		p = filepath.Clean(p)
		s.ViewRO, s.ViewRW = drop(s.ViewRO, p), drop(s.ViewRW, p)
	}
	for _, d := range []struct {
		flag  string
		paths []string
		rw    bool
	}{{"--ro", ro, false}, {"--rw", rw, true}} {
		for _, p := range d.paths {
			if err := r.ws.CheckBind(d.flag, p); err != nil {
				return err
			}
			p = filepath.Clean(p)
			s.ViewRO, s.ViewRW = drop(s.ViewRO, p), drop(s.ViewRW, p)
			if d.rw {
				s.ViewRW = append(s.ViewRW, p)
			} else {
				s.ViewRO = append(s.ViewRO, p)
			}
		}
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := workspace.WriteFileAtomic(r.layout.Settings(), append(b, '\n'), true); err != nil {
		return fmt.Errorf("view defaults: %w", err)
	}
	r.settings = s
	return nil
}
