package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// coreStandIn makes this test binary print its argv (NUL-separated) and
// exit 7 when it runs as the stand-in strata-core of TestEntry.
const coreStandIn = "STRATA_TEST_ENTRY_CORE"

func TestMain(m *testing.M) {
	if os.Getenv(coreStandIn) == "1" {
		os.Stdout.WriteString(strings.Join(os.Args, "\x00"))
		os.Exit(7)
	}
	os.Exit(m.Run())
}

// TestEntry builds the front with its assembly entry, as make build links
// it, beside a stand-in strata-core (this test binary), and checks which
// command lines go to the core before the Go runtime starts — the front's
// Go code then never runs, which GODEBUG=inittrace=1 shows as one
// process's package inits instead of two — and that argv arrives as it
// was given.
func TestEntry(t *testing.T) {
	dir := t.TempDir()
	front := filepath.Join(dir, "strata")
	if out, err := exec.Command("go", "build", "-trimpath", "-ldflags", "-w -E main.entry", "-o", front, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, self, filepath.Join(dir, coreName))

	// start runs the front with argv (argv[0] included) and env, and
	// returns the argv the core got, how many Go runtimes started, and
	// the exit code.
	start := func(argv []string, env ...string) (got []string, runtimes, code int) {
		t.Helper()
		cmd := exec.Command(front)
		cmd.Args = argv
		cmd.Env = append([]string{coreStandIn + "=1", "GODEBUG=inittrace=1", "HOME=" + dir}, env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%q: %v", argv, err)
		}
		if code == 7 {
			got = strings.Split(string(out), "\x00")
		}
		return got, strings.Count(stderr.String(), "init os @"), code
	}

	direct := [][]string{
		{"strata", "commit", "w"},
		{"strata", "--home", dir, "run", "--", "sh", "-c", "echo ''"},
		{"strata", "version"},
		{"strata"},
		// Odd bytes and empty words arrive as they were.
		{"strata", "import", "", "a\tb", "\xff\xfe", "execs", "paths", "she", "pat"},
		// The ws verbs but ws path.
		{"strata", "ws", "create", "w", "--tmpfs"},
		{"strata", "ws", "list"},
		// A name that is not argv[0]'s basename: the core is found beside
		// /proc/self/exe.
		{"/no/such/dir/other-name", "branch", "list"},
	}
	for _, argv := range direct {
		got, runtimes, code := start(argv)
		if code != 7 || runtimes != 1 || !slices.Equal(got, argv) {
			t.Errorf("%q: exit %d, %d Go runtimes started, core got %q; want the core at once with the same argv", argv, code, runtimes, got)
		}
	}

	// What the Go front decides: it hands these over too (no store here),
	// after its own start.
	viaGo := []struct {
		argv []string
		env  []string
	}{
		{[]string{"strata", "exec", "w", "--", "true"}, nil},
		{[]string{"strata", "--home", dir, "shell", "w"}, nil},
		{[]string{"strata", "ws", "path", "w"}, nil},
		{[]string{"strata", "commit", "path"}, nil}, // a workspace named path
		{[]string{"strata", "commit", "w"}, []string{"STRATA_FRONT=trace"}},
		{[]string{"strata", "commit", "w"}, []string{"STRATA_FRONT="}},
	}
	for _, c := range viaGo {
		got, runtimes, code := start(c.argv, c.env...)
		if code != 7 || runtimes != 2 || !reflect.DeepEqual(got, c.argv) {
			t.Errorf("%q %q: exit %d, %d Go runtimes started, core got %q; want the Go front to hand it over", c.argv, c.env, code, runtimes, got)
		}
	}

	// A re-executed child (nsexec) is the Go front's: an unknown entry
	// point is refused there, not handed to the core.
	if _, runtimes, code := start([]string{"strata:no-such-entry", "x"}); code != 125 || runtimes != 1 {
		t.Errorf("strata:no-such-entry: exit %d, %d Go runtimes; want the front's 125 alone", code, runtimes)
	}

	// Without strata-core the entry falls through to the Go front, which
	// says how to install it.
	if err := os.Remove(filepath.Join(dir, coreName)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(front, "ws", "list")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), coreName+" not found beside") {
		t.Errorf("without strata-core: %v, %s", err, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
