package strata

import (
	"context"
	"os"

	"github.com/stratafs/strata/internal/workspace"
)

// Shell runs an interactive shell (opts.Argv, default $SHELL, then
// /bin/bash, then /bin/sh) in a workspace on the caller's terminal. On a
// terminal the command gets a pty of its own as its controlling terminal:
// job control works, and the window size follows the caller's.
func (r *Repo) Shell(ctx context.Context, name string, opts ExecOptions) (ExitStatus, error) {
	root := r.ws.IsRoot(name)
	if len(opts.Argv) == 0 {
		opts.Argv = []string{workspace.DefaultShell()}
		if root {
			// The image's shell, not the host's $SHELL: bash where the
			// image has it.
			opts.Argv = []string{"/bin/sh", "-c", "command -v bash >/dev/null && exec bash; exec sh"}
		}
	}
	in := opts.Stdin
	if !workspace.IsTerminal(in) {
		return r.Exec(ctx, name, opts)
	}
	if err := r.checkOwner(name); err != nil {
		return ExitStatus{}, err
	}
	// The keeper first: until it runs, nothing may touch the terminal (a
	// --subids workspace fails here, and the CLI starts over in the
	// subordinate-id namespace, which must find the terminal untouched).
	noNS, err := r.ready(ctx, name)
	if err != nil {
		return ExitStatus{}, err
	}
	// A sandboxed shell runs in the workspace's view, whose /dev/pts is
	// its own: its terminal comes from there, or it would have no name
	// inside (tty: "not a tty"). --sandbox none sees the host's, and so
	// does a workspace without namespaces.
	open := workspace.OpenHostPTY
	if (opts.Sandbox.Mode != SandboxNone || root) && !noNS {
		open = func() (*os.File, *os.File, error) { return r.ws.OpenPTY(name) }
	}
	return workspace.OnTerminal(in, opts.Stdout, open, func(slave *os.File) (ExitStatus, error) {
		opts.Stdin, opts.Stdout, opts.Stderr, opts.TTY = slave, slave, slave, true
		return r.Exec(ctx, name, opts)
	})
}
