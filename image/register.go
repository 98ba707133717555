package image

import (
	"context"
	"errors"

	"github.com/stratafs/strata/store"
)

// ErrNotLinked is the error of Import and Push in a binary that does not
// link image/registry: strata-core's lean build leaves it out (see the
// package doc) and hands the verbs that need it to a full build.
var ErrNotLinked = errors.New("container image support (go-containerregistry) is not linked into this binary: import package github.com/stratafs/strata/image/registry")

// impl is what Register installed: set by package inits, which run one
// at a time before main, and only read after, so it needs no lock.
var impl struct {
	importImage func(ctx context.Context, s *store.Store, srcRef string, opts Options) (*Result, error)
	push        func(ctx context.Context, s *store.Store, commit store.ID, dest string, opts PushOptions) (*PushResult, error)
}

// Register installs the implementation of Import and Push. It is for
// image/registry's init only, which calls it once: a second call, or a
// nil function, panics (a binary would otherwise run whichever came
// last).
func Register(
	importImage func(ctx context.Context, s *store.Store, srcRef string, opts Options) (*Result, error),
	push func(ctx context.Context, s *store.Store, commit store.ID, dest string, opts PushOptions) (*PushResult, error),
) {
	if importImage == nil || push == nil {
		panic("image: Register with a nil function")
	}
	if impl.importImage != nil {
		panic("image: Register called twice")
	}
	impl.importImage, impl.push = importImage, push
}

// Linked reports whether this binary links image/registry: whether
// Import and Push work here.
func Linked() bool { return impl.importImage != nil }
