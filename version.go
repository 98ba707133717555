package strata

import (
	"runtime"

	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/store"
)

// version and commit are set at build time (the Makefile passes
// -ldflags "-X github.com/stratafs/strata.commit=…"); a plain `go build`
// reports the development version and no commit.
var (
	version = "0.1.0-dev"
	commit  = ""
)

// VersionInfo is what `strata version --json` prints and what clients (the
// MCP server's peers, the Python SDK) check for compatibility: the store
// schema a binary understands and the keeper protocol it speaks decide
// whether two strata builds can share a store and its live workspaces.
type VersionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Go      string `json:"go"`
	// Schema is the store's database schema version (store.SchemaVersion).
	Schema int `json:"schema"`
	// Protocol is the keeper protocol's version (nsexec.ProtocolVersion).
	Protocol int    `json:"protocol"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

// Version describes this build.
func Version() VersionInfo {
	return VersionInfo{
		Version:  version,
		Commit:   commit,
		Go:       runtime.Version(),
		Schema:   store.SchemaVersion(),
		Protocol: workspace.ProtocolVersion,
		OS:       runtime.GOOS,
		Arch:     runtime.GOARCH,
	}
}
