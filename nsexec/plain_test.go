package nsexec

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestPlainConfigRoundTrip: Plain travels to the child.
func TestPlainConfigRoundTrip(t *testing.T) {
	cfg := &childConfig{Version: protoVersion, Name: "ws", Dir: "/s", Target: "/p", Plain: "/s/upper", UserNS: true}
	var e encoder
	e.config(cfg)
	d := decoder{b: e.b}
	back, err := d.config()
	if err != nil || !reflect.DeepEqual(back, cfg) {
		t.Fatalf("config: %+v, %v; want %+v", back, err, cfg)
	}
	if got := newChildConfig(&Spec{Plain: "/x", Target: "/t"}, nil).Plain; got != "/x" {
		t.Errorf("newChildConfig: Plain %q", got)
	}
}

// TestCheckPlain: a plain Spec needs an absolute, existing directory and
// no overlay.
func TestCheckPlain(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Plain: "rel"}, "not absolute"},
		{Spec{Plain: dir, Lowers: []string{"/l"}}, "no overlay"},
		{Spec{Plain: dir, Upper: "/u"}, "no overlay"},
		{Spec{Plain: filepath.Join(dir, "missing")}, "no such file"},
		{Spec{Plain: file}, "not a directory"},
		{Spec{Plain: dir, Root: &Root{}}, "image root"},
		{Spec{Plain: dir + "/."}, ""},
	} {
		s := c.spec
		err := checkPlain(&s)
		if c.want == "" {
			if err != nil || s.Plain != dir {
				t.Errorf("%+v: %v, Plain %q", c.spec, err, s.Plain)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.spec, err, c.want)
		}
	}
	// checkSpec lets a plain Spec through without lowers.
	s := Spec{Name: "p", Dir: dir, Target: dir, Plain: dir}
	if err := checkSpec(&s, true); err != nil {
		t.Errorf("checkSpec: %v", err)
	}
}

// TestKeeperPlain: a keeper of a plain directory (a reflink or copy
// workspace) binds it on the target: commands write into the directory
// itself, rename directories that existed before (no overlay, so no
// EXDEV), and see a private /tmp; the same with the target being the
// directory itself (bound on itself).
func TestKeeperPlain(t *testing.T) {
	both(t, func(t *testing.T) {
		for _, same := range []bool{false, true} {
			base := t.TempDir()
			plain := filepath.Join(base, "tree")
			if err := os.MkdirAll(filepath.Join(plain, "dir", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(plain, "dir", "sub", "f"), []byte("f\n"), 0o644)
			state := filepath.Join(base, "state")
			target := filepath.Join(base, "target")
			os.Mkdir(state, 0o700)
			if same {
				target = plain
			} else {
				os.Mkdir(target, 0o755)
			}
			spec := Spec{Name: "plain", Dir: state, Target: target, Plain: plain}
			k := startKeeper(t, spec)
			r := execIn(t, spec, sh(`pwd && mv dir moved && echo new > moved/sub/g && cat moved/sub/f && echo t > /tmp/strata-plain-x && cat /tmp/strata-plain-x`))
			if r.Code != 0 || r.stdout != target+"\nf\nt\n" {
				t.Fatalf("same %v: %v %q %q", same, r.ExitStatus, r.stdout, r.stderr)
			}
			if b, err := os.ReadFile(filepath.Join(plain, "moved", "sub", "g")); err != nil || string(b) != "new\n" {
				t.Errorf("same %v: the write in the directory: %q %v", same, b, err)
			}
			if _, err := os.Stat(filepath.Join(plain, "dir")); !os.IsNotExist(err) {
				t.Errorf("same %v: dir still there: %v", same, err)
			}
			if _, err := os.Stat("/tmp/strata-plain-x"); err == nil {
				t.Errorf("same %v: /tmp is the host's", same)
			}
			if !same {
				if ents, _ := os.ReadDir(target); len(ents) != 0 {
					t.Errorf("the bind reached the host's target: %v", ents)
				}
			}
			if b, err := os.ReadFile(filepath.Join(k.Path(), "moved", "sub", "g")); err != nil || string(b) != "new\n" {
				t.Errorf("same %v: through %s: %q %v", same, k.Path(), b, err)
			}
			if err := StopKeeper(context.Background(), state); err != nil {
				t.Fatal(err)
			}
		}
	})
}
