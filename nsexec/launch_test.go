package nsexec

import (
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
	out, err := exec.Command(goCmd, "list", "-deps", "github.com/stratafs/strata/cmd/strata-init").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "runtime/cgo", strings.Contains(dep, "sqlite"), dep == "github.com/stratafs/strata/seccomp", strings.Contains(dep, "libseccomp"):
			t.Errorf("strata-init depends on %s", dep)
		}
	}
}
