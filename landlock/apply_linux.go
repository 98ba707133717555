package landlock

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rulesetAttr is struct landlock_ruleset_attr up to ABI 6 (scoped). The
// kernel accepts a larger struct from an older kernel's point of view as
// long as the tail is zero (copy_min_struct_from_user), so one size fits
// ABIs 1 to 7.
type rulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// pathBeneathAttr is struct landlock_path_beneath_attr, which the kernel
// declares packed: 12 bytes. The Go struct has 4 bytes of trailing
// padding that the kernel never reads.
type pathBeneathAttr struct {
	allowedAccess uint64
	parentFd      int32
}

// netPortAttr is struct landlock_net_port_attr (ABI 4+).
type netPortAttr struct {
	allowedAccess uint64
	port          uint64
}

const (
	ruleTypePathBeneath = unix.LANDLOCK_RULE_PATH_BENEATH
	ruleTypeNetPort     = 2 // LANDLOCK_RULE_NET_PORT; not in x/sys/unix yet
	// erratumSignalScope is Landlock erratum 2 (ABI 6): signals between
	// threads of one process could be denied by signal scoping. Fixed
	// kernels report the bit in LANDLOCK_CREATE_RULESET_ERRATA.
	erratumSignalScope = 1 << 1
)

// ABI returns the Landlock ABI version of the running kernel: 0 when
// Landlock is unavailable, with an error matching ErrUnsupported that says
// why (ENOSYS: the kernel was built without it, or a seccomp filter hides
// it; EOPNOTSUPP: built in but not enabled at boot). Like go-landlock, it
// reports ABI 5 for an ABI 6+ kernel that lacks the fix for erratum 2, so
// that signal scoping is only used where it works.
func ABI() (int, error) {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch e {
	case 0:
	case unix.ENOSYS:
		return 0, fmt.Errorf("%w: kernel built without Landlock (CONFIG_SECURITY_LANDLOCK) or a seccomp filter denies it: %w", ErrUnsupported, e)
	case unix.EOPNOTSUPP:
		return 0, fmt.Errorf("%w: Landlock is built in but disabled at boot; add landlock to the lsm= kernel parameter: %w", ErrUnsupported, e)
	default:
		return 0, fmt.Errorf("landlock: landlock_create_ruleset(LANDLOCK_CREATE_RULESET_VERSION): %w", e)
	}
	abi := int(v)
	if abi >= 6 {
		errata, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
		if e != 0 || errata&erratumSignalScope == 0 {
			abi = 5
		}
	}
	return abi, nil
}

// Apply enforces the ruleset on the calling process, irreversibly. It
// first sets no_new_privs (required by landlock_restrict_self for an
// unprivileged caller, and wanted anyway: setuid binaries must not gain
// privileges inside a sandbox).
//
// Threads: before ABI 8 Landlock restricts only the calling thread, so
// Apply locks the calling goroutine to its OS thread for good. Call it
// from the goroutine that will execve(2) the command, right before doing
// so; exec runs on that thread and the new program starts restricted.
// Other threads of the Go runtime stay unrestricted until the exec ends
// them. On ABI 8+ Apply passes LANDLOCK_RESTRICT_SELF_TSYNC and every
// thread is restricted.
//
// A path that vanished since Plan is skipped: leaving out a rule only
// ever grants less. On error the process must not exec the command.
func Apply(r *Ruleset) error {
	if r == nil {
		return errors.New("landlock: Apply: nil ruleset")
	}
	runtime.LockOSThread() // never unlocked: this thread carries the domain
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if !r.Enforced() {
		return nil
	}
	if r.HandledFS&^fsAll != 0 || r.HandledNet&^(NetBindTCP|NetConnectTCP) != 0 {
		return fmt.Errorf("landlock: %w: ruleset handles unknown rights", ErrInvalidPolicy)
	}

	attr := rulesetAttr{
		handledAccessFS:  uint64(r.HandledFS),
		handledAccessNet: uint64(r.HandledNet),
		scoped:           uint64(r.Scoped),
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		switch e {
		case unix.ENOSYS, unix.EOPNOTSUPP:
			return fmt.Errorf("landlock: landlock_create_ruleset: %w: %w", ErrUnsupported, e)
		case unix.EINVAL:
			return fmt.Errorf("landlock: landlock_create_ruleset: kernel refuses a ruleset planned for ABI %d (was it planned on another kernel?): %w", r.ABI, e)
		}
		return fmt.Errorf("landlock: landlock_create_ruleset: %w", e)
	}
	rulesetFd := int(fd)
	defer unix.Close(rulesetFd)

	for _, pr := range r.Paths {
		if err := addPath(rulesetFd, pr); err != nil {
			return err
		}
	}
	for _, pr := range r.Ports {
		a := netPortAttr{allowedAccess: uint64(pr.Access), port: uint64(pr.Port)}
		if err := addRule(rulesetFd, ruleTypeNetPort, unsafe.Pointer(&a)); err != nil {
			return fmt.Errorf("landlock: rule for TCP port %d (%v): %w", pr.Port, pr.Access, err)
		}
	}

	flags := uintptr(r.Flags)
	if r.KernelABI >= 8 {
		flags |= unix.LANDLOCK_RESTRICT_SELF_TSYNC
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFd), flags, 0); e != 0 {
		if e == unix.E2BIG {
			return fmt.Errorf("landlock: landlock_restrict_self: too many nested Landlock domains (the kernel allows 16): %w", e)
		}
		return fmt.Errorf("landlock: landlock_restrict_self: %w", e)
	}
	return nil
}

func addPath(rulesetFd int, pr PathRule) error {
	fd, err := unix.Open(pr.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock: rule for %s: open: %w", pr.Path, err)
	}
	defer unix.Close(fd)
	a := pathBeneathAttr{allowedAccess: uint64(pr.Access), parentFd: int32(fd)}
	if err := addRule(rulesetFd, ruleTypePathBeneath, unsafe.Pointer(&a)); err != nil {
		if errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("directory rights on a non-directory (did the path change since Plan?): %w", err)
		}
		return fmt.Errorf("landlock: rule for %s (%v): %w", pr.Path, pr.Access, err)
	}
	return nil
}

func addRule(rulesetFd, ruleType int, attr unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFd), uintptr(ruleType), uintptr(attr), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
