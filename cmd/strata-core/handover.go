package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/stratafs/strata"
)

// fullName is the build of this CLI that links go-git and
// go-containerregistry. `make build` builds strata-core with the
// strata_lean tag, without them: their package inits and pages cost every
// strata-core process a few milliseconds (docs/hotpath.md), and only the
// five verbs below use them. Those verbs, in a lean build, exec strata-full
// beside the running executable with the same command line — before they
// open or change anything — so the user sees one command.
const fullName = "strata-full"

// needGit hands the command over to strata-full when this binary does not
// link git support; it returns only when it does, or with an error.
func needGit() error { return needFull(strata.GitLinked(), "git (go-git)") }

// needImages is needGit for import --image, push and pull.
func needImages() error {
	return needFull(strata.ImagesLinked(), "container image (go-containerregistry)")
}

// needFull execs strata-full unless linked. A strata-full that finds itself
// without the implementation (built with the lean tag by mistake) reports
// it rather than exec itself again.
func needFull(linked bool, what string) error {
	if linked {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("this strata-core does not link %s support, and cannot find its own executable to find %s: %w", what, fullName, err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	full := filepath.Join(filepath.Dir(exe), fullName)
	if filepath.Base(exe) == fullName {
		return fmt.Errorf("%s was built without %s support (the strata_lean build tag): rebuild it without the tag: %w", exe, what, strata.ErrUnsupported)
	}
	if _, err := os.Stat(full); err != nil {
		return fmt.Errorf("this strata-core does not link %s support and %s is not beside it in %s: install every strata command (`make build`, or `go install github.com/stratafs/strata/cmd/...@latest`): %w", what, fullName, filepath.Dir(exe), strata.ErrUnsupported)
	}
	err = syscall.Exec(full, os.Args, os.Environ())
	return fmt.Errorf("exec %s: %w", full, err)
}
