package image

import (
	"context"
	"fmt"

	"github.com/stratafs/strata/store"
)

// PushOptions tune Push. A registry's credentials come from
// image/registry's Keychain (the Docker config, $REGISTRY_AUTH_FILE);
// registry.PushWith takes others.
type PushOptions struct {
	// TLSVerify false lets a registry be plain HTTP or present a
	// certificate that does not verify.
	TLSVerify bool
	// TempDir holds the layer blobs while they are pushed, in a
	// PushDir ("": os.TempDir()).
	TempDir string
	// CacheDir, if set, remembers each layer's digests (by the two trees
	// and the build), so that a layer the registry has is not even
	// written again: only a layer the registry lacks is generated. It
	// also remembers which repositories of which registries hold each
	// blob (pushed there or pulled from there), so that a push to
	// another repository of the same registry asks the registry to mount
	// the blob from one of them instead of uploading it
	// (image/registry/locations.go).
	CacheDir string
	// Progress, if set, is called as each layer is built and sent (from
	// several goroutines: blobs are uploaded in parallel).
	Progress func(BlobProgress)
}

// BlobState is where one layer of a push is.
type BlobState string

// The states of a pushed layer, in the order a layer goes through them.
// A layer ends uploaded, exists, mounted or written.
const (
	BlobBuilding  BlobState = "building"  // its tar is written from the store (Done: tar bytes of about Size)
	BlobUploading BlobState = "uploading" // Done of Size gzip bytes sent
	BlobUploaded  BlobState = "uploaded"  // the registry stored it
	BlobExists    BlobState = "exists"    // the registry had it: nothing sent
	BlobMounted   BlobState = "mounted"   // mounted from another repository of the registry: nothing sent
	BlobWritten   BlobState = "written"   // into an OCI layout
)

// BlobProgress reports one layer of a push.
type BlobProgress struct {
	Index, Count int    // the layer (0 = bottom) of Count
	Digest       string // of the gzip blob, once known
	State        BlobState
	Done, Size   int64
}

// PushedLayer is one layer of a pushed image.
type PushedLayer struct {
	Commit store.ID `json:"commit"` // the commit whose change from its parent this layer is
	DiffID string   `json:"diff_id"`
	Digest string   `json:"digest"` // of the gzip blob
	Size   int64    `json:"size"`   // of the gzip blob
	Tar    int64    `json:"tar_bytes"`
	// State says how the layer reached the destination: uploaded, exists
	// (the registry had it), mounted (from MountedFrom, another
	// repository of the registry), written (an OCI layout).
	State       BlobState `json:"state"`
	MountedFrom string    `json:"mounted_from,omitempty"`
}

// PushResult reports a push.
type PushResult struct {
	Dest   string        `json:"dest"`
	Commit store.ID      `json:"commit"`
	Tree   store.ID      `json:"tree"`
	Digest string        `json:"digest"` // the manifest's
	Layers []PushedLayer `json:"layers"`
	// Uploaded counts the layer bytes the registry was sent (layers it
	// already had are not; the config and manifest are not counted).
	Uploaded   int64 `json:"uploaded_bytes"`
	DurationNs int64 `json:"duration_ns"`
}

// Push writes commit as an OCI image to dest (docker://HOST/REPO:TAG or a
// bare reference; oci:DIR[:TAG]): one gzip layer per commit of its first-
// parent chain whose tree differs from its parent's (the change, as
// registry.LayerTar writes it), bottom first; a config whose history
// holds each layer's commit message and time, whose labels name the
// commit and its tree, and which, for a commit rooted in an imported
// image, carries that image's Env, WorkingDir, User, Entrypoint, Cmd and
// Labels; the manifest's org.opencontainers.image.base.digest names that
// image.
//
// Layers are reproducible: the same change gives the same bytes, so the
// same digest from any store, and a registry that has a blob (checked
// before each upload) is not sent it again.
//
// The implementation is image/registry's; in a binary that does not link
// it, Push returns ErrNotLinked.
func Push(ctx context.Context, s *store.Store, commit store.ID, dest string, opts PushOptions) (*PushResult, error) {
	if impl.push == nil {
		return nil, fmt.Errorf("push %s to %s: %w", commit.Short(), dest, ErrNotLinked)
	}
	return impl.push(ctx, s, commit, dest, opts)
}
