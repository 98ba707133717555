package mcp

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stratafs/strata"
)

// BenchmarkCallFloor measures a tool call the server refuses before any
// work (exec of an empty command) over in-memory transports: the SDK's
// share of every call, without pipes or another process.
func BenchmarkCallFloor(b *testing.B) {
	repo, err := strata.Init(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer repo.Close()
	s := NewServer(repo, Options{})
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"workspace": "w", "command": []string{}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "exec", Arguments: args})
		if err != nil || !res.IsError {
			b.Fatalf("%v %v", res, err)
		}
	}
}
