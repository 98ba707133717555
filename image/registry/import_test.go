package registry_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stratafs/strata/image"
	_ "github.com/stratafs/strata/image/registry" // these tests call it through image.Import and image.Push, as strata does
	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

func openStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func importImage(t testing.TB, s *store.Store, src, branch string) *image.Result {
	t.Helper()
	res, err := image.Import(context.Background(), s, src, image.Options{Branch: branch})
	if err != nil {
		t.Fatalf("import %s: %v", src, err)
	}
	return res
}

// lookup returns the entry at p of tree, nil if there is none.
func lookup(t testing.TB, s *store.Store, tree store.ID, p string) *store.TreeEntry {
	t.Helper()
	e, err := snapshot.Lookup(context.Background(), s, tree, p)
	if err != nil {
		return nil
	}
	return e
}

// TestImportLayerCases imports the instance image from the OCI layout and
// checks every case its env and instance layers hold.
func TestImportLayerCases(t *testing.T) {
	dir := testutil.Images(t)
	s := openStore(t)
	res := importImage(t, s, "oci:"+filepath.Join(dir, "oci")+":instance", "img")
	if len(res.Layers) != 3 {
		t.Fatalf("%d layers, want 3", len(res.Layers))
	}
	tr := res.Tree
	for _, p := range []string{"etc/issue.net", "var/lib/dpkg/alternatives", "opt/env/bin/other-link", "opt/env/current", "opt/env/lib/a.py", "opt/env/lib/b.py"} {
		if e := lookup(t, s, tr, p); e != nil {
			t.Errorf("%s: present (%v), want deleted by a whiteout or an opaque directory", p, e.Type)
		}
	}
	for _, p := range []string{"etc/passwd", "usr/bin/bash", "opt/env/lib/c.py", "testbed/pkg/__init__.py", "usr/share/common-licenses/ONLY"} {
		if lookup(t, s, tr, p) == nil {
			t.Errorf("%s: missing", p)
		}
	}
	if e := lookup(t, s, tr, "usr/share/common-licenses"); e == nil {
		t.Fatal("usr/share/common-licenses missing")
	}
	var n int
	if err := snapshot.Walk(context.Background(), s, tr, func(p string, e *store.TreeEntry) error {
		if len(p) > len("usr/share/common-licenses/") && p[:len("usr/share/common-licenses/")] == "usr/share/common-licenses/" {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("usr/share/common-licenses holds %d entries, want 1 (opaque)", n)
	}
	a, b := lookup(t, s, tr, "opt/env/bin/tool"), lookup(t, s, tr, "opt/env/bin/tool-link")
	if a == nil || b == nil || a.LinkGroup == "" || a.LinkGroup != b.LinkGroup || a.LinkGroup != "opt/env/bin/tool" {
		t.Errorf("tool / tool-link: not one link group keyed by its first member: %+v %+v", a, b)
	}
	if o := lookup(t, s, tr, "opt/env/bin/other"); o == nil || o.LinkGroup != "" {
		t.Errorf("opt/env/bin/other: %+v, want a plain file (its other link is whited out)", o)
	}
	if l1, l2 := lookup(t, s, tr, "testbed/test_link.py"), lookup(t, s, tr, "testbed/test_pkg.py"); l1 == nil || l2 == nil || l1.LinkGroup == "" || l1.LinkGroup != l2.LinkGroup {
		t.Errorf("testbed hard link: %+v %+v", l1, l2)
	}
	checks := []struct {
		p        string
		typ      store.EntryType
		mode     uint32
		uid, gid uint32
	}{
		{"opt/env/secret", store.TypeFile, 0o640, 1000, 1000},
		{"opt/env/setuid", store.TypeFile, 0o4755, 0, 0},
		{"opt/env/null0", store.TypeCharDev, 0o666, 0, 0},
		{"opt/env/fifo", store.TypeFIFO, 0o600, 0, 0},
		{"opt/env/abs", store.TypeSymlink, 0o777, 0, 0},
		{"opt/env/lib", store.TypeDir, 0o750, 1000, 1000},
		{"etc/shadow", store.TypeFile, 0o640, 0, 42},
	}
	for _, c := range checks {
		e := lookup(t, s, tr, c.p)
		if e == nil {
			t.Errorf("%s: missing", c.p)
			continue
		}
		if e.Type != c.typ || e.Mode != c.mode || e.UID != c.uid || e.GID != c.gid {
			t.Errorf("%s: %v %o %d:%d, want %v %o %d:%d", c.p, e.Type, e.Mode, e.UID, e.GID, c.typ, c.mode, c.uid, c.gid)
		}
	}
	if e := lookup(t, s, tr, "opt/env/null0"); e != nil && e.Rdev != 0x103 {
		t.Errorf("null0 rdev %#x, want 1,3", e.Rdev)
	}
	if e := lookup(t, s, tr, "opt/env/abs"); e != nil && e.Target != "/opt/env/bin/tool" {
		t.Errorf("abs -> %q", e.Target)
	}
	if e := lookup(t, s, tr, "opt/env/xattr"); e == nil || len(e.Xattrs) != 1 || e.Xattrs[0].Name != "user.strata" || string(e.Xattrs[0].Value) != "yes" {
		t.Errorf("opt/env/xattr: %+v", e)
	}
	c := res.Config
	if c.WorkingDir != "/testbed" || c.User != "root" || len(c.Entrypoint) != 2 || c.Cmd[0] != "echo hi" || c.Labels["org.strata.test"] != "instance" || len(c.Env) != 3 {
		t.Errorf("config: %+v", c)
	}
}
