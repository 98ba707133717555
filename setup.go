package strata

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// AppArmor's user-namespace restriction (Ubuntu 23.10+,
// kernel.apparmor_restrict_unprivileged_userns=1) confines a process that
// creates a user namespace to a profile without capabilities, unless a
// profile attached to its binary grants `userns`. Ubuntu ships such
// profiles for bwrap and podman (/etc/apparmor.d/bwrap-userns-restrict,
// /etc/apparmor.d/podman); SetupAppArmor writes and loads the same for
// the strata binaries. See docs/sandbox.md, "When user namespaces are not
// available".

// AppArmorProfileFile is where SetupAppArmor writes the profiles.
const AppArmorProfileFile = "/etc/apparmor.d/strata"

// appArmorBinaries are the programs that create user namespaces, each
// looked for beside the running one: strata (the front, which execs
// strata-core and may serve the hot path itself), strata-core (the CLI),
// strata-init (keepers and one-shot inits), strata-mcp (the MCP server
// runs workspaces in-process).
var appArmorBinaries = []string{"strata", "strata-core", "strata-init", "strata-mcp"}

// AppArmorSetup says what SetupAppArmor wrote, or would write.
type AppArmorSetup struct {
	// Binaries are the real paths (symlinks resolved) the profiles
	// attach to, by profile name.
	Binaries map[string]string `json:"binaries"`
	// Profile is the profile file's text.
	Profile string `json:"profile"`
	// File is where it is (or would be) written.
	File string `json:"file"`
	// Loaded: written and loaded into the kernel (apparmor_parser -r).
	Loaded bool `json:"loaded"`
}

// AppArmorOptions tune SetupAppArmor.
type AppArmorOptions struct {
	// Print only computes the profile: nothing is checked, written or
	// loaded, so it works without root and without AppArmor.
	Print bool
	// Executable is strata's own path (os.Executable when empty); the
	// other binaries are looked for beside it.
	Executable string
	// Root is where the kernel's and AppArmor's files are looked for ("/"
	// when empty; tests use a fake tree).
	Root string
}

// AppArmorBinaries returns the real path of each strata binary there is,
// by profile name: those of appArmorBinaries in the directory of exe (the
// running executable when ""), symlinks resolved. exe itself is always
// there, as "strata" if its name is none of them.
func AppArmorBinaries(exe string) (map[string]string, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("the strata executable: %w", err)
		}
	}
	real, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return nil, fmt.Errorf("the strata executable: %w", err)
	}
	out := map[string]string{}
	for _, name := range appArmorBinaries {
		p := filepath.Join(filepath.Dir(real), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				out[name] = r
			}
		}
	}
	if !slices.Contains(appArmorBinaries, filepath.Base(real)) {
		out["strata"] = real
	}
	return out, nil
}

// AppArmorProfile returns the profile file granting `userns` to each
// binary (profile name → real path), in the form Ubuntu ships for bwrap
// and podman: unconfined otherwise, with a local/ include for site
// additions. A path AppArmor could not take literally (a quote, a
// newline, a NUL) is refused; glob characters are escaped.
func AppArmorProfile(bins map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString(`# Written by "strata setup apparmor". Where AppArmor restricts unprivileged
# user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu
# 23.10 and later), these profiles let the strata binaries create them, as
# Ubuntu's bwrap-userns-restrict and podman profiles do for those tools.
# To undo: sudo apparmor_parser -R /etc/apparmor.d/strata && sudo rm /etc/apparmor.d/strata
abi <abi/4.0>,

include <tunables/global>
`)
	for _, name := range appArmorBinaries {
		p, ok := bins[name]
		if !ok {
			continue
		}
		if !filepath.IsAbs(p) || strings.ContainsAny(p, "\"\n\x00") {
			return "", fmt.Errorf("%s: path %q cannot go into an AppArmor profile: %w", name, p, ErrInvalidArgument)
		}
		fmt.Fprintf(&b, "\nprofile %s %s flags=(unconfined) {\n  userns,\n\n  # Site-specific additions and overrides. See local/README for details.\n  include if exists <local/%s>\n}\n",
			name, appArmorPath(p), name)
	}
	return b.String(), nil
}

// appArmorPath escapes AppArmor's glob characters in p and quotes it.
func appArmorPath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[]{}^\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	if strings.ContainsAny(p, " \t") {
		return `"` + b.String() + `"`
	}
	return b.String()
}

// SetupAppArmor writes AppArmorProfile for the installed binaries to
// AppArmorProfileFile and loads it (apparmor_parser -r). It decides before
// it changes anything: AppArmor must be enabled, with an AppArmor 4 userns
// rule (abi/4.0), apparmor_parser present, and the caller root; the
// profile is checked by apparmor_parser before it replaces the file, and
// a profile the kernel refuses to load leaves the previous file back in
// place. With opts.Print it only computes the profile.
func SetupAppArmor(ctx context.Context, opts AppArmorOptions) (*AppArmorSetup, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	bins, err := AppArmorBinaries(opts.Executable)
	if err != nil {
		return nil, err
	}
	text, err := AppArmorProfile(bins)
	if err != nil {
		return nil, err
	}
	res := &AppArmorSetup{Binaries: bins, Profile: text, File: filepath.Join(root, AppArmorProfileFile)}
	if opts.Print {
		return res, nil
	}
	if err := appArmorReady(root); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("writing %s and loading it needs root: run `sudo strata setup apparmor` (or `strata setup apparmor --print` to see the profile): %w", AppArmorProfileFile, os.ErrPermission)
	}
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		return nil, fmt.Errorf("apparmor_parser is not installed (Debian and Ubuntu: the apparmor package): %w", ErrUnsupported)
	}
	file := res.File
	// Check the new profile before it replaces anything.
	tmp, err := os.CreateTemp(filepath.Dir(file), ".strata-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return nil, err
	}
	if out, err := runParser(ctx, parser, "--skip-kernel-load", "--skip-cache", tmp.Name()); err != nil {
		return nil, fmt.Errorf("apparmor_parser refuses the profile: %v: %s", err, out)
	}
	old, oldErr := os.ReadFile(file)
	if err := os.Rename(tmp.Name(), file); err != nil {
		return nil, err
	}
	if out, err := runParser(ctx, parser, "-r", file); err != nil {
		// Put back what was there.
		if oldErr == nil {
			os.WriteFile(file, old, 0o644)
		} else {
			os.Remove(file)
		}
		return nil, fmt.Errorf("loading %s: apparmor_parser -r: %v: %s", file, err, out)
	}
	res.Loaded = true
	return res, nil
}

// appArmorReady checks that AppArmor is enabled under root and knows the
// userns rule (AppArmor 4).
func appArmorReady(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "sys/module/apparmor/parameters/enabled"))
	if err != nil || strings.TrimSpace(string(b)) != "Y" {
		why := "the AppArmor module is not loaded"
		if err == nil {
			why = "AppArmor is disabled (sys/module/apparmor/parameters/enabled is " + strings.TrimSpace(string(b)) + ")"
		}
		return fmt.Errorf("AppArmor is not enabled on this kernel (%s), so it restricts no user namespaces here: nothing to set up; `strata doctor` says what does: %w", why, ErrUnsupported)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/apparmor.d/abi/4.0")); err != nil {
		return fmt.Errorf("this AppArmor has no userns rule (no /etc/apparmor.d/abi/4.0: AppArmor 4, Ubuntu 24.04 and later, has it), and such AppArmor does not restrict user namespaces: nothing to set up: %w", ErrUnsupported)
	}
	return nil
}

func runParser(ctx context.Context, parser string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, parser, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return "", err
	}
	return strings.TrimSpace(out.String()), err
}
