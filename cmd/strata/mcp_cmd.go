package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
	"github.com/stratafs/strata/mcp"
)

func mcpCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve this store to AI agents over the Model Context Protocol (stdio, or streamable HTTP with --http)",
		Description: "Tools: workspace_create, workspace_list, workspace_remove, exec, read_file, write_file, edit_file,\n" +
			"list_dir, search, diff, checkpoint, rollback, fork, promote, apply_patch, log. Resources:\n" +
			"strata://workspace/NAME/diff and strata://workspace/NAME/log. The server only serves the store it was\n" +
			"started on (--home). Over HTTP it listens on loopback unless told otherwise, and any other address\n" +
			"needs a bearer token (STRATA_MCP_TOKEN or --token-file).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Usage: "serve streamable HTTP on `ADDR` (HOST:PORT, or :PORT for 127.0.0.1) instead of stdio"},
			&cli.BoolFlag{Name: "stateless", Usage: "HTTP: no sessions, each request stands alone"},
			&cli.StringFlag{Name: "token-file", Usage: "HTTP: require the bearer token in `FILE` (default $STRATA_MCP_TOKEN)"},
			&cli.StringFlag{Name: "sandbox", Value: strata.SandboxAgent, Usage: "how exec runs commands: agent, strict or none"},
			&cli.IntFlag{Name: "max-output", Value: mcp.DefaultMaxOutput, Usage: "cap in bytes on a command's stdout and stderr, a file read, a diff"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("mcp takes no arguments")
			}
			switch m := c.String("sandbox"); m {
			case strata.SandboxAgent, strata.SandboxStrict, strata.SandboxNone:
			default:
				return usagef("--sandbox %q: use agent, strict or none", m)
			}
			addr := c.String("http")
			if addr == "" && (c.Bool("stateless") || c.IsSet("token-file")) {
				return usagef("--stateless and --token-file go with --http")
			}
			token := os.Getenv("STRATA_MCP_TOKEN")
			if f := c.String("token-file"); f != "" {
				b, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					return usagef("--token-file %s is empty", f)
				}
			}
			if addr != "" {
				// Decide before opening anything: a public address
				// without a token is refused.
				a, loopback, err := mcp.ListenAddr(addr)
				if err != nil {
					return usagef("--http: %v", err)
				}
				if !loopback && token == "" {
					return usagef("--http %s: %v: set STRATA_MCP_TOKEN or --token-file, or listen on 127.0.0.1", a, mcp.ErrNeedToken)
				}
			}
			repo, err := e.open(strata.OpenOptions{})
			if err != nil {
				return err
			}
			defer repo.Close()
			srv := mcp.NewServer(repo, mcp.Options{
				Sandbox:   strata.SandboxOptions{Mode: c.String("sandbox")},
				MaxOutput: c.Int("max-output"),
				Logf: func(format string, args ...any) {
					if !e.quiet {
						fmt.Fprintf(e.stderr, "strata mcp: "+format+"\n", args...)
					}
				},
			})
			if addr == "" {
				return srv.ServeStdio(c.Context)
			}
			return srv.ServeHTTP(c.Context, mcp.HTTPOptions{Addr: addr, Token: token, Stateless: c.Bool("stateless"),
				Ready: func(a string) { fmt.Fprintf(e.stderr, "strata mcp: serving http://%s/mcp\n", a) }})
		},
	}
}
