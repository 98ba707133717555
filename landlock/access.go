package landlock

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"strings"
)

// FSAccess is a set of Landlock filesystem access rights
// (LANDLOCK_ACCESS_FS_*). Bit values are the kernel's (Linux:
// include/uapi/linux/landlock.h), so a value goes to the kernel as is. In JSON
// it is a list of names ("read_file", "refer", ...).
type FSAccess uint64

// Filesystem access rights, named after the kernel's constants.
const (
	FSExecute    FSAccess = 1 << 0  // ABI 1
	FSWriteFile  FSAccess = 1 << 1  // ABI 1
	FSReadFile   FSAccess = 1 << 2  // ABI 1
	FSReadDir    FSAccess = 1 << 3  // ABI 1
	FSRemoveDir  FSAccess = 1 << 4  // ABI 1
	FSRemoveFile FSAccess = 1 << 5  // ABI 1
	FSMakeChar   FSAccess = 1 << 6  // ABI 1
	FSMakeDir    FSAccess = 1 << 7  // ABI 1
	FSMakeReg    FSAccess = 1 << 8  // ABI 1
	FSMakeSock   FSAccess = 1 << 9  // ABI 1
	FSMakeFifo   FSAccess = 1 << 10 // ABI 1
	FSMakeBlock  FSAccess = 1 << 11 // ABI 1
	FSMakeSym    FSAccess = 1 << 12 // ABI 1
	FSRefer      FSAccess = 1 << 13 // ABI 2
	FSTruncate   FSAccess = 1 << 14 // ABI 3
	FSIoctlDev   FSAccess = 1 << 15 // ABI 5
)

var fsNames = []string{
	"execute", "write_file", "read_file", "read_dir", "remove_dir",
	"remove_file", "make_char", "make_dir", "make_reg", "make_sock",
	"make_fifo", "make_block", "make_sym", "refer", "truncate", "ioctl_dev",
}

// Groups of rights that policies grant.
const (
	// fsFile is what the kernel accepts on a rule for a non-directory:
	// the rights that act on an opened file (landlock.h, "file" rights).
	fsFile = FSExecute | FSWriteFile | FSReadFile | FSTruncate | FSIoctlDev

	// fsRO is read + execute beneath a directory.
	fsRO = FSExecute | FSReadFile | FSReadDir
	// fsROFiles is read + execute of files, without listing directories.
	fsROFiles = FSExecute | FSReadFile
	// fsRWFiles is read + write of existing files (device nodes such as
	// /dev/null and ptys), including ioctl on them, without creating,
	// removing or listing anything.
	fsRWFiles = FSReadFile | FSWriteFile | FSTruncate | FSIoctlDev
	// fsRW is everything beneath a directory except ioctl on devices:
	// create, remove, rename and link, including across directories
	// (REFER) so that cross-directory renames do not fail with EXDEV.
	fsRW = FSExecute | FSWriteFile | FSReadFile | FSReadDir | FSRemoveDir |
		FSRemoveFile | FSMakeChar | FSMakeDir | FSMakeReg | FSMakeSock |
		FSMakeFifo | FSMakeBlock | FSMakeSym | FSRefer | FSTruncate
)

// String lists the rights, e.g. "read_file,read_dir"; "none" when empty.
func (a FSAccess) String() string { return bitsString(uint64(a), fsNames) }

// MarshalJSON encodes the set as a list of names.
func (a FSAccess) MarshalJSON() ([]byte, error) { return bitsMarshal(uint64(a), fsNames) }

// UnmarshalJSON decodes a list of names.
func (a *FSAccess) UnmarshalJSON(b []byte) error {
	v, err := bitsUnmarshal(b, fsNames, "filesystem access right")
	*a = FSAccess(v)
	return err
}

// NetAccess is a set of Landlock network access rights
// (LANDLOCK_ACCESS_NET_*, ABI 4+). In JSON it is a list of names.
type NetAccess uint64

// Network access rights.
const (
	NetBindTCP    NetAccess = 1 << 0 // ABI 4
	NetConnectTCP NetAccess = 1 << 1 // ABI 4
)

var netNames = []string{"bind_tcp", "connect_tcp"}

func (a NetAccess) String() string { return bitsString(uint64(a), netNames) }

// MarshalJSON encodes the set as a list of names.
func (a NetAccess) MarshalJSON() ([]byte, error) { return bitsMarshal(uint64(a), netNames) }

// UnmarshalJSON decodes a list of names.
func (a *NetAccess) UnmarshalJSON(b []byte) error {
	v, err := bitsUnmarshal(b, netNames, "network access right")
	*a = NetAccess(v)
	return err
}

// Scope is a set of Landlock IPC scopes (LANDLOCK_SCOPE_*, ABI 6+). A
// scoped process cannot reach processes outside its Landlock domain by
// that IPC. In JSON it is a list of names.
type Scope uint64

// IPC scopes.
const (
	ScopeAbstractUnixSocket Scope = 1 << 0 // ABI 6
	ScopeSignal             Scope = 1 << 1 // ABI 6
)

var scopeNames = []string{"abstract_unix_socket", "signal"}

func (s Scope) String() string { return bitsString(uint64(s), scopeNames) }

// MarshalJSON encodes the set as a list of names.
func (s Scope) MarshalJSON() ([]byte, error) { return bitsMarshal(uint64(s), scopeNames) }

// UnmarshalJSON decodes a list of names.
func (s *Scope) UnmarshalJSON(b []byte) error {
	v, err := bitsUnmarshal(b, scopeNames, "scope")
	*s = Scope(v)
	return err
}

// RestrictFlags are landlock_restrict_self(2) flags
// (LANDLOCK_RESTRICT_SELF_*). Only the audit-logging flags of ABI 7 are
// planned; TSYNC (ABI 8) is chosen by Apply. In JSON a list of names.
type RestrictFlags uint32

// Restrict flags.
const (
	// LogSameExecOff stops logging denials of the process that called
	// Apply before it execs. Not used by the presets.
	LogSameExecOff RestrictFlags = 1 << 0
	// LogNewExecOn logs denials of the programs exec'd after Apply, which
	// the kernel does not log by default (ABI 7).
	LogNewExecOn RestrictFlags = 1 << 1
	// LogSubdomainsOff stops logging denials of nested domains.
	LogSubdomainsOff RestrictFlags = 1 << 2
)

var flagNames = []string{"log_same_exec_off", "log_new_exec_on", "log_subdomains_off"}

func (f RestrictFlags) String() string { return bitsString(uint64(f), flagNames) }

// MarshalJSON encodes the flags as a list of names.
func (f RestrictFlags) MarshalJSON() ([]byte, error) { return bitsMarshal(uint64(f), flagNames) }

// UnmarshalJSON decodes a list of names.
func (f *RestrictFlags) UnmarshalJSON(b []byte) error {
	v, err := bitsUnmarshal(b, flagNames, "restrict flag")
	*f = RestrictFlags(v)
	return err
}

func bitNames(v uint64, names []string) []string {
	out := []string{}
	for v != 0 {
		i := bits.TrailingZeros64(v)
		v &^= 1 << i
		if i < len(names) {
			out = append(out, names[i])
		} else {
			out = append(out, fmt.Sprintf("bit%d", i))
		}
	}
	return out
}

func bitsString(v uint64, names []string) string {
	if v == 0 {
		return "none"
	}
	return strings.Join(bitNames(v, names), ",")
}

func bitsMarshal(v uint64, names []string) ([]byte, error) {
	for i := len(names); i < 64; i++ {
		if v&(1<<i) != 0 {
			return nil, fmt.Errorf("landlock: unknown bit %d in %#x", i, v)
		}
	}
	return json.Marshal(bitNames(v, names))
}

func bitsUnmarshal(b []byte, names []string, what string) (uint64, error) {
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, err
	}
	var v uint64
next:
	for _, n := range list {
		for i, name := range names {
			if n == name {
				v |= 1 << i
				continue next
			}
		}
		return 0, fmt.Errorf("landlock: unknown %s %q", what, n)
	}
	return v, nil
}
