package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
)

func setupCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "setup",
		Usage: "adapt this machine to strata (as root)",
		Subcommands: []*cli.Command{
			{
				Name:  "apparmor",
				Usage: "write and load an AppArmor profile that lets the strata binaries create user namespaces (Ubuntu 23.10+ restricts them)",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "print", Usage: "print the profile and change nothing (needs neither root nor AppArmor)"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("setup apparmor takes no arguments")
					}
					res, err := strata.SetupAppArmor(c.Context, strata.AppArmorOptions{Print: c.Bool("print")})
					if err != nil {
						return err
					}
					return e.out(res, func(w io.Writer) {
						if c.Bool("print") {
							fmt.Fprintf(w, "# %s\n%s", res.File, res.Profile)
							return
						}
						names := make([]string, 0, len(res.Binaries))
						for n := range res.Binaries {
							names = append(names, n)
						}
						sort.Strings(names)
						fmt.Fprintf(w, "wrote %s and loaded it; these may now create user namespaces:\n", res.File)
						for _, n := range names {
							fmt.Fprintf(w, "  %s\n", res.Binaries[n])
						}
						fmt.Fprintln(w, "`strata doctor` checks it; run this again after moving or reinstalling strata")
					})
				},
			},
		},
	}
}
