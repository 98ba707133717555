//go:build linux && cgo

// Command gen writes seccomp/programs_gen.go: the BPF programs of every
// preset seccomp policy on every arch, compiled by libseccomp
// (seccomp/internal/compiler). Run it as `go generate ./seccomp`, with cgo
// and libseccomp-dev, whenever the plans or libseccomp change; the
// compiler package's TestProgramsFresh fails until then.
package main

import (
	"fmt"
	"os"

	"github.com/stratafs/strata/seccomp/internal/compiler"
)

func main() {
	src, err := compiler.Generate()
	if err == nil {
		err = os.WriteFile("programs_gen.go", src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccomp gen:", err)
		os.Exit(1)
	}
}
