package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
)

func doctorCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "what this kernel and user allow, and what is missing",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("doctor takes no arguments")
			}
			rep := strata.Doctor(c.Context, e.home)
			if err := e.out(rep, func(w io.Writer) {
				who := fmt.Sprintf("uid %d", rep.UID)
				if rep.RealRoot {
					who = "root"
				}
				fmt.Fprintf(w, "kernel %s, running as %s\n", rep.Kernel, who)
				for _, ch := range rep.Checks {
					mark := "ok  "
					if !ch.OK {
						mark = "MISS"
						if ch.Optional {
							mark = "opt "
						}
					}
					fmt.Fprintf(w, "[%s] %-36s %s\n", mark, ch.Name, ch.Detail)
					if !ch.OK && ch.Disables != "" {
						fmt.Fprintf(w, "       %-36s disables: %s\n", "", ch.Disables)
					}
				}
				for _, sb := range rep.Sandbox {
					fmt.Fprintf(w, "\n--sandbox %s on this kernel:\n", sb.Mode)
					for _, en := range sb.Enforces {
						fmt.Fprintf(w, "  enforces: %s\n", en)
					}
					for _, m := range sb.Missing {
						fmt.Fprintf(w, "  not enforced: %s\n", m)
					}
				}
				fmt.Fprintf(w, "\nwhat --sandbox agent and strict commands see (the view; add to it with --ro/--rw, or strata init --ro/--rw for every command):\n")
				for _, v := range rep.View {
					fmt.Fprintf(w, "  %-28s %-10s %s\n", v.Path, v.Access, v.What)
				}
			}); err != nil {
				return err
			}
			if !rep.OK() {
				return &exitCode{code: exitError}
			}
			return nil
		},
	}
}
