package workspace

import (
	"context"
	"encoding/json"
	"os"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
)

// The keeper spec file (layout.KeeperSpec, hotpath.SpecFile): what a
// workspace's keeper mounts, written by `ws create` and whenever the
// lifecycle starts the keeper, so that the front (cmd/strata) starts the
// keeper of a stopped workspace and serves its commands without opening
// the store (docs/hotpath.md). It is a cache of what the registry says:
// removed before anything changes what the keeper mounts (InvalidateSpec:
// reset, rebase, ws rm), and checked by its reader against what it
// cannot see changing (hotpath.SpecFile.Check). Promote and commit leave
// the mount as it is (a commit moves the base, not the mount base).

// servableFields are the record's fields (its registry JSON) whose
// meaning the front knows, at hotpath.SpecVersion: a workspace whose
// record sets any other — an image root, another backend's, whatever a
// later strata adds — gets no spec file, and the front hands its
// commands to strata-core. Adding a field to Record leaves such
// workspaces to strata-core until it is added here, deliberately.
var servableFields = map[string]bool{
	"backend": true, "upper": true, "work": true, "tmpfs": true, "subids": true, "source": true,
	"created_branch": true, "fork": true, "mount_base": true, "from_branch": true,
}

// servable reports whether the front may start workspace rec's keeper
// from spec and plan its commands itself: the overlay backend, the host
// view (no image root), and no record field it does not know.
func servable(rec *Record, spec *nsexec.Spec) bool {
	if rec.Backend != BackendOverlay || spec.Root != nil {
		return false
	}
	b, err := json.Marshal(rec)
	return err == nil && servableJSON(b)
}

// servableJSON reports whether a record's JSON sets only servableFields.
func servableJSON(b []byte) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return false
	}
	for k := range fields {
		if !servableFields[k] {
			return false
		}
	}
	return true
}

// saveSpec writes spec as workspace rec's keeper spec file when the
// front can serve it, and removes the file otherwise. A failure to write
// leaves no file, which only sends the front's commands through
// strata-core: it is not an error of the caller's.
func (m *Manager) saveSpec(rec *Record, spec nsexec.Spec) {
	if !servable(rec, &spec) {
		InvalidateSpec(rec.Dir)
		return
	}
	s, err := m.settings()
	if err != nil {
		InvalidateSpec(rec.Dir)
		return
	}
	mountDir, _ := m.source(rec.Source)
	b, err := hotpath.EncodeSpec(&hotpath.SpecFile{
		Version: hotpath.SpecVersion, UID: os.Geteuid(), MaxLayers: s.MaxLayers, MountDir: mountDir, Spec: spec,
	})
	// Not durable: a file lost in a crash is only a slower next exec.
	if err != nil || WriteFileAtomic(layout.KeeperSpecFile(rec.Dir), b, false) != nil {
		InvalidateSpec(rec.Dir)
	}
}

// WriteSpec writes workspace rec's keeper spec file (ws create, once the
// workspace is registered): its first exec then starts the keeper from
// the front without the store. The stack is materialized already
// (Populate); the overlay features are probed here when this user never
// mounted an overlay on this kernel, in the binary's own namespaced child
// (nsexec.Init), as the first keeper start would.
func (m *Manager) WriteSpec(ctx context.Context, rec *Record) error {
	if rec.Backend != BackendOverlay {
		return nil
	}
	spec, err := m.Spec(ctx, rec)
	if err != nil {
		return err
	}
	m.saveSpec(rec, spec)
	return nil
}

// InvalidateSpec removes the keeper spec file of the workspace directory
// dir. Whatever changes what the workspace's keeper mounts calls it
// first, before it stops the keeper: a front that read the file before
// finds it gone after starting the keeper (cmd/strata checks), and stops
// it again.
func InvalidateSpec(dir string) {
	_ = os.Remove(layout.KeeperSpecFile(dir))
}
