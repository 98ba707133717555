package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Issue "mcp": an MCP `exec` round trip (a go-sdk client over stdio to
// `strata mcp`) against `strata exec` started from a shell, side by side,
// and what the server adds: the round trip minus the time the server spent
// in the root package's Exec (the result's duration_ms).

func runMCP(b *Bench) error {
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	if _, _, err := b.st("-q", "ws", "create", "mcp"); err != nil {
		return err
	}
	defer b.st("-q", "ws", "rm", "--force", "mcp")
	cmd := exec.Command(b.strata, "--home", b.home, "mcp")
	cmd.Stderr = os.Stderr
	c := sdk.NewClient(&sdk.Implementation{Name: "strata-bench", Version: "1"}, nil)
	cs, err := c.Connect(b.ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("connect to strata mcp: %w", err)
	}
	defer cs.Close()
	call := func() (time.Duration, time.Duration, error) {
		start := time.Now()
		res, err := cs.CallTool(b.ctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"workspace": "mcp", "command": []string{"true"}}})
		d := time.Since(start)
		if err != nil {
			return 0, 0, err
		}
		if res.IsError {
			return 0, 0, fmt.Errorf("mcp exec: tool error: %v", res.Content)
		}
		var out struct {
			ExitCode   int     `json:"exit_code"`
			DurationMs float64 `json:"duration_ms"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil || out.ExitCode != 0 {
			return 0, 0, fmt.Errorf("mcp exec: %s (%v)", raw, err)
		}
		return d, time.Duration(out.DurationMs * float64(time.Millisecond)), nil
	}
	// The protocol's floor: a call the server answers without running
	// anything (exec with an empty command is refused by its handler).
	floor := func() (time.Duration, error) {
		start := time.Now()
		res, err := cs.CallTool(b.ctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"workspace": "mcp", "command": []string{}}})
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		if !res.IsError {
			return 0, fmt.Errorf("mcp exec of an empty command succeeded")
		}
		return d, nil
	}
	var rt, inner, overhead, cli, empty []time.Duration
	// Three unrecorded rounds first; then MCP and CLI interleaved, so that
	// drift in the machine hits both alike.
	for i := -3; i < b.cfg.n.exec; i++ {
		if err := b.cancelled(); err != nil {
			return err
		}
		d, in, err := call()
		if err != nil {
			return err
		}
		_, dc, err := b.run("", nil, "/bin/sh", "-c", `exec "$0" --home "$1" exec mcp -- true`, b.strata, b.home)
		if err != nil {
			return err
		}
		df, err := floor()
		if err != nil {
			return err
		}
		if i >= 0 {
			rt, inner, overhead, cli = append(rt, d), append(inner, in), append(overhead, d-in), append(cli, dc)
			empty = append(empty, df)
		}
	}
	b.record("mcp", "roundtrip", unitNS, durs(rt), "")
	b.record("mcp", "inner", unitNS, durs(inner), "")
	b.record("mcp", "overhead", unitNS, durs(overhead), "")
	b.record("mcp", "cli", unitNS, durs(cli), "")
	b.record("mcp", "floor", unitNS, durs(empty), "")
	return nil
}

func reportMCP(r *Results) []Table {
	if !r.has("mcp") {
		return nil
	}
	t := Table{
		Title:  "`exec -- true` into a live workspace: over MCP vs the CLI from a shell",
		Header: append([]string{"what", "N"}, passHeader(r.Passes, "p50", "p99")...),
	}
	rows := []struct{ key, label string }{
		{"roundtrip", "MCP `exec` round trip (go-sdk client → `strata mcp` over stdio → result)"},
		{"cli", "`sh -c 'strata exec W -- true'` (a shell starting the CLI)"},
		{"inner", "… of the round trip: the server inside the root package's Exec"},
		{"overhead", "… of the round trip: what the MCP server and protocol add (round trip − Exec)"},
		{"floor", "(protocol floor: a tool call the server refuses without running anything)"},
	}
	for _, row := range rows {
		cells := []string{row.label, nOf(r, "mcp", row.key)}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, "mcp", row.key, "p50"), r.cell(p, "mcp", row.key, "p99"))
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append([]string{
		"Target from the issue: the server adds under 1 ms. One client session for all calls; MCP and CLI interleaved after three unrecorded rounds. The MCP server is a long-lived process, so it pays no process start per call.",
	}, r.skips("mcp")...)
	return []Table{t}
}
