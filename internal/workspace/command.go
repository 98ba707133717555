package workspace

import (
	"context"
	"os"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/nsexec"
)

// Sandbox modes (--sandbox); the root package re-exports them.
const (
	SandboxAgent  = hotpath.SandboxAgent  // Landlock fence + seccomp deny list (default)
	SandboxStrict = hotpath.SandboxStrict // agent + no network (--net none, sockets denied)
	SandboxNone   = hotpath.SandboxNone   // trusted work: no fence at all, the host view
)

// Network modes (--net).
const (
	NetHost = hotpath.NetHost // the host's network
	NetNone = hotpath.NetNone // a private network namespace with loopback only
)

// SandboxOptions are the sandbox flags of exec, shell and run (the root
// package's SandboxOptions, field for field).
type SandboxOptions = hotpath.SandboxOptions

// CommandOptions describe a command to run in a workspace.
type CommandOptions = hotpath.CommandOptions

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
	var cmd nsexec.Command
	rf, isRoot, err := readRootFile(m.Layout.Workspace(name))
	if err != nil {
		return ExitStatus{}, err
	}
	if isRoot {
		cmd, err = m.rootCommand(rf, opts)
	} else {
		cmd, err = m.buildCommand(k.Target, opts)
	}
	if err != nil {
		return ExitStatus{}, err
	}
	st, err := nsexec.Exec(ctx, m.Layout.Workspace(name), cmd, io.Stdin, io.Stdout, io.Stderr)
	if err == nil && !isRoot {
		hotpath.HintNotFound(st, cmd, k.Target, opts.Sandbox.Warn)
	}
	return st, err
}

// planner plans the store's commands: the planning the front shares
// (internal/workspace/hotpath).
func (m *Manager) planner() *hotpath.Planner {
	return &hotpath.Planner{Home: m.Layout.Home(), Settings: m.settings}
}

// buildCommand turns options into the nsexec command for a workspace whose
// merged view is at target inside its namespace.
func (m *Manager) buildCommand(target string, opts CommandOptions) (nsexec.Command, error) {
	return m.planner().Command(target, opts)
}

// The helpers the planner and image roots (root.go) share.

func mergeEnv(base, extra []string) []string { return hotpath.MergeEnv(base, extra) }
func hasEnv(env []string, key string) bool   { return hotpath.HasEnv(env, key) }
func within(p, dir string) bool              { return hotpath.Within(p, dir) }
