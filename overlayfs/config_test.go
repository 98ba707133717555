package overlayfs

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestNewPlanLegacy(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{
			name: "rootless",
			cfg:  Config{Lowers: []string{"/l/2", "/l/1"}, Upper: "/ws/u", Work: "/ws/w", UserXattr: true},
			want: "lowerdir=/l/2:/l/1,upperdir=/ws/u,workdir=/ws/w,userxattr,redirect_dir=nofollow,index=off,metacopy=off",
		},
		{
			name: "root with redirect",
			cfg:  Config{Lowers: []string{"/l/1"}, Upper: "/ws/u", Work: "/ws/w", RedirectDir: true},
			want: "lowerdir=/l/1,upperdir=/ws/u,workdir=/ws/w,redirect_dir=on,index=off,metacopy=off",
		},
		{
			name: "root without redirect",
			cfg:  Config{Lowers: []string{"/l/1"}, Upper: "/ws/u", Work: "/ws/w"},
			want: "lowerdir=/l/1,upperdir=/ws/u,workdir=/ws/w,redirect_dir=off,index=off,metacopy=off",
		},
		{
			name: "volatile",
			cfg:  Config{Lowers: []string{"/l/1"}, Upper: "/ws/u", Work: "/ws/w", UserXattr: true, Volatile: true},
			want: "lowerdir=/l/1,upperdir=/ws/u,workdir=/ws/w,userxattr,redirect_dir=nofollow,index=off,metacopy=off,volatile",
		},
		{
			name: "read-only",
			cfg:  Config{Lowers: []string{"/l/2", "/l/1"}, UserXattr: true},
			want: "lowerdir=/l/2:/l/1,userxattr,redirect_dir=nofollow,index=off,metacopy=off",
		},
		{
			name: "escaped",
			cfg:  Config{Lowers: []string{`/l/a,b`, `/l/c:d`}, Upper: `/ws/u\x`, Work: "/ws/w", UserXattr: true},
			want: `lowerdir=/l/a\,b:/l/c\:d,upperdir=/ws/u\\x,workdir=/ws/w,userxattr,redirect_dir=nofollow,index=off,metacopy=off`,
		},
		{
			name: "cleaned",
			cfg:  Config{Lowers: []string{"/l//1/"}, Upper: "/ws/./u", Work: "/ws/w/../w", UserXattr: true},
			want: "lowerdir=/l/1,upperdir=/ws/u,workdir=/ws/w,userxattr,redirect_dir=nofollow,index=off,metacopy=off",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newPlan(tt.cfg, Legacy, 4096)
			if err != nil {
				t.Fatal(err)
			}
			if p.Method != Legacy || p.Dir != "" || p.Data != tt.want {
				t.Errorf("plan = %+v\nwant data %s", p, tt.want)
			}
		})
	}
}

func TestNewPlanInvalid(t *testing.T) {
	many := make([]string, maxLowerLayers+1)
	for i := range many {
		many[i] = fmt.Sprintf("/l/%d", i)
	}
	tests := []struct {
		name string
		cfg  Config
		msg  string
	}{
		{"no lowers", Config{Upper: "/u", Work: "/w"}, "no lower"},
		{"too many lowers", Config{Lowers: many, Upper: "/u", Work: "/w"}, "at most 500"},
		{"upper without work", Config{Lowers: []string{"/l"}, Upper: "/u"}, "together"},
		{"one lower read-only", Config{Lowers: []string{"/l"}}, "at least two"},
		{"volatile read-only", Config{Lowers: []string{"/l", "/m"}, Volatile: true}, "volatile"},
		{"userxattr and redirect", Config{Lowers: []string{"/l"}, Upper: "/u", Work: "/w", UserXattr: true, RedirectDir: true}, "redirect_dir=on"},
		{"relative lower", Config{Lowers: []string{"l"}, Upper: "/u", Work: "/w"}, "absolute"},
		{"empty lower", Config{Lowers: []string{""}, Upper: "/u", Work: "/w"}, "empty"},
		{"NUL", Config{Lowers: []string{"/l\x00"}, Upper: "/u", Work: "/w"}, "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, m := range []Method{Legacy, Fsconfig, FsconfigFD} {
				_, err := newPlan(tt.cfg, m, 4096)
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("%s: err = %v, want ErrInvalidConfig mentioning %q", m, err, tt.msg)
				}
			}
		})
	}
	// Exactly the kernel's limit is fine.
	if _, err := newPlan(Config{Lowers: many[:maxLowerLayers], Upper: "/u", Work: "/w"}, FsconfigFD, 4096); err != nil {
		t.Errorf("500 layers: %v", err)
	}
}

// layerPaths returns n lower paths like strata's layer cache would have.
func layerPaths(root string, n int) []string {
	ls := make([]string, n)
	for i := range ls {
		ls[i] = fmt.Sprintf("%s/layers/%064x/fs", root, i)
	}
	return ls
}

func TestNewPlanPageLimit(t *testing.T) {
	const home = "/home/someone/.local/share/strata"
	t.Run("fits", func(t *testing.T) {
		cfg := Config{Lowers: layerPaths(home, 10), Upper: home + "/ws/a/upper", Work: home + "/ws/a/work", UserXattr: true}
		p, err := newPlan(cfg, Legacy, 4096)
		if err != nil || p.Dir != "" {
			t.Fatalf("plan = %+v, %v; want absolute paths", p, err)
		}
	})
	t.Run("relative", func(t *testing.T) {
		// 40 layers are ~4.4 KiB absolute, ~3.2 KiB relative to layers/.
		cfg := Config{Lowers: layerPaths(home, 40), Upper: home + "/ws/a/upper", Work: home + "/ws/a/work", UserXattr: true}
		abs := legacyData(cfg.Lowers, cfg.Upper, cfg.Work, flagOptions(cfg))
		if len(abs) < 4096 {
			t.Fatalf("test setup: absolute options are only %d bytes", len(abs))
		}
		p, err := newPlan(cfg, Legacy, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if p.Dir != home+"/layers" {
			t.Errorf("Dir = %q, want %q", p.Dir, home+"/layers")
		}
		if len(p.Data)+1 > 4096 {
			t.Errorf("data is %d bytes", len(p.Data)+1)
		}
		wantPrefix := fmt.Sprintf("lowerdir=%064x/fs:", 0)
		if !strings.HasPrefix(p.Data, wantPrefix) {
			t.Errorf("data = %.100s..., want prefix %s", p.Data, wantPrefix)
		}
		if !strings.Contains(p.Data, ",upperdir=../ws/a/upper,workdir=../ws/a/work,") {
			t.Errorf("upper/work not relative: %s", p.Data)
		}
	})
	t.Run("upper elsewhere stays absolute", func(t *testing.T) {
		cfg := Config{Lowers: layerPaths(home, 40), Upper: "/dev/shm/u", Work: "/dev/shm/w", UserXattr: true}
		p, err := newPlan(cfg, Legacy, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.Data, ",upperdir=/dev/shm/u,workdir=/dev/shm/w,") {
			t.Errorf("data = %s", p.Data)
		}
	})
	t.Run("too long even relative", func(t *testing.T) {
		cfg := Config{Lowers: layerPaths(home, 100), Upper: home + "/u", Work: home + "/w", UserXattr: true}
		_, err := newPlan(cfg, Legacy, 4096)
		if !errors.Is(err, ErrOptionsTooLong) {
			t.Fatalf("err = %v, want ErrOptionsTooLong", err)
		}
		// The new mount API has no page limit.
		p, err := newPlan(cfg, Fsconfig, 4096)
		if err != nil || p.Dir != "" || len(p.Params) != 100+2+4 {
			t.Fatalf("fsconfig plan = %d params, dir %q, %v", len(p.Params), p.Dir, err)
		}
	})
}

func TestNewPlanFsconfig(t *testing.T) {
	cfg := Config{Lowers: []string{"/l/2", `/l/a,b:c\d`}, Upper: `/ws/u\x`, Work: "/ws/w", UserXattr: true, Volatile: true}
	p, err := newPlan(cfg, Fsconfig, 4096)
	if err != nil {
		t.Fatal(err)
	}
	want := []Param{
		{ParamString, "lowerdir+", "/l/2"},
		{ParamString, "lowerdir+", `/l/a,b:c\d`}, // not unescaped by the kernel
		{ParamString, "upperdir", `/ws/u\\x`},    // unescaped by the kernel
		{ParamString, "workdir", "/ws/w"},
		{ParamFlag, "userxattr", ""},
		{ParamString, "redirect_dir", "nofollow"},
		{ParamString, "index", "off"},
		{ParamString, "metacopy", "off"},
		{ParamFlag, "volatile", ""},
	}
	if p.Method != Fsconfig || p.Dir != "" || !reflect.DeepEqual(p.Params, want) {
		t.Errorf("plan = %+v\nwant params %+v", p, want)
	}

	p, err = newPlan(cfg, FsconfigFD, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for i, prm := range p.Params[:4] {
		if prm.Kind != ParamDir {
			t.Errorf("param %d = %v, want a directory fd", i, prm)
		}
	}
	if p.Params[2].Value != `/ws/u\x` {
		t.Errorf("fd params are paths, not escaped: %q", p.Params[2].Value)
	}
}

func TestNewPlanFsconfigLongPath(t *testing.T) {
	deep := "/" + strings.Repeat("d/", 140) // 281 bytes
	cfg := Config{Lowers: []string{deep + "l1", deep + "l2"}, Upper: deep + "u", Work: deep + "w", UserXattr: true}
	p, err := newPlan(cfg, Fsconfig, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if p.Dir != strings.TrimSuffix(deep, "/") {
		t.Errorf("Dir = %q", p.Dir)
	}
	if p.Params[0].Value != "l1" || p.Params[2].Value != "u" {
		t.Errorf("params = %v", p.Params)
	}
	// With layer fds there is no limit.
	if p, err := newPlan(cfg, FsconfigFD, 4096); err != nil || p.Dir != "" {
		t.Errorf("fd plan = %+v, %v", p, err)
	}
	// A single component longer than 255 bytes cannot be shortened.
	long := "/" + strings.Repeat("x", 250) + "/" + strings.Repeat("y", 260)
	cfg = Config{Lowers: []string{long, "/l"}, Upper: "/u", Work: "/w"}
	if _, err := newPlan(cfg, Fsconfig, 4096); !errors.Is(err, ErrOptionsTooLong) {
		t.Errorf("err = %v, want ErrOptionsTooLong", err)
	}
}

func TestCommonDir(t *testing.T) {
	tests := []struct {
		paths []string
		want  string
	}{
		{[]string{"/a/b/c"}, "/a/b/c"},
		{[]string{"/a/b/c", "/a/b/d"}, "/a/b"},
		{[]string{"/a/bc", "/a/b"}, "/a"},
		{[]string{"/a/b", "/a/b/c"}, "/a/b"},
		{[]string{"/x", "/y"}, "/"},
	}
	for _, tt := range tests {
		if got := commonDir(tt.paths); got != tt.want {
			t.Errorf("commonDir(%q) = %q, want %q", tt.paths, got, tt.want)
		}
	}
}

func TestDefaultConfig(t *testing.T) {
	rootless := DefaultConfig([]string{"/l"}, "/u", "/w", Features{Key: Key{Euid: 0, UserNS: true}, RedirectDir: true})
	if !rootless.UserXattr || rootless.RedirectDir || rootless.Flavour() != FlavourUser {
		t.Errorf("rootless = %+v", rootless)
	}
	root := DefaultConfig([]string{"/l"}, "/u", "/w", Features{Key: Key{Euid: 0}, RedirectDir: true})
	if root.UserXattr || !root.RedirectDir || root.Flavour() != FlavourTrusted {
		t.Errorf("root = %+v", root)
	}
}

func TestFeaturesMethod(t *testing.T) {
	for _, tt := range []struct {
		f    Features
		want Method
	}{
		{Features{}, Legacy},
		{Features{LowerdirPlus: true}, Fsconfig},
		{Features{LowerdirPlus: true, LayerFDs: true}, FsconfigFD},
	} {
		if got := tt.f.Method(); got != tt.want {
			t.Errorf("%+v.Method() = %v, want %v", tt.f, got, tt.want)
		}
	}
}
