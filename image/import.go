package image

import (
	"context"
	"fmt"

	"github.com/stratafs/strata/store"
)

// Options tune Import. A registry's credentials come from
// image/registry's Keychain (the Docker config, $REGISTRY_AUTH_FILE);
// registry.ImportWith takes others.
type Options struct {
	Branch string // required
	// Platform is OS/ARCH[/VARIANT]; empty: this machine's.
	Platform string
	// TLSVerify false lets a registry be plain HTTP or present a
	// certificate that does not verify (skopeo's --tls-verify=false).
	TLSVerify bool
	// Progress, if set, is called as a layer is read: index (0 = bottom)
	// of count layers, bytes of the uncompressed tar read so far.
	Progress func(p LayerProgress)
	Warn     func(path, msg string)
	// CacheDir, if set, is the push cache (PushOptions.CacheDir): a pull
	// from a registry records there which repository holds each layer
	// blob, so that a later push to that registry mounts them.
	CacheDir string
}

// LayerProgress reports reading one layer.
type LayerProgress struct {
	Index, Count int
	DiffID       string
	Done         int64 // uncompressed bytes read
	Size         int64 // the compressed size the manifest gives
	Reused       bool  // the layer's commit exists: not read
	// Fetched is the compressed bytes received from a registry so far
	// (of Size); 0 for other sources.
	Fetched int64
	// Finished: the layer is committed (or was reused); the last report
	// of the layer.
	Finished bool
}

// LayerResult reports one layer of an import.
type LayerResult struct {
	DiffID  string   `json:"diff_id"`
	ChainID string   `json:"chain_id"`
	Commit  store.ID `json:"commit"`
	// Reused: the layer's commit (its chain) was already in the store and
	// the layer was not read.
	Reused     bool  `json:"reused"`
	ReadBytes  int64 `json:"read_bytes"` // uncompressed tar bytes read
	NewObjects int64 `json:"new_objects"`
	NewBytes   int64 `json:"new_bytes"`
	Changes    int   `json:"changes"`
}

// Result reports an import.
type Result struct {
	Commit     store.ID          `json:"commit"`
	Parent     store.ID          `json:"parent,omitempty"` // the branch's head before
	Branch     string            `json:"branch"`
	Tree       store.ID          `json:"tree"`
	Stats      store.CommitStats `json:"stats"`
	Config     Config            `json:"config"`
	Layers     []LayerResult     `json:"layers"`
	Unchanged  bool              `json:"unchanged"` // the branch already pointed at this image
	NewObjects int64             `json:"new_objects"`
	NewBytes   int64             `json:"new_bytes"`
	DurationNs int64             `json:"duration_ns"`
}

// Import reads the image src into s: each layer becomes a commit on the
// commit of the layer beneath (the bottom one a root commit), found by
// its chain ID if an earlier import made it (then the layer is not
// read), and one commit on top, with the top layer's tree and a message
// that holds the image's Config, is set as opts.Branch by
// compare-and-swap. A branch that holds a commit other than an image
// commit is refused (store.ErrExists) before anything is read.
//
// A layer commit is deterministic (its time is 0, its message names its
// diff ID), so two stores that import one layer chain hold the same
// commits. Each layer is verified as it is read: the uncompressed tar
// against the config's diff ID (the config against the manifest's
// digest; registry blobs against their digests too), and nothing of a
// layer is committed unless it matches and every member's name and link
// target is safe (DESIGN invariant 9). An interrupted import keeps the
// layers it finished.
//
// The implementation is image/registry's; in a binary that does not link
// it, Import returns ErrNotLinked.
func Import(ctx context.Context, s *store.Store, srcRef string, opts Options) (*Result, error) {
	if impl.importImage == nil {
		return nil, fmt.Errorf("import image %s: %w", srcRef, ErrNotLinked)
	}
	return impl.importImage(ctx, s, srcRef, opts)
}
