// Command strata-mcp is the MCP server behind `strata mcp`, a binary of
// its own so that strata itself does not link the MCP SDK: every strata
// call (exec into a live workspace above all) would pay its package
// initialization (~0.35 ms) and size. `strata mcp` checks its flags and
// execs this binary, installed beside it by `make build`, with them
// normalized; it is not meant to be run by hand.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/stratafs/strata"
	"github.com/stratafs/strata/mcp"
	"github.com/stratafs/strata/nsexec"
)

func main() {
	nsexec.Init()
	os.Exit(run())
}

// gcPercent: the SDK allocates large buffers for every message it
// decodes, and the server's live heap is small, so the default GOGC=100
// collects after nearly every call. 400 halved a refused call's cost
// (BenchmarkCallFloor in package mcp: 0.53 → 0.26 ms, client and server
// in one process) for a few MB of heap. GOGC in the environment wins.
const gcPercent = 400

func run() int {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	fs := flag.NewFlagSet("strata-mcp", flag.ContinueOnError)
	home := fs.String("home", "", "store directory")
	httpAddr := fs.String("http", "", "serve streamable HTTP on ADDR")
	stateless := fs.Bool("stateless", false, "HTTP: no sessions")
	sandbox := fs.String("sandbox", strata.SandboxAgent, "agent, strict or none")
	maxOutput := fs.Int("max-output", mcp.DefaultMaxOutput, "output cap in bytes")
	quiet := fs.Bool("quiet", false, "no diagnostics")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *home == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "strata-mcp: run it as `strata mcp`")
		return 2
	}
	// The token comes through the environment, never argv (visible in ps).
	// Commands inherit the server's environment: the token is not theirs.
	token := os.Getenv("STRATA_MCP_TOKEN")
	os.Unsetenv("STRATA_MCP_TOKEN")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	repo, err := strata.Open(*home, strata.OpenOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "strata: %v\n", err)
		return 1
	}
	defer repo.Close()
	srv := mcp.NewServer(repo, mcp.Options{
		Sandbox:   strata.SandboxOptions{Mode: *sandbox},
		MaxOutput: *maxOutput,
		Logf: func(format string, args ...any) {
			if !*quiet {
				fmt.Fprintf(os.Stderr, "strata mcp: "+format+"\n", args...)
			}
		},
	})
	if *httpAddr == "" {
		err = srv.ServeStdio(ctx)
	} else {
		err = srv.ServeHTTP(ctx, mcp.HTTPOptions{Addr: *httpAddr, Token: token, Stateless: *stateless,
			Ready: func(a string) { fmt.Fprintf(os.Stderr, "strata mcp: serving http://%s/mcp\n", a) }})
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "strata: mcp: %v\n", err)
		return 1
	}
	return 0
}
