//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The front (cmd/strata, docs/hotpath.md) serves exec, shell and ws path
// itself and hands everything else to strata-core. These tests hold it to
// the core's contract: for every command line below, what the user sees —
// stdout, stderr, the exit code — is the same whether the front serves it
// or strata-core does (STRATA_FRONT=off), and the front serves exactly
// those it should (STRATA_FRONT=trace says which).

const traceServed = "strata: front: served\n"

// frontRun runs strata with STRATA_FRONT=trace and returns its result
// without the trace line, and whether the front served the command.
func frontRun(h *home, stdin []byte, args ...string) (result, bool) {
	h.t.Helper()
	saved := h.env
	h.env = append(append([]string{}, saved...), "STRATA_FRONT=trace")
	defer func() { h.env = saved }()
	r := h.runIn(h.t.Context(), "", stdin, args...)
	served := strings.HasSuffix(r.stderr, traceServed)
	r.stderr = strings.TrimSuffix(r.stderr, traceServed)
	if i := strings.LastIndex(r.stderr, "strata: front: handed over: "); i >= 0 && !served {
		r.stderr = r.stderr[:i] + r.stderr[i+strings.Index(r.stderr[i:], "\n")+1:]
	}
	return r, served
}

// coreRun runs strata with every command handed to strata-core.
func coreRun(h *home, stdin []byte, args ...string) result {
	h.t.Helper()
	saved := h.env
	h.env = append(append([]string{}, saved...), "STRATA_FRONT=off")
	defer func() { h.env = saved }()
	return h.runIn(h.t.Context(), "", stdin, args...)
}

// TestFrontMatchesCore: command lines of exec, shell and ws path, served
// by the front where it may (a live keeper, and one it starts from the
// spec file), handed over where it must (--json, usage errors, a missing
// workspace), each with the output and exit code strata-core gives.
func TestFrontMatchesCore(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	host := cliHostDir(t)
	os.WriteFile(filepath.Join(host, "marker"), []byte("host\n"), 0o644)
	// A tool the host has outside the sandbox's view: its 127 names the
	// --ro that fixes it.
	tools := filepath.Join(host, "bin")
	os.Mkdir(tools, 0o755)
	os.WriteFile(filepath.Join(tools, "hosttool"), []byte("#!/bin/sh\necho tool\n"), 0o755)
	h.env = append(h.env, "PATH="+tools+":"+os.Getenv("PATH"))

	for _, tc := range []struct {
		args   string
		stdin  string
		served bool
	}{
		{"exec w -- true", "", true},
		{"exec w -- sh -c 'echo out; echo err >&2; exit 42'", "", true},
		{"exec w -- no-such-command", "", true},
		{"exec w -- /etc/hostname", "", true},
		{"exec w -- sh -c 'kill -TERM $$'", "", true},
		{"exec w -- hosttool", "", true},
		{"-q exec w -- hosttool", "", true},
		{"exec w --ro " + tools + " -- hosttool", "", true},
		{"exec w --cwd src -- pwd", "", true},
		{"exec w --cwd /tmp -- pwd", "", true},
		{"exec --env A=1 --env B=2,C=3 w -- sh -c 'echo $A $B $C $HOME'", "", true},
		{"exec w --sandbox none -- sh -c 'echo $HOME; cat " + filepath.Join(host, "marker") + "'", "", true},
		{"exec w --sandbox strict -- cat a.txt", "", true},
		{"exec w --net none -- cat a.txt", "", true},
		{"exec w -- cat " + filepath.Join(host, "marker"), "", true},
		{"exec w --ro " + host + " -- cat " + filepath.Join(host, "marker"), "", true},
		{"exec w cat -- a.txt", "", true},
		{"exec w ls --cwd x", "", true},
		{"exec w -q sh -c 'cat; exit 3'", "from stdin\n", true},
		{"ws path w", "", true},
		{"shell w", "echo shell $HOME; exit 5\n", true},
		{"shell w --sandbox none", "pwd\n", true},
		// strata-core's to answer.
		{"--json exec w -- true", "", false},
		{"--json ws path w", "", false},
		{"exec w", "", false},
		{"exec nosuch -- true", "", false},
		{"exec w --ro /nonexistent/dir -- true", "", false},
		{"exec w --ro relative -- true", "", false},
		{"exec w --allow-connect http -- true", "", false},
		{"exec w --sandbox none --ro " + host + " -- true", "", false},
		{"exec w --sandbox jail -- true", "", false},
		{"exec w --env NOEQUALS -- true", "", false},
		{"exec w --cwd nosuch -- true", "", false},
		{"exec w --help", "", false},
		{"exec --bogus w -- true", "", false},
		{"ws path nosuch", "", false},
		{"ws list", "", false},
		{"shell w extra", "", false},
	} {
		args := shellWords(t, tc.args)
		var in []byte
		if tc.stdin != "" {
			in = []byte(tc.stdin)
		}
		for _, state := range []string{"live", "stopped"} {
			if state == "stopped" {
				h.ok("ws", "stop", "w")
			}
			got, served := frontRun(h, in, args...)
			if served != tc.served {
				t.Errorf("%s (%s): served %t, want %t; %s", tc.args, state, served, tc.served, got)
			}
			if state == "stopped" {
				h.ok("ws", "stop", "w")
			}
			want := coreRun(h, in, args...)
			if state == "stopped" && strings.Contains(tc.args, "ws path") {
				// Another keeper, another pid.
				got.stdout, want.stdout = procPID.ReplaceAllString(got.stdout, "/proc/PID/"), procPID.ReplaceAllString(want.stdout, "/proc/PID/")
			}
			if got.code != want.code || got.stdout != want.stdout || got.stderr != want.stderr {
				t.Errorf("%s (%s):\nfront: %s\ncore:  %s", tc.args, state, got, want)
			}
		}
	}
}

var procPID = regexp.MustCompile(`/proc/[0-9]+/`)

// shellWords splits a command line as sh does.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "set -- "+s+`; for a in "$@"; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// specFile reads a workspace's keeper spec file (after its header line).
func specFile(t *testing.T, h *home, name string) (map[string]any, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "workspaces", name, "keeper.spec"))
	if err != nil {
		return nil, false
	}
	_, body, _ := bytes.Cut(b, []byte("\n"))
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("keeper.spec: %v", err)
	}
	return m, true
}

// TestFrontStaleSpec: whatever changes what a workspace's keeper mounts
// either removes its spec file first (reset, rebase, ws rm) or is found
// by the front when it reads it (max_layers, a layer gc evicted, a tmpfs
// upper lost at reboot, a store moved): the front hands over, strata-core
// starts the keeper from the registry and writes the file again, and
// the next start is the front's. The store's view defaults reach a
// keeper the front starts.
func TestFrontStaleSpec(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	frontOK := func(wantServed bool, args ...string) result {
		t.Helper()
		r, served := frontRun(h, nil, args...)
		if r.code != 0 || served != wantServed {
			t.Fatalf("strata %s: served %t, want %t: %s", strings.Join(args, " "), served, wantServed, r)
		}
		return r
	}
	stopped := func(name string) {
		t.Helper()
		h.ok("ws", "stop", name)
		if _, ok := specFile(t, h, name); !ok {
			t.Fatalf("%s: no spec file after ws stop", name)
		}
	}

	// ws create writes the spec: the first exec starts the keeper from it.
	h.ok("ws", "create", "w")
	if _, ok := specFile(t, h, "w"); !ok {
		t.Fatal("ws create wrote no keeper spec")
	}
	frontOK(true, "exec", "w", "--", "sh", "-c", "echo new > new.txt")

	// reset: the file goes first; a copy of it from before is refused.
	old, _ := os.ReadFile(filepath.Join(h.dir, "workspaces", "w", "keeper.spec"))
	h.ok("reset", "w")
	if _, ok := specFile(t, h, "w"); ok {
		t.Error("reset left the spec file")
	}
	if r := h.run("exec", "w", "--", "cat", "new.txt"); r.code == 0 {
		t.Errorf("after reset the workspace still has new.txt: %s", r)
	}
	stopped("w")
	if err := os.WriteFile(filepath.Join(h.dir, "workspaces", "w", "keeper.spec"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, served := frontRun(h, nil, "exec", "w", "--", "cat", "new.txt"); served || r.code == 0 {
		t.Errorf("the front started a keeper from a spec file of before the reset: served %t, %s", served, r)
	}
	stopped("w")
	frontOK(true, "exec", "w", "--", "true")

	// max_layers: another stack limit is another stack.
	stopped("w")
	h.ok("init", "--max-layers", "100")
	if r, served := frontRun(h, nil, "exec", "w", "--", "true"); served || r.code != 0 {
		t.Fatalf("exec after max-layers: served %t, %s", served, r)
	}
	if m, _ := specFile(t, h, "w"); m["max_layers"] != float64(100) {
		t.Errorf("the spec file was not written again with max_layers 100: %v", m["max_layers"])
	}
	frontOK(true, "exec", "w", "--", "true")

	// The store's view defaults: a keeper the front starts shows them.
	host := cliHostDir(t)
	os.WriteFile(filepath.Join(host, "marker"), []byte("default bind\n"), 0o644)
	h.ok("init", "--ro", host)
	stopped("w")
	if got := frontOK(true, "exec", "w", "--", "cat", filepath.Join(host, "marker")).stdout; got != "default bind\n" {
		t.Errorf("a store default missing from the view of a keeper the front started: %q", got)
	}
	h.ok("init", "--forget", host)

	// A layer gc evicted (moved away here): strata-core materializes it.
	stopped("w")
	m, _ := specFile(t, h, "w")
	lower := m["spec"].(map[string]any)["lowers"].([]any)[0].(string)
	if err := os.Rename(lower, lower+".away"); err != nil {
		t.Fatal(err)
	}
	if r, served := frontRun(h, nil, "exec", "w", "--", "cat", "a.txt"); served || r.code != 0 || r.stdout != "1\n2\n3\n" {
		t.Errorf("exec with a layer evicted: served %t, %s", served, r)
	}
	os.RemoveAll(lower + ".away")
	stopped("w")
	frontOK(true, "exec", "w", "--", "true")

	// A tmpfs upper lost (a reboot): strata-core starts over empty.
	h.ok("ws", "create", "t", "--tmpfs")
	frontOK(true, "exec", "t", "--", "sh", "-c", "echo x > lost.txt")
	stopped("t")
	m, _ = specFile(t, h, "t")
	upper := m["spec"].(map[string]any)["upper"].(string)
	// The overlay's work/work is mode 000: make it removable first.
	sh(t, "", "chmod -R u+rwX "+filepath.Dir(upper)+" && rm -rf "+filepath.Dir(upper))
	if r, served := frontRun(h, nil, "exec", "t", "--", "ls"); served || r.code != 0 || strings.Contains(r.stdout, "lost.txt") {
		t.Errorf("exec with the tmpfs upper lost: served %t, %s", served, r)
	}
	stopped("t")
	frontOK(true, "exec", "t", "--", "true")

	// rebase: the workspace moves onto another stack.
	frontOK(true, "exec", "t", "--", "sh", "-c", "echo keep > kept.txt")
	h.ok("exec", "w", "--", "sh", "-c", "echo more > more.txt")
	h.ok("commit", "w", "-m", "more")
	h.ok("promote", "w", "--into", "main")
	h.ok("rebase", "t", "main")
	if _, ok := specFile(t, h, "t"); ok {
		t.Error("rebase left the spec file")
	}
	if r, served := frontRun(h, nil, "exec", "t", "--", "cat", "more.txt", "kept.txt"); served || r.code != 0 || r.stdout != "more\nkeep\n" {
		t.Errorf("after rebase: served %t, %s", served, r)
	}
	stopped("t")
	if r := frontOK(true, "exec", "t", "--", "cat", "more.txt", "kept.txt"); r.stdout != "more\nkeep\n" {
		t.Errorf("after rebase, the front's keeper: %s", r)
	}

	// ws rm: the directory, the file with it.
	h.ok("ws", "rm", "--force", "t")
	if r, served := frontRun(h, nil, "exec", "t", "--", "true"); served || r.code != 125 {
		t.Errorf("exec into a removed workspace: served %t, %s", served, r)
	}

	// A store moved on disk: the file names the old paths.
	stopped("w")
	moved := h.dir + ".moved"
	if err := os.Rename(h.dir, moved); err != nil {
		t.Fatal(err)
	}
	h.dir = moved
	if r, served := frontRun(h, nil, "exec", "w", "--", "cat", "a.txt"); served || r.code != 0 {
		t.Errorf("exec in a moved store: served %t, %s", served, r)
	}
	stopped("w")
	frontOK(true, "exec", "w", "--", "true")
	h.ok("ws", "rm", "--force", "w")
}

// TestFrontAlone: `go install …/cmd/strata@latest` alone installs the
// front only. It serves exec into a workspace — starting its keeper with
// itself as the init, without strata-init — and says how to install the
// rest for anything else.
func TestFrontAlone(t *testing.T) {
	h := newHome(t)
	src := cliProject(t)
	h.ok("import", src)
	h.ok("ws", "create", "w")
	defer h.run("ws", "rm", "--force", "w")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	alone := filepath.Join(dir, "strata")
	in, err := os.Open(bin(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(alone, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(out, in)
	in.Close()
	out.Close()
	run := func(args ...string) result {
		cmd := exec.Command(alone, append([]string{"--home", h.dir}, args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		r := result{stdout: o.String(), stderr: e.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		}
		return r
	}
	for _, state := range []string{"stopped", "live"} {
		if r := run("exec", "w", "--", "cat", "a.txt"); r.code != 0 || r.stdout != "1\n2\n3\n" {
			t.Errorf("exec (%s) with the front alone: %s", state, r)
		}
	}
	if r := run("ws", "path", "w"); r.code != 0 || !strings.HasPrefix(r.stdout, "/proc/") {
		t.Errorf("ws path with the front alone: %s", r)
	}
	if r := run("ws", "list"); r.code != 125 || !strings.Contains(r.stderr, "strata-core not found beside "+alone) || !strings.Contains(r.stderr, "go install github.com/stratafs/strata/cmd/...@latest") {
		t.Errorf("ws list with the front alone: %s", r)
	}
}
