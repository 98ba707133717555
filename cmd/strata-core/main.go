// Command strata-core is the command-line interface of strata (see docs/cli.md): flag
// parsing, output (text and --json), exit codes and progress bars. All
// behaviour lives in the root package.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/stratafs/strata"
	"github.com/stratafs/strata/nsexec"
)

// Exit codes (docs/cli.md).
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitConflict = 3
	// exitJobsFailed: batch ran every job and at least one failed.
	exitJobsFailed = 4
	exitStrata     = 125 // exec/run: strata failed before or around the command
)

// usageError marks an error in how strata was called (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// Is makes a usage error one of strata's invalid-argument errors, so that
// strata.Kind classifies it as a usage error.
func (e *usageError) Is(target error) bool { return target == strata.ErrInvalidArgument }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitCode carries a command's own exit status (exec, run) through cli.
type exitCode struct {
	code int
	err  error // what strata reports, if anything
}

func (e *exitCode) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}
func (e *exitCode) Unwrap() error { return e.err }

// env is what every command needs: global flags and output streams.
type env struct {
	home   string
	json   bool
	quiet  bool
	stdout io.Writer
	stderr io.Writer
	tty    bool // stdout is a terminal
}

func main() {
	nsexec.Init()
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if f, ok := stdout.(*os.File); ok {
		e.tty = term.IsTerminal(int(f.Fd()))
	}
	app := newApp(e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	var caught atomic.Value // the signal that cancelled ctx
	go func() {
		if s, ok := <-sigc; ok {
			caught.Store(s)
			cancel()
		}
	}()
	stop := func() { signal.Stop(sigc) }
	defer stop()
	err := app.RunContext(ctx, permuteArgs(app, args))
	if errors.Is(err, nsexec.ErrNeedSubIDNS) {
		// A --subids workspace: start it or read its changes again from
		// the namespace of the subordinate ids. Nothing was done yet.
		stop()
		if eerr := nsexec.EnterSubIDs(); eerr != nil {
			err = fmt.Errorf("%w (%v)", eerr, err)
		}
	}
	code := e.report(err)
	// Interrupted: exit 128+signal, as shells and git do (130 for SIGINT),
	// unless the command's own status is the answer (exec, run).
	var xc *exitCode
	if s, ok := caught.Load().(syscall.Signal); ok && err != nil && !errors.As(err, &xc) {
		code = 128 + int(s)
	}
	return code
}

func newApp(e *env) *cli.App {
	app := &cli.App{
		Name:                 "strata",
		Usage:                "isolated, writable copies of a project in milliseconds, without root",
		HideVersion:          true,
		Writer:               e.stdout,
		ErrWriter:            e.stderr,
		EnableBashCompletion: false,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "home", Usage: "store directory (default $STRATA_HOME, $XDG_DATA_HOME/strata, ~/.local/share/strata)"},
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output: one JSON object per result"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress bars, no warnings, only results"},
			&cli.BoolFlag{Name: "version", Usage: "print the version (as strata version) and exit"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				return e.printVersion()
			}
			if c.NArg() > 0 {
				return usagef("unknown command %q", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		Before: func(c *cli.Context) error {
			e.json, e.quiet = c.Bool("json"), c.Bool("quiet")
			e.home = c.String("home")
			if e.home == "" {
				h, err := strata.DefaultHome()
				if err != nil {
					return err
				}
				e.home = h
			}
			return nil
		},
		// Errors are reported once, by env.report.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return &usageError{err.Error()}
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(e.stderr, "strata: unknown command %q; see `strata help`\n", name)
			os.Exit(exitUsage)
		},
	}
	app.Commands = append(app.Commands, storeCommands(e)...)
	app.Commands = append(app.Commands, wsCommand(e), execCommand(e), shellCommand(e))
	app.Commands = append(app.Commands, changeCommands(e)...)
	app.Commands = append(app.Commands, runCommand(e), batchCommand(e))
	app.Commands = append(app.Commands, shareCommands(e)...)
	app.Commands = append(app.Commands, doctorCommand(e), versionCommand(e), completionCommand(e), mcpCommand(e))
	app.Commands = append(app.Commands, setupCommand(e))
	for _, extra := range extraCommands {
		app.Commands = append(app.Commands, extra(e))
	}
	addExamples(app.Commands, "")
	for _, c := range app.Commands {
		setUsageErrors(c)
	}
	return app
}

// setUsageErrors makes flag errors of every subcommand exit 2.
func setUsageErrors(c *cli.Command) {
	c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return &usageError{err.Error()} }
	for _, s := range c.Subcommands {
		setUsageErrors(s)
	}
}

// report prints err (if any) and returns the exit code. This is the one
// place where errors become exit codes and user-facing messages.
func (e *env) report(err error) int {
	if err == nil {
		return exitOK
	}
	var xc *exitCode
	if errors.As(err, &xc) {
		if xc.err != nil {
			e.printError(xc.err, strata.Kind(xc.err))
		}
		return xc.code
	}
	code := exitFor(err)
	if ue := (*usageError)(nil); errors.As(err, &ue) && !e.json {
		fmt.Fprintf(e.stderr, "strata: %s\nRun `strata help` for usage.\n", err)
		return code
	}
	e.printError(err, strata.Kind(err))
	return code
}

// exitFor is the exit code of a command that failed with err, from its
// kind (strata.Kind): 2 for usage errors, 3 for conflicts, else 1.
func exitFor(err error) int {
	switch strata.Kind(err) {
	case strata.KindUsage, strata.KindInvalidName:
		return exitUsage
	case strata.KindConflict:
		return exitConflict
	}
	return exitError
}

// isUsage reports whether err is a usage error (exit 2), which exec and
// run report as such rather than as strata's own failure (125).
func isUsage(err error) bool { return exitFor(err) == exitUsage }

func (e *env) printError(err error, kind string) {
	if e.json {
		m := map[string]any{"error": err.Error(), "kind": kind}
		// The paths in the message, as data too.
		var ce *strata.ConflictError
		var ae *strata.ApplyRefusedError
		var pe *strata.PolicyError
		switch {
		case errors.As(err, &ce):
			m["conflicts"] = ce.Conflicts
		case errors.As(err, &ae):
			m["conflicts"] = ae.Refused
		case errors.As(err, &pe):
			m["policy_violations"] = pe.Violations
		}
		b, _ := json.Marshal(m)
		fmt.Fprintf(e.stderr, "%s\n", b)
		return
	}
	fmt.Fprintf(e.stderr, "strata: %s\n", explain(err))
}

// explain adds what to do to errors whose message alone doesn't say.
func explain(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, strata.ErrNoSpace):
		if strings.Contains(msg, "free space there:") {
			return msg + "\n  the store is unchanged; read-only commands (log, show, ws list, fsck, diff of commits) still work."
		}
		return msg + "\n  the filesystem holding the store is full; the store is unchanged. Free space there: `strata ws rm -f NAME` removes a workspace and its changes, `strata ws stop NAME` releases files deleted inside it, `strata gc --prune 0s` drops unreferenced data; then retry."
	case errors.Is(err, strata.ErrReadOnly):
		return msg + "\n  the store cannot be written here; read-only commands (log, show, export, fsck) still work. Use --home to pick a writable store."
	case errors.Is(err, context.Canceled):
		return "interrupted; nothing was changed by the interrupted operation"
	}
	return msg
}

// count is "1 file", "2 files".
func count[N int | int64](n N, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// out prints one result: v as a JSON line with --json, else text.
func (e *env) out(v any, text func(w io.Writer)) error {
	if e.json {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	if text != nil {
		text(e.stdout)
	}
	return nil
}

// warn prints a warning unless --quiet.
func (e *env) warn(path, msg string) {
	if e.quiet {
		return
	}
	if e.json {
		b, _ := json.Marshal(map[string]string{"warning": msg, "path": path})
		fmt.Fprintf(e.stderr, "%s\n", b)
		return
	}
	if path != "" {
		fmt.Fprintf(e.stderr, "strata: warning: %s: %s\n", quotePath(path), msg)
	} else {
		fmt.Fprintf(e.stderr, "strata: warning: %s\n", msg)
	}
}

// open opens the store named by --home.
func (e *env) open(opts strata.OpenOptions) (*strata.Repo, error) {
	if !opts.ReadOnly {
		if err := checkWritable(e.home); err != nil {
			return nil, err
		}
	}
	return strata.Open(e.home, opts)
}

// checkWritable says "permission denied: DIR" and what to do when a store
// is to be created where this user cannot write (the directory, or the
// nearest existing one it would be created in): SQLite's own answer is
// "unable to open database file (14)". An existing store that cannot be
// written is reported by Open (ErrReadOnly: read-only commands work).
func checkWritable(home string) error {
	if _, err := os.Stat(filepath.Join(home, "strata.db")); err == nil {
		return nil // an existing store: opening it says whether it is read-only
	}
	dir := home
	for {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir)
	}
	err := unix.Access(dir, unix.W_OK)
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
		return nil
	}
	owner := "its owner"
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil {
		owner = userName(st.Uid)
	}
	what := "the store directory"
	if dir != home {
		what = "the directory the store would be created in"
	}
	return &permissionError{fmt.Sprintf("permission denied: %s: %s is not writable by %s; it belongs to %s.\n  Use --home DIR (or $STRATA_HOME) for a store of your own, or have it made writable for you.",
		dir, what, userName(uint32(os.Getuid())), owner)}
}

// permissionError is an os.ErrPermission whose message says it all.
type permissionError struct{ msg string }

func (e *permissionError) Error() string        { return e.msg }
func (e *permissionError) Is(target error) bool { return target == os.ErrPermission }

// userName is "alice (uid 1000)", or "uid 1000" for an id without a name.
func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// extraCommands are hidden commands of builds that carry them (man.go:
// the man page generator, left out of the installed binary).
var extraCommands []func(*env) *cli.Command
