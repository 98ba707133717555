package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
)

func versionCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "this build's version, commit, Go version, store schema and keeper protocol versions",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output (as the global --json)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("version takes no arguments")
			}
			if c.Bool("json") {
				e.json = true
			}
			return e.printVersion()
		},
	}
}

func (e *env) printVersion() error {
	v := strata.Version()
	return e.out(v, func(w io.Writer) {
		commit := v.Commit
		if commit == "" {
			commit = "unknown"
		}
		fmt.Fprintf(w, "strata %s (commit %s, %s, %s/%s; store schema %d, keeper protocol %d)\n",
			v.Version, commit, v.Go, v.OS, v.Arch, v.Schema, v.Protocol)
	})
}
