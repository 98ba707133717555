// Package gogit connects strata with git: it snapshots a git commit into
// the store (Snapshot, behind `strata import --git`) and records a strata
// change as a git commit on a new branch (ExportGit, behind `strata
// export-git`). It is the only importer of go-git, and registers both with
// package worktree (which holds the types, the paths the keeper needs and
// the dispatch) at init: a binary links go-git only by importing this
// package, as strata-full and strata-mcp do and strata-core (built with
// the strata_lean tag) does not — go-git's package inits cost every
// process that links them ~2 ms (docs/hotpath.md).
//
// Terms, used exactly in this package:
//
//   - source repository: the git repository a snapshot is taken from. Its
//     git objects are read; its working copy is read only for the ignored
//     directories; nothing of it is written (DESIGN.md invariant 1), except
//     that ExportGit adds objects and one branch.
//   - REV: the commit a snapshot records, given as any revision go-git
//     resolves (HEAD by default, a branch, a tag, a hash, HEAD~2, ...).
//   - tracked files: the entries of REV's git tree. They come from git
//     objects, never from the working copy, with modes 0644/0755 (from
//     100644/100755), symlinks verbatim, directories 0755, every mtime the
//     commit's committer time and the caller's uid/gid; a gitlink
//     (submodule) becomes an empty directory.
//   - ignored directory: a directory of the working copy that git ignores
//     (the working copy's .gitignore files, tracked or not, else REV's;
//     info/exclude; core.excludesfile: what git check-ignore says) and REV
//     does not track, such as node_modules or .venv. Those selected by
//     SnapshotOptions.WithIgnored are imported as snapshot.Import does and
//     grafted into the tree at their path; where REV tracks a path inside
//     one, the tracked entry wins.
//   - blob cache: the store's stat cache under the root
//     ObjectsDir(GitDir)+"//git-blobs", mapping a blob's hex id to the
//     content id it was stored as, so that a snapshot of another revision
//     reads only the blobs it has not stored before.
//   - synthetic .git: the .git directory a snapshot carries, so that git
//     works in a workspace: HEAD, refs, config, an index that matches the
//     snapshot's files, and objects/info/alternates naming AlternatesPath
//     of the source's objects directory, where strata's keeper bind-mounts
//     it read-only (the workspace hides the real one). Objects are shared,
//     not copied; new ones (a commit in the workspace) go to the
//     workspace's own .git/objects.
//
// See docs/worktree.md for the layout of the synthetic .git, the rules for
// ignored directories and export, and measured figures.
package gogit

import "github.com/stratafs/strata/worktree"

func init() { worktree.Register(Snapshot, ExportGit) }
