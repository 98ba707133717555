package hotpath

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
)

// SpecVersion is the version of the keeper spec file (layout.KeeperSpec)
// that this strata writes and serves. Version 1 is a workspace of the
// overlay backend on the host view — no image root — whose commands are
// planned as Planner plans them: the front may start its keeper from
// Spec and serve its commands itself. A workspace of any other kind gets
// no spec file (the lifecycle decides, internal/workspace's servable),
// or a version of its own that readers which do not know it hand over.
const SpecVersion = 1

// specHeader is the spec file's first line: it says the version, so that
// a reader tells whether it may serve the workspace without decoding the
// rest (exec into a live keeper reads no more).
// (TestSpecFile holds it to SpecVersion.)
const specHeader = "strata keeper spec 1\n"

// SpecFile is a workspace's keeper spec file: the nsexec.Spec its keeper
// mounts, and what says whether that is still what the store would
// compute. It is a cache: the registry stays the truth, and a missing,
// unreadable or stale file only sends the command through strata-core,
// which writes it again. The lifecycle removes it before anything
// changes what the keeper mounts (reset, rebase, ws rm) and rewrites it
// whenever it starts a keeper; what it cannot see from there (a layer
// gc evicted, a tmpfs upper lost at reboot, another max_layers, another
// kernel) Check finds.
type SpecFile struct {
	Version int `json:"version"`
	// UID is the effective uid that wrote it: the layers' flavour
	// (trusted.* as real root, user.* rootless) and the workspace are
	// that user's.
	UID int `json:"uid"`
	// MaxLayers is the store's max_layers setting the layer stack was
	// computed under, as the settings file says it (0: unset).
	MaxLayers int `json:"max_layers"`
	// MountDir is the directory the workspace's base was imported from
	// (its source, as the lifecycle maps it): where the workspace is
	// mounted when that directory exists, Dir/merged otherwise.
	MountDir string `json:"mount_dir,omitempty"`
	// Spec is what the keeper mounts. Its View is the writer's: a
	// starter recomputes it from the store's view defaults and its own
	// PATH (Planner.ViewBinds), as the lifecycle does at every start.
	Spec nsexec.Spec `json:"spec"`
}

// ErrNoSpec: a workspace has no keeper spec file this strata can use
// (none, an older or newer version, unreadable).
var ErrNoSpec = errors.New("no usable keeper spec")

// EncodeSpec is f as the file's bytes: the header line, then f as JSON.
func EncodeSpec(f *SpecFile) ([]byte, error) {
	f.Version = SpecVersion
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return append(append([]byte(specHeader), b...), '\n'), nil
}

// readSpecFile returns the spec file of the workspace directory dir
// without its header, or ErrNoSpec when there is none of this version.
func readSpecFile(dir string) ([]byte, error) {
	file := layout.KeeperSpecFile(dir)
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has none", ErrNoSpec, dir)
	}
	if err != nil {
		return nil, err
	}
	rest, ok := bytes.CutPrefix(b, []byte(specHeader))
	if !ok {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		return nil, fmt.Errorf("%w: %s: %q, this strata reads %q", ErrNoSpec, file, line, strings.TrimSpace(specHeader))
	}
	return rest, nil
}

// Servable reports whether the workspace directory dir has a keeper spec
// file of this version: the front may serve commands into its live
// keeper (which one of the lifecycle or the front started from what
// such a file says). It reads only the header.
func Servable(dir string) error {
	_, err := readSpecFile(dir)
	return err
}

// ReadSpec reads the keeper spec file of the workspace directory dir.
// Anything it does not know — another version, a field this strata does
// not have (a newer writer's) — is ErrNoSpec: the caller hands over.
func ReadSpec(dir string) (*SpecFile, error) {
	b, err := readSpecFile(dir)
	if err != nil {
		return nil, err
	}
	f := new(SpecFile)
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(f); err != nil || f.Version != SpecVersion {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoSpec, layout.KeeperSpecFile(dir), err)
	}
	return f, nil
}

// MountTarget is where a workspace appears inside its namespace: at the
// directory its commit was imported from (mountDir), so that absolute
// paths in the project (.venv scripts, shebangs, configs) keep working —
// when that is an existing directory; otherwise at DIR/merged.
func MountTarget(dir, mountDir string) string {
	if mountDir != "" && filepath.IsAbs(mountDir) {
		if fi, err := os.Stat(mountDir); err == nil && fi.IsDir() {
			return filepath.Clean(mountDir)
		}
	}
	return layout.MergedDir(dir)
}

// ErrStale: a keeper spec file no longer says what the store would have
// the keeper mount (Check says why).
var ErrStale = errors.New("stale keeper spec")

func stale(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrStale, fmt.Sprintf(format, args...))
}

// Check reports whether f still describes the keeper of workspace name
// of the store laid out by l, with settings s, for this process: the
// writer's uid, the workspace directory where the layout puts it (a
// store moved on disk), the same max_layers, overlay features probed on
// this kernel for this user, no subordinate-id namespace needed, the
// mount target the lifecycle would choose now, and every directory the
// keeper mounts or binds present — the layers among them, so the caller
// holds the layer lock (LayerLock) from before Check until the keeper
// has mounted them. An error matches ErrStale, saying what differs.
func (f *SpecFile) Check(l layout.Layout, name string, s Settings) error {
	sp := &f.Spec
	switch {
	case f.UID != os.Geteuid():
		return stale("written by uid %d", f.UID)
	case sp.Dir != l.Workspace(name) || sp.Name != name:
		return stale("for %s (%s), not %s", sp.Name, sp.Dir, l.Workspace(name))
	case sp.Root != nil:
		return stale("an image root")
	case f.MaxLayers != s.MaxLayers:
		return stale("max_layers %d, the store says %d", f.MaxLayers, s.MaxLayers)
	case sp.SubIDs && nsexec.NeedSubIDNS():
		return stale("maps subordinate ids: starting it needs their namespace")
	case len(sp.Lowers) == 0:
		return stale("no layer")
	}
	key, err := overlayfs.CurrentKey()
	if err != nil {
		return err
	}
	key.UserNS = !nsexec.RealRoot()
	if key != sp.Features.Key {
		return stale("overlay features of %s, this is %s", sp.Features.Key, key)
	}
	if t := MountTarget(sp.Dir, f.MountDir); t != sp.Target {
		return stale("mounted at %s, now %s", sp.Target, t)
	}
	dirs := append([]string{sp.Upper, sp.Work}, sp.Lowers...)
	for _, b := range sp.Binds {
		dirs = append(dirs, b.Source)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			return stale("%v", err)
		}
	}
	return nil
}

// SameMount reports whether f and g have the keeper mount the same: equal
// but for the view, which every start recomputes.
func (f *SpecFile) SameMount(g *SpecFile) bool {
	enc := func(x *SpecFile) []byte {
		c := *x
		c.Spec.View = nil
		b, _ := json.Marshal(&c)
		return b
	}
	return f != nil && g != nil && bytes.Equal(enc(f), enc(g))
}
