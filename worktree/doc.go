// Package worktree is the go-git-free half of strata's git support: the
// options and results of Snapshot (`strata import --git`) and ExportGit
// (`strata export-git`), the paths a workspace of a git import needs
// (ObjectsDir, AlternatesPath: the keeper bind-mounts the source's objects
// there), and Snapshot and ExportGit themselves as calls into the
// implementation in package worktree/gogit, which registers itself when a
// binary imports it.
//
// The split is for start-up time: every process runs the package inits of
// everything it links, and go-git's cost ~2 ms and a larger binary's page
// faults on every strata-core call, although only two verbs use it. The
// root package and strata-core import this package; strata-full (the same
// CLI without the strata_lean build tag), strata-mcp and the tests import
// worktree/gogit as well. Without it, Snapshot and ExportGit return an
// error wrapping ErrNotLinked. See package gogit for the terms and
// docs/worktree.md for the layout of the synthetic .git.
package worktree
