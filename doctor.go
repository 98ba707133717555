package strata

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/seccomp"
)

// Check is one thing Doctor probed.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Disables says what strata cannot do without it (empty when OK).
	Disables string `json:"disables,omitempty"`
	// Optional checks only speed things up or add features; a required
	// one missing means workspaces do not work for this user.
	Optional bool `json:"optional,omitempty"`
	// Fix says what to do about a failed check, best first.
	Fix []string `json:"fix,omitempty"`
}

// DoctorReport is what this kernel and user allow.
type DoctorReport struct {
	Kernel   string          `json:"kernel"`
	UID      int             `json:"uid"`
	RealRoot bool            `json:"real_root"`
	Checks   []Check         `json:"checks"`
	Sandbox  []SandboxReport `json:"sandbox"`
	// View is what a sandboxed command of the store sees (DescribeView,
	// for this process's PATH).
	View []ViewEntry `json:"view"`
	// UserNS says why unprivileged user namespaces fail here (cause ""
	// when they work), from a probe of its own (nsexec.ProbeUserNS).
	UserNS nsexec.UserNSDiagnosis `json:"userns"`
	// NoNamespaces says what a command of a workspace without namespaces
	// (reflink or copy backend, where user namespaces are denied) gets
	// on this kernel instead of what namespaces give.
	NoNamespaces []nsexec.NoNSItem `json:"no_namespaces"`
	// Backend is what `--backend auto` chooses here (doctor_backend.go).
	Backend string `json:"backend"`
}

// SandboxReport says what one --sandbox mode enforces on this kernel, and
// what it asks for that the kernel cannot enforce.
type SandboxReport struct {
	Mode     string   `json:"mode"`
	Enforces []string `json:"enforces"`
	Missing  []string `json:"missing,omitempty"`
}

// OK reports whether every required check passed.
func (d *DoctorReport) OK() bool {
	for _, c := range d.Checks {
		if !c.OK && !c.Optional {
			return false
		}
	}
	return true
}

// Doctor probes what this kernel and user allow: user namespaces,
// unprivileged overlay and its options, Landlock, seccomp and cgroup v2
// delegation, and says what each missing piece disables. scratchParent is
// a directory on the filesystem workspaces will use (the store); Doctor
// makes and removes a scratch directory in it.
func Doctor(ctx context.Context, scratchParent string) *DoctorReport {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	rep := &DoctorReport{
		Kernel:   unix.ByteSliceToString(uts.Release[:]),
		UID:      os.Getuid(),
		RealRoot: nsexec.RealRoot(),
	}
	add := func(c Check) { rep.Checks = append(rep.Checks, c) }

	if err := os.MkdirAll(scratchParent, 0o700); err != nil {
		scratchParent = os.TempDir()
	}
	scratch, err := os.MkdirTemp(scratchParent, ".doctor-")
	if err != nil {
		add(Check{Name: "scratch", Detail: err.Error(), Disables: "every probe below"})
		return rep
	}
	defer os.RemoveAll(scratch)

	// Rootless: user namespace + overlay inside it; and, told apart,
	// why user namespaces fail when they do.
	userFeat, userErr := nsexec.ProbeOverlay(ctx, mkdirIn(scratch, "user"), true)
	rep.UserNS = nsexec.DiagnoseUserNS(nsexec.ProbeUserNS(ctx))
	const noUserNS = "rootless overlay workspaces (exec, shell, run) — every overlay workspace command needs root"
	switch {
	case userErr != nil && rep.UserNS.Cause != nsexec.UserNSWorks:
		add(Check{Name: "user namespaces", Detail: rep.UserNS.Detail, Fix: rep.UserNS.Fix, Disables: noUserNS})
	case errors.Is(userErr, nsexec.ErrNoUserNS):
		add(Check{Name: "user namespaces", Detail: userErr.Error(), Disables: noUserNS})
	case userErr != nil:
		add(Check{Name: "user namespaces", Detail: userErr.Error(), Disables: "rootless workspaces"})
	default:
		add(Check{Name: "user namespaces", OK: true, Detail: "unprivileged user + mount namespaces work"})
	}
	if userErr == nil {
		add(featureCheck(userFeat, "overlay", "unprivileged overlay", userFeat.Overlay,
			"overlay mounts inside a user namespace", "rootless workspaces: needs Linux 5.11+ (or root)", false))
		add(featureCheck(userFeat, "userxattr", "userxattr", userFeat.UserXattr,
			"overlay keeps whiteouts and opaque dirs in user.overlay.* xattrs", "rootless workspaces: needs Linux 5.11+", false))
		add(featureCheck(userFeat, "lowerdir_plus", "fsconfig lowerdir+", userFeat.LowerdirPlus,
			"layers are passed one by one (fsconfig lowerdir+), no page limit", "nothing: strata falls back to short relative paths within mount(2)'s one-page option limit (Linux 6.8+ has lowerdir+)", true))
		add(featureCheck(userFeat, "whiteout", "whiteouts", userFeat.Whiteout,
			"mknod c 0 0 works for layer whiteouts", "deleting files in a layer; needs Linux 5.8+", false))
		add(featureCheck(userFeat, "user_xattrs", "user xattrs on the store's filesystem", userFeat.UserXattrs,
			"user.* xattrs work where layers and uppers live ("+userFeat.FSType+")", "opaque directories in rootless layers: keep the store on ext4, xfs, btrfs or tmpfs (6.6+)", false))
	}
	var rootErr error
	if rep.RealRoot {
		rootFeat, err := nsexec.ProbeOverlay(ctx, mkdirIn(scratch, "root"), false)
		if rootErr = err; err == nil && !rootFeat.Overlay {
			rootErr = fmt.Errorf("overlay: %s", rootFeat.Errors["overlay"])
		}
		if err != nil {
			add(Check{Name: "redirect_dir", Detail: err.Error(), Optional: true,
				Disables: "renaming lower directories as root (falls back to EXDEV as rootless)"})
		} else {
			add(featureCheck(rootFeat, "redirect_dir", "redirect_dir", rootFeat.RedirectDir,
				"as root, renaming a directory from a lower layer works (overlay.redirect)", "renaming lower directories: rename(2) returns EXDEV and tools copy instead", true))
		}
	} else {
		add(Check{Name: "redirect_dir", Optional: true, Detail: "needs real root: the kernel forbids redirect_dir with userxattr",
			Disables: "renaming a directory that exists in a lower layer returns EXDEV inside rootless workspaces; mv, npm and pip fall back to copying, os.rename and `git mv DIR` do not"})
	}

	abi, err := landlock.ABI()
	if err != nil || abi == 0 {
		detail := "not available"
		if err != nil {
			detail = err.Error()
		}
		add(Check{Name: "landlock", Detail: detail,
			Disables: "the filesystem fence of --sandbox agent/strict: commands can read and write everything the user can (boot with lsm=...,landlock on Linux 5.13+)"})
	} else {
		add(Check{Name: "landlock", OK: true, Detail: fmt.Sprintf("ABI %d: %s", abi, landlockABIFeatures(abi))})
	}

	if ok, detail := seccomp.Available(); ok {
		add(Check{Name: "seccomp", OK: true, Detail: detail})
	} else {
		add(Check{Name: "seccomp", Detail: detail,
			Disables: "the syscall deny list of --sandbox agent/strict (ptrace, mount, bpf, io_uring, namespaces)"})
	}

	bc, backend := backendCheck(scratch, string(rep.UserNS.Cause), rep.UserNS.Probe.Seccomp, rep.RealRoot, rootErr)
	add(bc)
	rep.Backend = backend
	add(cgroupCheck())
	add(subIDCheck())
	rep.Sandbox = sandboxReports(abi)
	if err != nil {
		abi = 0
	}
	rep.NoNamespaces = nsexec.NoNSReport(abi)
	rep.View = DescribeView(scratchParent, os.Environ())
	return rep
}

// sandboxReports plans each sandbox mode for this kernel, as exec would.
func sandboxReports(abi int) []SandboxReport {
	seccompOK, _ := seccomp.Available()
	var out []SandboxReport
	for _, mode := range []string{SandboxAgent, SandboxStrict} {
		rep := SandboxReport{Mode: mode}
		pol := landlock.Agent("/", "/tmp", nil, nil)
		if mode == SandboxStrict {
			pol = landlock.Strict("/", "/tmp", nil, nil)
		}
		rs, err := landlock.Plan(pol, abi)
		switch {
		case err != nil:
			rep.Missing = append(rep.Missing, err.Error())
		case !rs.Enforced():
			rep.Missing = append(rep.Missing, "no filesystem fence: Landlock is not available")
		default:
			rep.Enforces = append(rep.Enforces, fmt.Sprintf("Landlock ABI %d: filesystem access limited to the workspace, /tmp and read-only system dirs (%s)", rs.ABI, rs.HandledFS))
			if rs.HandledNet != 0 {
				rep.Enforces = append(rep.Enforces, "Landlock: TCP "+rs.HandledNet.String()+" only to listed ports")
			}
			if rs.Scoped != 0 {
				rep.Enforces = append(rep.Enforces, "Landlock scoping: "+rs.Scoped.String()+" confined to the workspace")
			}
			rep.Missing = append(rep.Missing, rs.Warnings...)
		}
		if seccompOK {
			rep.Enforces = append(rep.Enforces, "seccomp: ptrace, mount, bpf, io_uring, namespaces, kexec, modules, keyrings and clock changes return EPERM (x86-64, x86 and x32 ABIs)")
			if mode == SandboxStrict {
				rep.Enforces = append(rep.Enforces, "seccomp: sockets other than AF_UNIX return EPERM")
			}
		} else {
			rep.Missing = append(rep.Missing, "no syscall filter: seccomp is not available")
		}
		if mode == SandboxStrict {
			rep.Enforces = append(rep.Enforces, "a private network namespace with loopback only (--net none)")
		}
		out = append(out, rep)
	}
	return append(out, SandboxReport{Mode: SandboxNone, Missing: []string{"nothing is enforced beyond the workspace's private mount namespace, whose view is the whole host (your home included): for trusted work only"}})
}

func mkdirIn(parent, name string) string {
	p := filepath.Join(parent, name)
	_ = os.Mkdir(p, 0o700)
	return p
}

func featureCheck(f overlayfs.Features, key, name string, ok bool, okDetail, disables string, optional bool) Check {
	c := Check{Name: name, OK: ok, Optional: optional}
	if ok {
		c.Detail = okDetail
		return c
	}
	c.Detail = f.Errors[key]
	if c.Detail == "" {
		c.Detail = "not supported"
	}
	c.Disables = disables
	return c
}

func landlockABIFeatures(abi int) string {
	feats := []string{"filesystem access (1)"}
	if abi >= 2 {
		feats = append(feats, "cross-directory rename/link (2)")
	}
	if abi >= 3 {
		feats = append(feats, "truncate (3)")
	}
	if abi >= 4 {
		feats = append(feats, "TCP bind/connect (4)")
	}
	if abi >= 5 {
		feats = append(feats, "device ioctl (5)")
	}
	if abi >= 6 {
		feats = append(feats, "signal and abstract-socket scoping (6)")
	}
	if abi >= 7 {
		feats = append(feats, "audit logging (7)")
	}
	return strings.Join(feats, ", ")
}

// cgroupCheck reports whether cgroup v2 is mounted and this user may manage
// its own cgroup (systemd delegation): that is what freezing a workspace's
// processes during commit, and resource limits, need.
func cgroupCheck() Check {
	const disables = "freezing a workspace's processes with cgroup.freeze during commit (strata stops them with SIGSTOP instead) and per-workspace resource limits"
	c := Check{Name: "cgroup v2 delegation", Optional: true}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		c.Detail, c.Disables = "cgroup v2 is not mounted at /sys/fs/cgroup", disables
		return c
	}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		c.Detail, c.Disables = err.Error(), disables
		return c
	}
	defer f.Close()
	var rel string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			rel = p
		}
	}
	dir := filepath.Join("/sys/fs/cgroup", rel)
	if err := unix.Access(filepath.Join(dir, "cgroup.procs"), unix.W_OK); err != nil {
		c.Detail = fmt.Sprintf("cgroup %s is not writable by uid %d (no delegation)", rel, os.Getuid())
		c.Disables = disables
		return c
	}
	ctrl, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	c.OK = true
	c.Detail = fmt.Sprintf("cgroup %s is writable; controllers: %s", rel, strings.TrimSpace(string(ctrl)))
	return c
}

// subIDCheck reports whether --subids workspaces can map the user's
// subordinate ids: newuidmap/newgidmap and ranges in /etc/subuid and
// /etc/subgid (nsexec.SubIDMaps). Root needs none.
func subIDCheck() Check {
	c := Check{Name: "subordinate ids", Optional: true}
	if nsexec.RealRoot() {
		c.OK, c.Detail = true, "root: every id is available to --subids workspaces"
		return c
	}
	m, err := nsexec.SubIDMaps()
	if err != nil {
		c.Detail, c.Disables = err.Error(), "--subids (workspaces map only your own uid and gid; other owners appear as nobody)"
		return c
	}
	n := func(rs []nsexec.IDRange) (sum uint64) {
		for _, r := range rs[1:] { // the first is the user's own id
			sum += uint64(r.Size)
		}
		return sum
	}
	c.OK = true
	c.Detail = fmt.Sprintf("newuidmap/newgidmap and %d subordinate uids, %d gids for --subids workspaces", n(m.UIDs), n(m.GIDs))
	return c
}
