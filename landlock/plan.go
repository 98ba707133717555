package landlock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// MaxABI is the newest Landlock ABI this package plans for. A newer kernel
// is planned for as MaxABI, which it enforces unchanged (Landlock ABIs are
// backward compatible). ABI 8 only adds TSYNC, which Apply uses when the
// kernel has it; ABI 9 (pathname unix sockets) and 10 (UDP) are not
// planned yet.
const MaxABI = 7

var (
	// ErrUnsupported means the running kernel offers no Landlock.
	ErrUnsupported = errors.New("landlock unsupported")
	// ErrInvalidPolicy marks a Policy that no kernel could enforce as
	// written (a relative path, an impossible RequireABI).
	ErrInvalidPolicy = errors.New("invalid policy")
)

// ABIError is returned by Plan when the policy requires a newer Landlock
// ABI than the kernel has (--sandbox-require-abi). It matches
// ErrUnsupported with errors.Is.
type ABIError struct {
	Have int // the kernel's ABI; 0 is no Landlock
	Need int // Policy.RequireABI
}

func (e *ABIError) Error() string {
	if e.Have == 0 {
		return fmt.Sprintf("landlock: policy requires ABI %d; this kernel has no Landlock (see strata doctor)", e.Need)
	}
	return fmt.Sprintf("landlock: policy requires ABI %d; this kernel has ABI %d (Linux 6.12+ has ABI 6, 6.15+ ABI 7)", e.Need, e.Have)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *ABIError) Is(target error) bool { return target == ErrUnsupported }

// PathRule grants Access beneath Path (landlock_add_rule(2),
// LANDLOCK_RULE_PATH_BENEATH).
type PathRule struct {
	Path   string   `json:"path"`
	Access FSAccess `json:"access"`
}

// PortRule grants Access to one TCP port (LANDLOCK_RULE_NET_PORT, ABI 4+).
type PortRule struct {
	Port   uint16    `json:"port"`
	Access NetAccess `json:"access"`
}

// Ruleset is a plan: the exact Landlock ruleset one kernel will enforce
// for a Policy, computed by Plan and enforced by Apply. It is plain data
// and survives a JSON round trip, so a parent can plan and print warnings
// and a re-executed child can apply it right before exec.
type Ruleset struct {
	// ABI is the ABI the ruleset was planned for: the kernel's, capped at
	// MaxABI. KernelABI is the kernel's own; Apply uses TSYNC when it is 8+.
	ABI       int `json:"abi"`
	KernelABI int `json:"kernel_abi"`

	// Handled rights are denied unless a rule grants them; rights not
	// handled are allowed everywhere.
	HandledFS  FSAccess      `json:"handled_fs"`
	HandledNet NetAccess     `json:"handled_net"`
	Scoped     Scope         `json:"scoped"`
	Flags      RestrictFlags `json:"flags"`

	Paths []PathRule `json:"paths"`
	Ports []PortRule `json:"ports"`

	// Skipped are policy paths that did not exist when planning; no rule
	// was made for them.
	Skipped []string `json:"skipped"`
	// Warnings name what the policy asks for that this kernel cannot
	// enforce, one line each, for the caller to print on stderr.
	Warnings []string `json:"warnings"`
}

// Enforced reports whether Apply restricts anything.
func (r *Ruleset) Enforced() bool {
	return r.HandledFS != 0 || r.HandledNet != 0 || r.Scoped != 0
}

// Rights each ABI can handle (Documentation/userspace-api/landlock.rst).
func supportedFS(abi int) FSAccess {
	switch {
	case abi >= 5:
		return FSRefer<<3 - 1 // up to FSIoctlDev
	case abi >= 3:
		return FSRefer<<2 - 1 // up to FSTruncate
	case abi == 2:
		return FSRefer<<1 - 1 // up to FSRefer
	case abi == 1:
		return FSRefer - 1
	}
	return 0
}

func supportedNet(abi int) NetAccess {
	if abi >= 4 {
		return NetBindTCP | NetConnectTCP
	}
	return 0
}

func supportedScope(abi int) Scope {
	if abi >= 6 {
		return ScopeSignal | ScopeAbstractUnixSocket
	}
	return 0
}

func supportedFlags(abi int) RestrictFlags {
	if abi >= 7 {
		return LogSameExecOff | LogNewExecOn | LogSubdomainsOff
	}
	return 0
}

// fsAll is every filesystem right this package plans.
const fsAll = FSRefer<<3 - 1

// What a right missing from an ABI means for the sandboxed command; each
// entry becomes one warning when the policy wants it and the ABI lacks it.
var gaps = []struct {
	abi   int
	fs    FSAccess
	net   NetAccess
	scope Scope
	flags RestrictFlags
	means string
}{
	{abi: 3, fs: FSTruncate, means: "truncate(2) works on any file the user may write"},
	{abi: 4, net: NetBindTCP | NetConnectTCP, means: "TCP bind and connect work on any port"},
	{abi: 5, fs: FSIoctlDev, means: "ioctl(2) works on any device file the command can open"},
	{abi: 6, scope: ScopeSignal | ScopeAbstractUnixSocket, means: "the command can signal, or connect to abstract unix sockets of, processes outside the sandbox"},
	{abi: 7, flags: LogNewExecOn, means: "the command's denials are not audit-logged"},
}

// Plan computes the ruleset that enforces p on a kernel with Landlock ABI
// abi (from ABI). Like go-landlock's best-effort mode it downgrades to what
// the ABI supports, but it records every right it cannot enforce in
// Ruleset.Warnings, and it fails with *ABIError when p.RequireABI > abi.
//
// Plan makes no syscall that changes state: it only stats the policy's
// paths, to skip missing ones and to give non-directories only the rights
// the kernel accepts on a file.
func Plan(p Policy, abi int) (*Ruleset, error) {
	return plan(p, abi, statDir)
}

// statDir reports whether path (symlinks followed, as Apply's open does)
// is a directory.
func statDir(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// isMissing reports whether a stat error means the path is not there.
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func plan(p Policy, abi int, stat func(string) (bool, error)) (*Ruleset, error) {
	if abi < 0 {
		return nil, fmt.Errorf("landlock: negative ABI %d", abi)
	}
	if err := validate(p); err != nil {
		return nil, err
	}
	if p.RequireABI > abi {
		return nil, &ABIError{Have: abi, Need: p.RequireABI}
	}
	r := &Ruleset{
		ABI:       min(abi, MaxABI),
		KernelABI: abi,
		Paths:     []PathRule{},
		Ports:     []PortRule{},
		Skipped:   []string{},
		Warnings:  []string{},
	}
	abi = r.ABI

	var wantFS FSAccess
	if p.restrictsFS() {
		wantFS = fsAll
	}
	wantNet := p.wantNet()
	wantScope := p.wantScope()
	var wantFlags RestrictFlags
	if p.LogExec {
		wantFlags = LogNewExecOn
	}

	if abi == 0 {
		if wantFS != 0 || wantNet != 0 || wantScope != 0 {
			r.Warnings = append(r.Warnings, "landlock: not available on this kernel (ABI 0): "+
				"nothing is restricted, neither files, nor TCP, nor signals and abstract unix sockets")
		}
		return r, nil
	}

	r.HandledFS = wantFS & supportedFS(abi)
	r.HandledNet = wantNet & supportedNet(abi)
	r.Scoped = wantScope & supportedScope(abi)
	r.Flags = wantFlags & supportedFlags(abi)

	// ABI 1 denies every rename or link across directories inside a
	// domain (EXDEV) and has no right to allow it. git, npm and pip do
	// such renames inside the workspace all the time, so a writable
	// policy on ABI 1 would break them; go-landlock's best-effort mode
	// gives up on the filesystem for the same reason.
	if r.HandledFS != 0 && len(p.RW) > 0 && r.HandledFS&FSRefer == 0 {
		r.HandledFS = 0
		r.Warnings = append(r.Warnings, fmt.Sprintf("landlock ABI %d: files are not restricted: "+
			"this ABI cannot allow renaming files across directories (refer, needs ABI 2), "+
			"which tools need inside the workspace", abi))
	}

	for _, g := range gaps {
		if g.abi <= abi {
			continue
		}
		var names []string
		if wantFS&g.fs != 0 && r.HandledFS != 0 {
			names = append(names, (wantFS & g.fs).String())
		}
		if wantNet&g.net != 0 {
			names = append(names, (wantNet & g.net).String())
		}
		if wantScope&g.scope != 0 {
			names = append(names, "scope "+(wantScope&g.scope).String())
		}
		if wantFlags&g.flags != 0 {
			names = append(names, (wantFlags & g.flags).String())
		}
		if len(names) > 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("landlock ABI %d: cannot enforce %s (needs ABI %d): %s",
				abi, strings.Join(names, ", "), g.abi, g.means))
		}
	}

	if r.HandledFS != 0 {
		if err := r.addPaths(p, stat); err != nil {
			return nil, err
		}
	}
	if r.HandledNet != 0 {
		r.addPorts(p.ConnectTCP, NetConnectTCP&r.HandledNet)
		r.addPorts(p.BindTCP, NetBindTCP&r.HandledNet)
	}
	return r, nil
}

func validate(p Policy) error {
	if p.RequireABI < 0 || p.RequireABI > MaxABI {
		return fmt.Errorf("landlock: %w: RequireABI %d: strata plans ABIs 1 to %d", ErrInvalidPolicy, p.RequireABI, MaxABI)
	}
	for _, l := range []struct {
		name  string
		paths []string
	}{{"RW", p.RW}, {"RO", p.RO}, {"ROFiles", p.ROFiles}, {"RWFiles", p.RWFiles}} {
		for _, path := range l.paths {
			if !filepath.IsAbs(path) {
				// A relative path would resolve against the child's
				// working directory, not the caller's.
				return fmt.Errorf("landlock: %w: %s path %q is not absolute", ErrInvalidPolicy, l.name, path)
			}
		}
	}
	return nil
}

func (r *Ruleset) addPaths(p Policy, stat func(string) (bool, error)) error {
	index := map[string]int{} // path -> index in r.Paths
	skipped := map[string]bool{}
	for _, l := range []struct {
		name   string
		paths  []string
		access FSAccess
	}{
		{"RW", p.RW, fsRW},
		{"RO", p.RO, fsRO},
		{"ROFiles", p.ROFiles, fsROFiles},
		{"RWFiles", p.RWFiles, fsRWFiles},
	} {
		for _, path := range l.paths {
			path = filepath.Clean(path)
			if skipped[path] {
				continue
			}
			isDir, err := stat(path)
			if isMissing(err) {
				skipped[path] = true
				r.Skipped = append(r.Skipped, path)
				continue
			}
			if err != nil {
				return fmt.Errorf("landlock: %s path: %w", l.name, err)
			}
			access := l.access & r.HandledFS
			if !isDir {
				// The kernel refuses directory rights on a file (EINVAL).
				access &= fsFile
			}
			if access == 0 {
				continue
			}
			if i, ok := index[path]; ok {
				r.Paths[i].Access |= access
				continue
			}
			index[path] = len(r.Paths)
			r.Paths = append(r.Paths, PathRule{Path: path, Access: access})
		}
	}
	return nil
}

func (r *Ruleset) addPorts(ports []uint16, access NetAccess) {
	if access == 0 {
		return
	}
	for _, port := range ports {
		i := slices.IndexFunc(r.Ports, func(pr PortRule) bool { return pr.Port == port })
		if i >= 0 {
			r.Ports[i].Access |= access
			continue
		}
		r.Ports = append(r.Ports, PortRule{Port: port, Access: access})
	}
}
