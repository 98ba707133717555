//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupAppArmor (both passes): `strata setup apparmor --print` shows
// the profile for the real paths of the binaries under test, without root
// and without AppArmor; `strata setup apparmor` on this machine, which has
// no AppArmor, refuses with the reason and changes nothing.
func TestSetupAppArmor(t *testing.T) {
	h := newHome(t)
	real, err := filepath.EvalSymlinks(bin(t))
	if err != nil {
		t.Fatal(err)
	}
	r := h.ok("setup", "apparmor", "--print")
	for _, want := range []string{
		"abi <abi/4.0>,",
		"include <tunables/global>",
		"profile strata " + real + " flags=(unconfined) {\n  userns,",
		"profile strata-init " + filepath.Join(filepath.Dir(real), "strata-init") + " flags=(unconfined) {",
		"profile strata-core " + filepath.Join(filepath.Dir(real), "strata-core") + " flags=(unconfined) {",
		"include if exists <local/strata>",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--print lacks %q:\n%s", want, r.stdout)
		}
	}
	var res struct {
		Binaries map[string]string `json:"binaries"`
		File     string            `json:"file"`
		Loaded   bool              `json:"loaded"`
	}
	r = h.ok("--json", "setup", "apparmor", "--print")
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.Binaries["strata"] != real || res.File != "/etc/apparmor.d/strata" || res.Loaded {
		t.Errorf("--json --print: %+v", res)
	}

	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil && strings.TrimSpace(string(b)) == "Y" {
		t.Skip("this machine has AppArmor: the refusal without it is not seen here")
	}
	_, statErr := os.Stat("/etc/apparmor.d/strata")
	r = h.fails(1, "setup", "apparmor")
	if !strings.Contains(r.stderr, "AppArmor is not enabled on this kernel") || !strings.Contains(r.stderr, "nothing to set up") {
		t.Errorf("refusal: %s", r)
	}
	r = h.fails(1, "--json", "setup", "apparmor")
	if !strings.Contains(r.stderr, `"kind":"unsupported"`) {
		t.Errorf("--json refusal: %s", r)
	}
	if _, err := os.Stat("/etc/apparmor.d/strata"); (err == nil) != (statErr == nil) {
		t.Errorf("/etc/apparmor.d/strata appeared or went: %v", err)
	}
}
