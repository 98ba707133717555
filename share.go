package strata

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/store"
)

// PushOptions tune Push.
type PushOptions struct {
	// InsecureTLS allows a plain-HTTP registry or one whose certificate
	// does not verify (--tls-verify=false).
	InsecureTLS bool
	Progress    func(image.BlobProgress) // per layer; see image.PushOptions
}

// Push writes the commit ref names (a branch, a commit id or prefix) to
// dest (docker://HOST/REPO:TAG or a bare reference, oci:DIR[:TAG]) as an
// OCI image: one reproducible layer per tree change of its first-parent
// chain; blobs the registry has are not uploaded. See image.Push and
// README "Sharing snapshots".
func (r *Repo) Push(ctx context.Context, ref, dest string, opts PushOptions) (*image.PushResult, error) {
	id, err := r.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	return image.Push(ctx, st, id, dest, image.PushOptions{
		TLSVerify: !opts.InsecureTLS, Progress: opts.Progress, TempDir: st.Dir(),
		CacheDir: filepath.Join(st.Dir(), "push-cache"),
	})
}

// PullOptions tune Pull.
type PullOptions struct {
	Branch      string // default DefaultBranch
	InsecureTLS bool
	Progress    func(image.LayerProgress)
	Warn        func(path, msg string)
}

// Pull imports the image src, as ImportImage does (layers the store has,
// by chain ID, are not downloaded), and, if the image was pushed by
// strata, checks that the tree it makes is the tree pushed.
func (r *Repo) Pull(ctx context.Context, src string, opts PullOptions) (*image.Result, error) {
	res, err := r.ImportImage(ctx, src, ImageImportOptions{
		Branch: opts.Branch, InsecureTLS: opts.InsecureTLS, Progress: opts.Progress, Warn: opts.Warn,
	})
	if err != nil {
		return nil, err
	}
	if want := res.Config.Labels[image.LabelTree]; want != "" && want != res.Tree.String() {
		return res, fmt.Errorf("pull %s: the image says it holds tree %.12s, its layers make %s: %w", src, want, res.Tree.Short(), store.ErrCorrupt)
	}
	return res, nil
}
