package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/stratafs/strata"
)

func boolp(b bool) *bool { return &b }

// execSchema is exec's input schema as inferred from execIn, with command
// typed as what it is: an argv list of strings, or a shell string (an
// `any` field infers to no type at all).
func execSchema() *jsonschema.Schema {
	sc, err := jsonschema.For[execIn](nil)
	if err != nil {
		panic(err)
	}
	c := sc.Properties["command"]
	c.AnyOf = []*jsonschema.Schema{
		{Type: "array", Items: &jsonschema.Schema{Type: "string"}},
		{Type: "string"},
	}
	return sc
}

// addTools registers every tool. Annotations tell clients which tools only
// read (they may call those without asking) and which destroy.
func (s *Server) addTools() {
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true}
	destructive := &sdk.ToolAnnotations{DestructiveHint: boolp(true)}
	safe := &sdk.ToolAnnotations{DestructiveHint: boolp(false)}
	sdk.AddTool(s.srv, &sdk.Tool{Name: "workspace_create", Annotations: safe,
		Description: "Create a workspace: an isolated, writable copy of a branch or commit (default main). Costs milliseconds and no copying. " +
			"From a container image imported into the store, commands run in the image (its / and environment, the project at its working directory); " +
			"root and at put a project branch at a path inside an image instead."}, s.toolCreate)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "workspace_list", Annotations: ro,
		Description: "List the workspaces of this store with their branch, state and size of uncommitted changes."}, s.toolList)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "workspace_remove", Annotations: destructive,
		Description: "Remove a workspace. Refuses when it has uncommitted changes unless force is set (they are then lost)."}, s.toolRemove)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "exec", Annotations: destructive, InputSchema: execSchema(),
		Description: "Run a command in a workspace's sandbox: command is an argv list, or a string run by `sh -c`. " +
			"Returns exit_code, stdout, stderr (each capped; truncated says so). timeout_s ends it (exit 124). " +
			"Cancelling the call kills the command and everything it started."}, s.toolExec)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "read_file", Annotations: ro,
		Description: "Read a file of a workspace, optionally lines start_line..end_line (1-based, inclusive)."}, s.toolReadFile)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "write_file", Annotations: destructive,
		Description: "Write a file of a workspace (created with its parent directories, or replaced)."}, s.toolWriteFile)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "edit_file", Annotations: destructive,
		Description: "Replace the exact text old with new in a file of a workspace. old must match exactly once " +
			"(whitespace included) unless replace_all is set."}, s.toolEditFile)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "list_dir", Annotations: ro,
		Description: "List a directory of a workspace (default its root): name, type and size of each entry."}, s.toolListDir)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "search", Annotations: ro,
		Description: "Search the files of a workspace for a pattern (grep regular expression, or fixed text), skipping .git and binary files."}, s.toolSearch)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "diff", Annotations: ro,
		Description: "The workspace's changes since its last checkpoint, uncommitted ones included: a git-style patch and the changed files."}, s.toolDiff)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "checkpoint", Annotations: safe,
		Description: "Save the workspace's changes as a checkpoint (a commit on its branch) with a message; rollback returns to it."}, s.toolCheckpoint)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "rollback", Annotations: destructive,
		Description: "Drop the workspace's uncommitted changes, returning to its last checkpoint, or move it to an earlier checkpoint. " +
			"Ends the workspace's running processes."}, s.toolRollback)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "fork", Annotations: safe,
		Description: "Create a new workspace from a workspace's last checkpoint (or the checkpoint given): branch after an expensive setup. " +
			"Uncommitted changes are not carried over; checkpoint first."}, s.toolFork)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "promote", Annotations: safe,
		Description: "Merge a workspace's checkpoints into the branch it was forked from (or into): fast-forward or three-way merge; a conflict changes nothing."}, s.toolPromote)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "apply_patch", Annotations: destructive,
		Description: "Apply a unified diff (git-style, paths a/ b/) to a workspace's files, all or nothing."}, s.toolApplyPatch)
	sdk.AddTool(s.srv, &sdk.Tool{Name: "log", Annotations: ro,
		Description: "The checkpoints of a workspace's branch, newest first."}, s.toolLog)
}

// --- workspaces -------------------------------------------------------------

type createIn struct {
	Name  string `json:"name" jsonschema:"the new workspace's name"`
	From  string `json:"from,omitempty" jsonschema:"the branch or commit to copy (default main)"`
	Tmpfs bool   `json:"tmpfs,omitempty" jsonschema:"keep its changes in memory (fast, lost at reboot)"`
	Root  string `json:"root,omitempty" jsonschema:"an imported container image (branch or commit): from's tree is mounted at 'at' inside it"`
	At    string `json:"at,omitempty" jsonschema:"with root: the absolute path inside the image where the project appears, e.g. /testbed"`
	// Backend: README "Backends".
	Backend string `json:"backend,omitempty" jsonschema:"how its writable tree is made: overlay, reflink (a clone, on XFS or Btrfs), copy, or auto (default: the store's, else auto)"`
}

// workspaceOut is a workspace as tools report it.
type workspaceOut struct {
	Name    string `json:"name"`
	Branch  string `json:"branch"`
	Base    string `json:"base" jsonschema:"the commit (checkpoint) it is on"`
	State   string `json:"state" jsonschema:"running or stopped"`
	Path    string `json:"path,omitempty" jsonschema:"where commands see the workspace"`
	Changes int64  `json:"changes_bytes" jsonschema:"bytes of uncommitted changes"`
	Source  string `json:"source,omitempty"`
	Backend string `json:"backend,omitempty" jsonschema:"overlay, reflink or copy"`
}

func wsOut(w *strata.Workspace) workspaceOut {
	return workspaceOut{Name: w.Name, Branch: w.Branch, Base: w.Base.String(), State: w.State, Changes: w.Changes, Source: w.Source, Backend: w.Backend}
}

func (s *Server) toolCreate(ctx context.Context, _ *sdk.CallToolRequest, in createIn) (*sdk.CallToolResult, workspaceOut, error) {
	w, err := s.repo.CreateWorkspace(ctx, in.Name, strata.WorkspaceOptions{From: in.From, Tmpfs: in.Tmpfs, Root: in.Root, At: in.At, Backend: in.Backend})
	if err != nil {
		return nil, workspaceOut{}, toolError(err)
	}
	out := wsOut(w)
	if r, err := s.openRoot(ctx, in.Name); err == nil {
		out.Path, out.State = r.target, "running"
		r.Close()
	}
	return nil, out, nil
}

type listIn struct{}

type listOut struct {
	Workspaces []workspaceOut `json:"workspaces"`
}

func (s *Server) toolList(ctx context.Context, _ *sdk.CallToolRequest, _ listIn) (*sdk.CallToolResult, listOut, error) {
	ws, err := s.repo.Workspaces(ctx)
	if err != nil {
		return nil, listOut{}, toolError(err)
	}
	out := listOut{Workspaces: []workspaceOut{}}
	for i := range ws {
		out.Workspaces = append(out.Workspaces, wsOut(&ws[i]))
	}
	return nil, out, nil
}

type removeIn struct {
	Name  string `json:"name"`
	Force bool   `json:"force,omitempty" jsonschema:"remove it even with uncommitted changes, which are lost"`
}

type removeOut struct {
	Removed string `json:"removed"`
}

func (s *Server) toolRemove(ctx context.Context, _ *sdk.CallToolRequest, in removeIn) (*sdk.CallToolResult, removeOut, error) {
	err := s.repo.RemoveWorkspace(ctx, in.Name, in.Force)
	if errors.Is(err, strata.ErrConflict) && !in.Force {
		// RemoveWorkspace counts a non-empty upper directory as changes,
		// and a checkpoint leaves its files there: when the diff against
		// the last checkpoint is empty, nothing would be lost.
		if d, derr := s.diff(ctx, in.Name, 1); derr == nil && len(d.Files) == 0 {
			err = s.repo.RemoveWorkspace(ctx, in.Name, true)
		}
	}
	if err != nil {
		if errors.Is(err, strata.ErrConflict) {
			return nil, removeOut{}, fmt.Errorf("workspace %q has uncommitted changes: checkpoint them first, or call workspace_remove with force=true to discard them", in.Name)
		}
		return nil, removeOut{}, toolError(err)
	}
	return nil, removeOut{Removed: in.Name}, nil
}

// --- files ------------------------------------------------------------------

// maxFile bounds what edit_file reads into memory.
const maxFile = 64 << 20

type readIn struct {
	Workspace string `json:"workspace"`
	Path      string `json:"path" jsonschema:"relative to the workspace root"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"first line to return, 1-based (default 1)"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"last line to return, inclusive (default: the last)"`
}

type readOut struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Encoding   string `json:"encoding,omitempty" jsonschema:"base64 when the content is not UTF-8 text"`
	StartLine  int    `json:"start_line,omitempty"`
	EndLine    int    `json:"end_line,omitempty"`
	TotalLines int    `json:"total_lines"`
	Size       int64  `json:"size"`
	Truncated  bool   `json:"truncated" jsonschema:"the content was cut at the server's output cap: read a line range"`
}

func (s *Server) toolReadFile(ctx context.Context, _ *sdk.CallToolRequest, in readIn) (*sdk.CallToolResult, readOut, error) {
	r, err := s.openRoot(ctx, in.Workspace)
	if err != nil {
		return nil, readOut{}, toolError(err)
	}
	defer r.Close()
	f, rel, err := r.openRegular(in.Path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, readOut{}, toolError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, readOut{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFile))
	if err != nil {
		return nil, readOut{}, fmt.Errorf("read %q: %w", rel, err)
	}
	out := readOut{Path: rel, Size: fi.Size(), TotalLines: countLines(data)}
	if in.StartLine < 0 || in.EndLine < 0 || (in.EndLine > 0 && in.StartLine > in.EndLine) {
		return nil, readOut{}, fmt.Errorf("bad line range %d..%d: lines are 1-based and start_line <= end_line", in.StartLine, in.EndLine)
	}
	if in.StartLine > 0 || in.EndLine > 0 {
		start, end := max(in.StartLine, 1), in.EndLine
		if end == 0 || end > out.TotalLines {
			end = out.TotalLines
		}
		data = lineRange(data, start, end)
		out.StartLine, out.EndLine = start, end
	}
	if len(data) > s.opts.MaxOutput {
		data, out.Truncated = data[:s.opts.MaxOutput], true
	}
	if utf8.Valid(data) || out.Truncated && utf8.Valid(trimPartialRune(data)) {
		out.Content = string(data)
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return nil, out, nil
}

// trimPartialRune drops a rune cut in two at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, _ := utf8.DecodeLastRune(b); r != utf8.RuneError {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

func countLines(b []byte) int {
	n := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// lineRange returns lines start..end (1-based, inclusive) of b.
func lineRange(b []byte, start, end int) []byte {
	line, from := 1, -1
	if start <= 1 {
		from = 0
	}
	for i, c := range b {
		if c != '\n' {
			continue
		}
		line++
		if line == start {
			from = i + 1
		}
		if line == end+1 {
			if from < 0 {
				return nil
			}
			return b[from : i+1]
		}
	}
	if from < 0 {
		return nil
	}
	return b[from:]
}

type writeIn struct {
	Workspace string `json:"workspace"`
	Path      string `json:"path" jsonschema:"relative to the workspace root; parent directories are created"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"base64 when content is base64-encoded bytes"`
	Mode      string `json:"mode,omitempty" jsonschema:"octal permissions of a new file (default 0644), e.g. 0755"`
}

type writeOut struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func (s *Server) toolWriteFile(ctx context.Context, _ *sdk.CallToolRequest, in writeIn) (*sdk.CallToolResult, writeOut, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "text":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return nil, writeOut{}, fmt.Errorf("content is not base64: %w", err)
		}
		data = b
	default:
		return nil, writeOut{}, fmt.Errorf("encoding %q: use \"base64\" or leave it out for text", in.Encoding)
	}
	mode := uint32(0o644)
	if in.Mode != "" {
		var m uint32
		if _, err := fmt.Sscanf(in.Mode, "%o", &m); err != nil || m > 0o7777 {
			return nil, writeOut{}, fmt.Errorf("mode %q: give octal permissions such as 0644 or 0755", in.Mode)
		}
		mode = m
	}
	r, err := s.openRoot(ctx, in.Workspace)
	if err != nil {
		return nil, writeOut{}, toolError(err)
	}
	defer r.Close()
	rel, err := r.rel(in.Path)
	if err != nil {
		return nil, writeOut{}, err
	}
	if rel == "." {
		return nil, writeOut{}, errors.New("path is the workspace root: name a file")
	}
	if err := r.mkdirAll(rel); err != nil {
		return nil, writeOut{}, toolError(err)
	}
	if err := r.writeFile(rel, data, mode); err != nil {
		return nil, writeOut{}, toolError(err)
	}
	return nil, writeOut{Path: rel, Bytes: len(data)}, nil
}

// openRegular opens p like open, refusing anything but a regular file (a
// directory, a FIFO an agent made that would block the server forever):
// O_NONBLOCK keeps the open itself from waiting on a FIFO.
func (r *root) openRegular(p string, flags int, mode uint32) (*os.File, string, error) {
	f, rel, err := r.open(p, flags|unix.O_NONBLOCK|unix.O_NOCTTY, mode)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return nil, rel, fmt.Errorf("%q is not a regular file", rel)
		}
		return nil, rel, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, rel, err
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, rel, fmt.Errorf("%q is a directory: use list_dir", rel)
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, rel, fmt.Errorf("%q is not a regular file (%s)", rel, fi.Mode().Type())
	}
	return f, rel, nil
}

// writeFile replaces the contents of rel (keeping an existing file's mode).
func (r *root) writeFile(rel string, data []byte, mode uint32) error {
	f, _, err := r.openRegular(rel, unix.O_WRONLY|unix.O_CREAT, mode)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return fmt.Errorf("write %q: %w", rel, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %q: %w", rel, err)
	}
	return f.Close()
}

type editIn struct {
	Workspace  string `json:"workspace"`
	Path       string `json:"path"`
	Old        string `json:"old" jsonschema:"the exact text to replace, whitespace included"`
	New        string `json:"new" jsonschema:"the replacement"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of requiring exactly one"`
}

type editOut struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
}

func (s *Server) toolEditFile(ctx context.Context, _ *sdk.CallToolRequest, in editIn) (*sdk.CallToolResult, editOut, error) {
	if in.Old == "" {
		return nil, editOut{}, errors.New("old is empty: give the exact text to replace (use write_file to write a whole file)")
	}
	r, err := s.openRoot(ctx, in.Workspace)
	if err != nil {
		return nil, editOut{}, toolError(err)
	}
	defer r.Close()
	f, rel, err := r.openRegular(in.Path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, editOut{}, toolError(err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	f.Close()
	if err != nil {
		return nil, editOut{}, fmt.Errorf("read %q: %w", rel, err)
	}
	if len(data) > maxFile {
		return nil, editOut{}, fmt.Errorf("%q is larger than %d MiB: edit it with exec (sed) or apply_patch", rel, maxFile>>20)
	}
	n := strings.Count(string(data), in.Old)
	switch {
	case n == 0:
		return nil, editOut{}, fmt.Errorf("old text not found in %q: read_file it and copy the text exactly, whitespace and indentation included", rel)
	case n > 1 && !in.ReplaceAll:
		return nil, editOut{}, fmt.Errorf("old text matches %d times in %q: include more surrounding lines to make it unique, or set replace_all", n, rel)
	}
	res := strings.Replace(string(data), in.Old, in.New, -1)
	if err := r.writeFile(rel, []byte(res), 0o644); err != nil {
		return nil, editOut{}, toolError(err)
	}
	return nil, editOut{Path: rel, Replacements: n}, nil
}

type listDirIn struct {
	Workspace string `json:"workspace"`
	Path      string `json:"path,omitempty" jsonschema:"the directory, relative to the workspace root (default the root)"`
}

type dirEntry struct {
	Name   string `json:"name"`
	Type   string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size   int64  `json:"size"`
	Target string `json:"target,omitempty" jsonschema:"a symlink's target"`
}

type listDirOut struct {
	Path      string     `json:"path"`
	Entries   []dirEntry `json:"entries"`
	Truncated bool       `json:"truncated"`
}

// maxEntries caps one list_dir answer.
const maxEntries = 2000

func (s *Server) toolListDir(ctx context.Context, _ *sdk.CallToolRequest, in listDirIn) (*sdk.CallToolResult, listDirOut, error) {
	if in.Path == "" {
		in.Path = "."
	}
	r, err := s.openRoot(ctx, in.Workspace)
	if err != nil {
		return nil, listDirOut{}, toolError(err)
	}
	defer r.Close()
	f, rel, err := r.open(in.Path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, listDirOut{}, fmt.Errorf("%q is not a directory: use read_file", in.Path)
		}
		return nil, listDirOut{}, toolError(err)
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, listDirOut{}, fmt.Errorf("list %q: %w", rel, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	out := listDirOut{Path: rel, Entries: []dirEntry{}}
	if len(ents) > maxEntries {
		ents, out.Truncated = ents[:maxEntries], true
	}
	for _, e := range ents {
		d := dirEntry{Name: e.Name(), Type: "other"}
		switch t := e.Type(); {
		case t.IsRegular():
			d.Type = "file"
		case t.IsDir():
			d.Type = "dir"
		case t&os.ModeSymlink != 0:
			d.Type = "symlink"
			buf := make([]byte, 4096)
			if n, err := unix.Readlinkat(int(f.Fd()), e.Name(), buf); err == nil {
				d.Target = string(buf[:n])
			}
		}
		if d.Type == "file" {
			var st unix.Stat_t
			if unix.Fstatat(int(f.Fd()), e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				d.Size = st.Size
			}
		}
		out.Entries = append(out.Entries, d)
	}
	return nil, out, nil
}

// --- changes ----------------------------------------------------------------

type wsIn struct {
	Workspace string `json:"workspace"`
}

type fileChange struct {
	Path    string `json:"path"`
	Status  string `json:"status" jsonschema:"A added, D deleted, M modified, T type changed"`
	Binary  bool   `json:"binary,omitempty"`
	Added   int    `json:"added"`
	Deleted int    `json:"deleted"`
}

type diffOut struct {
	Workspace string       `json:"workspace"`
	Patch     string       `json:"patch" jsonschema:"git-style unified diff"`
	Files     []fileChange `json:"files"`
	Truncated bool         `json:"truncated" jsonschema:"the patch was cut at the server's output cap; files lists every change"`
}

func (s *Server) toolDiff(ctx context.Context, _ *sdk.CallToolRequest, in wsIn) (*sdk.CallToolResult, diffOut, error) {
	out, err := s.diff(ctx, in.Workspace, s.opts.MaxOutput)
	if err != nil {
		return nil, diffOut{}, toolError(err)
	}
	return nil, *out, nil
}

// diff is a workspace's patch against its base; limit > 0 caps it.
func (s *Server) diff(ctx context.Context, name string, limit int) (*diffOut, error) {
	if err := strata.ValidateWorkspaceName(name); err != nil {
		return nil, err
	}
	if _, err := s.repo.WorkspaceInfo(ctx, name); err != nil {
		return nil, err
	}
	spec, changes, err := s.repo.Diff(ctx, name)
	if err != nil {
		return nil, err
	}
	defer spec.Release() // the server's Repo lives on: drop the view's objects
	var buf bytes.Buffer
	if err := s.repo.WritePatch(ctx, &buf, changes); err != nil {
		return nil, err
	}
	fcs, err := s.repo.FileChanges(ctx, changes, true)
	if err != nil {
		return nil, err
	}
	out := &diffOut{Workspace: name, Files: []fileChange{}}
	for _, c := range fcs {
		out.Files = append(out.Files, fileChange{Path: c.Path, Status: c.Status, Binary: c.Binary, Added: c.Added, Deleted: c.Deleted})
	}
	p := buf.Bytes()
	if limit > 0 && len(p) > limit {
		p, out.Truncated = trimPartialRune(p[:limit]), true
	}
	out.Patch = strings.ToValidUTF8(string(p), "\uFFFD")
	return out, nil
}

type checkpointIn struct {
	Workspace string `json:"workspace"`
	Message   string `json:"message" jsonschema:"what the checkpoint holds"`
}

type checkpointOut struct {
	Workspace  string `json:"workspace"`
	Checkpoint string `json:"checkpoint" jsonschema:"the commit id; rollback and fork take it"`
	Branch     string `json:"branch"`
	Clean      bool   `json:"clean" jsonschema:"nothing had changed: no new checkpoint was made"`
	Changed    int    `json:"changed" jsonschema:"paths changed"`
}

func (s *Server) toolCheckpoint(ctx context.Context, _ *sdk.CallToolRequest, in checkpointIn) (*sdk.CallToolResult, checkpointOut, error) {
	if strings.TrimSpace(in.Message) == "" {
		return nil, checkpointOut{}, errors.New("message is empty: say what the checkpoint holds")
	}
	res, err := s.repo.Commit(ctx, in.Workspace, strata.CommitOptions{Message: in.Message})
	if err != nil {
		if errors.Is(err, strata.ErrConflict) {
			return nil, checkpointOut{}, fmt.Errorf("%v: the branch moved since this workspace's last checkpoint (a promote or another workspace); the changes are still in the workspace: fork it or rollback to the branch's head", err)
		}
		return nil, checkpointOut{}, toolError(err)
	}
	return nil, checkpointOut{Workspace: in.Workspace, Checkpoint: res.Commit.String(), Branch: res.Branch, Clean: res.Clean, Changed: res.Changed}, nil
}

type rollbackIn struct {
	Workspace  string `json:"workspace"`
	Checkpoint string `json:"checkpoint,omitempty" jsonschema:"the checkpoint (commit id or ref) to return to; default the last one"`
}

type rollbackOut struct {
	Workspace  string `json:"workspace"`
	Checkpoint string `json:"checkpoint"`
}

func (s *Server) toolRollback(ctx context.Context, _ *sdk.CallToolRequest, in rollbackIn) (*sdk.CallToolResult, rollbackOut, error) {
	id, err := s.repo.Reset(ctx, in.Workspace, in.Checkpoint)
	if err != nil {
		return nil, rollbackOut{}, toolError(err)
	}
	return nil, rollbackOut{Workspace: in.Workspace, Checkpoint: id.String()}, nil
}

type forkIn struct {
	Workspace  string `json:"workspace" jsonschema:"the workspace to fork"`
	Name       string `json:"name" jsonschema:"the new workspace's name"`
	Checkpoint string `json:"checkpoint,omitempty" jsonschema:"the checkpoint to start from; default the workspace's last"`
	Tmpfs      bool   `json:"tmpfs,omitempty"`
}

type forkOut struct {
	workspaceOut
	Warning string `json:"warning,omitempty"`
}

func (s *Server) toolFork(ctx context.Context, _ *sdk.CallToolRequest, in forkIn) (*sdk.CallToolResult, forkOut, error) {
	src, err := s.repo.WorkspaceInfo(ctx, in.Workspace)
	if err != nil {
		return nil, forkOut{}, toolError(err)
	}
	from := in.Checkpoint
	if from == "" {
		from = src.Base.String()
	}
	w, err := s.repo.CreateWorkspace(ctx, in.Name, strata.WorkspaceOptions{From: from, Tmpfs: in.Tmpfs})
	if err != nil {
		return nil, forkOut{}, toolError(err)
	}
	out := forkOut{workspaceOut: wsOut(w)}
	if src.Changes > 0 && in.Checkpoint == "" {
		out.Warning = fmt.Sprintf("%s has uncommitted changes that the fork does not have: checkpoint %s and fork again to carry them", in.Workspace, in.Workspace)
	}
	return nil, out, nil
}

type promoteIn struct {
	Workspace string `json:"workspace"`
	Into      string `json:"into,omitempty" jsonschema:"the branch to merge into; default the one the workspace was forked from"`
}

type promoteOut struct {
	From      string   `json:"from"`
	Into      string   `json:"into"`
	Commit    string   `json:"commit"`
	How       string   `json:"how" jsonschema:"fast-forward, merge or up-to-date"`
	Conflicts []string `json:"conflicts,omitempty"`
}

func (s *Server) toolPromote(ctx context.Context, _ *sdk.CallToolRequest, in promoteIn) (*sdk.CallToolResult, promoteOut, error) {
	if _, err := s.repo.WorkspaceInfo(ctx, in.Workspace); err != nil {
		return nil, promoteOut{}, toolError(err)
	}
	res, err := s.repo.Promote(ctx, in.Workspace, in.Into)
	if err != nil {
		var ce *strata.ConflictError
		if errors.As(err, &ce) {
			return nil, promoteOut{}, fmt.Errorf("%v: nothing changed; rollback to the target branch's head in a fork, redo the conflicting edits there, checkpoint and promote again", err)
		}
		return nil, promoteOut{}, toolError(err)
	}
	out := promoteOut{From: res.From, Into: res.Into, Commit: res.Commit.String(), How: res.How}
	for _, c := range res.Conflicts {
		out.Conflicts = append(out.Conflicts, fmt.Sprint(c))
	}
	return nil, out, nil
}

type logIn struct {
	Workspace string `json:"workspace"`
	Limit     int    `json:"limit,omitempty" jsonschema:"at most this many (default 50)"`
}

type logEntry struct {
	Checkpoint string `json:"checkpoint"`
	Message    string `json:"message"`
	TimeNs     int64  `json:"time_ns"`
}

type logOut struct {
	Workspace string     `json:"workspace"`
	Branch    string     `json:"branch"`
	Entries   []logEntry `json:"entries"`
}

func (s *Server) toolLog(ctx context.Context, _ *sdk.CallToolRequest, in logIn) (*sdk.CallToolResult, logOut, error) {
	if in.Limit <= 0 {
		in.Limit = 50
	}
	out, err := s.log(ctx, in.Workspace, in.Limit)
	if err != nil {
		return nil, logOut{}, toolError(err)
	}
	return nil, *out, nil
}

func (s *Server) log(ctx context.Context, name string, n int) (*logOut, error) {
	w, err := s.repo.WorkspaceInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	ents, err := s.repo.Log(ctx, w.Base.String(), n)
	if err != nil {
		return nil, err
	}
	out := &logOut{Workspace: name, Branch: w.Branch, Entries: []logEntry{}}
	for _, e := range ents {
		out.Entries = append(out.Entries, logEntry{Checkpoint: e.ID.String(), Message: e.Message, TimeNs: e.TimeNs})
	}
	return out, nil
}

func jsonText(v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return string(b), err
}
