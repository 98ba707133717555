// Package landlock fences what a sandboxed command may do with files, TCP
// ports and IPC, using the Linux Landlock LSM. It works in two steps, like
// go-landlock's downgrade/restrict split: Plan is pure and table-tested,
// Apply is the only code that makes Landlock syscalls.
//
// Terms, used exactly in this package:
//
//   - ABI: the Landlock ABI version of a kernel (landlock_create_ruleset
//     with LANDLOCK_CREATE_RULESET_VERSION). Each version adds rights:
//     1 files (5.13), 2 refer (5.19), 3 truncate (6.2), 4 TCP bind and
//     connect (6.7), 5 ioctl on devices (6.10), 6 scopes for signals and
//     abstract unix sockets (6.12), 7 audit-log flags (6.15). 0 means no
//     Landlock.
//   - right: one kind of access (FSAccess, NetAccess) or IPC scope (Scope).
//   - handled: a right the ruleset restricts. A handled right is denied
//     everywhere except where a rule grants it; a right that is not
//     handled is allowed everywhere.
//   - rule: a grant of rights beneath one path (PathRule) or on one TCP
//     port (PortRule).
//   - policy: what strata wants to allow (Policy), independent of the
//     kernel. Agent and Strict are the presets behind --sandbox.
//   - plan, or ruleset: what one kernel will enforce for a policy
//     (Ruleset), with Warnings for every right the policy wants handled
//     that the ABI cannot handle. Plan computes it; it is JSON so that
//     the parent can plan and print warnings while the re-executed child
//     applies it right before exec.
//   - domain: the set of restrictions a process runs under after Apply.
//     It is inherited across fork and execve and cannot be lifted; a
//     process in a domain may only signal, ptrace or reach (abstract unix
//     sockets) processes in the same or a nested domain, as scoped.
//
// Denials: Landlock fails a denied file or TCP operation with EACCES (a
// rename or link that would move a file to where it gets more rights fails
// with EXDEV), and a scoped signal or abstract unix connect with EPERM.
//
// This package makes the Landlock syscalls itself through
// golang.org/x/sys/unix rather than through go-landlock, whose package
// pulls libpsx in to restrict every thread on kernels before ABI 8; see
// Apply for how threads are handled instead.
package landlock
