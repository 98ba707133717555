// Package hotpath is what running a command in a workspace needs besides
// the store: the command's environment, working directory and sandbox
// policy, the view's binds (the store's defaults, the toolchains PATH
// reaches, --ro and --rw), the hint after a 127, the shell's terminal,
// the store's settings file, the layer lock, and the keeper spec file
// that lets a keeper start without the store. Both sides of the CLI use
// it: the lifecycle (internal/workspace, in strata-core and the Go API)
// and the front (cmd/strata), which serves exec, shell and ws path
// without linking SQLite, go-git or a CLI framework (docs/hotpath.md).
// One implementation, so that the two cannot drift apart.
//
// Terms:
//
//   - planner: the store's home and settings, which every command of
//     the store is planned against (Planner).
//   - view binds: host paths a sandboxed command's view shows besides
//     the system directories, the workspace and its private directories.
//   - keeper spec file: layout.KeeperSpec in a workspace directory, the
//     nsexec.Spec its keeper mounts, with what says whether it is still
//     current (SpecFile). The lifecycle writes it; the front reads it.
//
// It imports nsexec (the keeper's client side and its types),
// internal/sandbox (the policy request), overlayfs (the features' key),
// layout and the standard library: nothing that opens the store.
package hotpath
