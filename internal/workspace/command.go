package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/nsexec"
)

// Sandbox modes (--sandbox); the root package re-exports them.
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

// Stdio are a command's standard files.
type Stdio struct {
	Stdin, Stdout, Stderr *os.File
}

// Exec runs a command in workspace name, starting its keeper if needed,
// and returns the command's exit status. Errors are strata's own.
func (m *Manager) Exec(ctx context.Context, name string, opts CommandOptions, io Stdio) (ExitStatus, error) {
	k, pst, handled, err := m.execPlain(ctx, name, opts, io)
	if handled {
		return pst, err
	}
	if k == nil {
		if k, err = m.Keeper(ctx, name); err != nil {
			return ExitStatus{}, err
		}
	}
	cmd, err := m.buildCommand(k.Target, opts)
	if err != nil {
		return ExitStatus{}, err
	}
	st, err := nsexec.Exec(ctx, m.Layout.Workspace(name), cmd, io.Stdin, io.Stdout, io.Stderr)
	if err == nil {
		hintNotFound(st, cmd, k.Target, opts.Sandbox.Warn)
	}
	return st, err
}

// hintNotFound says, when a sandboxed command was not found (127) and
// what it needs is on the host outside the view, which --ro fixes it.
func hintNotFound(st ExitStatus, cmd nsexec.Command, target string, warn func(string)) {
	if st.Code != 127 || !cmd.View || warn == nil {
		return
	}
	shown := func(p string) bool {
		if inSystemView(p) || within(p, target) {
			return true
		}
		for _, b := range cmd.Binds {
			if within(p, b.Target) {
				return true
			}
		}
		return false
	}
	if h := notFoundHint(cmd.Argv, cmd.Env, cmd.Dir, shown); h != "" {
		warn("sandbox: " + h)
	}
}

// buildCommand turns options into the nsexec command for a workspace whose
// merged view is at target inside its namespace.
func (m *Manager) buildCommand(target string, opts CommandOptions) (nsexec.Command, error) {
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
		env = sandboxEnv(env)
	}
	cmd := nsexec.Command{
		Argv: opts.Argv,
		Env:  mergeEnv(env, opts.Env),
		Dir:  filepath.Clean(cwd),
		TTY:  opts.TTY,
	}
	if err := m.applySandbox(&cmd, target, opts.Sandbox); err != nil {
		return nsexec.Command{}, err
	}
	return cmd, nil
}

// applySandbox adds a sandbox mode's policy to cmd: the keeper plans
// Landlock and takes the seccomp program once per policy (nsexec).
func (m *Manager) applySandbox(cmd *nsexec.Command, target string, o SandboxOptions) error {
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
	// binds of viewBinds. Landlock names the same paths.
	vp, err := m.viewBinds(cmd.Env, &o)
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

// mergeEnv overlays extra K=V pairs on base.
func mergeEnv(base, extra []string) []string {
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

// sandboxEnv points HOME at sandboxHome and TMPDIR at the private /tmp, and
// drops XDG base directories: they usually point outside the fence (into
// the real home, or a per-user temporary directory).
func sandboxEnv(env []string) []string {
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
		if !hasEnv(env, k) {
			out = append(out, kv)
		}
	}
	return out
}

// quietTools turns off update checks that a fresh HOME would trigger.
var quietTools = []string{"NO_UPDATE_NOTIFIER=1", "npm_config_update_notifier=false", "PIP_DISABLE_PIP_VERSION_CHECK=1"}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}
