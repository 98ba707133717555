package main

import (
	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata/internal/cliargs"
)

// permuteArgs moves each command's flags in front of its positional
// arguments, so that `strata import DIR -b dev` works as CLI.md shows:
// urfave/cli v2 stops parsing flags at the first positional argument.
// Everything after "--" is left alone. The front (cmd/strata) orders the
// hot verbs' arguments with the same code (internal/cliargs).
func permuteArgs(app *cli.App, args []string) []string {
	return cliargs.Permute(treeFlags(app.Flags), tree(app.Commands), args)
}

// tree is the command tree as internal/cliargs sees it.
func tree(cmds []*cli.Command) []*cliargs.Command {
	out := make([]*cliargs.Command, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, &cliargs.Command{
			Name: c.Name, Aliases: c.Aliases, Flags: treeFlags(c.Flags),
			Subcommands: tree(c.Subcommands), SkipFlagParsing: c.SkipFlagParsing,
		})
	}
	return out
}

func treeFlags(flags []cli.Flag) []cliargs.Flag {
	out := make([]cliargs.Flag, 0, len(flags))
	for _, f := range flags {
		_, isBool := f.(*cli.BoolFlag)
		out = append(out, cliargs.Flag{Names: f.Names(), Bool: isBool})
	}
	return out
}
