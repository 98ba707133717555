// Package cliargs puts a strata command line in the order its flag parser
// reads: each command's flags before its positional arguments, global
// flags before the command, the user's command line of exec and run left
// alone. Both sides of the CLI use it — strata-core (urfave/cli, which
// stops reading flags at the first positional argument) and the front
// (cmd/strata, which parses the hot verbs with the standard library's
// flag package and hands the rest over) — so that one command line means
// the same to both (docs/cli.md, docs/hotpath.md).
//
// Terms: a command tree is the verbs (Command) with their flags (Flag)
// and subcommands; a positional is an argument that is not a flag or a
// flag's value; the pass-through point of exec and run is where the
// user's command line starts (PassthroughAfter).
//
// It imports only the standard library: the front links it.
package cliargs

import (
	"slices"
	"strings"
)

// Flag is a flag of a command, by its names (without dashes).
type Flag struct {
	Names []string
	// Bool: it takes no value argument (`-q`, `--force`).
	Bool bool
}

// Command is a verb of the command tree.
type Command struct {
	Name            string
	Aliases         []string
	Flags           []Flag
	Subcommands     []*Command
	SkipFlagParsing bool
}

// PassthroughAfter names commands that run a user's command: after this
// many positionals, the rest is the command line, passed through as is
// (`strata exec NAME ls -la` leaves -la to ls).
var PassthroughAfter = map[string]int{"exec": 1, "run": 0}

// Permute moves each command's flags in front of its positional
// arguments, so that `strata import DIR -b dev` works as docs/cli.md
// shows, and global flags that follow the command (`strata ws list
// --json`) in front of it. Everything after "--" is left alone, and so is
// the command line of exec and run.
func Permute(globals []Flag, cmds []*Command, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var found []string
	args, found = extractGlobals(globals, args)
	out := append([]string{args[0]}, found...)
	rest := args[1:]
	// `strata help ws create` shows create's help, as `strata ws create
	// --help` does (urfave/cli's help command would show ws's).
	if len(rest) > 1 && (rest[0] == "help" || rest[0] == "h") {
		rest = append(slices.Clone(rest[1:]), "--help")
	}
	// Global flags come before the command; keep them where they are.
	flags := globals
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
		cmd := find(cmds, a)
		out = append(out, a)
		rest = rest[1:]
		if cmd == nil {
			return append(out, rest...)
		}
		if len(cmd.Subcommands) > 0 {
			flags, cmds = cmd.Flags, cmd.Subcommands
			if len(rest) > 0 && find(cmds, rest[0]) != nil {
				continue
			}
		}
		if cmd.SkipFlagParsing {
			return append(out, rest...)
		}
		limit, ok := PassthroughAfter[cmd.Name]
		if !ok {
			limit = -1
		}
		return append(out, reorder(cmd.Flags, rest, limit)...)
	}
	return out
}

// reorder puts flags (and their values) first, positionals after, and keeps
// "--" and what follows it last. With limit >= 0, everything after the
// first limit+1 positionals is passed through unparsed (PassthroughAfter).
func reorder(flags []Flag, args []string, limit int) []string {
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
func splitShort(flags []Flag, a string) (flag, value string, ok bool) {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a, "=") {
		return "", "", false
	}
	if has(flags, a[1:]) || !takesValue(flags, a[:2]) || !has(flags, a[1:2]) {
		return "", "", false
	}
	return a[:2], a[2:], true
}

func has(flags []Flag, name string) bool {
	for _, f := range flags {
		if slices.Contains(f.Names, name) {
			return true
		}
	}
	return false
}

func find(cmds []*Command, name string) *Command {
	for _, c := range cmds {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether flag token a (like "-b" or "--branch") names
// a flag that consumes the next argument.
func takesValue(flags []Flag, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		if slices.Contains(f.Names, name) {
			return !f.Bool
		}
	}
	return false
}

// extractGlobals removes the global flags (and their values) from args
// after the command name, up to "--", and returns them apart.
func extractGlobals(globals []Flag, args []string) (rest, found []string) {
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
				if l, ok := PassthroughAfter[a]; ok {
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

func isFlag(flags []Flag, a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	return has(flags, name)
}
