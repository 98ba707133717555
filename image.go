package strata

import (
	"context"
	"path/filepath"

	"github.com/stratafs/strata/image"
)

// ImagesLinked reports whether this binary links container image support
// (package image/registry, which registers itself when imported):
// without it, ImportImage, Push and Pull fail with an error wrapping
// image.ErrNotLinked. strata-core built with the strata_lean tag lacks it
// on purpose and hands those verbs to strata-full (docs/hotpath.md).
func ImagesLinked() bool { return image.Linked() }

// ImageImportOptions tune ImportImage.
type ImageImportOptions struct {
	Branch string // default DefaultBranch
	// Platform is OS/ARCH[/VARIANT]; empty: this machine's.
	Platform string
	// InsecureTLS allows a plain-HTTP registry or one whose certificate
	// does not verify (--tls-verify=false).
	InsecureTLS bool
	Progress    func(image.LayerProgress)
	Warn        func(path, msg string)
}

// ImportImage imports the container image src (docker://HOST/REPO:TAG or a
// bare HOST/REPO:TAG, oci:DIR[:TAG], docker-archive:FILE[:REF]) as a
// chain of layer commits (shared layers once) and an image commit on top
// that keeps its config; opts.Branch is moved to it by compare-and-swap.
// See package image and docs/images.md.
func (r *Repo) ImportImage(ctx context.Context, src string, opts ImageImportOptions) (*image.Result, error) {
	branch := opts.Branch
	if branch == "" {
		branch = DefaultBranch
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	return image.Import(ctx, st, src, image.Options{
		Branch:    branch,
		Platform:  opts.Platform,
		TLSVerify: !opts.InsecureTLS,
		Progress:  opts.Progress,
		Warn:      opts.Warn,
		CacheDir:  filepath.Join(st.Dir(), "push-cache"), // where pulled blobs came from: push mounts them
	})
}
