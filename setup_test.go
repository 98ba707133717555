package strata

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAppArmorProfile: the profile is Ubuntu's form for bwrap and podman,
// one profile per binary, by real path; odd paths are escaped or refused.
func TestAppArmorProfile(t *testing.T) {
	got, err := AppArmorProfile(map[string]string{
		"strata":      "/usr/local/bin/strata",
		"strata-init": "/usr/local/bin/strata-init",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `# Written by "strata setup apparmor". Where AppArmor restricts unprivileged
# user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu
# 23.10 and later), these profiles let the strata binaries create them, as
# Ubuntu's bwrap-userns-restrict and podman profiles do for those tools.
# To undo: sudo apparmor_parser -R /etc/apparmor.d/strata && sudo rm /etc/apparmor.d/strata
abi <abi/4.0>,

include <tunables/global>

profile strata /usr/local/bin/strata flags=(unconfined) {
  userns,

  # Site-specific additions and overrides. See local/README for details.
  include if exists <local/strata>
}

profile strata-init /usr/local/bin/strata-init flags=(unconfined) {
  userns,

  # Site-specific additions and overrides. See local/README for details.
  include if exists <local/strata-init>
}
`
	if got != want {
		t.Errorf("profile:\n%s\nwant:\n%s", got, want)
	}

	got, err = AppArmorProfile(map[string]string{"strata": "/opt/my tools/str*ta[1]"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `profile strata "/opt/my tools/str\*ta\[1\]" flags=(unconfined) {`) {
		t.Errorf("odd path not escaped and quoted:\n%s", got)
	}
	for _, bad := range []string{"/a\"b", "/a\nb", "relative/strata"} {
		if _, err := AppArmorProfile(map[string]string{"strata": bad}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("path %q: %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// TestAppArmorBinaries: the real paths of strata (through a symlink) and
// of the binaries beside it that exist.
func TestAppArmorBinaries(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(real, 0o755))
	for _, n := range []string{"strata", "strata-init"} {
		must(os.WriteFile(filepath.Join(real, n), []byte("#!/bin/sh\n"), 0o755))
	}
	must(os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	must(os.Symlink(filepath.Join(real, "strata"), filepath.Join(dir, "bin", "strata")))
	got, err := AppArmorBinaries(filepath.Join(dir, "bin", "strata"))
	must(err)
	realDir, _ := filepath.EvalSymlinks(real)
	if len(got) != 2 || got["strata"] != filepath.Join(realDir, "strata") || got["strata-init"] != filepath.Join(realDir, "strata-init") {
		t.Errorf("binaries %v", got)
	}
}

// TestSetupAppArmorRefuses: without AppArmor, or without AppArmor 4's
// userns rule, SetupAppArmor says there is nothing to set up and writes
// nothing; --print needs neither.
func TestSetupAppArmorRefuses(t *testing.T) {
	ctx := context.Background()
	exe := filepath.Join(t.TempDir(), "strata")
	if err := os.WriteFile(exe, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := SetupAppArmor(ctx, AppArmorOptions{Executable: exe, Root: root})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "AppArmor is not enabled") {
		t.Errorf("no AppArmor: %v", err)
	}
	write("sys/module/apparmor/parameters/enabled", "N\n")
	_, err = SetupAppArmor(ctx, AppArmorOptions{Executable: exe, Root: root})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "enabled is N") {
		t.Errorf("AppArmor disabled: %v", err)
	}
	write("sys/module/apparmor/parameters/enabled", "Y\n")
	_, err = SetupAppArmor(ctx, AppArmorOptions{Executable: exe, Root: root})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "abi/4.0") {
		t.Errorf("AppArmor 3: %v", err)
	}
	write("etc/apparmor.d/abi/4.0", "")
	// No apparmor_parser on PATH: a test run as root on an AppArmor
	// machine must not load anything into the kernel.
	t.Setenv("PATH", t.TempDir())
	_, err = SetupAppArmor(ctx, AppArmorOptions{Executable: exe, Root: root})
	switch {
	case os.Geteuid() != 0:
		if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "sudo strata setup apparmor") {
			t.Errorf("not root: %v", err)
		}
	default:
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "apparmor_parser is not installed") {
			t.Errorf("root without apparmor_parser: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, AppArmorProfileFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a profile was written: %v", err)
	}
	res, err := SetupAppArmor(ctx, AppArmorOptions{Executable: exe, Root: t.TempDir(), Print: true})
	if err != nil || !strings.Contains(res.Profile, "profile strata "+exe+" flags=(unconfined)") || res.Loaded {
		t.Errorf("print: %+v, %v", res, err)
	}
}
