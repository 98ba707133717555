package nsexec

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Why unprivileged user namespaces fail. Four causes are common and each
// has its own fix (docs/sandbox.md, "When user namespaces are not
// available"):
//
//   - AppArmor (Ubuntu 23.10+, kernel.apparmor_restrict_unprivileged_userns
//     = 1): creating the namespace succeeds, but the process is moved to a
//     profile without capabilities, so mapping ids or mounting fails.
//   - a container's seccomp profile (Docker's, Kubernetes' RuntimeDefault):
//     unshare/clone with CLONE_NEWUSER fails with EPERM although
//     user.max_user_namespaces > 0; /proc/self/status says "Seccomp: 2".
//   - a limit: user.max_user_namespaces = 0 here, or in an enclosing user
//     namespace (bwrap --disable-userns, flatpak): ENOSPC.
//   - a kernel without them (CONFIG_USER_NS off): EINVAL, and no
//     /proc/self/ns/user.
//
// ProbeUserNS gathers the facts; DiagnoseUserNS, a pure function of them,
// names the cause and the fix.

// UserNSProbe is what ProbeUserNS found.
type UserNSProbe struct {
	// Sysctls, -1 where the file is missing (the sysctl does not exist
	// on this kernel).
	MaxUserNamespaces       int `json:"max_user_namespaces"`
	UnprivilegedUsernsClone int `json:"unprivileged_userns_clone"` // Debian's older kernels
	AppArmorRestrict        int `json:"apparmor_restrict_unprivileged_userns"`
	// AppArmor: the AppArmor LSM is enabled.
	AppArmor bool `json:"apparmor"`
	// Seccomp is the Seccomp field of /proc/self/status: 0 none, 1
	// strict, 2 filtered; -1 unknown.
	Seccomp int `json:"seccomp"`
	// HasUserNS: /proc/self/ns/user exists (the kernel has user
	// namespaces).
	HasUserNS bool `json:"has_userns"`
	// Container names the container runtime this runs under, when one
	// is visible ("docker", "podman", "kubernetes", "lxc", ...).
	Container string `json:"container,omitempty"`
	// The attempt, in a fresh child: the errno names of creating a user
	// and mount namespace (clone), of mapping the caller's uid and gid
	// into it from outside, and of mounting a tmpfs inside ("" for
	// success; a step not reached is "-").
	Unshare string `json:"unshare"`
	MapIDs  string `json:"map_ids"`
	Mount   string `json:"mount"`
}

// UserNSCause names why user namespaces are unusable ("" when they work).
type UserNSCause string

const (
	UserNSWorks    UserNSCause = ""
	UserNSAppArmor UserNSCause = "apparmor"
	UserNSSeccomp  UserNSCause = "seccomp"
	UserNSLimit    UserNSCause = "max_user_namespaces"
	UserNSSysctl   UserNSCause = "unprivileged_userns_clone"
	UserNSNoKernel UserNSCause = "kernel"
	UserNSUnknown  UserNSCause = "unknown"
)

// UserNSDiagnosis is DiagnoseUserNS's verdict.
type UserNSDiagnosis struct {
	Cause UserNSCause `json:"cause"`
	// Detail says what was seen.
	Detail string `json:"detail"`
	// Fix lists what to do, best first.
	Fix []string `json:"fix,omitempty"`
	// Probe is what the verdict rests on.
	Probe UserNSProbe `json:"probe"`
}

// noNSFix is the fix that works whatever the cause: strata's backends
// that need no user namespace.
const noNSFix = "or run without user namespaces: workspaces of the reflink or copy backend, fenced by Landlock and seccomp (docs/sandbox.md, \"When user namespaces are not available\")"

// DiagnoseUserNS names the cause of p's failure and its fix. It is pure.
func DiagnoseUserNS(p UserNSProbe) UserNSDiagnosis {
	d := UserNSDiagnosis{Probe: p}
	set := func(c UserNSCause, detail string, fix ...string) UserNSDiagnosis {
		d.Cause, d.Detail, d.Fix = c, detail, append(fix, noNSFix)
		return d
	}
	in := ""
	if p.Container != "" {
		in = " (this runs in a " + p.Container + " container)"
	}
	switch p.Unshare {
	case "":
		if p.MapIDs == "" && p.Mount == "" {
			d.Detail = "unprivileged user and mount namespaces work"
			return d
		}
		step, errno := "mounting inside it", p.Mount
		if p.MapIDs != "" {
			step, errno = "mapping ids into it", p.MapIDs
		}
		switch {
		case p.AppArmorRestrict == 1:
			return set(UserNSAppArmor,
				fmt.Sprintf("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): creating one works, %s fails with %s — the process was moved to a profile without capabilities", step, errno),
				"sudo strata setup apparmor   (a profile granting `userns` to the strata binaries, as Ubuntu ships for bwrap and podman)",
				"or, for the whole machine: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (and the same line in /etc/sysctl.d/ to keep it)")
		case p.Seccomp == 2:
			return set(UserNSSeccomp,
				fmt.Sprintf("a seccomp filter%s lets the namespace be created but %s fails with %s", in, step, errno),
				"run the container with a seccomp profile that allows mount(2) in user namespaces (docker run --security-opt seccomp=unconfined; Kubernetes: securityContext.seccompProfile.type: Unconfined)")
		}
		return set(UserNSUnknown, fmt.Sprintf("a user namespace can be created, but %s fails with %s; no AppArmor restriction or seccomp filter is visible", step, errno))
	case "ENOSPC", "EUSERS":
		if p.MaxUserNamespaces == 0 {
			return set(UserNSLimit, "user namespaces are disabled: user.max_user_namespaces=0 (creating one fails with "+p.Unshare+")",
				"sudo sysctl -w user.max_user_namespaces=15000 (and the same line in /etc/sysctl.d/ to keep it)")
		}
		return set(UserNSLimit,
			fmt.Sprintf("creating a user namespace fails with %s: the limit of an enclosing user namespace is reached — a sandbox that forbids nesting them (bwrap --disable-userns, flatpak) or user.max_user_namespaces of a parent namespace (here it reads %d)%s", p.Unshare, p.MaxUserNamespaces, in),
			"run strata outside that sandbox, or let it nest user namespaces (bwrap without --disable-userns)")
	case "EINVAL", "ENOSYS":
		return set(UserNSNoKernel, "this kernel has no user namespaces (CONFIG_USER_NS is off): creating one fails with "+p.Unshare,
			"boot a kernel built with CONFIG_USER_NS=y (every mainstream distribution's is)")
	case "EPERM", "EACCES":
		switch {
		case !p.HasUserNS:
			return set(UserNSNoKernel, "this kernel has no user namespaces (no /proc/self/ns/user): creating one fails with "+p.Unshare,
				"boot a kernel built with CONFIG_USER_NS=y (every mainstream distribution's is)")
		case p.UnprivilegedUsernsClone == 0:
			return set(UserNSSysctl, "unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone=0 (creating one fails with "+p.Unshare+")",
				"sudo sysctl -w kernel.unprivileged_userns_clone=1 (and the same line in /etc/sysctl.d/ to keep it)")
		case p.Seccomp == 2:
			return set(UserNSSeccomp,
				fmt.Sprintf("a seccomp filter%s refuses CLONE_NEWUSER: creating a user namespace fails with %s although user.max_user_namespaces=%d (Seccomp: 2 in /proc/self/status)", in, p.Unshare, p.MaxUserNamespaces),
				"run the container with a seccomp profile that allows unshare and clone with CLONE_NEWUSER (docker run --security-opt seccomp=unconfined, or Docker's default profile with them allowed; Kubernetes: securityContext.seccompProfile.type: Unconfined)")
		case p.AppArmorRestrict == 1 || p.AppArmor:
			return set(UserNSAppArmor, "AppArmor denies creating user namespaces here (creating one fails with "+p.Unshare+")",
				"sudo strata setup apparmor   (a profile granting `userns` to the strata binaries)",
				"or, for the whole machine: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")
		}
		return set(UserNSUnknown, "creating a user namespace fails with "+p.Unshare+"; no sysctl, seccomp filter or AppArmor restriction explains it (an LSM such as SELinux may)")
	}
	return set(UserNSUnknown, "creating a user namespace fails: "+p.Unshare)
}

// ReadUserNSFacts reads what the kernel says about user namespaces under
// root ("/" on a real system; tests pass a directory of fake files):
// the sysctls, AppArmor, this process's seccomp mode, /proc/self/ns/user
// and signs of a container.
func ReadUserNSFacts(root string) UserNSProbe {
	num := func(rel string) int {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return -1
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return -1
		}
		return n
	}
	p := UserNSProbe{
		MaxUserNamespaces:       num("proc/sys/user/max_user_namespaces"),
		UnprivilegedUsernsClone: num("proc/sys/kernel/unprivileged_userns_clone"),
		AppArmorRestrict:        num("proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
		Seccomp:                 -1,
	}
	if b, err := os.ReadFile(filepath.Join(root, "sys/module/apparmor/parameters/enabled")); err == nil {
		p.AppArmor = strings.TrimSpace(string(b)) == "Y"
	}
	if _, err := os.Lstat(filepath.Join(root, "proc/self/ns/user")); err == nil {
		p.HasUserNS = true
	}
	if f, err := os.Open(filepath.Join(root, "proc/self/status")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Seccomp:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					p.Seccomp = n
				}
			}
		}
		f.Close()
	}
	p.Container = containerName(root)
	return p
}

// containerName recognizes a container runtime from the marks it leaves.
func containerName(root string) string {
	exists := func(rel string) bool { _, err := os.Lstat(filepath.Join(root, rel)); return err == nil }
	switch {
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "" && root == "/":
		return "kubernetes"
	case exists(".dockerenv"):
		return "docker"
	case exists("run/.containerenv"):
		return "podman"
	}
	if b, err := os.ReadFile(filepath.Join(root, "proc/1/environ")); err == nil {
		for _, kv := range bytes.Split(b, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("container=")); ok && len(v) > 0 {
				return string(v)
			}
		}
	}
	return ""
}

// Entry points of the user-namespace probe's child: it waits while the
// parent maps its ids, then re-executes itself (which gives it the
// namespace's capabilities, as uid 0 there) and mounts.
const (
	entryProbeUserNS      = "probe-userns"
	entryProbeUserNSMount = "probe-userns-mount"
)

func init() {
	Register(entryProbeUserNS, probeUserNSChild)
	Register(entryProbeUserNSMount, probeUserNSMountChild)
}

// ProbeUserNS reads the facts (ReadUserNSFacts("/")) and tries, in a
// fresh child of InitPath (the binary workspaces use, so that an
// AppArmor profile for it counts): creating a user and mount namespace,
// mapping the caller's uid and gid to 0 in it from outside, and mounting
// a tmpfs inside.
func ProbeUserNS(ctx context.Context) UserNSProbe {
	p := ReadUserNSFacts("/")
	p.MapIDs, p.Mount = "-", "-"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, InitPath())
	cmd.Args = []string{argv0Prefix + entryProbeUserNS}
	cmd.Env = childEnv
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		p.Unshare = err.Error()
		return p
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		p.Unshare = errnoName(err)
		return p
	}
	p.Unshare = ""
	p.MapIDs = errnoName(mapIDs(cmd.Process.Pid))
	if p.MapIDs != "" {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return p
	}
	io.WriteString(stdin, "go\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		p.Mount = "child: " + err.Error() + ": " + strings.TrimSpace(errb.String())
		return p
	}
	var r struct{ Mount string }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		p.Mount = "child: " + err.Error()
		return p
	}
	p.Mount = r.Mount
	return p
}

// mapIDs maps the caller's uid and gid to 0 in pid's user namespace,
// from outside, as Go's SysProcAttr.UidMappings does.
func mapIDs(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	if err := os.WriteFile(dir+"setgroups", []byte("deny"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(dir+"uid_map", []byte(fmt.Sprintf("0 %d 1\n", os.Getuid())), 0); err != nil {
		return err
	}
	return os.WriteFile(dir+"gid_map", []byte(fmt.Sprintf("0 %d 1\n", os.Getgid())), 0)
}

// errnoName is the name of the errno in err ("EPERM"), its text when it
// has none, or "" for nil.
func errnoName(err error) string {
	if err == nil {
		return ""
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		if n := unix.ErrnoName(en); n != "" {
			return n
		}
	}
	return err.Error()
}

// probeUserNSChild waits for the parent's "go" (the ids are mapped), then
// re-executes itself: an execve as uid 0 of the namespace gives it the
// namespace's capabilities, which the first execve (unmapped) dropped.
func probeUserNSChild() int {
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if line != "go\n" {
		return 1
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		exe = Self
	}
	err = syscall.Exec(exe, []string{argv0Prefix + entryProbeUserNSMount}, childEnv)
	fmt.Fprintf(os.Stderr, "probe-userns: exec: %v\n", err)
	return 125
}

// probeUserNSMountChild makes the mount namespace private and mounts a
// tmpfs on /tmp in it (or on / without /tmp), and reports the errno.
func probeUserNSMountChild() int {
	res := struct{ Mount string }{}
	err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	if err == nil {
		target := "/tmp"
		if fi, serr := os.Stat(target); serr != nil || !fi.IsDir() {
			target = "/"
		}
		err = unix.Mount("strata-probe", target, "tmpfs", 0, "size=64k")
	}
	res.Mount = errnoName(err)
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}
