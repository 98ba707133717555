package strata

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestPythonSDKKnowsThisBuild: the Python SDK (python/src/stratafs)
// refuses a binary whose store schema or keeper protocol is outside its
// SUPPORTED_SCHEMA / SUPPORTED_PROTOCOL ranges; a change that bumps either
// must widen them in the same commit (after checking the SDK against it),
// or every Python harness stops at its version check.
func TestPythonSDKKnowsThisBuild(t *testing.T) {
	b, err := os.ReadFile("python/src/stratafs/store.py")
	if err != nil {
		t.Fatal(err)
	}
	v := Version()
	for _, c := range []struct {
		name string
		have int
	}{{"SUPPORTED_SCHEMA", v.Schema}, {"SUPPORTED_PROTOCOL", v.Protocol}} {
		m := regexp.MustCompile(`(?m)^` + c.name + ` = range\((\d+), (\d+)\)$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("store.py: no `%s = range(LO, HI)` line", c.name)
		}
		lo, _ := strconv.Atoi(string(m[1]))
		hi, _ := strconv.Atoi(string(m[2]))
		if c.have < lo || c.have >= hi {
			t.Errorf("this build speaks %s %d; the Python SDK's %s is range(%d, %d)", c.name, c.have, c.name, lo, hi)
		}
	}
}
