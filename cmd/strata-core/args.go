package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// permuteArgs moves each command's flags in front of its positional
// arguments, so that `strata import DIR -b dev` works as CLI.md shows:
// urfave/cli v2 stops parsing flags at the first positional argument.
// Everything after "--" is left alone.
func permuteArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	// Global flags may also follow the command (`strata ws list --json`):
	// they are moved in front of it.
	var globals []string
	args, globals = extractGlobals(app.Flags, args)
	out := append([]string{args[0]}, globals...)
	rest := args[1:]
	// `strata help ws create` shows create's help, as `strata ws create
	// --help` does (urfave/cli's help command would show ws's).
	if len(rest) > 1 && (rest[0] == "help" || rest[0] == "h") {
		rest = append(slices.Clone(rest[1:]), "--help")
	}
	// Global flags come before the command; keep them where they are.
	flags, cmds := app.Flags, app.Commands
	for len(rest) > 0 {
		a := rest[0]
		if a == "--" {
			return append(out, rest...)
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			out = append(out, a)
			rest = rest[1:]
			if takesValue(flags, a) && len(rest) > 0 {
				out = append(out, rest[0])
				rest = rest[1:]
			}
			continue
		}
		cmd := findCommand(cmds, a)
		out = append(out, a)
		rest = rest[1:]
		if cmd == nil {
			return append(out, rest...)
		}
		if len(cmd.Subcommands) > 0 {
			flags, cmds = cmd.Flags, cmd.Subcommands
			if len(rest) > 0 && findCommand(cmds, rest[0]) != nil {
				continue
			}
		}
		if cmd.SkipFlagParsing {
			return append(out, rest...)
		}
		limit, ok := passthroughAfter[cmd.Name]
		if !ok {
			limit = -1
		}
		return append(out, reorder(cmd.Flags, rest, limit)...)
	}
	return out
}

// passthroughAfter names commands that run a user's command: after this
// many positionals, the rest is the command line, passed through as is
// (`strata exec NAME ls -la` leaves -la to ls).
var passthroughAfter = map[string]int{"exec": 1, "run": 0}

// reorder puts flags (and their values) first, positionals after, and keeps
// "--" and what follows it last. With limit >= 0, everything after the
// first limit+1 positionals is passed through unparsed (passthroughAfter).
func reorder(flags []cli.Flag, args []string, limit int) []string {
	var fl, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if limit >= 0 && len(pos) > limit && a != "--" {
			// The command line starts here.
			return append(append(append(fl, "--"), pos...), args[i:]...)
		}
		if a == "--" {
			if len(pos) == 0 {
				return append(fl, args[i:]...)
			}
			return append(append(append(fl, "--"), pos...), args[i+1:]...)
		}
		if short, val, ok := splitShort(flags, a); ok {
			fl = append(fl, short, val)
			continue
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			fl = append(fl, a)
			if takesValue(flags, a) && i+1 < len(args) {
				i++
				fl = append(fl, args[i])
			}
			continue
		}
		pos = append(pos, a)
	}
	if len(pos) == 0 {
		return fl
	}
	// "--" keeps positionals that look like flags from being parsed.
	return append(append(fl, "--"), pos...)
}

// splitShort splits a one-letter flag and its attached value, as git and
// getopt read them: `-n1` is `-n 1`, `-bdev` is `-b dev`.
func splitShort(flags []cli.Flag, a string) (flag, value string, ok bool) {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a, "=") {
		return "", "", false
	}
	if hasFlag(flags, a[1:]) || !takesValue(flags, a[:2]) || !hasFlag(flags, a[1:2]) {
		return "", "", false
	}
	return a[:2], a[2:], true
}

func hasFlag(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
		for _, al := range c.Aliases {
			if al == name {
				return c
			}
		}
	}
	return nil
}

// takesValue reports whether flag token a (like "-b" or "--branch") names
// a flag that consumes the next argument.
func takesValue(flags []cli.Flag, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if _, ok := f.(*cli.BoolFlag); ok {
				return false
			}
			return true
		}
	}
	return false
}

// extractGlobals removes the app's global flags (and their values) from
// args after the command name, up to "--", and returns them apart.
func extractGlobals(globals []cli.Flag, args []string) (rest, found []string) {
	rest = []string{args[0]}
	seenCmd := false
	limit, positionals := -1, 0
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" || limit >= 0 && positionals > limit {
			// The user's command line of exec/run starts here.
			return append(rest, args[i:]...), found
		}
		if !strings.HasPrefix(a, "-") {
			if !seenCmd {
				if l, ok := passthroughAfter[a]; ok {
					limit = l
				}
			} else {
				positionals++
			}
			seenCmd = true
			rest = append(rest, a)
			continue
		}
		if !seenCmd || !isFlag(globals, a) {
			rest = append(rest, a)
			continue
		}
		found = append(found, a)
		if takesValue(globals, a) && i+1 < len(args) {
			i++
			found = append(found, args[i])
		}
	}
	return rest, found
}

func isFlag(flags []cli.Flag, a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}
