package hotpath

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/workspace/layout"
)

// TestPathToolchains: PATH entries under the home directory bind their
// toolchain's root (never credentials, never the store), entries outside
// the home and in the system view bind nothing.
func TestPathToolchains(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".pyenv/shims", ".nvm/versions/node/v20/bin", ".cargo/bin", ".rustup/toolchains", "go/bin",
		".local/bin", ".local/share/pnpm", ".config/tool/bin", "bin", "random/bin", ".local/share/strata"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(home, ".cargo", "credentials.toml"), []byte("token"), 0o600)
	j := func(p string) string { return filepath.Join(home, p) }
	path := strings.Join([]string{j(".pyenv/shims"), j(".nvm/versions/node/v20/bin"), j(".cargo/bin"), j("go/bin"), j(".local/bin"),
		j(".local/share/pnpm"), j(".config/tool/bin"), j("bin"), j("random/bin"), j(".missing/bin"), "/usr/local/go/bin", "/usr/bin",
		"relative/bin", j(".pyenv/shims")}, ":")
	var got []string
	for _, tc := range pathToolchains(path, home, j(".local/share/strata")) {
		got = append(got, strings.TrimPrefix(tc.Dir, home+"/")+"="+tc.Env)
	}
	want := []string{".pyenv=PYENV_ROOT", ".nvm=NVM_DIR", ".cargo/bin=", ".rustup=RUSTUP_HOME", "go=", ".local/bin=", "bin="}
	if !slices.Equal(got, want) {
		t.Errorf("toolchains %q; want %q", got, want)
	}
	// A store inside a toolchain root, or holding one, keeps it out.
	if tcs := pathToolchains(j(".pyenv/shims"), home, j(".pyenv/store")); len(tcs) != 0 {
		t.Errorf("a toolchain holding the store was bound: %v", tcs)
	}
	if tcs := pathToolchains(j(".pyenv/shims"), home, home); len(tcs) != 0 {
		t.Errorf("a toolchain inside the store was bound: %v", tcs)
	}
}

// TestCheckBind: --ro/--rw paths must exist, be absolute, and neither
// hold the store nor lie in it.
func TestCheckBind(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "data", "strata")
	m := &Planner{Home: layout.New(home).Home()}
	os.MkdirAll(home, 0o700)
	os.MkdirAll(filepath.Join(base, "tools"), 0o755)
	for _, tc := range []struct {
		path, want string
	}{
		{filepath.Join(base, "tools"), ""},
		{"relative", "absolute"},
		{filepath.Join(base, "nope"), "no such file or directory"},
		{base, "strata store"},
		{filepath.Join(home, "layers"), "no such file"},
		{home, "strata store"},
	} {
		err := m.CheckBind("--ro", tc.path)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkBind(%q) = %v; want %q", tc.path, err, tc.want)
		}
	}
}

// TestNotFoundHint: a command (or a script's interpreter) found on the
// host outside the view names the --ro that fixes it.
func TestNotFoundHint(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	bin := filepath.Join(home, ".pyenv", "shims")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "python9"), []byte("#!/bin/sh\n"), 0o755)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "script"), []byte("#!/usr/bin/env python9\n"), 0o755)
	os.WriteFile(filepath.Join(ws, "direct"), []byte("#!"+filepath.Join(bin, "python9")+" -u\n"), 0o755)
	env := []string{"PATH=" + bin + ":/usr/bin"}
	shown := func(p string) bool { return inSystemView(p) || Within(p, ws) }
	want := "--ro " + filepath.Join(home, ".pyenv")
	for _, argv := range [][]string{{"python9", "-c", "1"}, {"./script"}, {"./direct"}} {
		if h := notFoundHint(argv, env, ws, shown); !strings.Contains(h, want) {
			t.Errorf("hint for %q: %q; want %q", argv, h, want)
		}
	}
	if h := notFoundHint([]string{"no-such-tool"}, env, ws, shown); h != "" {
		t.Errorf("hint for a tool the host lacks too: %q", h)
	}
	if h := notFoundHint([]string{"sh"}, env, ws, shown); h != "" {
		t.Errorf("hint for a tool in the view: %q", h)
	}
}
