// Package registry is the implementation of image.Import and image.Push,
// and the only importer of go-containerregistry: it reads a source
// (a registry through remote, an OCI layout, a docker archive), verifies
// and applies its layers (layer.go), writes a commit chain as an image
// to a registry or a layout, and tracks which repositories hold which
// blobs (locations.go) and what the registry did with each (watch.go).
//
// Its init registers ImportWith and PushWith, with the default keychain
// (Keychain), as image's Import and Push: linking this package is what
// makes them work (package image says why it is split). ImportWith and
// PushWith take another keychain; package image's options carry none,
// since the lean package does not link authn.
//
// Names and hard-link targets of a layer are untrusted: a ".." element,
// an invalid name or a write through a symlink beneath refuses the layer
// (ErrUnsafePath) before anything of it is committed. Symlink targets are
// data, kept verbatim. The terms (source, layer, layer commit, image
// commit, whiteout) are package image's; see docs/images.md.
package registry
