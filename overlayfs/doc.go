// Package overlayfs is strata's only contact with kernel OverlayFS: it turns
// a layer stack into mount options (as data), probes what the running kernel
// allows, performs the one mount, and reads back what a workspace changed.
//
// Terms, used exactly in this package:
//
//   - lower (layer): a read-only directory. Config.Lowers lists them topmost
//     first, the order the kernel's lowerdir= option uses.
//   - upper (upperdir): the writable directory that receives every change
//     made through the mount: new and copied-up entries, whiteouts and
//     opaque directories.
//   - work (workdir): the kernel's scratch directory on the same filesystem
//     as upper. Its content is the kernel's; strata never reads it, except
//     to clear the marker a volatile mount leaves (see Mount).
//   - merged view (target): the mount point showing upper over the lowers.
//   - beneath: what the lowers alone show at a path, i.e. the merged view of
//     the layer stack without the upper. Changes compares the upper with
//     what is beneath.
//   - whiteout: an upper entry that hides the name beneath: a character
//     device 0/0, or (Linux 6.7+) a zero-size regular file carrying the
//     overlay.whiteout xattr.
//   - opaque directory: an upper directory whose overlay.opaque xattr is "y";
//     nothing beneath it is visible. The value "x" instead marks a directory
//     that contains xattr whiteouts and is not opaque.
//   - redirect: the overlay.redirect xattr on a directory renamed while
//     redirect_dir=on; it names the path beneath whose content the directory
//     continues.
//   - flavour: which xattr namespace the kernel uses for those markers:
//     "trusted.overlay." (real root) or "user.overlay." (mount option
//     userxattr, required for unprivileged mounts in a user namespace). A
//     layer written by one flavour is not read correctly by the other.
//   - plan: the complete, syscall-free description of one mount (NewPlan);
//     Mount executes a plan and nothing else calls mount(2) in strata.
//   - features: what Probe found the kernel and the upper filesystem allow
//     in the caller's namespaces, cached on disk per kernel release.
//
// Rootless vs root. Unprivileged overlay mounts (Linux 5.11+) must use
// userxattr, and with it the kernel refuses redirect_dir and metacopy
// (Linux: fs/overlayfs/params.c ovl_fs_params_verify), so renaming a
// directory that exists beneath fails with EXDEV. Real root can mount with
// redirect_dir=on, and the upper then carries redirect xattrs that Changes
// resolves. index and metacopy are always off: strata reads upper
// directories offline, and both features make the upper meaningless without
// the kernel's index or the lower data.
//
// See docs/overlayfs.md for what was probed on the reference kernel.
package overlayfs
