// Package nsexec runs commands inside a workspace: it re-executes a small
// child into new user (rootless), mount and PID namespaces, mounts the
// workspace's overlay there, and starts commands with the sandbox applied
// last, right before exec.
//
// Terms:
//
//   - child: a re-executed process (os.Args[0] is "strata:ENTRY") that does
//     namespace work: strata-init (cmd/strata-init, pure Go, fast to start)
//     when it sits beside the running executable, else the running
//     executable itself, whose main calls Init. Go cannot unshare a user
//     namespace once its runtime has started threads, so namespaces are
//     created by cloning a fresh child (SysProcAttr.Cloneflags), never by
//     the CLI process.
//   - keeper: a child that holds a workspace's namespaces open so that
//     several commands, and host tools through /proc/PID/root, share one
//     mount (StartKeeper, FindKeeper, StopKeeper). It is PID 1 of the
//     workspace's PID namespace: when it exits, the kernel ends every
//     process in the workspace. It holds keeper.lock (flock) for its life
//     and serves commands on keeper.sock (Exec).
//   - one-shot init: a child that mounts, runs one command and exits with
//     it (Run); nothing survives it.
//   - state directory: Spec.Dir, where keeper.lock, keeper.sock,
//     keeper.json and keeper.log live.
//   - sandbox: what a Command carries besides argv: a private network
//     namespace (NetNone), and a sandbox policy (Policy: the keeper plans
//     it once and keeps the plan) or a Landlock ruleset and seccomp BPF
//     programs planned by the caller (landlock.Plan, seccomp.Program),
//     applied by the child on the thread that forks the command.
//   - root: what a command sees as /: the host view (the host's mounts,
//     with the workspace at its path; a sandboxed command's view is
//     assembled from the host's system directories, view.go), or an image
//     root (Spec.Root: a container image's layers as /, root.go).
//   - real root: euid 0 in the initial user namespace. Then no user
//     namespace is needed (unless Spec.UserNS) and overlay may use
//     redirect_dir and trusted.* xattrs; everywhere else strata is
//     rootless, and the child holds its user namespace's capabilities,
//     which the commands it starts never do.
//
// The child never opens the store: everything it needs is computed by the
// parent and passed to it, but for sandbox policies, which it plans
// itself (internal/sandbox: Landlock plans and embedded seccomp
// programs). Package nsexec links neither cgo nor SQLite, so that
// strata-init stays small; see docs/nsexec.md for the design and its
// measured costs.
package nsexec
