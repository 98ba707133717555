package strata

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/stratafs/strata/internal/workspace"
)

// Sandbox modes (--sandbox).
const (
	SandboxAgent  = workspace.SandboxAgent  // Landlock fence + seccomp deny list (default)
	SandboxStrict = workspace.SandboxStrict // agent + no network (--net none, sockets denied)
	SandboxNone   = workspace.SandboxNone   // trusted work: no fence at all, the host view
)

// Network modes (--net).
const (
	NetHost = workspace.NetHost // the host's network
	NetNone = workspace.NetNone // a private network namespace with loopback only
)

// SandboxOptions are the sandbox flags of exec, shell and run.
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

// ExecOptions describe a command to run in a workspace.
type ExecOptions struct {
	Argv []string
	// Env is added to (and overrides) the environment the command
	// inherits from the caller: "K=V" each.
	Env []string
	// Cwd is the working directory inside the workspace; relative paths
	// are relative to the workspace root. Default: the workspace root.
	Cwd     string
	Sandbox SandboxOptions
	// TTY: stdin is a terminal (the slave side of a pty): the command gets
	// it as its controlling terminal.
	TTY                   bool
	Stdin, Stdout, Stderr *os.File
}

// ExitStatus is how a command ended.
type ExitStatus = workspace.ExitStatus

// Exec runs a command in a workspace, starting its keeper if needed, and
// returns the command's exit status. Errors are strata's own (exit 125).
func (r *Repo) Exec(ctx context.Context, name string, opts ExecOptions) (ExitStatus, error) {
	if err := r.checkOwner(name); err != nil {
		return ExitStatus{}, err
	}
	if err := ValidateWorkspaceName(name); err != nil {
		return ExitStatus{}, err
	}
	return r.ws.Exec(ctx, name, opts.command(), workspace.Stdio{Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr})
}

// command is what the lifecycle needs of opts to build the command.
func (opts ExecOptions) command() workspace.CommandOptions {
	return workspace.CommandOptions{Argv: opts.Argv, Env: opts.Env, Cwd: opts.Cwd, Sandbox: workspace.SandboxOptions(opts.Sandbox), TTY: opts.TTY}
}

// checkOwner refuses root's commands in another user's workspace before
// anything starts: its keeper lives in that user's namespaces, where root
// is nobody (the keeper would answer "uid 65534 may not run commands"),
// and a keeper root started would leave root's files in the user's store.
func (r *Repo) checkOwner(name string) error {
	if os.Geteuid() != 0 {
		return nil // another user's store is not readable or not theirs to us
	}
	fi, err := os.Stat(r.layout.Workspace(name))
	if err != nil {
		return nil // no such workspace: keeper() says so
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	owner := fmt.Sprintf("uid %d", st.Uid)
	as := owner
	if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil {
		owner, as = fmt.Sprintf("%s (uid %d)", u.Username, st.Uid), u.Username
	}
	return fmt.Errorf("workspace %s belongs to %s: its processes run in that user's namespaces, which root cannot enter; run the command as its owner (sudo -u %s strata --home %s exec %s ...): %w",
		name, owner, as, r.home, name, os.ErrPermission)
}
