package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/store"
)

// TestVersionJSON: `strata version --json`, `strata --json version` and
// `strata --version --json` print one object carrying the versions
// clients check for compatibility.
func TestVersionJSON(t *testing.T) {
	for _, args := range [][]string{{"version", "--json"}, {"--json", "version"}, {"--json", "--version"}} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"strata"}, args...), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var v struct {
			Version  string `json:"version"`
			Go       string `json:"go"`
			Schema   int    `json:"schema"`
			Protocol int    `json:"protocol"`
		}
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("%v: %v: %q", args, err, out.String())
		}
		if v.Version == "" || !strings.HasPrefix(v.Go, "go") || v.Schema != store.SchemaVersion() || v.Protocol != nsexec.ProtocolVersion {
			t.Errorf("%v: got %+v", args, v)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"strata", "version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "strata ") {
		t.Errorf("text: exit %d, %q", code, out.String())
	}
}
