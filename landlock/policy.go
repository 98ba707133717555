package landlock

// Policy says what a sandboxed command may touch. It is data: Plan turns it
// into the rules one kernel can enforce, Apply enforces them.
//
// Paths are absolute and are resolved (symlinks followed) when the plan is
// made. A path that does not exist is skipped and recorded in
// Plan.Skipped; it is not an error, so that presets can name directories
// that only some distributions have (/lib32, /libx32).
//
// Workspace paths must be the merged directory (the overlay mount point
// the command sees), never a layer, upper or work directory: Landlock
// attaches rules to the inode the path resolves to, and the merged view's
// inodes are overlay inodes, distinct from the layers' inodes. A rule on a
// layer path would not match anything the command opens.
type Policy struct {
	// RW are hierarchies the command may read, write, execute, create in,
	// remove from and rename within or across (REFER, ABI 2+).
	RW []string `json:"rw,omitempty"`
	// RO are hierarchies the command may read, list and execute.
	RO []string `json:"ro,omitempty"`
	// ROFiles are files (or hierarchies of files) the command may read and
	// execute, without listing directories.
	ROFiles []string `json:"ro_files,omitempty"`
	// RWFiles are existing files, typically device nodes such as /dev/null
	// or the ptys under /dev/pts, that the command may read, write,
	// truncate and ioctl (ABI 5+), but not create, remove or list.
	RWFiles []string `json:"rw_files,omitempty"`

	// ConnectTCP, when not empty, restricts TCP connect(2) to these remote
	// ports (ABI 4+). Empty leaves connect unrestricted unless RestrictTCP.
	ConnectTCP []uint16 `json:"connect_tcp,omitempty"`
	// BindTCP, when not empty, restricts TCP bind(2) to these local ports
	// (ABI 4+). Port 0 (an ephemeral port) must be listed to be allowed.
	BindTCP []uint16 `json:"bind_tcp,omitempty"`
	// RestrictTCP restricts both TCP connect and bind to the listed ports,
	// denying all TCP when none are listed.
	RestrictTCP bool `json:"restrict_tcp,omitempty"`

	// ScopeSignals denies sending signals to processes outside the domain
	// (ABI 6+): an agent cannot kill the user's other processes.
	ScopeSignals bool `json:"scope_signals,omitempty"`
	// ScopeAbstractUnix denies connecting to abstract unix sockets created
	// outside the domain (ABI 6+), e.g. a desktop session's D-Bus or X11.
	ScopeAbstractUnix bool `json:"scope_abstract_unix,omitempty"`

	// LogExec asks the kernel to audit-log denials of the exec'd command
	// (ABI 7+). Off by default: an agent probing the fence would flood the
	// audit log.
	LogExec bool `json:"log_exec,omitempty"`

	// RequireABI makes Plan fail with *ABIError when the kernel's Landlock
	// ABI is older (--sandbox-require-abi). 0 accepts any ABI, including no
	// Landlock at all, with warnings.
	RequireABI int `json:"require_abi,omitempty"`
}

// restrictsFS reports whether the policy restricts the filesystem at all.
// A policy that names no path leaves the filesystem alone (for example a
// network-only policy); a policy that names paths denies everything else.
func (p Policy) restrictsFS() bool {
	return len(p.RW)+len(p.RO)+len(p.ROFiles)+len(p.RWFiles) > 0
}

// wantNet is the set of network rights the policy restricts.
func (p Policy) wantNet() NetAccess {
	var a NetAccess
	if p.RestrictTCP || len(p.ConnectTCP) > 0 {
		a |= NetConnectTCP
	}
	if p.RestrictTCP || len(p.BindTCP) > 0 {
		a |= NetBindTCP
	}
	return a
}

func (p Policy) wantScope() Scope {
	var s Scope
	if p.ScopeSignals {
		s |= ScopeSignal
	}
	if p.ScopeAbstractUnix {
		s |= ScopeAbstractUnixSocket
	}
	return s
}

// System hierarchies every tool needs to read and execute: binaries,
// libraries, the dynamic loader, configuration (ld.so.cache, passwd,
// resolv.conf, ssl certificates, gitconfig), and /opt for vendor
// toolchains. Missing ones (/lib32 on most systems) are skipped.
var systemRO = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	// systemd-resolved keeps the target of the /etc/resolv.conf symlink
	// here; without it DNS fails even though networking is allowed.
	"/run/systemd/resolve",
}

// Kernel interfaces real tools read. /proc: /proc/self/{exe,maps,status,
// fd,cgroup,mountinfo}, /proc/cpuinfo, /proc/meminfo, /proc/stat (node,
// python, gcc, the Go runtime). Reading another process's private entries
// (environ, mem, fd, root) goes through ptrace_may_access, which Landlock
// denies for processes outside the domain, so other agents' environments
// stay unreadable. /sys: CPU and NUMA topology (glibc's
// sysconf(_SC_NPROCESSORS_CONF), OpenMP), cgroup limits (libuv, the JVM,
// Go's GOMAXPROCS), transparent huge pages (the Go runtime). Nothing under
// /proc or /sys is writable.
var kernelRO = []string{
	"/proc",
	"/sys/devices/system/cpu",
	"/sys/devices/system/node",
	"/sys/fs/cgroup",
	"/sys/kernel/mm/transparent_hugepage",
}

// Device nodes: read, write and ioctl, no creation. /dev/tty and the ptys
// for interactive shells and programs that allocate a pty (script, expect,
// node-pty, python's pty module); the rest are the usual sinks and sources.
var devRWFiles = []string{
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
	"/dev/tty", "/dev/ptmx", "/dev/pts",
}

// Agent is the default policy (--sandbox agent): read-write on the
// workspace's merged directory, on tmp (the command's private /tmp) and on
// extraRW; read and execute on the system (systemRO, kernelRO) and on
// extraRO; read-write on the usual device nodes and on /dev/shm (POSIX
// shared memory and semaphores: python's multiprocessing, sem_open).
// Nothing else: not $HOME, not the strata store, not other workspaces.
//
// TCP is not restricted, so host networking keeps working; signals and
// abstract unix sockets are scoped to the domain, so the command cannot
// signal or talk to the user's other processes (including other agents)
// through them.
//
// workspace must be the merged (mount point) path; see Policy. Empty
// workspace or tmp are left out.
func Agent(workspace, tmp string, extraRO, extraRW []string) Policy {
	p := Policy{
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
	}
	for _, d := range []string{workspace, tmp} {
		if d != "" {
			p.RW = append(p.RW, d)
		}
	}
	p.RW = append(p.RW, "/dev/shm")
	p.RW = append(p.RW, extraRW...)
	p.RO = append(p.RO, systemRO...)
	p.RO = append(p.RO, kernelRO...)
	p.RO = append(p.RO, extraRO...)
	p.RWFiles = append(p.RWFiles, devRWFiles...)
	return p
}

// Strict is Agent with all TCP denied (--sandbox strict): connect and bind
// are allowed only to ports the caller adds to ConnectTCP and BindTCP.
// Strict also implies --net none and the seccomp socket deny; Landlock's
// part is defence in depth for kernels or setups without them.
func Strict(workspace, tmp string, extraRO, extraRW []string) Policy {
	p := Agent(workspace, tmp, extraRO, extraRW)
	p.RestrictTCP = true
	return p
}
