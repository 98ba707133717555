package image

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stratafs/strata/store"
)

// TestNotLinked: without image/registry (this test binary does not link
// it) Import and Push refuse with ErrNotLinked, naming the operation and
// its source or destination, and touch nothing: the store is nil.
func TestNotLinked(t *testing.T) {
	if Linked() {
		t.Fatal("Linked() is true without image/registry")
	}
	ctx := context.Background()
	_, err := Import(ctx, nil, "oci:/nowhere:env", Options{Branch: "env"})
	if !errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), "import image oci:/nowhere:env") {
		t.Errorf("Import: %v, want ErrNotLinked naming the source", err)
	}
	var c store.ID
	c[0] = 0xab
	_, err = Push(ctx, nil, c, "docker://reg.test/x:1", PushOptions{})
	if !errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), "push "+c.Short()+" to docker://reg.test/x:1") {
		t.Errorf("Push: %v, want ErrNotLinked naming the commit and destination", err)
	}
}

// TestRegister: Register installs both functions once; a second call or a
// nil function panics rather than leave a binary running whichever came
// last.
func TestRegister(t *testing.T) {
	saved := impl
	t.Cleanup(func() { impl = saved })
	var imported, pushed bool
	imp := func(context.Context, *store.Store, string, Options) (*Result, error) {
		imported = true
		return &Result{}, nil
	}
	push := func(context.Context, *store.Store, store.ID, string, PushOptions) (*PushResult, error) {
		pushed = true
		return &PushResult{}, nil
	}
	panics := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	panics("nil import", func() { Register(nil, push) })
	panics("nil push", func() { Register(imp, nil) })
	if Linked() {
		t.Fatal("a refused Register linked something")
	}
	Register(imp, push)
	if !Linked() {
		t.Fatal("Linked() is false after Register")
	}
	if _, err := Import(context.Background(), nil, "x", Options{}); err != nil || !imported {
		t.Errorf("Import after Register: %v, reached %v", err, imported)
	}
	if _, err := Push(context.Background(), nil, store.ID{}, "x", PushOptions{}); err != nil || !pushed {
		t.Errorf("Push after Register: %v, reached %v", err, pushed)
	}
	panics("second Register", func() { Register(imp, push) })
}
