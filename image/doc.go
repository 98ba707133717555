// Package image is strata's container image API: the types of an import
// and a push (Options, Result, Config, PushOptions, PushResult...), the
// image commit's Config trailer, the layer refs' prefix, the push
// directories gc cleans (RemoveStalePushDirs), and Import and Push.
//
// The implementation of Import and Push, everything that speaks to a
// registry or reads an image layout or archive, is package
// image/registry, the only importer of go-containerregistry: its
// name/authn/remote side (go-digest's regexps, docker/cli's config,
// net/http, crypto/tls) costs every process that links it package
// init and a larger binary, and most strata commands never read an
// image. So this package links none of go-containerregistry, and
// image/registry registers its Import and Push here from its init
// (Register). A binary that wants images links
// image/registry, blank if it calls only this package or the root
// package; in one that does not (strata-core's lean build) Import and
// Push return ErrNotLinked and Linked reports false.
//
// Terms, used exactly here and in image/registry:
//
//   - source: where an image is read, named as skopeo names it:
//     docker://HOST/REPO:TAG (or a bare HOST/REPO:TAG) for a registry,
//     oci:DIR[:TAG] for an OCI image layout, docker-archive:FILE[:REF] for
//     a docker save / podman save tarball.
//   - layer: one tar of an image, applied over the layers beneath it.
//     Its diff ID is the digest of the uncompressed tar; its chain ID
//     (registry.ChainIDs) names it together with every layer beneath.
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
// See docs/images.md.
package image
