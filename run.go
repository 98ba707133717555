package strata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/glob"
	"github.com/stratafs/strata/internal/workspace"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// ExitTimeout is the exit code of a run whose command exceeded --timeout
// (as timeout(1) reports it). The whole PID namespace was killed.
const ExitTimeout = 124

// RunOptions describe a one-shot run: fork, patch, run, report, then
// discard, keep or commit.
type RunOptions struct {
	From      string // REF to fork; default main
	PatchData []byte // a git-style unified diff applied before the command
	PatchName string // where PatchData came from, for messages
	Disk      bool   // upper on disk instead of a tmpfs
	// Backend makes the run's tree (WorkspaceOptions.Backend): a
	// reflink or copy run clones its base on disk.
	Backend string
	// SubIDs maps the user's subordinate ids (WorkspaceOptions.SubIDs);
	// rootless, the caller runs in their namespace (nsexec.EnterSubIDs).
	SubIDs  bool
	Timeout time.Duration
	// Keep leaves the workspace (named in the result) whatever the outcome.
	Keep bool
	// CommitBranch commits the change to this branch when the command
	// exits 0 and the change passes the policy check.
	CommitBranch string
	// Protect lists globs of paths the change must not touch (with
	// CommitBranch); `**` matches across directories.
	Protect []string
	// Output, when set, receives the command's stdout and stderr as files
	// and result.json; otherwise they go to Stdout and Stderr.
	Output  string
	Argv    []string
	Env     []string
	Cwd     string
	Sandbox SandboxOptions
	Stdin   *os.File
	Stdout  *os.File
	Stderr  *os.File
	Warn    func(path, msg string)
	// Root (an image ref) and At run From's tree as a project at At over
	// the image's root; without Root, a run from an image commit is
	// image-rooted by itself. Scope is what its diff and commit cover
	// ("project", default, or "all"). See docs/images.md.
	Root, At, Scope string
}

// check validates the options that need no store and no kernel.
func (opts RunOptions) check() error {
	if len(opts.Argv) == 0 {
		return invalidf("run: no command given")
	}
	if opts.Keep && opts.CommitBranch != "" {
		return invalidf("run: --keep and --commit exclude each other")
	}
	switch {
	case opts.At != "" && opts.Root == "":
		return invalidf("run: --at needs --root IMAGE: the image the project is mounted in")
	case opts.Root != "" && opts.At == "":
		return invalidf("run: --root %s needs --at PATH: where the project appears in the image (e.g. --at /testbed)", opts.Root)
	}
	switch opts.Scope {
	case "", workspace.ScopeProject, workspace.ScopeAll:
	default:
		return invalidf("run: --scope %q: want project or all", opts.Scope)
	}
	// An empty patch is refused like a garbage one (which has no file
	// changes either): running the tests on the unpatched tree would
	// report on a change that is not there.
	if opts.PatchName != "" && len(bytes.TrimSpace(opts.PatchData)) == 0 {
		return invalidf("patch %s is empty: nothing to apply (leave out the patch to run on REF as it is)", opts.PatchName)
	}
	if opts.CommitBranch != "" {
		if err := store.ValidateBranchName(opts.CommitBranch); err != nil {
			return err
		}
	}
	for _, g := range opts.Protect {
		if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
			return invalidf("--protect %q: %v", g, err)
		}
	}
	return workspace.CheckBackend(opts.Backend)
}

// RunResult is the one result object of a run (`run --json`).
type RunResult struct {
	ID        string   `json:"id"`
	From      store.ID `json:"from"`
	ExitCode  int      `json:"exit_code"`
	Signal    string   `json:"signal"` // "SIGKILL" when a signal ended the command, else ""
	TimedOut  bool     `json:"timed_out"`
	Workspace string   `json:"workspace,omitempty"` // kept as
	Commit    store.ID `json:"commit,omitempty"`
	Branch    string   `json:"branch,omitempty"`
	Backend   string   `json:"backend"`
	Diff      DiffStat `json:"diff"`
	// Violations are the policy check's findings; with any, nothing was
	// committed.
	Violations []Violation `json:"policy_violations"` // [] when none: always present
	// Durations of each phase in nanoseconds (runPhases; 0 for a phase
	// that did not happen) and their total.
	Durations map[string]int64 `json:"durations_ns"`
	Output    string           `json:"output,omitempty"`
	Error     string           `json:"error,omitempty"`
}

// runPhases are the phases of a run, in order, as durations_ns names them.
var runPhases = []string{"fork", "patch", "run", "diff", "commit", "discard"}

// DiffStat summarizes a run's change (workspace.DiffStat, field for
// field).
type DiffStat struct {
	Files     int      `json:"files"`
	Added     int      `json:"insertions"`
	Deleted   int      `json:"deletions"`
	Paths     []string `json:"paths,omitempty"`
	Truncated bool     `json:"paths_truncated,omitempty"`
}

// Violation is one path the policy check refused.
type Violation struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Run forks ref into a throwaway workspace, applies a patch, runs a
// command with a timeout (the PID namespace is killed, nothing survives),
// and then discards the workspace, keeps it, or commits its change. The
// returned error is strata's own; the command's outcome is in the result.
func (r *Repo) Run(ctx context.Context, opts RunOptions) (result *RunResult, err error) {
	t0 := time.Now()
	res := &RunResult{ID: randomHex(6), Durations: map[string]int64{}, Violations: []Violation{}}
	for _, p := range runPhases {
		res.Durations[p] = 0 // every phase is reported, 0 when it did not happen
	}
	phase := func(name string, since time.Time) time.Time {
		now := time.Now()
		res.Durations[name] += now.Sub(since).Nanoseconds()
		return now
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	if err := workspace.CheckSubIDs(opts.SubIDs); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	r.ws.CleanRuns(false)
	from := opts.From
	if from == "" {
		from = DefaultBranch
	}
	var base *store.Commit
	var rootOpts *workspace.RootOptions
	var rootTree store.ID
	if err := st.View(ctx, func(tx *store.Tx) error {
		id, err := resolve(tx, from)
		if err != nil {
			return err
		}
		res.From = id
		if base, err = tx.Commit(id); err != nil {
			return err
		}
		rootOpts, rootTree, err = resolveRoot(tx, base, rootRequest{Root: opts.Root, At: opts.At, Scope: opts.Scope})
		return err
	}); err != nil {
		return nil, err
	}
	var root *workspace.Root
	var backend string
	if rootOpts != nil {
		// An image root is an overlay stack (rootBackend).
		if backend, err = rootBackend(opts.Backend); err != nil {
			return nil, err
		}
		if root, err = r.ws.NewRoot(ctx, rootTree, *rootOpts); err != nil {
			return nil, err
		}
		if err := workspace.CheckRootSubIDs(opts.SubIDs); err != nil {
			return nil, err
		}
	} else if backend, err = r.chooseBackend(ctx, opts.Backend, base.Stats, func(m string) { warnf(opts.Warn, m) }); err != nil {
		return nil, err
	}
	res.Backend = backend

	// Fork: a run directory with upper and work, registered by its pid.
	run, err := r.ws.NewRun(res.ID, opts.Disk || workspace.IsPlain(backend))
	if err != nil {
		return nil, err
	}
	if err := run.SetBackend(backend); err != nil {
		run.Discard()
		return nil, err
	}
	if root != nil {
		run.SetRoot(root, opts.SubIDs)
	}
	keepDir := false
	defer func() {
		if !keepDir {
			start := time.Now()
			run.Discard()
			phase("discard", start)
		}
		if result == nil {
			return
		}
		// The total covers every phase, the discard included; result.json
		// is the result the caller gets.
		res.Durations["total"] = time.Since(t0).Nanoseconds()
		if opts.Output != "" {
			b, _ := json.MarshalIndent(res, "", "  ")
			_ = os.WriteFile(filepath.Join(opts.Output, "result.json"), append(b, '\n'), 0o644)
		}
	}()
	if err := run.Prepare(ctx, res.From); err != nil {
		return nil, err
	}
	t := phase("fork", t0)

	if len(opts.PatchData) > 0 {
		if _, err := r.applyPatch(ctx, st, base.Tree, run.Upper, run.PatchDir(), opts.PatchData); err != nil {
			if opts.PatchName != "" {
				err = fmt.Errorf("%s: %w", opts.PatchName, err)
			}
			return nil, err
		}
		t = phase("patch", t)
	}

	cmd, err := run.Command(base.Source, opts.SubIDs, ExecOptions{Argv: opts.Argv, Env: opts.Env, Cwd: opts.Cwd, Sandbox: opts.Sandbox}.command())
	if err != nil {
		return nil, err
	}
	stdin, stdout, stderr := opts.Stdin, opts.Stdout, opts.Stderr
	if opts.Output != "" {
		if err := os.MkdirAll(opts.Output, 0o755); err != nil {
			return nil, err
		}
		if stdout, err = os.Create(filepath.Join(opts.Output, "stdout")); err != nil {
			return nil, err
		}
		defer stdout.Close()
		if stderr, err = os.Create(filepath.Join(opts.Output, "stderr")); err != nil {
			return nil, err
		}
		defer stderr.Close()
		res.Output = opts.Output
	}
	if stdin == nil {
		if stdin, err = os.Open(os.DevNull); err != nil {
			return nil, err
		}
		defer stdin.Close()
	}
	rctx := ctx
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	// The layers are mounted once the command starts; gc keeps them for
	// the run's lifetime through its run.json.
	status, runErr := run.Exec(rctx, cmd, workspace.Stdio{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	t = phase("run", t)
	if runErr != nil && !(rctx.Err() != nil && status.Signal != 0) {
		return nil, runErr
	}
	res.ExitCode = status.Code
	if status.Signal != 0 {
		res.Signal = unix.SignalName(status.Signal)
	}
	if opts.Timeout > 0 && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		res.TimedOut, res.ExitCode = true, ExitTimeout
	}

	ds, changes, err := run.Changes()
	if err != nil {
		return nil, err
	}
	res.Diff = DiffStat(ds)
	t = phase("diff", t)

	switch {
	case opts.CommitBranch != "" && res.ExitCode == 0 && !res.TimedOut:
		owners, err := run.Owners()
		if err != nil {
			return res, err
		}
		if err := r.commitRun(ctx, st, res, base, changes, owners, opts); err != nil {
			return res, err
		}
		t = phase("commit", t)
	case opts.Keep:
		name := "run-" + res.ID
		if err := r.adoptRun(ctx, run, name, base.Source, opts.SubIDs); err != nil {
			return res, err
		}
		keepDir = true
		res.Workspace = name
	}
	return res, nil
}

// commitRun turns a successful run's change into a commit on
// opts.CommitBranch, after the policy check.
func (r *Repo) commitRun(ctx context.Context, st *store.Store, res *RunResult, base *store.Commit, changes []snapshot.UpperChange, owners func(uid, gid uint32) (uint32, uint32), opts RunOptions) error {
	wr, err := st.NewWriter(ctx, "run "+res.ID)
	if err != nil {
		return err
	}
	defer wr.Abort()
	ar, err := snapshot.ApplyUpper(ctx, st, wr, base.Tree, changes, snapshot.ApplyOptions{
		BaseStats: &base.Stats, Warn: opts.Warn, Owners: owners,
	})
	if err != nil {
		return err
	}
	if ar.Tree == base.Tree {
		res.Commit, res.Branch = res.From, opts.CommitBranch
		return r.moveBranchTo(ctx, opts.CommitBranch, res.From)
	}
	if err := wr.Flush(); err != nil { // the policy check reads the new tree
		return err
	}
	diff, err := snapshot.Diff(ctx, st, base.Tree, ar.Tree)
	if err != nil {
		return err
	}
	if vs := policyCheck(diff, opts.Protect); len(vs) > 0 {
		res.Violations = vs
		return &PolicyError{Violations: res.Violations}
	}
	branch := opts.CommitBranch
	return wr.Finish(func(tx *store.Tx) error {
		c := &store.Commit{
			Tree: ar.Tree, Parents: []store.ID{res.From}, Message: "run " + strings.Join(opts.Argv, " "),
			TimeNs: time.Now().UnixNano(), Source: base.Source, Stats: ar.Stats,
		}
		head, err := tx.Ref(branch)
		switch {
		case isNotFound(err):
			head = store.ZeroID
		case err != nil:
			return err
		case head != res.From:
			return fmt.Errorf("branch %q is at %s, not at the run's base %s: %w", branch, head.Short(), res.From.Short(), ErrConflict)
		}
		id, err := tx.CommitOnBranch(c, branch, head, store.Op{Kind: "run-commit", Detail: res.ID})
		if moved := (*store.BranchMovedError)(nil); errors.As(err, &moved) {
			return fmt.Errorf("branch %q moved during the run: %w", branch, moved.Err)
		}
		res.Commit, res.Branch = id, branch
		return err
	})
}

// moveBranchTo makes branch point at id when it does not exist yet (a run
// that changed nothing commits nothing, but --commit BRANCH still names
// its result).
func (r *Repo) moveBranchTo(ctx context.Context, branch string, id store.ID) error {
	return r.update(ctx, func(tx *store.Tx) error {
		head, err := tx.Ref(branch)
		switch {
		case err == nil && head == id:
			return nil
		case err == nil:
			return fmt.Errorf("branch %q is at %s, not at the run's base %s: %w", branch, head.Short(), id.Short(), ErrConflict)
		case !isNotFound(err):
			return err
		}
		return tx.SetRef(branch, store.ZeroID, id)
	})
}

// PolicyError lists the paths a run's change may not touch. Nothing was
// committed.
type PolicyError struct{ Violations []Violation }

func (e *PolicyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the change breaks the policy in %d path(s); nothing was committed:", len(e.Violations))
	for _, v := range e.Violations {
		fmt.Fprintf(&b, "\n  %s: %s", v.Path, v.Reason)
	}
	return b.String()
}

// policyCheck refuses changes to protected paths, and always refuses
// setuid/setgid bits, device nodes and symlinks that point out of the
// tree.
func policyCheck(diff []snapshot.Change, protect []string) []Violation {
	var out []Violation
	for _, c := range diff {
		for _, g := range protect {
			if glob.Match(g, c.Path) {
				out = append(out, Violation{Path: c.Path, Reason: "protected by --protect " + g})
				break
			}
		}
		e := c.New
		if e == nil {
			continue
		}
		// setuid/setgid bits and device nodes: the one policy apply and
		// export strip (snapshot.SpecialReason).
		if reason := snapshot.SpecialReason(c.Old, e); reason != "" {
			out = append(out, Violation{Path: c.Path, Reason: reason})
		}
		if e.Type == store.TypeSymlink && escapes(c.Path, e.Target) {
			out = append(out, Violation{Path: c.Path, Reason: "symlink points out of the tree: " + strconv.Quote(e.Target)})
		}
	}
	return out
}

// escapes reports whether a symlink at p (relative to the root) with
// target leads outside the tree.
func escapes(p, target string) bool {
	if path.IsAbs(target) {
		return true
	}
	j := path.Join(path.Dir(p), target)
	return j == ".." || strings.HasPrefix(j, "../")
}

// adoptRun registers a kept run as a workspace named name.
func (r *Repo) adoptRun(ctx context.Context, run *workspace.Run, name, source string, subIDs bool) error {
	branch := wsBranchPrefix + name
	rec, err := run.Adopt(name, branch, source, subIDs)
	if err != nil {
		return err
	}
	return r.update(ctx, func(tx *store.Tx) error {
		if err := tx.SetRef(branch, store.ZeroID, rec.Base); err != nil {
			return fmt.Errorf("branch %q: %w", branch, err)
		}
		if err := setRootRef(tx, name, rec); err != nil {
			return err
		}
		if err := workspace.Save(tx, rec); err != nil {
			return err
		}
		return tx.AppendOp(store.Op{Kind: "ws-create", Ref: branch, New: rec.Base, Detail: name + " (kept run)"})
	})
}
