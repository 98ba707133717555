package hotpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/nsexec"
)

// Sandbox modes (--sandbox).
const (
	SandboxAgent  = "agent"  // Landlock fence + seccomp deny list (default)
	SandboxStrict = "strict" // agent + no network (--net none, sockets denied)
	SandboxNone   = "none"   // trusted work: no fence at all, the host view
)

// Network modes (--net).
const (
	NetHost = "host" // the host's network
	NetNone = "none" // a private network namespace with loopback only
)

// SandboxOptions are the sandbox flags of exec, shell and run (the root
// package's SandboxOptions, field for field).
type SandboxOptions struct {
	Mode         string   // SandboxAgent (default), SandboxStrict, SandboxNone
	Net          string   // NetHost (default; NetNone under strict)
	RW, RO       []string // host paths added to the view read-write / read-only (must exist)
	AllowConnect []uint16 // TCP ports connect(2) may reach (Landlock ABI 4+)
	AllowBind    []uint16 // TCP ports bind(2) may use (Landlock ABI 4+)
	RequireABI   int      // refuse to run when Landlock's ABI is older
	// Warn receives what the kernel cannot enforce of the request.
	Warn func(msg string)
}

// CommandOptions describe a command to run in a workspace.
type CommandOptions struct {
	Argv []string
	// Env is added to (and overrides) the environment the command
	// inherits from the caller: "K=V" each.
	Env []string
	// Cwd is the working directory inside the workspace; relative paths
	// are relative to the workspace root. Default: the workspace root.
	Cwd     string
	Sandbox SandboxOptions
	// TTY: stdin is a terminal the command gets as its controlling one.
	TTY bool
}

// ErrInvalidArgument marks bad input other than a name (a flag value, a
// batch job, a patch, a range). Errors in this category carry their whole
// explanation; the sentinel adds no text to them (Invalidf). The lifecycle
// and the root package re-export it (strata.ErrInvalidArgument).
var ErrInvalidArgument = errors.New("invalid argument")

// invalidError is an ErrInvalidArgument whose message is only its own.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalidArgument }

// Invalidf returns an ErrInvalidArgument error with the formatted message,
// without a ": invalid argument" suffix.
func Invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// Planner plans the commands of one store's workspaces.
type Planner struct {
	// Home is the store directory: no view ever shows it.
	Home string
	// Settings returns the store's settings (the view's defaults); nil:
	// none.
	Settings func() (Settings, error)
}

func (p *Planner) settings() (Settings, error) {
	if p.Settings == nil {
		return Settings{}, nil
	}
	return p.Settings()
}

// Command turns opts into the nsexec command for a workspace whose
// merged view is at target inside its namespace: its environment (the
// caller's, with a sandbox's HOME and TMPDIR, and opts.Env on top), its
// working directory, and its sandbox (the view's binds and the policy
// the keeper plans).
func (p *Planner) Command(target string, opts CommandOptions) (nsexec.Command, error) {
	if len(opts.Argv) == 0 {
		return nsexec.Command{}, fmt.Errorf("no command given")
	}
	cwd := target
	if opts.Cwd != "" {
		cwd = opts.Cwd
		if !filepath.IsAbs(cwd) {
			cwd = filepath.Join(target, cwd)
		}
	}
	env := os.Environ()
	if opts.Sandbox.Mode != SandboxNone {
		env = SandboxEnv(env)
	}
	cmd := nsexec.Command{
		Argv: opts.Argv,
		Env:  MergeEnv(env, opts.Env),
		Dir:  filepath.Clean(cwd),
		TTY:  opts.TTY,
	}
	if err := p.applySandbox(&cmd, target, opts.Sandbox); err != nil {
		return nsexec.Command{}, err
	}
	return cmd, nil
}

// applySandbox adds a sandbox mode's policy to cmd: the keeper plans
// Landlock and takes the seccomp program once per policy (nsexec).
func (p *Planner) applySandbox(cmd *nsexec.Command, target string, o SandboxOptions) error {
	mode := o.Mode
	if mode == "" {
		mode = SandboxAgent
	}
	warn := o.Warn
	if warn == nil {
		warn = func(string) {}
	}
	switch o.Net {
	case "", NetHost:
		cmd.NetNone = mode == SandboxStrict
	case NetNone:
		cmd.NetNone = true
	default:
		return Invalidf("--net %q: want host or none", o.Net)
	}
	if mode == SandboxStrict && o.Net == NetHost {
		return Invalidf("--sandbox strict implies --net none; --net host contradicts it")
	}
	switch mode {
	case SandboxNone:
		if len(o.RO)+len(o.RW)+len(o.AllowConnect)+len(o.AllowBind) > 0 || o.RequireABI > 0 {
			return Invalidf("--rw, --ro, --allow-connect, --allow-bind and --sandbox-require-abi need a sandbox; --sandbox none has none")
		}
		return nil
	case SandboxAgent, SandboxStrict:
	default:
		return Invalidf("--sandbox %q: want agent, strict or none", mode)
	}
	// The view first (the mount namespace is the first fence): the
	// system, the workspace, private /tmp, /var/tmp and /dev/shm, and the
	// binds of ViewBinds. Landlock names the same paths.
	vp, err := p.ViewBinds(cmd.Env, &o)
	if err != nil {
		return err
	}
	cmd.View, cmd.Binds = true, vp.Binds
	cmd.Env = append(cmd.Env, vp.Env...)
	rw := append([]string{"/var/tmp"}, vp.RW...)
	// The keeper plans the policy once and keeps the plan; Run plans it here.
	cmd.Policy = &sandbox.Request{
		Strict: mode == SandboxStrict, Target: target, Tmp: "/tmp", RO: vp.RO, RW: rw,
		ConnectTCP: o.AllowConnect, BindTCP: o.AllowBind, RequireABI: o.RequireABI,
	}
	cmd.Warn = func(w string) { warn("sandbox: " + w) }
	return nil
}

// HintNotFound says, when a sandboxed command was not found (127) and
// what it needs is on the host outside the view, which --ro fixes it.
func HintNotFound(st nsexec.ExitStatus, cmd nsexec.Command, target string, warn func(string)) {
	if st.Code != 127 || !cmd.View || warn == nil {
		return
	}
	shown := func(p string) bool {
		if inSystemView(p) || Within(p, target) {
			return true
		}
		for _, b := range cmd.Binds {
			if Within(p, b.Target) {
				return true
			}
		}
		return false
	}
	if h := notFoundHint(cmd.Argv, cmd.Env, cmd.Dir, shown); h != "" {
		warn("sandbox: " + h)
	}
}

// MergeEnv overlays extra K=V pairs on base.
func MergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// sandboxHome is HOME inside a sandbox: the user's home is outside the
// fence, and tools that cannot read their config there fail (git exits 128
// on an unreadable ~/.gitconfig). The workspace's private /tmp stands in;
// --env HOME=... overrides it.
const sandboxHome = "/tmp"

// SandboxEnv points HOME at sandboxHome and TMPDIR at the private /tmp, and
// drops XDG base directories: they usually point outside the fence (into
// the real home, or a per-user temporary directory).
func SandboxEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR":
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "HOME="+sandboxHome, "TMPDIR=/tmp")
	// A fresh HOME makes some tools check for their own updates over the
	// network at every start (npm's update notifier costs ~0.6 s per
	// `npm test` in a one-shot run); these are their documented switches.
	for _, kv := range quietTools {
		k, _, _ := strings.Cut(kv, "=")
		if !HasEnv(env, k) {
			out = append(out, kv)
		}
	}
	return out
}

// quietTools turns off update checks that a fresh HOME would trigger.
var quietTools = []string{"NO_UPDATE_NOTIFIER=1", "npm_config_update_notifier=false", "PIP_DISABLE_PIP_VERSION_CHECK=1"}

// HasEnv reports whether env sets key.
func HasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}
