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
				// The detail column starts after the longest label, so no
				// label runs into its detail.
				width := 0
				for _, ch := range rep.Checks {
					width = max(width, len(ch.Name))
				}
				for _, ch := range rep.Checks {
					mark := "ok  "
					if !ch.OK {
						mark = "MISS"
						if ch.Optional {
							mark = "opt "
						}
					}
					fmt.Fprintf(w, "[%s] %-*s  %s\n", mark, width, ch.Name, ch.Detail)
					if !ch.OK && ch.Disables != "" {
						fmt.Fprintf(w, "       %-*s  disables: %s\n", width, "", ch.Disables)
					}
					for _, fix := range ch.Fix {
						fmt.Fprintf(w, "       %-*s  fix: %s\n", width, "", fix)
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
				if rep.UserNS.Cause != "" {
					fmt.Fprintf(w, "\nwithout user namespaces (workspaces of the reflink or copy backend), on this kernel:\n")
					for _, it := range rep.NoNamespaces {
						fmt.Fprintf(w, "  %-12s %s: %s\n", it.Status, it.What, it.Detail)
					}
				}
				fmt.Fprintf(w, "\nwhat --sandbox agent and strict commands see (the view; add to it with --ro/--rw, or strata init --ro/--rw for every command):\n")
				pw := 0
				for _, v := range rep.View {
					pw = max(pw, len(v.Path))
				}
				for _, v := range rep.View {
					fmt.Fprintf(w, "  %-*s  %-10s %s\n", pw, v.Path, v.Access, v.What)
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
