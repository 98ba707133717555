package registry

import (
	"context"

	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/store"
)

// Linking this package is what makes image.Import and image.Push work:
// a binary imports it (blank, if it calls them only through image or
// the root package) exactly when it wants go-containerregistry.
func init() {
	image.Register(
		func(ctx context.Context, s *store.Store, srcRef string, opts image.Options) (*image.Result, error) {
			return ImportWith(ctx, s, srcRef, opts, nil)
		},
		func(ctx context.Context, s *store.Store, commit store.ID, dest string, opts image.PushOptions) (*image.PushResult, error) {
			return PushWith(ctx, s, commit, dest, opts, nil)
		})
}
