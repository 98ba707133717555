// Package mcp serves a strata store to AI agents over the Model Context
// Protocol (the official go-sdk): stdio, or streamable HTTP.
//
// Terms: the server is started on one store (a *strata.Repo) and never
// exposes another — no tool takes a store location. A tool is a thin
// wrapper over the root package's API with a JSON-schema'd input and a
// structured output; a failure is an MCP tool error (isError) whose message
// says what to do. A workspace path is a path inside a workspace's merged
// view, relative to its root (or absolute under the path the workspace is
// mounted at): file tools resolve it beneath the view's root
// (openat2 RESOLVE_BENEATH), so `..` or a symlink that leaves the
// workspace is refused, and commands (exec, search, apply_patch) run in
// the workspace's sandbox like `strata exec`.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stratafs/strata"
)

// Options tune NewServer.
type Options struct {
	// Sandbox is how commands run (exec, search, apply_patch); its zero
	// value is strata's default, the agent sandbox.
	Sandbox strata.SandboxOptions
	// MaxOutput caps each of a command's stdout and stderr, and a file
	// read or diff, in bytes (default DefaultMaxOutput).
	MaxOutput int
	// Logf, when set, receives the server's diagnostics (never stdout:
	// the stdio transport owns it).
	Logf func(format string, args ...any)
}

// DefaultMaxOutput is the default cap on what one tool call returns of a
// command's output or a file: large enough for a test run's report, small
// enough for an agent's context.
const DefaultMaxOutput = 256 << 10

// Server is the strata MCP server of one store.
type Server struct {
	repo *strata.Repo
	opts Options
	srv  *sdk.Server
}

// NewServer makes the MCP server of repo with every tool and resource.
func NewServer(repo *strata.Repo, opts Options) *Server {
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = DefaultMaxOutput
	}
	v := strata.Version()
	s := &Server{repo: repo, opts: opts}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "strata", Title: "strata workspaces", Version: v.Version}, &sdk.ServerOptions{
		Instructions: "strata gives you isolated, writable copies (workspaces) of a project. " +
			"Create one with workspace_create, change files with write_file/edit_file/apply_patch, run commands with exec, " +
			"review with diff, save with checkpoint, undo with rollback, branch with fork, and merge back with promote. " +
			"Paths are relative to the workspace root.",
	})
	s.addTools()
	s.addResources()
	return s
}

// MCP returns the go-sdk server, for transports the caller runs itself.
func (s *Server) MCP() *sdk.Server { return s.srv }

// ServeStdio serves one client on stdin/stdout until it hangs up or ctx
// ends.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.srv.Run(ctx, &sdk.StdioTransport{})
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// toolError turns an API error into what an agent should read: what
// failed and what to do about it.
func toolError(err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("cancelled: %s", msg)
	case errors.Is(err, errEscape):
		return err
	case errors.Is(err, strata.ErrNotFound):
		return fmt.Errorf("%s (workspace_list shows the workspaces; log and diff name the checkpoints)", msg)
	case errors.Is(err, strata.ErrExists):
		return fmt.Errorf("%s (pick another name, or workspace_remove the old one)", msg)
	case errors.Is(err, strata.ErrInvalidName):
		return fmt.Errorf("%s (names are letters, digits, '.', '_' and '-')", msg)
	case errors.Is(err, strata.ErrConflict):
		return fmt.Errorf("conflict: %s", msg)
	case errors.Is(err, strata.ErrUnsupported):
		return fmt.Errorf("%s (run `strata doctor` on the host to see what this kernel allows)", msg)
	}
	return err
}

// --- resources --------------------------------------------------------------

const (
	diffTemplate = "strata://workspace/{name}/diff"
	logTemplate  = "strata://workspace/{name}/log"
)

func (s *Server) addResources() {
	s.srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "workspace-diff",
		Title:       "A workspace's diff",
		Description: "The git-style patch of a workspace's changes against its last checkpoint, uncommitted changes included.",
		MIMEType:    "text/x-diff",
		URITemplate: diffTemplate,
	}, s.readDiffResource)
	s.srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "workspace-log",
		Title:       "A workspace's log",
		Description: "The checkpoints (commits) of a workspace's branch, newest first, as JSON.",
		MIMEType:    "application/json",
		URITemplate: logTemplate,
	}, s.readLogResource)
}

// resourceWorkspace parses strata://workspace/NAME/WHAT.
func resourceWorkspace(uri, what string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "strata" || u.Host != "workspace" {
		return "", sdk.ResourceNotFoundError(uri)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 2 || parts[1] != what || strata.ValidateWorkspaceName(parts[0]) != nil {
		return "", sdk.ResourceNotFoundError(uri)
	}
	return parts[0], nil
}

func (s *Server) readDiffResource(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	name, err := resourceWorkspace(req.Params.URI, "diff")
	if err != nil {
		return nil, err
	}
	out, err := s.diff(ctx, name, 0)
	if err != nil {
		return nil, toolError(err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "text/x-diff", Text: out.Patch}}}, nil
}

func (s *Server) readLogResource(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	name, err := resourceWorkspace(req.Params.URI, "log")
	if err != nil {
		return nil, err
	}
	out, err := s.log(ctx, name, 0)
	if err != nil {
		return nil, toolError(err)
	}
	b, err := jsonText(out)
	if err != nil {
		return nil, err
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: b}}}, nil
}
