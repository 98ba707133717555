// Command strata is the front of the strata command line (docs/cli.md,
// docs/hotpath.md): a small static binary that hands every command over to
// strata-core, the full CLI installed beside it, by execve — the same
// process, so signals, the terminal and the exit code are the core's.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// coreName is the full CLI, found beside this executable.
const coreName = "strata-core"

func main() {
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
