package strata

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Job is one line of a batch file (JSON lines).
type Job struct {
	ID string `json:"id,omitempty"` // default: "line-N" (1-based)
	// From is the ref to fork (default main).
	From string `json:"from,omitempty"`
	// Patch is the path of a patch file (relative to the batch file), or
	// PatchText the patch itself.
	Patch     string `json:"patch,omitempty"`
	PatchText string `json:"patch_text,omitempty"`
	// Cmd is the command: an array of arguments, or a string run by
	// /bin/sh -c.
	Cmd     json.RawMessage `json:"cmd"`
	Timeout json.RawMessage `json:"timeout,omitempty"` // "90s" or seconds
	// Env is {"K": "V"} or ["K=V", ...].
	Env     json.RawMessage `json:"env,omitempty"`
	Cwd     string          `json:"cwd,omitempty"`
	Commit  string          `json:"commit,omitempty"` // branch, as --commit
	Keep    bool            `json:"keep,omitempty"`
	Backend string          `json:"backend,omitempty"` // overrides BatchOptions.Backend
	Protect []string        `json:"protect,omitempty"`
	Sandbox string          `json:"sandbox,omitempty"`
	Net     string          `json:"net,omitempty"`
	// Root (an image ref) and At: From is a project mounted at At over
	// the image's root (RunOptions.Root); Scope: what an image-rooted
	// job's diff and commit cover ("project" or "all").
	Root  string `json:"root,omitempty"`
	At    string `json:"at,omitempty"`
	Scope string `json:"scope,omitempty"`
}

// JobResult is one line of a batch's output.
type JobResult struct {
	ID    string `json:"id"`
	Index int    `json:"index"` // 1-based line number in the batch file
	*RunResult
	StdoutTail string `json:"stdout_tail,omitempty"`
	StderrTail string `json:"stderr_tail,omitempty"`
	Error      string `json:"error,omitempty"`
	Kind       string `json:"error_kind,omitempty"`
	// Shard is "K/N" when the batch ran one shard (BatchOptions.Shard).
	Shard string `json:"shard,omitempty"`
}

// BatchOptions tune Batch.
type BatchOptions struct {
	Parallel int    // default 1
	Out      string // results file (JSON lines); jobs already in it are skipped
	Output   string // per-job stdout/stderr under Output/<id>/
	Sandbox  SandboxOptions
	// SubIDs maps the user's subordinate ids in every job (RunOptions).
	SubIDs bool
	// Backend makes every job's tree (RunOptions.Backend) unless the job
	// names its own.
	Backend string
	// Progress is called after each job with (done, total).
	Progress func(done, total int)
	// Kind classifies an error for the result line (the CLI's kinds).
	Kind func(error) string
	// Shard, if Shards > 1, runs only the jobs whose 0-based index is
	// ≡ Shard (mod Shards); see ParseShard.
	Shard, Shards int
}

// BatchSummary reports a batch.
type BatchSummary struct {
	Jobs     int    `json:"jobs"`
	Skipped  int    `json:"skipped"` // already in --out
	Ran      int    `json:"ran"`
	Passed   int    `json:"passed"` // exit code 0
	Failed   int    `json:"failed"`
	Errors   int    `json:"errors"` // strata could not run them
	TimedOut int    `json:"timed_out"`
	Duration int64  `json:"duration_ns"`
	Shard    string `json:"shard,omitempty"` // "K/N" of a sharded batch
}

// tailSize is how much of each job's stdout and stderr a result line
// carries when there is no --output directory.
const tailSize = 4096

// Batch runs the jobs of a JSON-lines file, Parallel at a time, and appends
// one result line per job to opts.Out (or w) as each finishes, with its id
// and line number. Jobs already present in opts.Out are skipped, so a
// batch that was interrupted resumes where it stopped.
func (r *Repo) Batch(ctx context.Context, file string, w io.Writer, opts BatchOptions) (*BatchSummary, error) {
	start := time.Now()
	jobs, err := readJobs(file)
	if err != nil {
		return nil, err
	}
	if err := checkJobs(file, jobs, opts); err != nil {
		return nil, err
	}
	if opts.Shards > 1 && (opts.Shard < 0 || opts.Shard >= opts.Shards) {
		return nil, invalidf("batch: shard %d/%d: want 0 <= K < N", opts.Shard, opts.Shards)
	}
	var mine []int // indexes of the jobs this batch (shard) runs
	for i := range jobs {
		if opts.Shards <= 1 || i%opts.Shards == opts.Shard {
			mine = append(mine, i)
		}
	}
	shard := ""
	if opts.Shards > 1 {
		shard = fmt.Sprintf("%d/%d", opts.Shard, opts.Shards)
	}
	sum := &BatchSummary{Jobs: len(mine), Shard: shard}
	done := map[string]bool{}
	var out io.Writer = w
	if opts.Out != "" {
		if done, err = finishedJobs(opts.Out); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(opts.Out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		out = f
	}
	par := opts.Parallel
	if par <= 0 {
		par = 1
	}
	var mu sync.Mutex
	finished := 0
	emit := func(res *JobResult) error {
		mu.Lock()
		defer mu.Unlock()
		res.Shard = shard
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		if _, err := out.Write(append(b, '\n')); err != nil {
			return err
		}
		finished++
		switch {
		case res.Error != "":
			sum.Errors++
		case res.RunResult.TimedOut:
			sum.TimedOut++
			sum.Failed++
		case res.RunResult.ExitCode == 0:
			sum.Passed++
		default:
			sum.Failed++
		}
		if opts.Progress != nil {
			opts.Progress(finished, len(mine)-sum.Skipped)
		}
		return nil
	}
	todo := make(chan int)
	errc := make(chan error, par)
	var wg sync.WaitGroup
	for i := 0; i < par; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range todo {
				if err := emit(r.runJob(ctx, file, i, jobs[i], opts)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
feed:
	for _, i := range mine {
		if j := jobs[i]; done[j.ID] {
			sum.Skipped++
			continue
		}
		select {
		case todo <- i:
			sum.Ran++
		case <-ctx.Done():
			break feed
		case err := <-errc:
			close(todo)
			wg.Wait()
			return sum, err
		}
	}
	close(todo)
	wg.Wait()
	select {
	case err := <-errc:
		return sum, err
	default:
	}
	sum.Duration = time.Since(start).Nanoseconds()
	return sum, ctx.Err()
}

// runJob runs one job and never fails: problems go into the result.
func (r *Repo) runJob(ctx context.Context, file string, i int, j Job, opts BatchOptions) *JobResult {
	res := &JobResult{ID: j.ID, Index: i + 1}
	fail := func(err error) *JobResult {
		res.Error = err.Error()
		if opts.Kind != nil {
			res.Kind = opts.Kind(err)
		}
		return res
	}
	ro, err := jobOptions(file, j, opts)
	if err != nil {
		return fail(err)
	}
	var outF, errF *os.File
	if opts.Output != "" {
		ro.Output = filepath.Join(opts.Output, safeName(j.ID))
	} else {
		if outF, err = os.CreateTemp("", "strata-job-out-"); err != nil {
			return fail(err)
		}
		defer os.Remove(outF.Name())
		defer outF.Close()
		if errF, err = os.CreateTemp("", "strata-job-err-"); err != nil {
			return fail(err)
		}
		defer os.Remove(errF.Name())
		defer errF.Close()
		ro.Stdout, ro.Stderr = outF, errF
	}
	rr, err := r.Run(ctx, ro)
	res.RunResult = rr
	// The command ran even when its commit conflicted or broke the
	// policy: its output belongs in the line either way.
	if outF != nil && rr != nil {
		res.StdoutTail, res.StderrTail = tail(outF), tail(errF)
	}
	if err != nil {
		return fail(err)
	}
	return res
}

// checkJobs validates every job before any runs, so that a bad line
// (line 40 of 50) does not leave a half-run batch behind. All problems
// are reported at once.
func checkJobs(file string, jobs []Job, opts BatchOptions) error {
	var bad []string
	for _, j := range jobs {
		ro, err := jobOptions(file, j, opts)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if err := ro.check(); err != nil {
			bad = append(bad, fmt.Sprintf("job %s: %v", j.ID, err))
		} else if err := checkSandboxNames(ro.Sandbox); err != nil {
			bad = append(bad, fmt.Sprintf("job %s: %v", j.ID, err))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return invalidf("batch %s: %d of %d %s %s invalid; no job was run:\n  %s",
		file, len(bad), len(jobs), plural(len(jobs), "job", "jobs"), plural(len(bad), "is", "are"), strings.Join(bad, "\n  "))
}

// checkSandboxNames checks a job's sandbox and net names (the rest of the
// sandbox is checked when each command starts).
func checkSandboxNames(o SandboxOptions) error {
	switch o.Mode {
	case "", SandboxAgent, SandboxStrict, SandboxNone:
	default:
		return invalidf("sandbox %q: want agent, strict or none", o.Mode)
	}
	switch o.Net {
	case "", NetHost, NetNone:
	default:
		return invalidf("net %q: want host or none", o.Net)
	}
	return nil
}

// plural picks the singular or plural form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// jobOptions turns a job into run options.
func jobOptions(file string, j Job, opts BatchOptions) (RunOptions, error) {
	ro := RunOptions{From: j.From, Cwd: j.Cwd, CommitBranch: j.Commit, Keep: j.Keep, Protect: j.Protect, Sandbox: opts.Sandbox, SubIDs: opts.SubIDs,
		Root: j.Root, At: j.At, Scope: j.Scope}
	if j.Sandbox != "" {
		ro.Sandbox.Mode = j.Sandbox
	}
	if j.Net != "" {
		ro.Sandbox.Net = j.Net
	}
	if ro.Backend = opts.Backend; j.Backend != "" {
		ro.Backend = j.Backend
	}
	var argv []string
	var shell string
	switch {
	case len(j.Cmd) == 0:
		return ro, invalidf("job %s: no cmd", j.ID)
	case json.Unmarshal(j.Cmd, &argv) == nil && len(argv) > 0:
		ro.Argv = argv
	case json.Unmarshal(j.Cmd, &shell) == nil && shell != "":
		ro.Argv = []string{"/bin/sh", "-c", shell}
	default:
		return ro, invalidf("job %s: cmd must be a string or an array of strings", j.ID)
	}
	if len(j.Timeout) > 0 {
		var s string
		var secs float64
		switch {
		case json.Unmarshal(j.Timeout, &s) == nil:
			d, err := time.ParseDuration(s)
			if err != nil {
				return ro, invalidf("job %s: timeout %q", j.ID, s)
			}
			ro.Timeout = d
		case json.Unmarshal(j.Timeout, &secs) == nil:
			ro.Timeout = time.Duration(secs * float64(time.Second))
		default:
			return ro, invalidf("job %s: timeout must be \"90s\" or a number of seconds", j.ID)
		}
	}
	if len(j.Env) > 0 {
		var m map[string]string
		var l []string
		switch {
		case json.Unmarshal(j.Env, &m) == nil:
			for k, v := range m {
				ro.Env = append(ro.Env, k+"="+v)
			}
		case json.Unmarshal(j.Env, &l) == nil:
			ro.Env = l
		default:
			return ro, invalidf("job %s: env must be an object or a list of K=V", j.ID)
		}
	}
	switch {
	case j.PatchText != "":
		ro.PatchData, ro.PatchName = []byte(j.PatchText), "patch_text"
	case j.Patch != "":
		p := j.Patch
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(file), p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return ro, fmt.Errorf("job %s: patch: %w", j.ID, err)
		}
		ro.PatchData, ro.PatchName = b, j.Patch
	}
	return ro, nil
}

// readJobs parses a JSON-lines batch file; blank lines and lines starting
// with # are skipped.
func readJobs(file string) ([]Job, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	defer f.Close()
	var jobs []Job
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var j Job
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			return nil, invalidf("batch %s:%d: %v", file, n, err)
		}
		if j.ID == "" {
			j.ID = "line-" + strconv.Itoa(n)
		}
		if prev, dup := seen[j.ID]; dup {
			return nil, invalidf("batch %s:%d: job id %q already used on line %d", file, n, j.ID, prev)
		}
		seen[j.ID] = n
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("batch %s: %w", file, err)
	}
	return jobs, nil
}

// finishedJobs reads the ids already in a results file. A last line cut
// short by a crash is ignored (and its job runs again).
func finishedJobs(out string) (map[string]bool, error) {
	done := map[string]bool{}
	b, err := os.ReadFile(out)
	if os.IsNotExist(err) {
		return done, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		// Cut the partial line off so that appending starts a new one.
		i := bytes.LastIndexByte(b, '\n')
		if err := os.Truncate(out, int64(i+1)); err != nil {
			return nil, err
		}
		b = b[:i+1]
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var r struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(line, &r) == nil && r.ID != "" {
			done[r.ID] = true
		}
	}
	return done, nil
}

func tail(f *os.File) string {
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - tailSize
	if off < 0 {
		off = 0
	}
	b := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(b, off)
	return string(b[:n])
}

// safeName makes a job id usable as a directory name.
func safeName(id string) string {
	if id == "." || id == ".." {
		return "_" + id
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r < 0x20 {
			return '_'
		}
		return r
	}, id)
}
