package sandbox

import (
	"runtime"
	"slices"

	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/seccomp"
)

// Without namespaces (a reflink or copy workspace where user namespaces
// are denied: nsexec.RunNoNS) there is no view, no private /tmp and no
// network namespace: Landlock is the only fence around the filesystem,
// and seccomp refuses what only a mount namespace would hide.

// NoNSPolicy is the Landlock policy of a namespace-free command: the agent
// policy (landlock.Agent: the workspace and tmp read-write; /usr /bin
// /sbin /lib* /etc /opt read-only and executable; /proc and the CPU, NUMA
// and cgroup parts of /sys read-only; /dev/null, zero, full, random,
// urandom and tty; signals and abstract sockets scoped) without what only
// a mount namespace makes private: /dev/shm, /dev/ptmx and /dev/pts are
// the host's, shared with every process of the user (their shared memory,
// their terminals), so they are left out. With restrictTCP (--net none,
// strict) every TCP connect and bind is denied but the ports allowed.
func NoNSPolicy(workspace, tmp string, extraRO, extraRW []string, restrictTCP bool) landlock.Policy {
	p := landlock.Agent(workspace, tmp, extraRO, extraRW)
	p.RW = slices.DeleteFunc(p.RW, func(s string) bool { return s == "/dev/shm" })
	p.RWFiles = slices.DeleteFunc(p.RWFiles, func(s string) bool { return s == "/dev/ptmx" || s == "/dev/pts" })
	p.RestrictTCP = restrictTCP
	return p
}

// BuildNoNS plans a request for a namespace-free command: NoNSPolicy for
// Landlock (Target the workspace directory, Tmp its private temporary
// directory), and for seccomp the preset's program — strict's, which
// denies every IP socket, when netNone — followed by
// seccomp.UnixSocketDeny: no unix socket can be created, so the host's
// (session bus, ssh-agent, docker.sock), which no mount namespace hides
// here, cannot be reached. A kernel without Landlock gives a plan whose
// Landlock is nil: nsexec.RunNoNS refuses it (fail closed).
func BuildNoNS(req Request, netNone bool) (*Plan, error) {
	pol := NoNSPolicy(req.Target, req.Tmp, req.RO, req.RW, req.Strict || netNone)
	out, err := plan(req, pol, req.Strict || netNone)
	if err != nil {
		return nil, err
	}
	deny, err := seccomp.UnixSocketDeny(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	out.Seccomp = append(out.Seccomp, deny)
	return out, nil
}
