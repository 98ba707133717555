package hotpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Settings are the store's settings file (layout.SettingsName) as the
// lifecycle reads it: the root package's Settings writes the same keys.
type Settings struct {
	// MaxLayers is the deepest layer stack a workspace mounts (0: the
	// default, snapshot.DefaultMaxDepth).
	MaxLayers int `json:"max_layers,omitempty"`
	// ViewRO and ViewRW are host paths every sandboxed command sees
	// (`strata init --ro/--rw`).
	ViewRO []string `json:"view_ro,omitempty"`
	ViewRW []string `json:"view_rw,omitempty"`
	// Backend is the backend of workspaces and runs that name none
	// (`strata init --backend`); "" is auto.
	Backend string `json:"backend,omitempty"`
}

// ReadSettings reads the settings file; a missing one is the defaults.
func ReadSettings(file string) (Settings, error) {
	var s Settings
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return Settings{}, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}
