package registry

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// sumWriter stands in for a store.Writer: the id is the content's sha256.
type sumWriter struct{}

func (sumWriter) WriteContent(r io.Reader) (store.ID, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	var id store.ID
	copy(id[:], h.Sum(nil))
	return id, n, err
}

// fakeLower is a tree beneath the layer, by path.
type fakeLower map[string]*store.TreeEntry

func (f fakeLower) lookup(p string) (*store.TreeEntry, error) { return f[p], nil }

type tm struct {
	name string
	typ  byte
	link string
	body string
}

func mkTar(t testing.TB, ms ...tm) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		typ := m.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: m.name, Typeflag: typ, Mode: 0o644, Linkname: m.link}
		if typ == tar.TypeReg {
			h.Size = int64(len(m.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, m.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"a/b": "a/b", "./a/b/": "a/b", "/a//b": "a/b", ".": "", "./": "", "/": "", "a/./b": "a/b",
	} {
		got, err := cleanPath(in)
		if err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../x", "a/../../x", "/../etc/passwd", "a/..", "a/\x00b"} {
		if _, err := cleanPath(in); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("cleanPath(%q): %v, want ErrUnsafePath", in, err)
		}
	}
}

// TestLayerUnsafe: names and hard-link targets that leave the root, and
// writes through a symlink of the layers beneath, are refused with an
// error that names the member; a symlink's target is kept verbatim.
func TestLayerUnsafe(t *testing.T) {
	lower := fakeLower{
		"lib":     {Name: "lib", Type: store.TypeSymlink, Target: "/etc"},
		"usr":     {Name: "usr", Type: store.TypeDir},
		"usr/bin": {Name: "bin", Type: store.TypeDir},
	}
	for _, tc := range []struct {
		what string
		ms   []tm
		want string
	}{
		{"dotdot name", []tm{{name: "../../etc/passwd", body: "x"}}, "../../etc/passwd"},
		{"dotdot inside", []tm{{name: "usr/../../x"}}, "usr/../../x"},
		{"hard link out", []tm{{name: "usr/x", typ: tar.TypeLink, link: "../../etc/shadow"}}, "../../etc/shadow"},
		{"through a lower symlink", []tm{{name: "lib/cron.d/evil", body: "x"}}, `"lib"`},
		{"whiteout name", []tm{{name: "usr/.wh..."}}, "whiteout"},
	} {
		_, err := layerChanges(bytes.NewReader(mkTar(t, tc.ms...)), sumWriter{}, lower.lookup)
		if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrUnsafePath naming %s", tc.what, err, tc.want)
		}
	}
	// Not through a symlink the layer itself replaces by a directory.
	if _, err := layerChanges(bytes.NewReader(mkTar(t, tm{name: "lib/", typ: tar.TypeDir}, tm{name: "lib/x", body: "y"})), sumWriter{}, lower.lookup); err != nil {
		t.Errorf("lib replaced by a directory: %v", err)
	}
	// A hard link to nothing.
	if _, err := layerChanges(bytes.NewReader(mkTar(t, tm{name: "usr/x", typ: tar.TypeLink, link: "usr/nothing"})), sumWriter{}, lower.lookup); err == nil {
		t.Error("hard link to a missing file accepted")
	}
	cs, err := layerChanges(bytes.NewReader(mkTar(t, tm{name: "usr/l", typ: tar.TypeSymlink, link: "../../../etc/passwd"})), sumWriter{}, lower.lookup)
	if err != nil || len(cs) != 1 || cs[0].Entry.Target != "../../../etc/passwd" {
		t.Errorf("symlink with an upward target: %v %+v, want kept verbatim", err, cs)
	}
}

// TestLayerWhiteouts checks the changes whiteouts and opaque markers
// become against a tree beneath.
func TestLayerWhiteouts(t *testing.T) {
	lower := fakeLower{
		"etc":        {Name: "etc", Type: store.TypeDir, Mode: 0o755},
		"etc/motd":   {Name: "motd", Type: store.TypeFile},
		"etc/cron.d": {Name: "cron.d", Type: store.TypeDir, Mode: 0o700},
		"var":        {Name: "var", Type: store.TypeDir, Mode: 0o711},
	}
	cs, err := layerChanges(bytes.NewReader(mkTar(t,
		tm{name: "etc/.wh.motd"},              // deletes a lower file
		tm{name: "etc/.wh.nothing"},           // nothing beneath: no change
		tm{name: "etc/cron.d/.wh..wh..opq"},   // opaque, directory not in the tar
		tm{name: "etc/cron.d/job", body: "j"}, //
		tm{name: "var/.wh.lib"},               // deleted and re-created: opaque
		tm{name: "var/lib/", typ: tar.TypeDir},
		tm{name: "new/deep/file", body: "f"}, // implicit parents
		tm{name: "a", body: "1"},
		tm{name: "b", typ: tar.TypeLink, link: "a"},
	)), sumWriter{}, lower.lookup)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]snapshot.UpperChange{}
	for _, c := range cs {
		got[c.Path] = c
	}
	want := map[string]string{ // path → kind, opaque
		"etc/motd": "deleted", "etc/cron.d": "modified opaque", "etc/cron.d/job": "modified",
		"var/lib": "modified opaque", "new": "modified", "new/deep": "modified", "new/deep/file": "modified",
		"a": "modified", "b": "modified",
	}
	for p, w := range want {
		c, ok := got[p]
		if !ok {
			t.Errorf("%s: no change", p)
			continue
		}
		s := c.Kind.String()
		if c.Opaque {
			s += " opaque"
		}
		if s != w {
			t.Errorf("%s: %s, want %s", p, s, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: unexpected change %+v", p, got[p])
		}
	}
	if e := got["etc/cron.d"].Entry; e == nil || e.Mode != 0o700 {
		t.Errorf("etc/cron.d keeps the metadata beneath: %+v", e)
	}
	if a, b := got["a"].Entry, got["b"].Entry; a.LinkGroup == "" || a.LinkGroup != b.LinkGroup || a.Content != b.Content {
		t.Errorf("hard link: %+v %+v", a, b)
	}
}

// FuzzLayerTar feeds arbitrary bytes to the layer reader: it must not
// panic, and whatever it accepts has only clean relative paths of valid
// names (no "..", no absolute path), hard-link targets included.
func FuzzLayerTar(f *testing.F) {
	f.Add(mkTar(f, tm{name: "a/b", body: "x"}, tm{name: "a/.wh.c"}, tm{name: "a/.wh..wh..opq"}))
	f.Add(mkTar(f, tm{name: "../evil", body: "x"}))
	f.Add(mkTar(f, tm{name: "x", body: "1"}, tm{name: "y", typ: tar.TypeLink, link: "/../x"}))
	f.Add(mkTar(f, tm{name: "./d/", typ: tar.TypeDir}, tm{name: "d/l", typ: tar.TypeSymlink, link: "../.."}))
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(p string) {
			if p == "." {
				return
			}
			if p == "" || strings.HasPrefix(p, "/") {
				t.Fatalf("accepted path %q", p)
			}
			for _, el := range strings.Split(p, "/") {
				if err := store.ValidateName(el); err != nil {
					t.Fatalf("accepted path %q: %v", p, err)
				}
			}
		}
		_ = readMembers(bytes.NewReader(data), func(m *member, _ io.Reader) error {
			if m.Kind != memberSkip && m.Path != "" {
				check(m.Path)
			}
			if m.Kind == memberHardlink {
				check(m.Link)
			}
			return nil
		})
		cs, err := layerChanges(bytes.NewReader(data), sumWriter{}, fakeLower{}.lookup)
		if err != nil {
			return
		}
		for _, c := range cs {
			check(c.Path)
		}
	})
}
