package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
)

func wsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "ws",
		Usage: "create, list, stop and remove workspaces",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "new workspace; by default on a new branch ws/NAME forked from REF (default main)",
				ArgsUsage: "[NAME]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "from", Usage: "REF to fork (default main)"},
					&cli.StringFlag{Name: "branch", Usage: "bind to this branch (created at --from if missing) instead of ws/NAME"},
					&cli.BoolFlag{Name: "tmpfs", Usage: "keep changes on a tmpfs (/dev/shm): faster, lost at reboot"},
					subIDsFlag(),
					&cli.StringFlag{Name: "root", Usage: "IMAGE (an imported image's ref) whose tree is / under the project, mounted at --at"},
					&cli.StringFlag{Name: "at", Usage: "with --root: PATH inside the image where the project appears (e.g. /testbed)"},
					&cli.StringFlag{Name: "scope", Usage: "an image-rooted workspace's diff and commits: project (its working directory; default) or all"},
					&cli.StringSliceFlag{Name: "env", Usage: "image-rooted: K=V over the image's environment for every command (repeatable)"},
					&cli.StringFlag{Name: "cwd", Usage: "image-rooted: the working directory instead of the image's (absolute, or relative to it)"},
					&cli.StringSliceFlag{Name: "ro", Usage: "image-rooted: host PATH bound read-only into the root for every command (repeatable)"},
					&cli.StringSliceFlag{Name: "rw", Usage: "image-rooted: host PATH bound read-write into the root for every command (repeatable)"},
					backendFlag(),
				},
				Action: func(c *cli.Context) error {
					if c.NArg() > 1 {
						return usagef("ws create takes at most one NAME")
					}
					r, err := e.open(strata.OpenOptions{Create: true})
					if err != nil {
						return err
					}
					defer r.Close()
					w, err := r.CreateWorkspace(c.Context, c.Args().First(), strata.WorkspaceOptions{
						From: c.String("from"), Branch: c.String("branch"), Tmpfs: c.Bool("tmpfs"), SubIDs: c.Bool("subids"),
						Root: c.String("root"), At: c.String("at"), Scope: c.String("scope"),
						Env: c.StringSlice("env"), Cwd: c.String("cwd"), RO: c.StringSlice("ro"), RW: c.StringSlice("rw"),
						KeeperSpec: true, // the front's first exec starts the keeper (docs/hotpath.md)
						Backend:    c.String("backend"), Warn: func(m string) { e.warn("", m) },
					})
					if err != nil {
						return err
					}
					return e.out(w, func(o io.Writer) {
						fmt.Fprintf(o, "workspace %s on branch %s at %s%s", w.Name, w.Branch, w.Base.Short(), backendNote(w.Backend))
						switch {
						case w.Root != nil && w.Root.At != "":
							fmt.Fprintf(o, ", at %s in image %s", w.Root.At, w.Root.Env.Short())
						case w.Root != nil:
							fmt.Fprintf(o, " (image-rooted; diff and commits: %s)", w.Root.Project)
						}
						fmt.Fprintln(o)
					})
				},
			},
			{
				Name:    "list",
				Aliases: []string{"ls"},
				Usage:   "name, branch, base commit, state, size of changes",
				Action: func(c *cli.Context) error {
					r, err := e.open(strata.OpenOptions{ReadOnly: readOnlyFS(e.home)})
					if err != nil {
						return err
					}
					defer r.Close()
					wss, err := r.Workspaces(c.Context)
					if err != nil {
						return err
					}
					if e.json {
						for _, w := range wss {
							if err := e.out(w, nil); err != nil {
								return err
							}
						}
						return nil
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tBRANCH\tBASE\tSTATE\tCHANGES")
					for _, w := range wss {
						state := w.State
						if w.Tmpfs {
							state += " (tmpfs)"
						}
						if w.SubIDs {
							state += " (subids)"
						}
						if w.Root != nil {
							state += " (image)"
						}
						state += backendNote(w.Backend)
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", w.Name, w.Branch, w.Base.Short(), state, ibytes(w.Changes))
					}
					return tw.Flush()
				},
			},
			{
				Name:      "path",
				Usage:     "a host path where the merged view can be read and written (starts the workspace)",
				ArgsUsage: "NAME",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usagef("ws path needs exactly one NAME")
					}
					r, err := e.open(strata.OpenOptions{})
					if err != nil {
						return err
					}
					defer r.Close()
					p, err := r.WorkspacePath(c.Context, c.Args().First())
					if err != nil {
						return err
					}
					return e.out(map[string]string{"name": c.Args().First(), "path": p}, func(o io.Writer) { fmt.Fprintln(o, p) })
				},
			},
			{
				Name:      "stop",
				Usage:     "end its processes and unmount; changes are kept",
				ArgsUsage: "NAME",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usagef("ws stop needs exactly one NAME")
					}
					r, err := e.open(strata.OpenOptions{})
					if err != nil {
						return err
					}
					defer r.Close()
					name := c.Args().First()
					if err := r.StopWorkspace(c.Context, name); err != nil {
						return err
					}
					return e.out(map[string]string{"name": name, "state": "stopped"}, func(o io.Writer) {
						fmt.Fprintf(o, "workspace %s stopped\n", name)
					})
				},
			},
			{
				Name:      "rm",
				Usage:     "stop and delete it with its uncommitted changes (--force when there are any)",
				ArgsUsage: "NAME...",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "discard uncommitted changes"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() < 1 {
						return usagef("ws rm needs a NAME")
					}
					r, err := e.open(strata.OpenOptions{})
					if err != nil {
						return err
					}
					defer r.Close()
					for _, name := range c.Args().Slice() {
						if err := r.RemoveWorkspace(c.Context, name, c.Bool("force")); err != nil {
							return err
						}
						if err := e.out(map[string]string{"name": name, "state": "removed"}, func(o io.Writer) {
							fmt.Fprintf(o, "workspace %s removed\n", name)
						}); err != nil {
							return err
						}
					}
					return nil
				},
			},
		},
	}
}

// sandboxFlags are the sandbox flags of exec, shell and run (CLI.md).
func sandboxFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "sandbox", Value: strata.SandboxAgent, Usage: "agent, strict (agent + no network) or none (no fence: the command sees the whole host, your home included)"},
		&cli.StringFlag{Name: "net", Usage: "host or none (a private network namespace with loopback only)"},
		&cli.StringSliceFlag{Name: "rw", Usage: "host PATH added to the sandbox's view read-write (repeatable; must exist)"},
		&cli.StringSliceFlag{Name: "ro", Usage: "host PATH added to the sandbox's view read-only, e.g. a toolchain or a repository (repeatable; must exist)"},
		&cli.StringSliceFlag{Name: "allow-connect", Usage: "TCP PORT the command may connect to (Landlock ABI 4+; repeatable)"},
		&cli.StringSliceFlag{Name: "allow-bind", Usage: "TCP PORT the command may bind (Landlock ABI 4+; repeatable)"},
		&cli.IntFlag{Name: "sandbox-require-abi", Usage: "refuse to run unless the kernel's Landlock ABI is at least N"},
	}
}

func sandboxOptions(e *env, c *cli.Context) (strata.SandboxOptions, error) {
	ports := func(flag string) ([]uint16, error) {
		var out []uint16
		for _, s := range c.StringSlice(flag) {
			n, err := strconv.ParseUint(s, 10, 16)
			if err != nil {
				return nil, usagef("--%s %q: want a TCP port number", flag, s)
			}
			out = append(out, uint16(n))
		}
		return out, nil
	}
	conn, err := ports("allow-connect")
	if err != nil {
		return strata.SandboxOptions{}, err
	}
	bind, err := ports("allow-bind")
	if err != nil {
		return strata.SandboxOptions{}, err
	}
	return strata.SandboxOptions{
		Mode: c.String("sandbox"), Net: c.String("net"),
		RW: c.StringSlice("rw"), RO: c.StringSlice("ro"),
		AllowConnect: conn, AllowBind: bind,
		RequireABI: c.Int("sandbox-require-abi"),
		Warn:       func(msg string) { e.warn("", msg) },
	}, nil
}

func execCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a workspace (exit status is the command's)",
		ArgsUsage: "NAME -- CMD [ARG...]",
		Flags: append(sandboxFlags(),
			&cli.StringFlag{Name: "cwd", Usage: "working directory: relative to the workspace root, or absolute as the command sees it"},
			&cli.StringSliceFlag{Name: "env", Usage: "K=V added to the command's environment (repeatable)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usagef("exec needs NAME -- CMD [ARG...]")
			}
			args := c.Args().Slice()
			return e.runInWorkspace(c, args[0], args[1:], false)
		},
	}
}

func shellCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "shell",
		Usage:     "an interactive shell in a workspace",
		ArgsUsage: "NAME",
		Flags: append(sandboxFlags(),
			&cli.StringFlag{Name: "cwd", Usage: "working directory: relative to the workspace root, or absolute as the command sees it"},
			&cli.StringSliceFlag{Name: "env", Usage: "K=V added to the shell's environment (repeatable)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("shell needs exactly one NAME")
			}
			return e.runInWorkspace(c, c.Args().First(), nil, true)
		},
	}
}

// runInWorkspace is exec and shell: the command's exit code becomes
// strata's; strata's own failures exit 125.
func (e *env) runInWorkspace(c *cli.Context, name string, argv []string, shell bool) error {
	sb, err := sandboxOptions(e, c)
	if err != nil {
		return err
	}
	for _, kv := range c.StringSlice("env") {
		if !strings.Contains(kv, "=") {
			return usagef("--env %q: want K=V", kv)
		}
	}
	r, err := e.open(strata.OpenOptions{})
	if err != nil {
		return &exitCode{code: exitStrata, err: err}
	}
	defer r.Close()
	opts := strata.ExecOptions{
		Argv: argv, Env: c.StringSlice("env"), Cwd: c.String("cwd"), Sandbox: sb,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	}
	// Signals go to the command (nsexec forwards them), not to strata:
	// Ctrl-C must interrupt the command, not kill it through a cancelled
	// context.
	ctx := context.WithoutCancel(c.Context)
	var st strata.ExitStatus
	if shell {
		st, err = r.Shell(ctx, name, opts)
	} else {
		st, err = r.Exec(ctx, name, opts)
	}
	if err != nil {
		if isUsage(err) {
			return err
		}
		return &exitCode{code: exitStrata, err: err}
	}
	if st.Code != 0 {
		return &exitCode{code: st.Code}
	}
	return nil
}

// backendNote marks a workspace of another backend than overlay.
func backendNote(b string) string {
	if b == "" || b == strata.BackendOverlay {
		return ""
	}
	return " (" + b + ")"
}
