package nsexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/overlayfs"
)

const entryProbeOverlay = "probe-overlay"

func init() {
	Register(entryProbeOverlay, probeOverlayChild)
}

// RealRoot reports whether this process is root in the initial user
// namespace: the case where strata mounts without a user namespace and
// uses redirect_dir and trusted.* xattrs. Root inside someone else's user
// namespace is not real root.
func RealRoot() bool {
	return os.Geteuid() == 0 && InitialUserNS()
}

// InitialUserNS reports whether this process runs in the initial user
// namespace, whose uid_map is the identity over the whole range.
func InitialUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// ErrNoUserNS: the kernel or a policy refuses unprivileged user namespaces.
var ErrNoUserNS = errors.New("cannot create a user namespace")

// ProbeOverlay probes overlay features the way a workspace will mount:
// in a new user + mount namespace when rootless (or when userns is set),
// in a new mount namespace as real root. scratch is an empty directory on
// the filesystem upper and work will live on.
func ProbeOverlay(ctx context.Context, scratch string, userns bool) (overlayfs.Features, error) {
	cmd := Reexec(entryProbeOverlay, scratch)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if userns || !RealRoot() {
		SetUserNS(cmd.SysProcAttr)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return overlayfs.Features{}, userNSError(err)
	}
	if err := cmd.Wait(); err != nil {
		return overlayfs.Features{}, fmt.Errorf("overlay probe: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	var f overlayfs.Features
	if err := json.Unmarshal(out.Bytes(), &f); err != nil {
		return f, fmt.Errorf("overlay probe: %w", err)
	}
	return f, nil
}

func probeOverlayChild() int {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "probe-overlay: want SCRATCH")
		return 125
	}
	// Keep the throwaway mounts out of the parent's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(os.Stderr, "probe-overlay: make / private: %v\n", err)
		return 125
	}
	f, err := overlayfs.Probe(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe-overlay: %v\n", err)
		return 125
	}
	if err := json.NewEncoder(os.Stdout).Encode(f); err != nil {
		return 125
	}
	return 0
}

// SetUserNS adds a new user namespace to attr, mapping the caller's uid and
// gid to themselves: inside, files keep their owners and tools see the user
// they run as. A non-zero uid loses its capabilities at execve, so the
// child keeps the capabilities of the new namespace as ambient ones (like
// `unshare --map-current-user --keep-caps`); they grant nothing outside it.
// Mounting needs more than CAP_SYS_ADMIN: overlayfs works in its workdir
// with the mounter's credentials and needs CAP_DAC_OVERRIDE there (measured
// on 6.18: SYS_ADMIN alone gets EPERM). The user's command never holds
// them: they are dropped right before it is executed.
func SetUserNS(attr *syscall.SysProcAttr) {
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	uid, gid := os.Getuid(), os.Getgid()
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
	attr.AmbientCaps = allCaps()
}

// allCaps lists every capability this kernel knows.
func allCaps() []uintptr {
	last := unix.CAP_LAST_CAP
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			last = n
		}
	}
	caps := make([]uintptr, 0, last+1)
	for c := 0; c <= last; c++ {
		caps = append(caps, uintptr(c))
	}
	return caps
}

// userNSError explains a failure to create a user namespace: which sysctl,
// policy or kernel refuses it, and the fix (DiagnoseUserNS).
func userNSError(err error) error {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EINVAL) &&
		!errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EUSERS) {
		return err
	}
	return fmt.Errorf("%w: %v (%s)", ErrNoUserNS, err, UserNSHint(err))
}

// UserNSHint explains err, the failure to create a user namespace, from
// what the kernel says (ReadUserNSFacts, without probing again): the
// cause, the first fix, and a pointer to `strata doctor`, which probes.
func UserNSHint(err error) string {
	p := ReadUserNSFacts("/")
	p.Unshare, p.MapIDs, p.Mount = errnoName(err), "-", "-"
	d := DiagnoseUserNS(p)
	return d.Detail + "; fix: " + d.Fix[0] + "; `strata doctor` says more"
}
