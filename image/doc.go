// Package image imports container images into the store. It is the only
// importer of go-containerregistry.
//
// Terms, used exactly in this package:
//
//   - source: where an image is read, named as skopeo names it:
//     docker://HOST/REPO:TAG (or a bare HOST/REPO:TAG) for a registry,
//     oci:DIR[:TAG] for an OCI image layout, docker-archive:FILE[:REF] for
//     a docker save / podman save tarball.
//   - layer: one tar of an image, applied over the layers beneath it.
//     Its diff ID is the digest of the uncompressed tar; its chain ID
//     (ChainIDs) names it together with every layer beneath.
//   - layer commit: the commit one layer becomes, on the layer commit
//     beneath (the bottom layer's is a root commit). It is found by its
//     chain ID (a ref under LayerRefPrefix), so a layer shared by two
//     images is read and stored once and is one commit, and so one cached
//     layer directory, for both.
//   - image commit: the commit on top of the top layer commit, with the
//     same tree, whose message holds the image's Config (Env, WorkingDir,
//     User, Entrypoint, Cmd, Labels, digests) as an "Image-Config:"
//     trailer. Import points the branch at it.
//   - whiteout: a member .wh.NAME, which deletes NAME of the layers
//     beneath; an opaque marker .wh..wh..opq makes its directory hide
//     everything beneath. They become snapshot's deletions and opaque
//     directories.
//
// Names and hard-link targets of a layer are untrusted: a ".." element,
// an invalid name or a write through a symlink beneath refuses the layer
// (ErrUnsafePath) before anything of it is committed. Symlink targets are
// data, kept verbatim. See docs/images.md.
package image
