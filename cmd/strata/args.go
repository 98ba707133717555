package main

import (
	"errors"
	"flag"
	"io"
	"strconv"
	"strings"

	"github.com/stratafs/strata/internal/cliargs"
	"github.com/stratafs/strata/internal/workspace/hotpath"
)

// The front's command line: the hot verbs, read as strata-core reads
// them — the same ordering (internal/cliargs), then the flags with the
// standard library's flag package, which urfave/cli v2 parses with too —
// and every other form handed over. TestFlagsMatchDoc holds the flags
// below to docs/cli.md, which TestCLIDocMatchesHelp (cmd/strata-core)
// holds to strata-core's.

// request is a hot verb the front may serve.
type request struct {
	verb  string // "exec", "shell" or "path" (ws path)
	home  string // --home; "" for the default
	quiet bool   // --quiet: no warnings
	name  string // the workspace
	opts  hotpath.CommandOptions
}

// handover is why the front does not serve a command line ("" when it
// does).
type handover string

// The global flags (strata-core's app flags).
var globalFlags = []cliargs.Flag{
	{Names: []string{"home"}},
	{Names: []string{"json"}, Bool: true},
	{Names: []string{"quiet", "q"}, Bool: true},
	{Names: []string{"version"}, Bool: true},
}

// Kinds of a verb's flags.
const (
	flagString = iota
	flagList   // repeatable (urfave/cli's StringSliceFlag)
	flagInt
)

// verbFlag is a flag of exec or shell.
type verbFlag struct {
	name string
	kind int
}

// commandFlags are exec's and shell's flags (strata-core's sandboxFlags,
// --cwd and --env); ws path has none.
var commandFlags = []verbFlag{
	{"sandbox", flagString}, {"net", flagString},
	{"rw", flagList}, {"ro", flagList}, {"allow-connect", flagList}, {"allow-bind", flagList},
	{"sandbox-require-abi", flagInt}, {"cwd", flagString}, {"env", flagList},
}

// commands is the part of the command tree the front serves.
var commands = func() []*cliargs.Command {
	var fl []cliargs.Flag
	for _, f := range commandFlags {
		fl = append(fl, cliargs.Flag{Names: []string{f.name}})
	}
	return []*cliargs.Command{
		{Name: "exec", Flags: fl},
		{Name: "shell", Flags: fl},
		{Name: "ws", Subcommands: []*cliargs.Command{{Name: "path"}}},
	}
}()

// parse reads args (os.Args) as a hot verb, or says why it hands over:
// another verb, a flag it does not serve (--json, --help, --version), a
// usage error (strata-core reports it), a list value with a comma.
func parse(args []string) (*request, handover) {
	args = cliargs.Permute(globalFlags, commands, args)
	r := &request{}
	app := newFlagSet()
	app.StringVar(&r.home, "home", "", "")
	json, version := app.Bool("json", false, ""), app.Bool("version", false, "")
	app.BoolVar(&r.quiet, "quiet", false, "")
	app.BoolVar(&r.quiet, "q", false, "")
	if err := app.Parse(args[1:]); err != nil {
		return nil, handover("global flags: " + err.Error())
	}
	switch {
	case *json:
		return nil, "--json"
	case *version:
		return nil, "--version"
	case app.NArg() == 0:
		return nil, "no command"
	}
	if i := len(args) - app.NArg(); args[i-1] == "--" {
		return nil, "-- before the command"
	}
	rest := app.Args()
	switch rest[0] {
	case "exec", "shell":
		r.verb = rest[0]
		return r, r.command(rest[1:])
	case "ws":
		if len(rest) > 1 && rest[1] == "path" {
			r.verb = "path"
			return r, r.command(rest[2:])
		}
		return nil, "another ws command"
	}
	return nil, handover("command " + strconv.Quote(rest[0]))
}

// command reads a hot verb's flags and positionals (in cliargs' order).
func (r *request) command(args []string) handover {
	fs := newFlagSet()
	o, sb := &r.opts, &r.opts.Sandbox
	var connect, bind []string
	if r.verb != "path" {
		fs.StringVar(&sb.Mode, "sandbox", hotpath.SandboxAgent, "")
		fs.StringVar(&sb.Net, "net", "", "")
		fs.StringVar(&o.Cwd, "cwd", "", "")
		fs.IntVar(&sb.RequireABI, "sandbox-require-abi", 0, "")
		for name, dst := range map[string]*[]string{"rw": &sb.RW, "ro": &sb.RO, "env": &o.Env, "allow-connect": &connect, "allow-bind": &bind} {
			fs.Var((*list)(dst), name, "")
		}
	}
	if err := fs.Parse(args); err != nil {
		return handover(r.verb + " flags: " + err.Error())
	}
	pos := fs.Args()
	switch {
	case r.verb == "exec" && len(pos) < 2:
		return "exec needs NAME -- CMD"
	case r.verb != "exec" && len(pos) != 1:
		return handover(r.verb + " needs exactly one NAME")
	}
	r.name, o.Argv = pos[0], pos[1:]
	// strata-core's sandboxOptions and runInWorkspace: usage errors are
	// its to report.
	for _, p := range []struct {
		in  []string
		out *[]uint16
	}{{connect, &sb.AllowConnect}, {bind, &sb.AllowBind}} {
		for _, s := range p.in {
			n, err := strconv.ParseUint(s, 10, 16)
			if err != nil {
				return handover("port " + strconv.Quote(s))
			}
			*p.out = append(*p.out, uint16(n))
		}
	}
	for _, kv := range o.Env {
		if !strings.Contains(kv, "=") {
			return handover("--env " + strconv.Quote(kv))
		}
	}
	return ""
}

// newFlagSet is a flag set that reports its errors and help requests
// only to its caller (which hands the command over).
func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("strata", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// list is a repeatable flag read as urfave/cli's StringSliceFlag reads
// it: each value split at commas, each part trimmed of spaces.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(v string) error {
	if strings.HasPrefix(v, "sl:::") {
		return errors.New("urfave/cli's serialized form") // its own encoding: hand over
	}
	for _, s := range strings.Split(v, ",") {
		*l = append(*l, strings.TrimSpace(s))
	}
	return nil
}
