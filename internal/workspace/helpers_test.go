package workspace

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// testManager is a Manager of a fresh store in a temporary directory, its
// tmpfs directories under the test's own temporary directory.
func testManager(t *testing.T) *Manager {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "store")
	st, err := store.Open(home, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &Manager{
		Layout: layout.New(home).WithShm(filepath.Join(dir, "shm")),
		DB:     func() (*store.Store, error) { return st, nil },
	}
}

// commitDir imports dir into m's store as a commit and returns it.
func commitDir(t *testing.T, m *Manager, dir string) (store.ID, *store.Commit) {
	t.Helper()
	ctx := context.Background()
	st, _ := m.DB()
	w, err := st.NewWriter(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	res, err := snapshot.Import(ctx, st, w, dir, snapshot.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Commit{Tree: res.Tree, Message: "test", Source: dir, Stats: res.Stats}
	var id store.ID
	if err := w.Finish(func(tx *store.Tx) error {
		id, err = tx.PutCommit(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return id, c
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
