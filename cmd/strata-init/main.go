// Command strata-init is the small child strata re-executes to hold a
// workspace's namespaces: a keeper (strata exec, shell, ws path) or a
// one-shot init (strata run). It is pure Go, without cgo or SQLite, so it
// starts several times faster than strata itself; strata looks for it
// beside its own executable and falls back to re-executing itself. It is
// not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/stratafs/strata/nsexec"
)

func main() {
	nsexec.Init()
	fmt.Fprintln(os.Stderr, "strata-init: started by strata to run workspaces; not meant to be run by hand")
	os.Exit(2)
}
