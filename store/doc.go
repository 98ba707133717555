// Package store is strata's content-addressed object store: one SQLite
// database (strata.db, through modernc.org/sqlite) in a store directory.
// It is the only package that talks to SQLite.
//
// Terms, used with these meanings throughout the package:
//
//   - object: an immutable record, one of these kinds: chunk (raw bytes),
//     file (a FileNode: a node of a large file's chunk tree), tree (a
//     directory listing), commit, and the index of a directory too large
//     for one tree (run index; tree index in stores written before schema
//     version 4), which lists the trees holding its runs of entries. An object's ID is the SHA-256 of a
//     header naming its kind and format version followed by its canonical
//     encoding (format.go, docs/store.md). Objects are verified by hash
//     whenever they are read; one that fails is ErrCorrupt.
//   - content: the bytes of a regular file. Up to SmallFileMax it is one
//     chunk; beyond, FastCDC cuts it into chunks (fastcdc.go) that hang
//     under a content-defined tree of FileNodes, so that an edit stores
//     only the changed chunks and the nodes above them. Empty content is
//     ZeroID.
//   - branch (ref): a name pointing to a commit, moved only by
//     compare-and-swap (Tx.SetRef).
//   - operation log: an append-only record of what moved which branch,
//     written in the same transaction as the move.
//   - workspace registry: the workspaces other packages created; a
//     workspace's base commit is kept from gc.
//   - Writer and lease: a Writer stores a batch of new objects (an import,
//     a commit) under a lease, a row naming its process. Whatever a Writer
//     wrote or retained is a gc root while the lease is live, that is until
//     Finish or Abort, or until the process is found dead.
//   - root: where gc starts marking: branches, workspace bases, live
//     leases' objects, and the commits the operation log names within the
//     prune window. An object no root reaches is garbage.
//   - stat cache: per import root, the stat of each file read and its
//     content id, so that an unchanged file need not be read again.
//
// Concurrency: a Store is safe for concurrent use, and many processes may
// open one store directory at once. Write transactions are BEGIN
// IMMEDIATE and durable (WAL, synchronous=FULL); they wait up to
// Options.BusyTimeout for another process's write lock. Read transactions
// see a snapshot. No *sql.Tx leaves the package: callers run code inside
// Update and View with a *Tx.
package store
