package snapshot

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot/snapshottest"
	"github.com/stratafs/strata/store"
)

// testCfg makes every file old enough for the stat cache: tests that are
// about the racy rule set their own clock.
func testCfg() importConfig {
	return importConfig{now: func() int64 { return time.Now().Add(time.Hour).UnixNano() }}
}

// warnings collects Warn calls.
type warnings struct {
	mu  sync.Mutex
	msg map[string]string
}

func (w *warnings) fn(p, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.msg == nil {
		w.msg = map[string]string{}
	}
	w.msg[p] = msg
}

func (w *warnings) get(p string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.msg[p]
	return m, ok
}

func importFake(t testing.TB, m *memStore, dir string, opts ImportOptions, cfg importConfig) (*ImportResult, *memWriter) {
	t.Helper()
	w := m.writer()
	res, err := importDir(context.Background(), m, w, dir, opts, cfg)
	if err != nil {
		t.Fatalf("import %s: %v", dir, err)
	}
	return res, w
}

func materializeFake(t testing.TB, m *memStore, tree store.ID, dir string, opts MaterializeOptions) {
	t.Helper()
	snapshottest.Writable(t, dir)
	if err := materialize(context.Background(), m, tree, dir, opts, matConfig{}); err != nil {
		t.Fatalf("materialize: %v", err)
	}
}

// entries returns path → entry for every entry of tree.
func entries(t testing.TB, m *memStore, tree store.ID) map[string]store.TreeEntry {
	t.Helper()
	out := map[string]store.TreeEntry{}
	err := walkTree(context.Background(), m, tree, func(p string, e *store.TreeEntry) error {
		out[p] = *e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t testing.TB, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runAsUser runs the named test of this binary as uid/gid 1000 when we are
// root, and reports whether the caller should return (the test ran in the
// child). As a non-root user it returns false and the test runs here.
func runAsUser(t *testing.T) (done bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "running as root and setpriv(1) is missing: cannot drop to uid 1000")
		return true
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The binary and the child's temporary directories must be reachable
	// by uid 1000.
	tmp, err := os.MkdirTemp("", "snapshot-asuser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "snapshot.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=1000", "--regid=1000", "--clear-groups", "--",
		bin, "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "HOME="+tmp)
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 1000:\n%s", out)
	if err != nil {
		t.Fatalf("as uid 1000: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP") {
		testutil.Skip(t, "skipped as uid 1000:\n"+string(out))
	}
	return true
}
