//go:build !strata_lean

package main

// Without the strata_lean tag this CLI links the git and container-image
// implementations itself: `go install …/cmd/...` gives a strata-core that
// does everything, and `make build` builds this form as strata-full, the
// binary the lean strata-core hands import --git, import --image,
// export-git, push and pull to (handover.go).
import (
	_ "github.com/stratafs/strata/image/registry"
	_ "github.com/stratafs/strata/worktree/gogit"
)
