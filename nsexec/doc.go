// Package nsexec runs commands inside a workspace: it re-executes strata
// into new user + mount (+ PID) namespaces, mounts the workspace's overlay
// there, applies the sandbox last, and execs the command.
//
// Terms:
//
//   - child: a re-executed strata process (os.Args[0] is "strata:ENTRY")
//     that does namespace work. Go cannot unshare a user namespace once its
//     runtime has started threads, so namespaces are created by cloning a
//     fresh child (SysProcAttr.Cloneflags), never by the CLI process.
//   - keeper: a child that holds a workspace's namespaces open so that
//     several commands, and host tools through /proc/PID/root, share one
//     mount. It is PID 1 of the workspace's PID namespace: when it exits,
//     the kernel ends every process in the workspace.
//   - real root: euid 0 in the initial user namespace. Then no user
//     namespace is needed and overlay may use redirect_dir and trusted.*
//     xattrs; everywhere else strata is rootless.
//
// The child never opens the store: everything it needs is computed by the
// parent and passed to it.
package nsexec
