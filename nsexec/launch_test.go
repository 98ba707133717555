package nsexec

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
)

// TestInitDeps: strata-init, and so package nsexec, links neither cgo
// nor SQLite nor package seccomp (libseccomp): it must stay small and
// fast to start, and pure Go for syscall.AllThreadsSyscall.
func TestInitDeps(t *testing.T) {
	goCmd := testutil.LookPath(t, "go")
	deps := func(pkg string, env ...string) []string {
		args := []string{"list", "-deps", pkg}
		if tags, ok := strings.CutPrefix(pkg, "-tags="); ok {
			// "-tags=T PKG": the build of PKG with tags T.
			tags, pkg, _ = strings.Cut(tags, " ")
			args = []string{"list", "-tags", tags, "-deps", pkg}
		}
		cmd := exec.Command(goCmd, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	// strata-init plans sandbox policies (internal/sandbox, package
	// seccomp's embedded programs), all pure Go.
	for _, dep := range deps("github.com/stratafs/strata/cmd/strata-init") {
		switch {
		case dep == "runtime/cgo", strings.Contains(dep, "sqlite"), strings.Contains(dep, "libseccomp"), strings.Contains(dep, "seccomp/internal/compiler"):
			t.Errorf("strata-init depends on %s", dep)
		}
	}
	// strata (the front) and strata-core: no libseccomp whatever
	// CGO_ENABLED says, and no cgo at all without it (make build).
	for _, cmd := range []string{"strata", "strata-core"} {
		for _, env := range [][]string{nil, {"CGO_ENABLED=0"}} {
			for _, dep := range deps("github.com/stratafs/strata/cmd/"+cmd, env...) {
				if strings.Contains(dep, "libseccomp") || strings.Contains(dep, "seccomp/internal/compiler") || len(env) > 0 && dep == "runtime/cgo" {
					t.Errorf("%s (%v) depends on %s", cmd, env, dep)
				}
			}
		}
	}
	// The front links none of the core's weight (docs/hotpath.md).
	for _, dep := range deps("github.com/stratafs/strata/cmd/strata", "CGO_ENABLED=0") {
		for _, heavy := range []string{"sqlite", "go-git", "go-containerregistry", "urfave/cli", "net/http"} {
			if strings.Contains(dep, heavy) {
				t.Errorf("the strata front depends on %s", dep)
			}
		}
	}
	// strata-core as make build builds it (strata_lean) hands the verbs
	// that need go-git or a registry client to strata-full: it links
	// neither, nor what only they pulled in (docs/hotpath.md).
	for _, dep := range deps("-tags=strata_lean github.com/stratafs/strata/cmd/strata-core", "CGO_ENABLED=0") {
		for _, heavy := range []string{"go-git/", "go-containerregistry/pkg/name", "go-containerregistry/pkg/v1/remote", "go-digest", "encoding/gob", "net/http"} {
			if strings.Contains(dep, heavy) && !strings.Contains(dep, "go-gitdiff") {
				t.Errorf("the lean strata-core depends on %s", dep)
			}
		}
	}
}
