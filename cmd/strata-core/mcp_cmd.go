package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
)

// mcpBinary is the MCP server, installed beside strata: strata does not
// link the MCP SDK itself (cmd/strata-mcp says why).
const mcpBinary = "strata-mcp"

// defaultMaxOutput is mcp.DefaultMaxOutput (not imported: see mcpBinary).
const defaultMaxOutput = 256 << 10

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
			&cli.IntFlag{Name: "max-output", Value: defaultMaxOutput, Usage: "cap in bytes on a command's stdout and stderr, a file read, a diff"},
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
			if c.Int("max-output") < 1 {
				return usagef("--max-output must be positive")
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
				// Decide before anything starts: a public address
				// without a token is refused.
				a, loopback, err := listenAddr(addr)
				if err != nil {
					return usagef("--http: %v", err)
				}
				if !loopback && token == "" {
					return usagef("--http %s: a bearer token is required to listen beyond loopback: set STRATA_MCP_TOKEN or --token-file, or listen on 127.0.0.1", a)
				}
			}
			// The store must exist: say so here, in the CLI's words.
			r, err := e.open(strata.OpenOptions{})
			if err != nil {
				return err
			}
			r.Close()
			self, err := os.Executable()
			if err != nil {
				return err
			}
			server := filepath.Join(filepath.Dir(self), mcpBinary)
			if _, err := os.Stat(server); err != nil {
				return fmt.Errorf("the MCP server %s is missing: install it beside strata (make build does): %w", server, strata.ErrUnsupported)
			}
			args := []string{mcpBinary, "--home", e.home, "--sandbox", c.String("sandbox"), "--max-output", strconv.Itoa(c.Int("max-output"))}
			if addr != "" {
				args = append(args, "--http", addr)
			}
			if c.Bool("stateless") {
				args = append(args, "--stateless")
			}
			if e.quiet {
				args = append(args, "--quiet")
			}
			env := os.Environ()
			if token != "" {
				env = append(env, "STRATA_MCP_TOKEN="+token)
			}
			err = syscall.Exec(server, args, env)
			return fmt.Errorf("exec %s: %w", server, err)
		},
	}
}

// listenAddr is mcp.ListenAddr: a missing host is 127.0.0.1; it reports
// whether the address is loopback-only.
func listenAddr(addr string) (string, bool, error) {
	if addr == "" {
		return "", false, errors.New("no address: give HOST:PORT or :PORT")
	}
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("address %q: %w (give HOST:PORT or :PORT)", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil {
		loopback = ip.IsLoopback()
	}
	return net.JoinHostPort(host, port), loopback, nil
}
