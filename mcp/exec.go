package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stratafs/strata"
)

// progressEvery is how often a long exec reports progress to a client
// that asked for it (a progress token in the call).
const progressEvery = time.Second

// drainWait bounds how long output is read after a command ended: a
// daemon it left behind may hold its stdout open forever.
const drainWait = 200 * time.Millisecond

type execIn struct {
	Workspace string            `json:"workspace"`
	Command   any               `json:"command" jsonschema:"an argv list such as [\"pytest\", \"-q\"], or a string run by sh -c"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory, relative to the workspace root (default the root)"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables to set"`
	TimeoutS  float64           `json:"timeout_s,omitempty" jsonschema:"seconds after which the command is killed (exit_code 124, timed_out true)"`
	Stdin     string            `json:"stdin,omitempty" jsonschema:"what the command reads on its standard input"`
}

type execOut struct {
	ExitCode   int      `json:"exit_code"`
	Signal     int      `json:"signal,omitempty" jsonschema:"the signal that killed it, if one did"`
	Stdout     string   `json:"stdout"`
	Stderr     string   `json:"stderr"`
	Truncated  bool     `json:"truncated" jsonschema:"stdout or stderr exceeded the cap: their middle was cut"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	DurationMs float64  `json:"duration_ms"`
	Warnings   []string `json:"warnings,omitempty"`
}

// argv turns exec's command into an argv.
func argv(c any) ([]string, error) {
	switch v := c.(type) {
	case string:
		if strings.TrimSpace(v) == "" {
			return nil, errors.New("command is empty")
		}
		return []string{"/bin/sh", "-c", v}, nil
	case []any:
		if len(v) == 0 {
			return nil, errors.New("command is an empty list: give [program, args...]")
		}
		out := make([]string, len(v))
		for i, a := range v {
			s, ok := a.(string)
			if !ok {
				return nil, fmt.Errorf("command[%d] is %T, not a string", i, a)
			}
			out[i] = s
		}
		return out, nil
	case []string:
		if len(v) == 0 {
			return nil, errors.New("command is an empty list: give [program, args...]")
		}
		return v, nil
	}
	return nil, fmt.Errorf("command is %T: give an argv list of strings or a shell command string", c)
}

func (s *Server) toolExec(ctx context.Context, req *sdk.CallToolRequest, in execIn) (*sdk.CallToolResult, execOut, error) {
	args, err := argv(in.Command)
	if err != nil {
		return nil, execOut{}, err
	}
	if in.TimeoutS < 0 {
		return nil, execOut{}, errors.New("timeout_s is negative")
	}
	var env []string
	for k, v := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, execOut{}, fmt.Errorf("env: bad variable name %q", k)
		}
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	var progress func(elapsed time.Duration, outBytes int64)
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		progress = func(elapsed time.Duration, outBytes int64) {
			p := &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: elapsed.Seconds(),
				Message: fmt.Sprintf("running for %.0fs, %d bytes of output", elapsed.Seconds(), outBytes)}
			if in.TimeoutS > 0 {
				p.Total = in.TimeoutS
			}
			if err := req.Session.NotifyProgress(ctx, p); err != nil {
				s.logf("progress: %v", err)
			}
		}
	}
	out, err := s.run(ctx, in.Workspace, runSpec{argv: args, cwd: in.Cwd, env: env, stdin: in.Stdin,
		timeout: time.Duration(in.TimeoutS * float64(time.Second)), progress: progress})
	if err != nil {
		return nil, execOut{}, toolError(err)
	}
	return nil, *out, nil
}

type runSpec struct {
	argv     []string
	cwd      string
	env      []string
	stdin    string
	timeout  time.Duration
	progress func(elapsed time.Duration, outBytes int64)
}

// run runs a command in a workspace and collects its capped output. A
// timeout is reported in the result (exit 124); cancellation of ctx kills
// the command's process group (nsexec.Exec) and is an error.
func (s *Server) run(ctx context.Context, name string, rs runSpec) (*execOut, error) {
	// A relative cwd is inside the workspace; an absolute one names a
	// directory of the command's view (the workspace's mount path, /tmp).
	if c := path.Clean(rs.cwd); rs.cwd != "" && !path.IsAbs(c) && (c == ".." || strings.HasPrefix(c, "../")) {
		return nil, fmt.Errorf("cwd %q: %w", rs.cwd, errEscape)
	}
	runCtx := ctx
	var cancel context.CancelFunc
	if rs.timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, rs.timeout)
		defer cancel()
	}
	stdout, stderr := newCapped(s.opts.MaxOutput), newCapped(s.opts.MaxOutput)
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	var stdinR *os.File
	if rs.stdin != "" {
		r, w, err := os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
		stdinR = r
		go func() {
			w.WriteString(rs.stdin) // a command that does not read gets EPIPE
			w.Close()
		}()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stdout.readFrom(outR) }()
	go func() { defer wg.Done(); stderr.readFrom(errR) }()

	var warnings []string
	var mu sync.Mutex
	sb := s.opts.Sandbox
	sb.Warn = func(msg string) {
		mu.Lock()
		warnings = append(warnings, msg)
		mu.Unlock()
	}
	stopProgress := make(chan struct{})
	if rs.progress != nil {
		go func() {
			start := time.Now()
			t := time.NewTicker(progressEvery)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					rs.progress(time.Since(start), stdout.total()+stderr.total())
				}
			}
		}()
	}
	start := time.Now()
	st, err := s.repo.Exec(runCtx, name, strata.ExecOptions{Argv: rs.argv, Env: rs.env, Cwd: rs.cwd, Sandbox: sb,
		Stdin: stdinR, Stdout: outW, Stderr: errW})
	dur := time.Since(start)
	close(stopProgress)
	outW.Close()
	errW.Close()
	if stdinR != nil {
		stdinR.Close()
	}
	// The command is gone (its process group killed if it was cut short);
	// what it left running may hold the pipes open: stop reading soon.
	deadline := time.Now().Add(drainWait)
	outR.SetReadDeadline(deadline)
	errR.SetReadDeadline(deadline)
	wg.Wait()
	outR.Close()
	errR.Close()

	// Exec returns the context's error only when it had the command
	// killed: a command that ended just before the deadline did not time
	// out, whatever the clock says now.
	timedOut := rs.timeout > 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
	if err != nil && !timedOut {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("exec cancelled, its processes were killed: %w", ctx.Err())
		}
		return nil, err
	}
	out := &execOut{ExitCode: st.Code, Signal: int(st.Signal), DurationMs: float64(dur.Microseconds()) / 1000,
		Stdout: stdout.String(), Stderr: stderr.String(), Truncated: stdout.truncated() || stderr.truncated(), Warnings: warnings}
	if timedOut {
		out.TimedOut, out.ExitCode = true, strata.ExitTimeout
	}
	return out, nil
}

// capped keeps the first and the last half of a cap of what it reads, and
// counts the rest: a test run's report is at its end, its command at the
// start.
type capped struct {
	mu    sync.Mutex
	limit int
	head  []byte
	tail  []byte // ring of the last limit/2 bytes once head is full
	pos   int    // next write position in tail
	full  bool   // tail has wrapped
	n     int64  // bytes read in all
}

func newCapped(limit int) *capped { return &capped{limit: limit} }

func (c *capped) readFrom(f *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			c.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (c *capped) write(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += int64(len(p))
	headCap := c.limit - c.limit/2
	if room := headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	tailCap := c.limit / 2
	if tailCap == 0 {
		return
	}
	if c.tail == nil && len(p) > 0 {
		c.tail = make([]byte, 0, tailCap)
	}
	for len(p) > 0 {
		if !c.full && len(c.tail) < tailCap {
			k := min(tailCap-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			c.pos = len(c.tail) % tailCap
			if len(c.tail) == tailCap {
				c.full = true
			}
			continue
		}
		k := copy(c.tail[c.pos:], p)
		p = p[k:]
		c.pos = (c.pos + k) % tailCap
	}
}

func (c *capped) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *capped) truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > int64(c.limit)
}

// String is what was kept, with a marker where bytes were dropped;
// invalid UTF-8 becomes U+FFFD.
func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b bytes.Buffer
	b.Write(c.head)
	tail := c.tail
	if c.full {
		tail = append(append([]byte{}, c.tail[c.pos:]...), c.tail[:c.pos]...)
	}
	if dropped := c.n - int64(len(c.head)) - int64(len(tail)); dropped > 0 {
		b.WriteString("\n[… " + strconv.FormatInt(dropped, 10) + " bytes cut …]\n")
	}
	b.Write(tail)
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}

// --- search and patches -----------------------------------------------------

type searchIn struct {
	Workspace  string `json:"workspace"`
	Pattern    string `json:"pattern" jsonschema:"a grep extended regular expression (or fixed text with fixed)"`
	Path       string `json:"path,omitempty" jsonschema:"directory or file to search, relative to the workspace root (default the root)"`
	Fixed      bool   `json:"fixed,omitempty" jsonschema:"pattern is plain text, not a regular expression"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	Include    string `json:"include,omitempty" jsonschema:"only files whose name matches this glob, e.g. *.go"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"at most this many matches (default 200)"`
}

type match struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

type searchOut struct {
	Matches   []match `json:"matches"`
	Truncated bool    `json:"truncated" jsonschema:"there are more matches than max_results"`
}

func (s *Server) toolSearch(ctx context.Context, _ *sdk.CallToolRequest, in searchIn) (*sdk.CallToolResult, searchOut, error) {
	if in.Pattern == "" {
		return nil, searchOut{}, errors.New("pattern is empty")
	}
	if in.MaxResults <= 0 {
		in.MaxResults = 200
	}
	if in.Path == "" {
		in.Path = "."
	}
	// The path is resolved beneath the workspace like a file tool's, so
	// a symlink out is refused before grep sees it.
	r, err := s.openRoot(ctx, in.Workspace)
	if err != nil {
		return nil, searchOut{}, toolError(err)
	}
	f, rel, err := r.open(in.Path, os.O_RDONLY, 0)
	r.Close()
	if err != nil {
		return nil, searchOut{}, toolError(err)
	}
	f.Close()
	// grep -r does not follow symlinks it meets (-R would).
	args := []string{"grep", "-rnIZE", "--exclude-dir=.git", "--color=never"}
	if in.Fixed {
		args[1] = "-rnIZF"
	}
	if in.IgnoreCase {
		args = append(args, "-i")
	}
	if in.Include != "" {
		args = append(args, "--include="+in.Include)
	}
	args = append(args, "-e", in.Pattern, "--", rel)
	out, err := s.run(ctx, in.Workspace, runSpec{argv: args})
	if err != nil {
		return nil, searchOut{}, toolError(err)
	}
	if out.ExitCode > 1 {
		return nil, searchOut{}, fmt.Errorf("search failed (grep exit %d): %s", out.ExitCode, strings.TrimSpace(out.Stderr))
	}
	res := searchOut{Matches: []match{}}
	for _, line := range strings.Split(out.Stdout, "\n") {
		p, rest, ok := strings.Cut(line, "\x00")
		if !ok {
			continue
		}
		num, text, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		if len(res.Matches) == in.MaxResults {
			res.Truncated = true
			break
		}
		res.Matches = append(res.Matches, match{Path: strings.TrimPrefix(p, "./"), Line: n, Text: text})
	}
	res.Truncated = res.Truncated || out.Truncated
	return nil, res, nil
}

type patchIn struct {
	Workspace string `json:"workspace"`
	Patch     string `json:"patch" jsonschema:"a unified diff; paths with a/ and b/ prefixes (git style) unless strip is 0"`
	Strip     *int   `json:"strip,omitempty" jsonschema:"leading path components to strip (default 1, as git apply)"`
}

type patchOut struct {
	Applied bool   `json:"applied"`
	Output  string `json:"output,omitempty"`
}

func (s *Server) toolApplyPatch(ctx context.Context, _ *sdk.CallToolRequest, in patchIn) (*sdk.CallToolResult, patchOut, error) {
	if strings.TrimSpace(in.Patch) == "" {
		return nil, patchOut{}, errors.New("patch is empty")
	}
	strip := 1
	if in.Strip != nil {
		strip = *in.Strip
	}
	if strip < 0 {
		return nil, patchOut{}, errors.New("strip is negative")
	}
	// git apply checks every hunk before it writes anything, and refuses
	// paths that leave the working tree (`..`, through symlinks). It runs
	// inside the workspace's sandbox like any command.
	out, err := s.run(ctx, in.Workspace, runSpec{argv: []string{"git", "apply", "-p" + strconv.Itoa(strip), "--recount", "--whitespace=nowarn", "-"}, stdin: in.Patch})
	if err != nil {
		return nil, patchOut{}, toolError(err)
	}
	switch out.ExitCode {
	case 0:
		return nil, patchOut{Applied: true, Output: out.Stdout + out.Stderr}, nil
	case 127:
		return nil, patchOut{}, errors.New("git is not available in the workspace's view: write the changes with write_file or edit_file")
	}
	return nil, patchOut{}, fmt.Errorf("patch does not apply, nothing was changed: %s; read_file the target to see its current text and regenerate the patch", strings.TrimSpace(out.Stderr))
}
