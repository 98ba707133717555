//go:build integration

package integration

// MCP tests: a go-sdk client drives `strata mcp` over stdio and streamable
// HTTP, every tool against the real kernel: path escapes refused,
// cancellation and timeouts leaving no process behind.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stratafs/strata/internal/testutil"
)

// mcpProject imports a small project into h and returns its directory.
func mcpProject(t *testing.T, h *home) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "proj")
	cliWrite(t, src, map[string]string{
		"a.txt":        "one\ntwo\nthree\nfour\n",
		"src/main.go":  "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n",
		"src/util.go":  "package main\n\n// hello again\nfunc util() {}\n",
		"dup.txt":      "x = 1\nx = 1\n",
		"docs/read.md": "# title\n",
	})
	h.ok("import", src)
	return src
}

// mcpStdio starts `strata mcp` on h's store and connects a client.
func mcpStdio(t *testing.T, h *home, opts *sdk.ClientOptions, args ...string) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(bin(t), append([]string{"--home", h.dir, "mcp"}, args...)...)
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Stderr = os.Stderr
	c := sdk.NewClient(&sdk.Implementation{Name: "strata-integration", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to strata mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpHTTP starts `strata mcp --http 127.0.0.1:0` with extra args and
// returns its endpoint.
func mcpHTTP(t *testing.T, h *home, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin(t), append([]string{"--home", h.dir, "mcp", "--http", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), h.env...), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "strata mcp: serving "); ok {
			go func() {
				for sc.Scan() {
					fmt.Fprintln(os.Stderr, sc.Text())
				}
			}()
			return u
		}
		t.Log(sc.Text())
	}
	t.Fatalf("strata mcp --http did not say where it serves")
	return ""
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func mcpConnectHTTP(t *testing.T, endpoint, token string) *sdk.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	c := sdk.NewClient(&sdk.Implementation{Name: "strata-integration", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpCall calls a tool that must succeed and decodes its structured
// output into out (when not nil).
func mcpCall(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", tool, args, mcpText(res))
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decoding %s: %v", tool, b, err)
		}
	}
	return res
}

// mcpFails calls a tool that must fail with a tool error whose message
// contains want, and returns the message.
func mcpFails(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, want string) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v; want a tool error", tool, args, err)
	}
	msg := mcpText(res)
	if !res.IsError {
		t.Fatalf("%s %v: succeeded (%s); want an error containing %q", tool, args, msg, want)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("%s %v: error %q; want it to contain %q", tool, args, msg, want)
	}
	return msg
}

func mcpText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type mcpExec struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timed_out"`
}

// TestMCPTools: every tool through a go-sdk client over stdio.
func TestMCPTools(t *testing.T) {
	h := newHome(t)
	mcpProject(t, h)
	cs := mcpStdio(t, h, nil, "--max-output", "4096")

	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, tl := range tools.Tools {
		have[tl.Name] = true
		if tl.InputSchema == nil {
			t.Errorf("tool %s has no input schema", tl.Name)
		}
		if tl.Name == "exec" {
			b, _ := json.Marshal(tl.InputSchema)
			if !strings.Contains(string(b), `"command":{"anyOf":[{"items":{"type":"string"},"type":"array"},{"type":"string"}]`) {
				t.Errorf("exec's command is not typed argv-or-string: %s", b)
			}
		}
	}
	for _, n := range []string{"workspace_create", "workspace_list", "workspace_remove", "exec", "read_file", "write_file",
		"edit_file", "list_dir", "search", "diff", "checkpoint", "rollback", "fork", "promote", "apply_patch"} {
		if !have[n] {
			t.Errorf("tool %s missing", n)
		}
	}

	var ws struct{ Name, Branch, Base, State, Path string }
	mcpCall(t, cs, "workspace_create", map[string]any{"name": "w1", "from": "main"}, &ws)
	if ws.Name != "w1" || ws.Branch != "ws/w1" || len(ws.Base) != 64 || ws.State != "running" || ws.Path == "" {
		t.Errorf("workspace_create: %+v", ws)
	}
	mcpFails(t, cs, "workspace_create", map[string]any{"name": "w1"}, "pick another name")
	mcpFails(t, cs, "workspace_create", map[string]any{"name": "w2", "from": "nosuchbranch"}, "not found")
	var list struct{ Workspaces []struct{ Name string } }
	mcpCall(t, cs, "workspace_list", nil, &list)
	if len(list.Workspaces) != 1 || list.Workspaces[0].Name != "w1" {
		t.Errorf("workspace_list: %+v", list)
	}

	// Files.
	var rd struct {
		Content    string
		TotalLines int `json:"total_lines"`
		StartLine  int `json:"start_line"`
		EndLine    int `json:"end_line"`
		Truncated  bool
	}
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w1", "path": "a.txt", "start_line": 2, "end_line": 3}, &rd)
	if rd.Content != "two\nthree\n" || rd.TotalLines != 4 || rd.StartLine != 2 || rd.EndLine != 3 {
		t.Errorf("read_file lines 2-3: %+v", rd)
	}
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w1", "path": ws.Path + "/a.txt", "start_line": 4}, &rd)
	if rd.Content != "four\n" {
		t.Errorf("read_file by absolute path, from line 4: %+v", rd)
	}
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "w1", "path": "new/deep/b.txt", "content": "bee\n"}, nil)
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w1", "path": "new/deep/b.txt"}, &rd)
	if rd.Content != "bee\n" {
		t.Errorf("read back: %+v", rd)
	}
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "w1", "path": "big.txt", "content": strings.Repeat("z", 10000)}, nil)
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w1", "path": "big.txt"}, &rd)
	if !rd.Truncated || len(rd.Content) != 4096 {
		t.Errorf("read_file over the cap: truncated %v, %d bytes", rd.Truncated, len(rd.Content))
	}
	mcpFails(t, cs, "read_file", map[string]any{"workspace": "w1", "path": "nope.txt"}, "no such file")
	mcpFails(t, cs, "read_file", map[string]any{"workspace": "nows", "path": "a.txt"}, "not found")

	var ed struct{ Replacements int }
	mcpCall(t, cs, "edit_file", map[string]any{"workspace": "w1", "path": "src/main.go", "old": `println("hello")`, "new": `println("bye")`}, &ed)
	if ed.Replacements != 1 {
		t.Errorf("edit_file: %+v", ed)
	}
	mcpFails(t, cs, "edit_file", map[string]any{"workspace": "w1", "path": "dup.txt", "old": "x = 1", "new": "x = 2"}, "matches 2 times")
	mcpFails(t, cs, "edit_file", map[string]any{"workspace": "w1", "path": "a.txt", "old": "absent", "new": "x"}, "not found")
	mcpCall(t, cs, "edit_file", map[string]any{"workspace": "w1", "path": "dup.txt", "old": "x = 1", "new": "x = 2", "replace_all": true}, &ed)
	if ed.Replacements != 2 {
		t.Errorf("edit_file replace_all: %+v", ed)
	}

	var ld struct {
		Entries []struct{ Name, Type, Target string }
	}
	mcpCall(t, cs, "list_dir", map[string]any{"workspace": "w1"}, &ld)
	names := map[string]string{}
	for _, e := range ld.Entries {
		names[e.Name] = e.Type
	}
	if names["a.txt"] != "file" || names["src"] != "dir" || names["new"] != "dir" {
		t.Errorf("list_dir: %+v", ld)
	}

	var sr struct {
		Matches []struct {
			Path string
			Line int
			Text string
		}
	}
	mcpCall(t, cs, "search", map[string]any{"workspace": "w1", "pattern": "hello"}, &sr)
	if len(sr.Matches) != 1 || sr.Matches[0].Path != "src/util.go" || sr.Matches[0].Line != 3 {
		t.Errorf("search hello: %+v", sr)
	}
	mcpCall(t, cs, "search", map[string]any{"workspace": "w1", "pattern": "func", "include": "*.go", "path": "src"}, &sr)
	if len(sr.Matches) != 2 {
		t.Errorf("search func in src: %+v", sr)
	}

	// exec: argv, shell string, cwd, env, stdin, caps, exit codes.
	var ex mcpExec
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w1", "command": []string{"cat", "new/deep/b.txt"}}, &ex)
	if ex.ExitCode != 0 || ex.Stdout != "bee\n" {
		t.Errorf("exec cat: %+v", ex)
	}
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w1", "command": "pwd; echo $FOO; cat; echo err >&2; exit 3",
		"cwd": "src", "env": map[string]string{"FOO": "bar"}, "stdin": "in\n"}, &ex)
	if ex.ExitCode != 3 || ex.Stdout != ws.Path+"/src\nbar\nin\n" || ex.Stderr != "err\n" {
		t.Errorf("exec sh: %+v", ex)
	}
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w1", "command": "seq 1 100000"}, &ex)
	if !ex.Truncated || !strings.HasPrefix(ex.Stdout, "1\n2\n") || !strings.HasSuffix(ex.Stdout, "99999\n100000\n") || len(ex.Stdout) > 4200 {
		t.Errorf("exec over the cap: truncated %v, %d bytes, %.40q…%.40q", ex.Truncated, len(ex.Stdout), ex.Stdout, ex.Stdout[max(0, len(ex.Stdout)-40):])
	}
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w1", "command": []string{"no-such-command-xyz"}}, &ex)
	if ex.ExitCode != 127 {
		t.Errorf("exec of a missing command: %+v", ex)
	}
	mcpFails(t, cs, "exec", map[string]any{"workspace": "w1", "command": []any{}}, "empty")
	mcpFails(t, cs, "exec", map[string]any{"workspace": "w1", "command": "true", "cwd": "../.."}, "leaves the workspace")
	// A timeout kills the command and what it started: 124.
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w1", "command": "sleep 98761 & sleep 98762", "timeout_s": 0.5}, &ex)
	if !ex.TimedOut || ex.ExitCode != 124 {
		t.Errorf("exec timeout: %+v", ex)
	}
	waitNoProcs(t, "sleep\x0098761")
	waitNoProcs(t, "sleep\x0098762")

	// diff, checkpoint, rollback.
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w1", "command": "rm big.txt"}, &ex)
	var df struct {
		Patch string
		Files []struct{ Path, Status string }
	}
	mcpCall(t, cs, "diff", map[string]any{"workspace": "w1"}, &df)
	if !strings.Contains(df.Patch, "+\tprintln(\"bye\")") || !strings.Contains(df.Patch, "b/new/deep/b.txt") {
		t.Errorf("diff patch:\n%s", df.Patch)
	}
	status := map[string]string{}
	for _, f := range df.Files {
		status[f.Path] = f.Status
	}
	if status["src/main.go"] != "M" || status["new/deep/b.txt"] != "A" {
		t.Errorf("diff files: %+v", df.Files)
	}
	var cp struct {
		Checkpoint string
		Clean      bool
	}
	mcpCall(t, cs, "checkpoint", map[string]any{"workspace": "w1", "message": "first"}, &cp)
	if len(cp.Checkpoint) != 64 || cp.Clean {
		t.Errorf("checkpoint: %+v", cp)
	}
	first := cp.Checkpoint
	mcpCall(t, cs, "diff", map[string]any{"workspace": "w1"}, &df)
	if df.Patch != "" || len(df.Files) != 0 {
		t.Errorf("diff after checkpoint: %+v", df)
	}
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "w1", "path": "a.txt", "content": "changed\n"}, nil)
	var rb struct{ Checkpoint string }
	mcpCall(t, cs, "rollback", map[string]any{"workspace": "w1"}, &rb)
	if rb.Checkpoint != first {
		t.Errorf("rollback to the last checkpoint: %+v, want %s", rb, first)
	}
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w1", "path": "a.txt"}, &rd)
	if rd.Content != "one\ntwo\nthree\nfour\n" {
		t.Errorf("after rollback a.txt = %q", rd.Content)
	}
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "w1", "path": "second.txt", "content": "2\n"}, nil)
	mcpCall(t, cs, "checkpoint", map[string]any{"workspace": "w1", "message": "second"}, &cp)
	var lg struct {
		Entries []struct{ Checkpoint, Message string }
	}
	mcpCall(t, cs, "log", map[string]any{"workspace": "w1"}, &lg)
	if len(lg.Entries) < 2 || lg.Entries[0].Message != "second" || lg.Entries[1].Message != "first" {
		t.Errorf("log: %+v", lg)
	}
	mcpCall(t, cs, "rollback", map[string]any{"workspace": "w1", "checkpoint": first}, &rb)
	mcpFails(t, cs, "read_file", map[string]any{"workspace": "w1", "path": "second.txt"}, "no such file")

	// fork: from the last checkpoint, and from a named one.
	mcpCall(t, cs, "checkpoint", map[string]any{"workspace": "w1", "message": "noop"}, &cp)
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "w1", "path": "uncommitted.txt", "content": "u\n"}, nil)
	var fk struct {
		Name, Base, Warning string
	}
	mcpCall(t, cs, "fork", map[string]any{"workspace": "w1", "name": "w2"}, &fk)
	if fk.Base != first || !strings.Contains(fk.Warning, "uncommitted") {
		t.Errorf("fork: %+v, want base %s and a warning", fk, first)
	}
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w2", "path": "new/deep/b.txt"}, &rd)
	mcpFails(t, cs, "read_file", map[string]any{"workspace": "w2", "path": "uncommitted.txt"}, "no such file")

	// apply_patch, then promote w2 into main.
	patch := "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,4 +1,4 @@\n one\n-two\n+TWO\n three\n four\n"
	mcpCall(t, cs, "apply_patch", map[string]any{"workspace": "w2", "patch": patch}, nil)
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w2", "path": "a.txt"}, &rd)
	if rd.Content != "one\nTWO\nthree\nfour\n" {
		t.Errorf("after apply_patch: %q", rd.Content)
	}
	mcpFails(t, cs, "apply_patch", map[string]any{"workspace": "w2", "patch": patch}, "does not apply")
	mcpCall(t, cs, "checkpoint", map[string]any{"workspace": "w2", "message": "TWO"}, &cp)
	var pr struct{ Into, How, Commit string }
	mcpCall(t, cs, "promote", map[string]any{"workspace": "w2", "into": "main"}, &pr)
	if pr.Into != "main" || pr.Commit != cp.Checkpoint {
		t.Errorf("promote: %+v, want main at %s", pr, cp.Checkpoint)
	}
	if got := strings.TrimSpace(h.ok("show", "main:a.txt").stdout); got != "one\nTWO\nthree\nfour" {
		t.Errorf("main:a.txt after promote = %q", got)
	}

	// Resources: each workspace's diff and log.
	rr, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "strata://workspace/w1/diff"})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "uncommitted.txt") {
		t.Errorf("diff resource: %v %+v", err, rr)
	}
	rr, err = cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "strata://workspace/w1/log"})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "first") {
		t.Errorf("log resource: %v %+v", err, rr)
	}
	if _, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "strata://workspace/nows/log"}); err == nil {
		t.Errorf("log resource of a missing workspace: no error")
	}

	// workspace_remove: refuses uncommitted changes without force.
	mcpFails(t, cs, "workspace_remove", map[string]any{"name": "w1"}, "force")
	mcpCall(t, cs, "workspace_remove", map[string]any{"name": "w1", "force": true}, nil)
	mcpCall(t, cs, "workspace_remove", map[string]any{"name": "w2"}, nil)
	mcpFails(t, cs, "workspace_remove", map[string]any{"name": "w2"}, "not found")
	mcpCall(t, cs, "workspace_list", nil, &list)
	if len(list.Workspaces) != 0 {
		t.Errorf("workspaces left: %+v", list)
	}
	h.fsckClean()
}

// TestMCPPathEscapes: file tools refuse paths that leave the workspace —
// `..`, absolute paths elsewhere, symlinks out (absolute and relative) —
// and follow symlinks that stay inside.
func TestMCPPathEscapes(t *testing.T) {
	h := newHome(t)
	mcpProject(t, h)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs := mcpStdio(t, h, nil)
	var ws struct{ Path string }
	mcpCall(t, cs, "workspace_create", map[string]any{"name": "w"}, &ws)
	defer h.run("ws", "rm", "--force", "w")
	var ex mcpExec
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w", "command": "ln -s /etc abs && ln -s ../../../../../../.. up && ln -s a.txt inner && ln -s " + secret + " hostlink && mkdir d && ln -s .. d/parent"}, &ex)
	if ex.ExitCode != 0 {
		t.Fatalf("making symlinks: %+v", ex)
	}
	const refused = "leaves the workspace"
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "../a.txt"}},
		{"read_file", map[string]any{"path": "src/../../a.txt"}},
		{"read_file", map[string]any{"path": "/etc/passwd"}},
		{"read_file", map[string]any{"path": secret}},
		{"read_file", map[string]any{"path": "abs/passwd"}},
		{"read_file", map[string]any{"path": "up/etc/passwd"}},
		{"read_file", map[string]any{"path": "hostlink"}},
		{"read_file", map[string]any{"path": "d/parent/../a.txt"}},
		{"write_file", map[string]any{"path": "abs/pwned", "content": "x"}},
		{"write_file", map[string]any{"path": "up/tmp/pwned", "content": "x"}},
		{"write_file", map[string]any{"path": "hostlink", "content": "x"}},
		{"write_file", map[string]any{"path": "../pwned", "content": "x"}},
		{"edit_file", map[string]any{"path": "hostlink", "old": "host", "new": "pwned"}},
		{"list_dir", map[string]any{"path": "up"}},
		{"list_dir", map[string]any{"path": "abs"}},
		{"search", map[string]any{"pattern": "root", "path": "abs"}},
		{"search", map[string]any{"pattern": "secret", "path": "hostlink"}},
	} {
		c.args["workspace"] = "w"
		mcpFails(t, cs, c.tool, c.args, refused)
	}
	if b, _ := os.ReadFile(secret); string(b) != "host secret\n" {
		t.Errorf("the host file changed: %q", b)
	}
	// A FIFO would block the server: refused, for reading and writing.
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w", "command": "mkfifo fifo"}, &ex)
	mcpFails(t, cs, "read_file", map[string]any{"workspace": "w", "path": "fifo"}, "not a regular file")
	mcpFails(t, cs, "write_file", map[string]any{"workspace": "w", "path": "fifo", "content": "x"}, "not a regular file")
	mcpFails(t, cs, "edit_file", map[string]any{"workspace": "w", "path": "fifo", "old": "a", "new": "b"}, "not a regular file")
	mcpFails(t, cs, "read_file", map[string]any{"workspace": "w", "path": "src"}, "is a directory")
	// A symlink inside the workspace, and `..` that stays inside, work.
	var rd struct{ Content string }
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w", "path": "inner"}, &rd)
	if rd.Content != "one\ntwo\nthree\nfour\n" {
		t.Errorf("read through an inner symlink: %q", rd.Content)
	}
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w", "path": "src/../a.txt"}, &rd)
	mcpCall(t, cs, "write_file", map[string]any{"workspace": "w", "path": "d/x/../y.txt", "content": "y"}, nil)
	mcpCall(t, cs, "read_file", map[string]any{"workspace": "w", "path": "d/y.txt"}, &rd)
	if rd.Content != "y" {
		t.Errorf("d/y.txt = %q", rd.Content)
	}
}

// TestMCPCancel: cancelling a long exec (after it reported progress) kills
// its process group — nothing it started survives — and the server goes
// on serving.
func TestMCPCancel(t *testing.T) {
	h := newHome(t)
	mcpProject(t, h)
	var progress atomic.Int32
	started := make(chan struct{}, 1)
	cs := mcpStdio(t, h, &sdk.ClientOptions{ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) {
		progress.Add(1)
		select {
		case started <- struct{}{}:
		default:
		}
	}})
	mcpCall(t, cs, "workspace_create", map[string]any{"name": "w"}, nil)
	defer h.run("ws", "rm", "--force", "w")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		p := &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"workspace": "w",
			"command": "sleep 98771 & (sleep 98772 &) ; sleep 98773"}}
		p.SetProgressToken("tok")
		_, err := cs.CallTool(ctx, p)
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("exec ended before reporting progress: %v", err)
	}
	for _, m := range []string{"sleep\x0098771", "sleep\x0098772", "sleep\x0098773"} {
		waitProcs(t, m, 1)
	}
	cancel()
	if err := <-done; err == nil {
		t.Errorf("cancelled call returned no error")
	}
	for _, m := range []string{"sleep\x0098771", "sleep\x0098772", "sleep\x0098773"} {
		waitNoProcs(t, m)
	}
	if progress.Load() < 1 {
		t.Errorf("no progress notification")
	}
	var ex mcpExec
	mcpCall(t, cs, "exec", map[string]any{"workspace": "w", "command": "echo still here"}, &ex)
	if ex.Stdout != "still here\n" {
		t.Errorf("after cancel: %+v", ex)
	}
}

// TestMCPHTTP: streamable HTTP, stateful and stateless, behind a bearer
// token; no token or a wrong one is refused; a non-loopback address without
// a token is refused before anything listens.
func TestMCPHTTP(t *testing.T) {
	h := newHome(t)
	mcpProject(t, h)
	r := h.fails(2, "mcp", "--http", "0.0.0.0:0")
	if !strings.Contains(r.stderr, "bearer token") {
		t.Errorf("non-loopback without a token: %s", r)
	}
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			args := []string{}
			if stateless {
				args = append(args, "--stateless")
			}
			endpoint := mcpHTTP(t, h, []string{"STRATA_MCP_TOKEN=s3cret"}, args...)
			for _, tok := range []string{"", "wrong"} {
				req, _ := http.NewRequest("POST", endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("token %q: status %d, want 401", tok, resp.StatusCode)
				}
			}
			cs := mcpConnectHTTP(t, endpoint, "s3cret")
			name := "h" + map[bool]string{false: "1", true: "2"}[stateless]
			mcpCall(t, cs, "workspace_create", map[string]any{"name": name}, nil)
			defer h.run("ws", "rm", "--force", name)
			mcpCall(t, cs, "write_file", map[string]any{"workspace": name, "path": "h.txt", "content": "over http\n"}, nil)
			var ex mcpExec
			mcpCall(t, cs, "exec", map[string]any{"workspace": name, "command": []string{"cat", "h.txt"}}, &ex)
			if ex.Stdout != "over http\n" {
				t.Errorf("exec over http: %+v", ex)
			}
			// The token is the server's, not its commands'.
			mcpCall(t, cs, "exec", map[string]any{"workspace": name, "command": "env"}, &ex)
			if strings.Contains(ex.Stdout, "s3cret") {
				t.Errorf("the bearer token leaked into a command's environment")
			}
			var df struct{ Patch string }
			mcpCall(t, cs, "diff", map[string]any{"workspace": name}, &df)
			if !strings.Contains(df.Patch, "+over http") {
				t.Errorf("diff over http: %q", df.Patch)
			}
		})
	}
}

// inspector is the MCP Inspector's CLI, installed by `make mcp-inspector`
// under $STRATA_CACHE (npm @modelcontextprotocol/inspector).
func inspector(t *testing.T) string {
	t.Helper()
	p := os.Getenv("STRATA_MCP_INSPECTOR")
	if p == "" {
		cache := os.Getenv("STRATA_CACHE")
		if cache == "" {
			cache = "/var/tmp/strata-cache"
		}
		p = filepath.Join(cache, "mcp-inspector", "node_modules", ".bin", "mcp-inspector")
	}
	if _, err := os.Stat(p); err != nil {
		testutil.Skip(t, "the MCP Inspector is not installed at "+p+": run `make mcp-inspector` (needs the npm registry)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		testutil.Skip(t, "node is not on PATH: the MCP Inspector needs it (make deps)")
	}
	return p
}

// TestMCPInspector: a client nobody here wrote, the MCP Inspector's CLI,
// lists the tools and calls workspace_create → write_file → exec → diff →
// checkpoint → rollback, over stdio and over streamable HTTP.
func TestMCPInspector(t *testing.T) {
	parallel(t)
	insp := inspector(t)
	h := newHome(t)
	mcpProject(t, h)
	endpoint := mcpHTTP(t, h, nil)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			target := []string{"--cli", bin(t), "--home", h.dir, "mcp"}
			if transport == "http" {
				target = []string{"--cli", endpoint, "--transport", "http"}
			}
			call := func(method string, args ...string) map[string]any {
				t.Helper()
				argv := append(append(append([]string{}, target...), "--method", method), args...)
				cmd := exec.Command(insp, argv...)
				cmd.Env = append(os.Environ(), h.env...)
				out, err := cmd.Output()
				if err != nil {
					var stderr string
					if ee, ok := err.(*exec.ExitError); ok {
						stderr = string(ee.Stderr)
					}
					t.Fatalf("inspector %s %v: %v\n%s\n%s", method, args, err, out, stderr)
				}
				var v map[string]any
				if err := json.Unmarshal(out, &v); err != nil {
					t.Fatalf("inspector %s: %v: %s", method, err, out)
				}
				return v
			}
			tool := func(name string, args ...string) map[string]any {
				t.Helper()
				v := call("tools/call", append([]string{"--tool-name", name, "--tool-arg"}, args...)...)
				if isErr, _ := v["isError"].(bool); isErr {
					t.Fatalf("%s %v: tool error %v", name, args, v["content"])
				}
				sc, _ := v["structuredContent"].(map[string]any)
				if sc == nil {
					t.Fatalf("%s: no structured content: %v", name, v)
				}
				return sc
			}
			tools, _ := call("tools/list")["tools"].([]any)
			names := map[string]bool{}
			for _, tl := range tools {
				if m, ok := tl.(map[string]any); ok {
					names[fmt.Sprint(m["name"])] = true
				}
			}
			for _, n := range []string{"workspace_create", "write_file", "exec", "diff", "checkpoint", "rollback", "fork", "read_file"} {
				if !names[n] {
					t.Errorf("tools/list lacks %s: %v", n, names)
				}
			}
			ws := "insp-" + transport
			defer h.run("ws", "rm", "--force", ws)
			if got := tool("workspace_create", "name="+ws, "from=main"); got["name"] != ws {
				t.Errorf("workspace_create: %v", got)
			}
			tool("write_file", "workspace="+ws, "path=notes/hello.txt", "content=hello inspector")
			if got := tool("exec", "workspace="+ws, "command=cat notes/hello.txt; echo; echo done >&2"); got["stdout"] != "hello inspector\n" ||
				got["stderr"] != "done\n" || got["exit_code"] != float64(0) {
				t.Errorf("exec: %v", got)
			}
			if got := tool("diff", "workspace="+ws); !strings.Contains(fmt.Sprint(got["patch"]), "+hello inspector") {
				t.Errorf("diff: %v", got)
			}
			cp := tool("checkpoint", "workspace="+ws, "message=from the inspector")
			if len(fmt.Sprint(cp["checkpoint"])) != 64 {
				t.Errorf("checkpoint: %v", cp)
			}
			tool("write_file", "workspace="+ws, "path=notes/hello.txt", "content=changed")
			if got := tool("rollback", "workspace="+ws); got["checkpoint"] != cp["checkpoint"] {
				t.Errorf("rollback: %v, want %v", got, cp["checkpoint"])
			}
			if got := tool("read_file", "workspace="+ws, "path=notes/hello.txt"); got["content"] != "hello inspector" {
				t.Errorf("after rollback: %v", got)
			}
		})
	}
}
