// Package seccomp denies a sandboxed command the system calls that reach
// beyond its workspace: debugging other processes, mounting, loading
// kernel code, creating namespaces, setting the clock, and (strict) IP
// networking. It works in steps: Plan is pure and table-tested; the plans
// of the presets (Agent, Strict) on every arch are compiled to classic BPF
// once, by libseccomp at `go generate` time (internal/compiler, the only
// code that links libseccomp and cgo), and embedded (programs_gen.go);
// Program returns a plan's program by its key, and Apply (or nsexec, on
// one thread) loads it. So the package is pure Go at run time.
//
// Terms, used exactly in this package:
//
//   - policy: what strata wants denied (Policy), independent of the
//     machine. Agent and Strict are the presets behind --sandbox.
//   - arch: a system call ABI as libseccomp names it ("amd64", "x86",
//     "x32", "arm64", "arm"). One process can use several: a 64-bit x86
//     process can make 32-bit calls with int $0x80, which the kernel
//     numbers differently. A filter that only knew amd64 numbers would
//     let ptrace through as i386 call 26, so a plan covers every arch the
//     machine can run, and the kernel rejects the rest (bad arch action:
//     kill the process).
//   - rule: one deny: a syscall on one arch, the errno it fails with, and
//     optionally conditions on its arguments, all of which must hold.
//   - plan, or filter: the rules per arch for one policy (Filter), plain
//     data that survives a JSON round trip; its Key selects its program.
//   - program: the classic BPF that enforces a plan, as loaded with
//     seccomp(SECCOMP_SET_MODE_FILTER).
//
// Every syscall not named by a rule is allowed (default action ALLOW):
// this is a deny list, not an allow list, so that any tool an agent may
// run works unless it does one of the few things a workspace must not.
// Denied calls fail with EPERM, which tools treat as "not permitted here"
// and degrade (libuv falls back from io_uring, git from hard links),
// rather than being killed. clone3 fails with ENOSYS instead, as in Docker
// and runc: its flags are in memory where seccomp cannot see them, and
// ENOSYS makes glibc fall back to clone(2), whose flags a rule can check.
package seccomp
