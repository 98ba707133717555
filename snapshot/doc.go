// Package snapshot is strata's tree model: it turns a directory on disk into
// store objects (Import), store objects back into a directory (Materialize),
// compares and inspects trees (Walk, Lookup, Diff), and writes commits as
// overlay layers (LayerCache, WriteDelta).
//
// Terms, used exactly in this package:
//
//   - source: the directory an Import reads. It is only read, never changed
//     (DESIGN.md invariant 1). Its own metadata (mode, mtime, owner) is not
//     recorded: a tree has no entry for itself.
//   - entry: one store.TreeEntry, a named member of a directory: a file,
//     directory, symlink, FIFO or device. Its path is the slash-separated
//     sequence of names from the root, without a leading slash; the root's
//     path is "".
//   - walk order: pre-order, each directory's entries sorted bytewise by
//     name. Walk visits entries in walk order; the LinkGroup of a hardlink
//     group is the path of its first member in walk order.
//   - link group: the regular files of one import that share an inode
//     (same device and inode number). Members are stored with the same
//     LinkGroup and materialized as hardlinks of one file.
//   - stat cache: per source root, what Import remembers about each file it
//     read (device, inode, mode, size, mtime, ctime, content id), so that the
//     next import of the same root reuses the content of unchanged files
//     without reading them (git's index, with git's "racy" rule).
//   - target: the directory a Materialize writes. It must not exist or be
//     empty. Names and symlink targets from the store are untrusted there
//     (DESIGN.md invariant 6): every entry is created relative to an open
//     directory descriptor and no symlink is ever followed.
//   - change: one path that differs between two trees (Diff): Added,
//     Deleted or Modified, with the entry on each side.
//   - layer: a read-only directory in overlay format holding a commit's
//     delta from its first parent (a root commit's: its full tree):
//     changed entries, whiteouts (character devices 0/0) for deleted
//     ones, opaque directories where a directory replaces a
//     non-directory. A flattened layer holds a commit's full tree.
//   - flavour: the xattr namespace of a layer's overlay markers, "user"
//     (rootless mounts) or "trusted" (real root).
//   - layer stack: a commit's layers, topmost first, down to a full
//     layer: the lowerdirs of its workspaces. LayerCache builds and
//     evicts them.
//   - clone: a commit's full tree written as a plain directory (a
//     workspace of the reflink or copy backend) whose files are FICLONEs
//     (or copies) of the files its layer stack shows (Clone).
//   - stat index: for every entry of such a directory, the stat it had
//     when the directory was known to hold a given tree; ScanWorkspace
//     compares the directory with it to find what changed, reading no
//     file (WriteIndex, ReadIndex, ScanWorkspace).
//
// See docs/snapshot.md for what is recorded and skipped, how the stat cache
// decides, and measured figures.
package snapshot
