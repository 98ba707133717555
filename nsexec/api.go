package nsexec

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/overlayfs"
)

// ErrNotRunning reports that a workspace has no live keeper.
var ErrNotRunning = errors.New("workspace keeper not running")

// Spec is everything a keeper or a one-shot init needs to set up a
// workspace's namespaces. The parent computes it (it has the store); the
// child never opens the store.
type Spec struct {
	// Name is the workspace's name, for the process title and messages.
	Name string `json:"name"`
	// Dir is the workspace's state directory: keeper.lock, keeper.sock,
	// keeper.json and keeper.log live there. It must exist.
	Dir string `json:"dir"`
	// Lowers are the layer directories, topmost first.
	Lowers []string `json:"lowers"`
	// Upper and Work are the overlay's upper and work directories.
	Upper string `json:"upper"`
	Work  string `json:"work"`
	// Target is the absolute path where the merged view is mounted inside
	// the namespace. The directory must exist on the host.
	Target string `json:"target"`
	// Features are what the overlay probe found (mount method, userxattr,
	// redirect_dir); they select the mount options (overlayfs.DefaultConfig).
	Features overlayfs.Features `json:"features"`
	// Volatile mounts with the volatile option (tmpfs uppers).
	Volatile bool `json:"volatile,omitempty"`
	// UserNS creates a user namespace even as real root, mapping root to
	// itself: the rootless path, taken anyway when not real root.
	UserNS bool `json:"userns,omitempty"`
	// Binds are host directories made visible read-only inside, for
	// example a git repository's objects that the workspace's .git uses as
	// alternates while the overlay hides the repository's own path.
	Binds []Bind `json:"binds,omitempty"`
	// SubIDs maps the caller's subordinate ids besides its own uid and
	// gid (SubIDMaps), and commands keep the capabilities that act on ids
	// (chown, setuid, access to files those ids own). Rootless, the
	// caller must run in their namespace already (EnterSubIDs); as real
	// root every id is the caller's own and SubIDs changes nothing.
	SubIDs bool `json:"subids,omitempty"`
	// View are host paths the keeper's view (Command.View) shows besides
	// the system: the store's default binds and the toolchains PATH
	// reaches. They are captured before anything is mounted, so they may
	// lie anywhere (beneath /tmp, beneath the target).
	View []Bind `json:"view,omitempty"`
	// Root, when set, makes the root commands see an image root (a
	// container image's layers) instead of the host view: its overlay
	// becomes / (pivot_root), and the workspace's overlay (Lowers, Upper,
	// Work), when Lowers is not empty, is mounted at Target inside it —
	// a project on an environment (--root IMAGE --at PATH). With Lowers
	// empty the root is the workspace itself, and Target is only where
	// commands start by default and what Keeper.Path shows (usually "/").
	// Dir is required: the root is assembled on Dir/rootfs, its
	// mount-point layer on Dir/rootfs-init. See docs/images.md.
	Root *Root `json:"root,omitempty"`
	// Plain, when set, is a workspace of the reflink or copy backend: a
	// plain directory, bound read-write on Target (nothing is mounted
	// when Target is Plain itself) instead of an overlay of Lowers,
	// Upper and Work, which stay empty. See plain.go.
	Plain string `json:"plain,omitempty"`

	// rootMaps are the user namespace maps of an image root started from
	// a subordinate-id namespace (checkRoot).
	rootMaps *IDMaps
}

// Root is an image root: a container image's layer stack with an upper
// and work directory of its own, mounted as a command's /, with a fresh
// /proc of the workspace's PID namespace, a minimal /dev, private /tmp,
// /var/tmp and /dev/shm, /sys read-only, and what HostNet and Binds add.
// Nothing of the host but those is visible.
//
// Mount points the image lacks (/proc, /etc/resolv.conf, a bind's
// target, Target) come from a layer of empty directories and files that
// the child makes on a tmpfs for each start and places beneath the
// image's layers: the image's own entries win where they exist, and
// nothing lands in the upper (so nothing is committed). Only where the
// image hides such a path (a whiteout, a dangling symlink) is the mount
// point made in the root itself, with a warning in keeper.log.
//
// Commands run as User, uid 0 inside being the caller rootless (only
// the caller is mapped; with Spec.SubIDs the image's other ids map to
// the caller's subordinate ranges, as rootless podman does), and keep
// ContainerCaps, as root or rootless. Sandboxed or not, they see the
// root: the host view is not reachable from an image root.
type Root struct {
	// Lowers are the image's layer directories, topmost first.
	Lowers []string `json:"lowers"`
	// Upper and Work are the root's own overlay upper and work
	// directories: what commands write outside Target (a project
	// overlay) lands there.
	Upper string `json:"upper"`
	Work  string `json:"work"`
	// HostNet binds the host's /etc/resolv.conf and /etc/hosts (the
	// files they resolve to) read-only over the image's, for commands
	// that use the host's network (--net host).
	HostNet bool `json:"host_net,omitempty"`
	// Binds are host paths shown inside the root at their Target
	// (--ro/--rw). The sources must exist.
	Binds []Bind `json:"binds,omitempty"`
	// User is who commands run as: "" or "root" (uid 0), "UID[:GID]",
	// or "NAME[:GROUP]" looked up in the root's /etc/passwd and
	// /etc/group, as the image config's User field is read.
	User string `json:"user,omitempty"`
}

// Bind is a bind mount: the host path Source (a directory with what is
// mounted below it, or a file) appears at Target, read-only unless RW.
// The source is captured (open_tree) before the overlay is mounted, so
// it may lie beneath the target. In Spec.Binds (the host view) a Target
// under /tmp lands in the private /tmp.
type Bind struct {
	Source string `json:"source"`
	Target string `json:"target"`
	RW     bool   `json:"rw,omitempty"`
}

// userNS reports whether the workspace's namespaces include a user
// namespace: always unless real root, and as real root when asked.
func (s *Spec) userNS() bool { return s.UserNS || !RealRoot() }

// Command is a command to run in a workspace, with its sandbox: a Policy
// the keeper plans (once per policy), or Landlock and Seccomp planned by
// the caller; the child only makes the syscalls, right before exec.
type Command struct {
	// Argv is the command and its arguments. Argv[0] without a slash is
	// looked up in the PATH of Env.
	Argv []string
	// Env is the command's environment; nil means the caller's.
	Env []string
	// Dir is the working directory inside the namespace; "" is
	// Spec.Target.
	Dir string
	// TTY: stdin is a terminal (the slave of a pty the caller owns). The
	// command becomes a session leader with it as controlling terminal
	// (setsid, TIOCSCTTY), so job control, /dev/tty and the terminal's
	// signals work. Otherwise the command leads its own process group.
	TTY bool
	// Landlock, when not nil, is applied to the command (landlock.Plan).
	Landlock *landlock.Ruleset
	// Seccomp, when not nil, are classic BPF programs loaded in order
	// (seccomp.Program), after no_new_privs.
	Seccomp [][]unix.SockFilter
	// Policy, when not nil, names the sandbox instead of Landlock and
	// Seccomp: the keeper plans it (sandbox.Build) the first time it is
	// sent and keeps the plan, so that a repeated exec sends this small
	// request and the keeper applies a ready ruleset and program; Run
	// plans it in the caller. A Command carries a Policy or a plan, not
	// both.
	Policy *sandbox.Request
	// Warn, when not nil, is told what the kernel cannot enforce of
	// Policy (sandbox.Plan.Warnings), before the command starts.
	Warn func(string)
	// Started, when not nil, is called once the keeper has started the
	// command: an error Exec returns before that means nothing ran, and
	// the caller may try again another way (the front hands over to
	// strata-core).
	Started func()
	// NetNone runs the command in a private network namespace with only
	// the loopback interface, up.
	NetNone bool
	// View runs the command in the workspace's view — a root assembled
	// from the system directories, the workspace, private /tmp, /var/tmp
	// and /dev/shm, a minimal /dev, /proc and /sys read-only, and binds —
	// instead of the host view (docs/nsexec.md, "The view"). As real
	// root such a command keeps only ContainerCaps. Sandboxed commands
	// set it; without it a command sees the host.
	View bool
	// Binds are what the command's view shows besides the system (with
	// View): the keeper's Spec.View and whatever else the command asks
	// for. A command whose binds the keeper's view does not all hold
	// gets a view of its own (about a millisecond more).
	Binds []Bind
}

// ExitStatus is how a command ended.
type ExitStatus struct {
	// Code is the exit code, or 128+signal when a signal killed it, as a
	// shell reports it. 127: not found; 126: found but not executable.
	Code int `json:"code"`
	// Signal is the signal that killed the command, or 0.
	Signal syscall.Signal `json:"signal,omitempty"`
}

func (s ExitStatus) String() string {
	if s.Signal != 0 {
		return "killed by " + unix.SignalName(s.Signal)
	}
	return "exit status " + strconv.Itoa(s.Code)
}

// Success reports whether the command exited with 0.
func (s ExitStatus) Success() bool { return s.Code == 0 && s.Signal == 0 }

func exitStatus(ws unix.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// Keeper is a live keeper: PID 1 of a workspace's PID namespace.
type Keeper struct {
	// PID is the keeper's process id in the caller's PID namespace.
	PID int
	// Target is where the merged view is mounted inside the namespace.
	Target string
	// Started is when the keeper became ready.
	Started time.Time
	// Fresh: this StartKeeper call started it (rather than finding it
	// running, or started by another process meanwhile).
	Fresh bool
}

// Path returns a host path of the merged view: /proc/PID/root + Target.
// The caller owns the keeper's user namespace (or is root), so the kernel
// lets it through; reads and writes there are the workspace's.
func (k *Keeper) Path() string {
	return "/proc/" + strconv.Itoa(k.PID) + "/root" + k.Target
}

func (k *Keeper) String() string { return fmt.Sprintf("keeper pid %d (%s)", k.PID, k.Target) }
