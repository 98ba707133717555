package seccomp

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

var (
	// ErrUnsupportedArch means strata has no syscall table for the
	// machine's architecture.
	ErrUnsupportedArch = errors.New("seccomp: unsupported architecture")
	// ErrInvalidPolicy marks a Policy naming a syscall strata does not
	// deny, or a Filter that is not well formed.
	ErrInvalidPolicy = errors.New("invalid policy")
)

// Policy says which system calls a sandboxed command is denied beyond the
// base deny list (see the package documentation and docs/sandbox.md).
type Policy struct {
	// DenyNetwork denies creating sockets of every address family except
	// AF_UNIX and AF_NETLINK with NETLINK_ROUTE (--sandbox strict), and on
	// 32-bit x86 the socketcall(2) multiplexer whose arguments seccomp
	// cannot see.
	DenyNetwork bool `json:"deny_network,omitempty"`
	// Allow removes syscalls from the base deny list, e.g. "ptrace" for a
	// debugging session. Each name must be one the base list denies.
	Allow []string `json:"allow,omitempty"`
}

// Agent is the default policy (--sandbox agent): the base deny list, with
// networking left alone.
func Agent() Policy { return Policy{} }

// Strict is Agent plus DenyNetwork (--sandbox strict).
func Strict() Policy { return Policy{DenyNetwork: true} }

// Op compares a syscall argument with a value.
type Op string

// Comparisons, as libseccomp's SCMP_CMP_*.
const (
	OpEq       Op = "eq"        // arg == Value
	OpNe       Op = "ne"        // arg != Value
	OpGt       Op = "gt"        // arg > Value (unsigned, 64-bit)
	OpMaskedEq Op = "masked_eq" // arg & Mask == Value
)

// Arg is a condition on argument Index (0-based) of a syscall.
type Arg struct {
	Index uint   `json:"index"`
	Op    Op     `json:"op"`
	Value uint64 `json:"value"`
	Mask  uint64 `json:"mask,omitempty"`
}

// Rule denies one syscall on one arch with Errno ("EPERM" or "ENOSYS")
// when all Args hold (always, without Args).
type Rule struct {
	Syscall string `json:"syscall"`
	// Nr, when not zero, is the syscall's number on this arch, for the
	// syscalls numbered 424 and up (the same on every arch, plus the x32
	// bit on x32). Apply uses it only when the linked libseccomp does not
	// know Syscall, which happens with a libseccomp older than the kernel.
	Nr    int    `json:"nr,omitempty"`
	Errno string `json:"errno"`
	Args  []Arg  `json:"args,omitempty"`
}

// ArchRules are the rules for one arch.
type ArchRules struct {
	Arch  string `json:"arch"`
	Rules []Rule `json:"rules"`
}

// Filter is a plan: the seccomp filter one machine loads for a Policy.
// Syscalls no rule names are allowed; Arches lists every ABI the filter
// accepts, the kernel kills a process that uses another.
type Filter struct {
	Arches []ArchRules `json:"arches"`
}

// Key is a digest of the plan: equal plans have equal keys, and any
// change to an arch, a rule or an argument changes it. It is what a
// cache of compiled programs is keyed by, and costs a few microseconds
// where encoding the plan as JSON cost 0.3 ms in a fresh process, on
// every sandboxed exec.
func (f *Filter) Key() [32]byte {
	h := sha256.New()
	var b []byte
	str := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	num := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str("strata seccomp plan v1")
	num(uint64(len(f.Arches)))
	for _, a := range f.Arches {
		str(a.Arch)
		num(uint64(len(a.Rules)))
		for _, r := range a.Rules {
			str(r.Syscall)
			num(uint64(r.Nr))
			str(r.Errno)
			num(uint64(len(r.Args)))
			for _, x := range r.Args {
				num(uint64(x.Index))
				str(string(x.Op))
				num(x.Value)
				num(x.Mask)
			}
		}
		h.Write(b)
		b = b[:0]
	}
	h.Write(b)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// Rules returns the rules for arch, or nil.
func (f *Filter) Rules(arch string) []Rule {
	for _, a := range f.Arches {
		if a.Arch == arch {
			return a.Rules
		}
	}
	return nil
}

// archFamilies maps GOARCH to the syscall ABIs such a machine runs: the
// native one first, then the compat ABIs a process may switch to.
var archFamilies = map[string][]string{
	"amd64": {"amd64", "x86", "x32"},
	"386":   {"x86"},
	"arm64": {"arm64", "arm"},
	"arm":   {"arm"},
}

// Archs lists the syscall ABIs Plan covers for goarch.
func Archs(goarch string) ([]string, error) {
	a, ok := archFamilies[goarch]
	if !ok {
		return nil, fmt.Errorf("%w: %q (strata knows amd64, 386, arm64, arm)", ErrUnsupportedArch, goarch)
	}
	return slices.Clone(a), nil
}

const x32SyscallBit = 0x40000000 // Linux: arch/x86/include/uapi/asm/unistd.h __X32_SYSCALL_BIT

// Namespace flags (Linux: include/uapi/linux/sched.h).
const (
	cloneNewTime   = 0x00000080
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
)

// Address families and netlink protocols (Linux: include/linux/socket.h).
const (
	afUnix       = 1
	afNetlink    = 16
	netlinkRoute = 0
)

var (
	x86Only    = []string{"x86"}
	x86Family  = []string{"amd64", "x86", "x32"}
	arch32Time = []string{"x86", "arm"} // 32-bit ABIs with *_time64 syscalls
)

// deny is one entry of the base deny list.
type deny struct {
	name string
	// nr is the syscall number for syscalls numbered 424 and up, which
	// are the same on every arch (Linux: scripts/syscall.tbl), so that
	// a libseccomp older than the kernel can still filter them.
	nr int
	// on lists the arches that have the syscall; nil is all.
	on []string
	// not lists the arches that lack it.
	not []string
}

// baseDeny is what every sandboxed command is denied, with EPERM. Each
// group says why; docs/sandbox.md repeats it for users.
var baseDeny = []deny{
	// Reading or writing another process's memory and file descriptors.
	// Landlock also confines ptrace to the domain; this covers kernels
	// without Landlock and processes inside the same domain.
	{name: "ptrace"},
	{name: "process_vm_readv"},
	{name: "process_vm_writev"},
	{name: "pidfd_getfd", nr: 438},

	// Changing the mount table. A workspace's mounts are set up by strata
	// before the filter; a command that could mount could hide or replace
	// what Landlock fences.
	{name: "mount"},
	{name: "umount", on: x86Only},
	{name: "umount2"},
	{name: "pivot_root"},
	{name: "open_tree", nr: 428},
	{name: "move_mount", nr: 429},
	{name: "fsopen", nr: 430},
	{name: "fsconfig", nr: 431},
	{name: "fsmount", nr: 432},
	{name: "fspick", nr: 433},
	{name: "mount_setattr", nr: 442},
	{name: "open_tree_attr", nr: 467}, // Linux 6.15; libseccomp 2.5 does not know it

	// Loading code into the kernel, or replacing it.
	{name: "kexec_load"},
	{name: "kexec_file_load", not: x86Only},
	{name: "init_module"},
	{name: "finit_module"},
	{name: "delete_module"},
	{name: "bpf"},

	// Large kernel attack surface that no build or test needs, and that
	// sidesteps seccomp itself (io_uring submits I/O without syscalls).
	{name: "perf_event_open"},
	{name: "userfaultfd"},
	{name: "io_uring_setup", nr: 425},
	{name: "io_uring_enter", nr: 426},
	{name: "io_uring_register", nr: 427},
	{name: "keyctl"}, // kernel keyrings are per user, shared with the host
	{name: "add_key"},
	{name: "request_key"},

	// Joining namespaces. Creating them is filtered on the flags of
	// unshare and clone below; clone3 gets ENOSYS.
	{name: "setns"},

	// Whole-machine state.
	{name: "reboot"},
	{name: "swapon"},
	{name: "swapoff"},
	{name: "syslog"},
	{name: "acct"},
	{name: "settimeofday"},
	{name: "stime", on: x86Only},
	{name: "clock_settime"},
	{name: "clock_settime64", on: arch32Time},
	// clock_adjtime can step the clock; its read-only use is rare.
	// adjtimex stays allowed, as in Docker: its modes are in memory, the
	// read-only call is common (ntp_gettime), and changing the clock
	// needs CAP_SYS_TIME in the initial user namespace.
	{name: "clock_adjtime"},
	{name: "clock_adjtime64", on: arch32Time},

	// Opening files by handle bypasses path-based checks (the "shocker"
	// container escape); I/O ports and vm86 reach hardware directly.
	{name: "open_by_handle_at"},
	{name: "iopl", on: x86Family},
	{name: "ioperm", on: x86Family},
	{name: "vm86", on: x86Only},
	{name: "vm86old", on: x86Only},
}

// The CLONE_NEW* flags, each denied on unshare(2) (arg 0) and, except
// CLONE_NEWTIME, which clone(2) does not accept and whose bit is part of
// clone's exit-signal byte, on clone(2) (arg 0 on every supported arch).
var nsFlags = []uint64{cloneNewNS, cloneNewCgroup, cloneNewUTS, cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet, cloneNewTime}

// Plan computes the filter that enforces p on a machine whose Go
// architecture is goarch (runtime.GOARCH), covering its compat ABIs too.
// It is pure.
func Plan(p Policy, goarch string) (*Filter, error) {
	arches, err := Archs(goarch)
	if err != nil {
		return nil, err
	}
	allow := map[string]bool{}
	for _, name := range p.Allow {
		if !slices.ContainsFunc(baseDeny, func(d deny) bool { return d.name == name }) &&
			name != "unshare" && name != "clone" && name != "clone3" {
			return nil, fmt.Errorf("seccomp: %w: Allow %q: not on the deny list", ErrInvalidPolicy, name)
		}
		allow[name] = true
	}
	f := &Filter{}
	for _, arch := range arches {
		f.Arches = append(f.Arches, ArchRules{Arch: arch, Rules: archRules(p, arch, allow)})
	}
	return f, nil
}

func archRules(p Policy, arch string, allow map[string]bool) []Rule {
	var rules []Rule
	add := func(r Rule) {
		if !allow[r.Syscall] {
			rules = append(rules, r)
		}
	}
	for _, d := range baseDeny {
		if d.on != nil && !slices.Contains(d.on, arch) || slices.Contains(d.not, arch) {
			continue
		}
		add(Rule{Syscall: d.name, Nr: genericNr(d.nr, arch), Errno: "EPERM"})
	}
	for _, flag := range nsFlags {
		add(Rule{Syscall: "unshare", Errno: "EPERM", Args: []Arg{{Index: 0, Op: OpMaskedEq, Mask: flag, Value: flag}}})
	}
	for _, flag := range nsFlags {
		if flag != cloneNewTime {
			add(Rule{Syscall: "clone", Errno: "EPERM", Args: []Arg{{Index: 0, Op: OpMaskedEq, Mask: flag, Value: flag}}})
		}
	}
	add(Rule{Syscall: "clone3", Nr: genericNr(435, arch), Errno: "ENOSYS"})

	if p.DenyNetwork {
		rules = append(rules, socketRules(arch)...)
	}
	return rules
}

// genericNr is the number of a syscall numbered 424+ on arch.
func genericNr(nr int, arch string) int {
	if nr != 0 && arch == "x32" {
		return nr | x32SyscallBit
	}
	return nr
}

// socketRules deny socket(2) for every address family but AF_UNIX and
// NETLINK_ROUTE: family 0, 2..15, 17 and up (unsigned, so garbage in the
// upper half of the register is denied too), and netlink protocols other
// than NETLINK_ROUTE, which glibc's getaddrinfo and if_nameindex use to
// list interfaces. AF_UNIX stays: shells, language servers, test runners
// and X11/Wayland clients talk over it. On i386, socketcall(2) is denied
// outright: it multiplexes every socket call with its arguments in memory,
// and since Linux 4.3 glibc uses the direct calls when they exist.
func socketRules(arch string) []Rule {
	rule := func(args ...Arg) Rule {
		return Rule{Syscall: "socket", Errno: "EPERM", Args: args}
	}
	rules := []Rule{
		rule(Arg{Index: 0, Op: OpEq, Value: 0}),
		rule(Arg{Index: 0, Op: OpGt, Value: afNetlink}),
		rule(Arg{Index: 0, Op: OpEq, Value: afNetlink}, Arg{Index: 2, Op: OpNe, Value: netlinkRoute}),
	}
	for fam := uint64(afUnix + 1); fam < afNetlink; fam++ {
		rules = append(rules, rule(Arg{Index: 0, Op: OpEq, Value: fam}))
	}
	if arch == "x86" {
		rules = append(rules, Rule{Syscall: "socketcall", Errno: "EPERM"})
	}
	return rules
}
