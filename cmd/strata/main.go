// Command strata is the front of the strata command line (docs/cli.md,
// docs/hotpath.md): a small static binary that serves the hot verbs itself
// — exec, shell and ws path into a workspace whose keeper runs, or whose
// keeper it can start from the spec file `ws create` wrote — and hands
// every other command over to strata-core, the full CLI installed beside
// it, by execve: the same process, so signals, the terminal and the exit
// code are the core's. It decides before it changes anything: a command
// it hands over has only been read.
//
// It links no SQLite, go-git, go-containerregistry, urfave/cli or
// net/http (TestInitDeps, scripts/depgraph.sh): what it serves costs a
// small static binary's start, not the full CLI's.
//
// STRATA_FRONT=off hands every command over; STRATA_FRONT=trace says on
// stderr what the front did and why (tests, and finding out why a
// command is slow).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/stratafs/strata/nsexec"
)

// coreName is the full CLI, found beside this executable.
const coreName = "strata-core"

func main() {
	// Without strata-init beside it, the front is its own keeper and
	// init (nsexec.InitPath).
	nsexec.Init()
	mode := os.Getenv("STRATA_FRONT")
	why := handover("STRATA_FRONT=off")
	if mode != "off" {
		var code int
		code, why = serve(os.Args)
		if why == "" {
			if mode == "trace" {
				fmt.Fprintf(os.Stderr, "strata: front: served\n")
			}
			os.Exit(code)
		}
	}
	if mode == "trace" {
		fmt.Fprintf(os.Stderr, "strata: front: handed over: %s\n", why)
	}
	core, err := findCore()
	if err != nil {
		fmt.Fprintf(os.Stderr, "strata: %v\n", err)
		os.Exit(125)
	}
	err = syscall.Exec(core, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "strata: exec %s: %v\n", core, err)
	os.Exit(125)
}

// findCore returns strata-core beside the running executable.
func findCore() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find my own executable: %w", err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	core := filepath.Join(filepath.Dir(exe), coreName)
	if _, err := os.Stat(core); err != nil {
		return "", fmt.Errorf("%s not found beside %s: install every strata command with `go install github.com/stratafs/strata/cmd/...@latest`", coreName, exe)
	}
	return core, nil
}
