// Package workspace is the workspace lifecycle: creating a workspace's
// writable tree, starting its keeper, running commands in it, reading what
// changed since its base, resetting it onto another commit, removing it;
// and one-shot runs, which are workspaces without a registry record.
//
// Terms (docs/workspaces.md says how they fit):
//
//   - record: a workspace's row in the store's registry (store.Workspace)
//     with the lifecycle's own fields (Record), typed here and nowhere
//     else; Load, Save and List read and write it.
//   - backend: how a workspace's writable tree is made (Record.Backend):
//     "overlay" (an upper and work directory over the base commit's layer
//     stack, mounted with kernel OverlayFS in the keeper's namespaces) is
//     the one implemented; reflink and copy come next (issue 17). What
//     differs per backend is the Backend interface.
//   - base: the commit the workspace's branch state sits on. mount base:
//     the commit whose layer stack the upper was made over (overlay).
//   - keeper: the process that holds a workspace's namespaces and serves
//     its commands (package nsexec).
//   - committed state: what the writable tree held when the base was
//     committed from it (the committed-state index), so that a workspace
//     is clean after a commit and the next commit reads only what changed.
//   - run directory: a one-shot run's upper, work and state file; sweeps
//     remove those of runs whose process died.
//
// Every path comes from package layout. The root package strata keeps the
// verbs (which commits, which branches, which transactions) and calls this
// package for everything that touches a workspace's files, namespaces or
// processes; it imports no nsexec, overlayfs, landlock or seccomp itself.
package workspace
