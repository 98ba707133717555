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
}

// Path returns a host path of the merged view: /proc/PID/root + Target.
// The caller owns the keeper's user namespace (or is root), so the kernel
// lets it through; reads and writes there are the workspace's.
func (k *Keeper) Path() string {
	return "/proc/" + strconv.Itoa(k.PID) + "/root" + k.Target
}

func (k *Keeper) String() string { return fmt.Sprintf("keeper pid %d (%s)", k.PID, k.Target) }
