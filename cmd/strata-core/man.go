//go:build !urfave_cli_no_docs

package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// The man page generator needs urfave/cli's docs support, which the
// installed binary is built without (-tags urfave_cli_no_docs: its
// markdown parser's init costs every call). `make man` builds this
// generator apart.
func init() {
	extraCommands = append(extraCommands, func(e *env) *cli.Command {
		return &cli.Command{
			Name:   "__man",
			Hidden: true,
			Usage:  "print strata(1) in roff",
			Action: func(c *cli.Context) error {
				page, err := c.App.ToManWithSection(1)
				if err != nil {
					return err
				}
				_, err = fmt.Fprint(e.stdout, page)
				return err
			},
		}
	})
}
