package workspace

import (
	"context"
	"fmt"
	"os"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// Settings are the store's settings the lifecycle obeys (its settings
// file, read by hotpath.ReadSettings).
type Settings = hotpath.Settings

// ReadSettings reads the store's settings file; a missing one is the
// defaults.
func ReadSettings(file string) (Settings, error) { return hotpath.ReadSettings(file) }

// Bind is a bind mount into a workspace's namespace (nsexec.Bind).
type Bind = nsexec.Bind

// ExitStatus is how a command ended (nsexec.ExitStatus).
type ExitStatus = nsexec.ExitStatus

// ProtocolVersion is the keeper protocol's version (nsexec).
const ProtocolVersion = nsexec.ProtocolVersion

// Manager runs the lifecycle of one store's workspaces. Its fields are
// the store's parts it needs; the root package's Repo makes one.
type Manager struct {
	Layout layout.Layout
	// DB returns the store, opening it on first use (exec into a live
	// keeper never needs it).
	DB func() (*store.Store, error)
	// Settings returns the store's settings.
	Settings func() (Settings, error)
	// Source says where a workspace whose tree came from source
	// (store.Commit.Source) is mounted, and what it needs bound besides
	// (a git import's objects); nil: at the source path itself when it
	// is an absolute directory, no binds.
	Source func(source string) (dir string, binds []Bind)
}

func (m *Manager) source(source string) (string, []Bind) {
	if m.Source == nil {
		return source, nil
	}
	return m.Source(source)
}

// Load reads workspace name's record. Processes a killed commit left
// stopped resume here, with the next command on the workspace (README,
// commit).
func (m *Manager) Load(ctx context.Context, name string) (*Record, error) {
	st, err := m.DB()
	if err != nil {
		return nil, err
	}
	var rec *Record
	if err := st.View(ctx, func(tx *store.Tx) error {
		var err error
		rec, err = Load(tx, m.Layout, name)
		return err
	}); err != nil {
		return nil, err
	}
	nsexec.ThawStale(rec.Dir)
	return rec, nil
}

// List reads every workspace's record.
func (m *Manager) List(ctx context.Context) ([]Record, error) {
	st, err := m.DB()
	if err != nil {
		return nil, err
	}
	var out []Record
	err = st.View(ctx, func(tx *store.Tx) error {
		var err error
		out, err = List(tx, m.Layout)
		return err
	})
	return out, err
}

// RealRoot reports whether this process is real root (no user namespace
// needed; layers and uppers in the trusted.overlay.* flavour).
func RealRoot() bool { return nsexec.RealRoot() }

// Flavour is the overlay flavour this process mounts with: decided once,
// here, for layers, uppers and the reading of changes.
func Flavour() overlayfs.Flavour {
	if nsexec.RealRoot() {
		return overlayfs.FlavourTrusted
	}
	return overlayfs.FlavourUser
}

// layerOptions are the layer cache's options in this process's flavour.
func (m *Manager) layerOptions() (snapshot.LayerOptions, error) {
	depth, err := m.MaxLayers()
	if err != nil {
		return snapshot.LayerOptions{}, err
	}
	return snapshot.LayerOptions{Flavour: Flavour().String(), Chown: nsexec.RealRoot(), MaxDepth: depth}, nil
}

// MaxLayers is the store's layer stack limit.
func (m *Manager) MaxLayers() (int, error) {
	s, err := m.settings()
	if err != nil {
		return 0, err
	}
	if s.MaxLayers <= 0 {
		return snapshot.DefaultMaxDepth, nil
	}
	return s.MaxLayers, nil
}

func (m *Manager) settings() (Settings, error) {
	if m.Settings == nil {
		return Settings{}, nil
	}
	return m.Settings()
}

// LayerCache is the store's layer cache.
func (m *Manager) LayerCache() *snapshot.LayerCache {
	return snapshot.NewLayerCache(m.Layout.Layers())
}

// LayerStack returns the layer directories of commit, materializing the
// missing ones, in the flavour this process mounts with.
func (m *Manager) LayerStack(ctx context.Context, commit store.ID) ([]string, error) {
	st, err := m.DB()
	if err != nil {
		return nil, err
	}
	opts, err := m.layerOptions()
	if err != nil {
		return nil, err
	}
	return m.LayerCache().Stack(ctx, st, commit, opts)
}

// Features returns the overlay features of this kernel for this user,
// probed once in a throwaway namespace and cached in the store directory.
func (m *Manager) Features(ctx context.Context) (overlayfs.Features, error) {
	key, err := overlayfs.CurrentKey()
	if err != nil {
		return overlayfs.Features{}, err
	}
	// The probe runs where workspaces mount: in a user namespace mapping
	// the caller to itself (so the euid is the caller's), or as real root.
	key.UserNS = !nsexec.RealRoot()
	cache := m.Layout.Features()
	if f, ok, _ := overlayfs.LoadFeatures(cache, key); ok {
		return f, nil
	}
	scratch, err := os.MkdirTemp(m.Layout.Home(), ".probe-")
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

// LayerLock takes the store's layer lock: shared while a workspace's stack
// is computed and mounted, exclusive while gc evicts layers. The returned
// function releases it.
func (m *Manager) LayerLock(exclusive bool) (func(), error) {
	return hotpath.LayerLock(m.Layout.LayersLock(), exclusive)
}
