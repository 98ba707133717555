package nsexec

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// argv0Prefix marks a re-executed strata child: os.Args[0] is
// "strata:ENTRY". The marker travels in argv, not the environment, so that
// it never leaks into the user's command.
const argv0Prefix = "strata:"

var entries = map[string]func() int{}

// Register names an entry point of a re-executed child. It is called from
// package init functions; registering a name twice panics.
func Register(name string, fn func() int) {
	if _, dup := entries[name]; dup {
		panic("nsexec: entry point registered twice: " + name)
	}
	entries[name] = fn
}

// Init runs the entry point named by os.Args[0] and exits when this process
// is a re-executed child; otherwise it returns at once. Call it first thing
// in main.
func Init() {
	name, ok := strings.CutPrefix(os.Args[0], argv0Prefix)
	if !ok {
		return
	}
	fn, ok := entries[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "strata: unknown re-exec entry point %q\n", name)
		os.Exit(125)
	}
	os.Exit(fn())
}

// Self is the path of the running executable, for re-execution. /proc/self/exe
// keeps working if the binary is replaced or deleted while strata runs.
const Self = "/proc/self/exe"

// Reexec returns a command that re-executes this binary at entry point
// name with args.
func Reexec(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(Self, args...)
	cmd.Args = append([]string{argv0Prefix + name}, args...)
	return cmd
}
