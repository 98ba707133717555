package strata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/glob"
	"github.com/stratafs/strata/internal/textdiff"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
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
}

// check validates the options that need no store and no kernel.
func (opts RunOptions) check() error {
	if len(opts.Argv) == 0 {
		return invalidf("run: no command given")
	}
	if opts.Keep && opts.CommitBranch != "" {
		return invalidf("run: --keep and --commit exclude each other")
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
	return nil
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

// DiffStat summarizes a run's change.
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

// runState is what a run leaves in its directory while it is alive, so
// that gc keeps its layers and a later run or gc can clean up after a run
// that was killed.
type runState struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	Base  string `json:"base"`
}

const (
	runsDir      = "runs"
	runStateFile = "run.json"
)

// runsRoot is where runs keep their upper and work: the per-store tmpfs
// directory, or the store itself for --disk runs.
func (r *Repo) runsRoot(disk bool) string {
	if disk {
		return filepath.Join(r.home, runsDir)
	}
	return filepath.Join(r.tmpfsRoot(), runsDir)
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
	if err := checkSubIDs(opts.SubIDs); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	st, err := r.db()
	if err != nil {
		return nil, err
	}
	r.cleanRuns(false)
	from := opts.From
	if from == "" {
		from = DefaultBranch
	}
	var base *store.Commit
	if err := st.View(ctx, func(tx *store.Tx) error {
		id, err := resolve(tx, from)
		if err != nil {
			return err
		}
		res.From = id
		base, err = tx.Commit(id)
		return err
	}); err != nil {
		return nil, err
	}

	// Fork: a run directory with upper and work, registered by its pid.
	if !opts.Disk {
		if err := r.markTmpfsRoot(); err != nil {
			return nil, fmt.Errorf("run: tmpfs: %w", err)
		}
	}
	dir := filepath.Join(r.runsRoot(opts.Disk), res.ID)
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	if err := mkdirs(0o700, upper, work); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	keepDir := false
	defer func() {
		if !keepDir {
			start := time.Now()
			_ = removeAll(dir)
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
	_, startTicks, _ := procSelfStart()
	stb, _ := json.Marshal(runState{PID: os.Getpid(), Start: startTicks, Base: res.From.String()})
	// Atomically (rename): a concurrent sweep must never read it half
	// written, which would look like a dead run.
	if err := writeFileAtomic(filepath.Join(dir, runStateFile), stb, false); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	unlock, err := r.layerLock(false)
	if err != nil {
		return nil, err
	}
	lowers, err := r.layerStack(ctx, res.From)
	if err != nil {
		unlock()
		return nil, err
	}
	feat, err := r.features(ctx)
	if err != nil {
		unlock()
		return nil, err
	}
	if len(lowers) > 0 {
		_ = copyDirAttrs(lowers[0], upper)
	}
	t := phase("fork", t0)

	if len(opts.PatchData) > 0 {
		if _, err := r.applyPatch(ctx, st, base.Tree, upper, opts.PatchData); err != nil {
			unlock()
			if opts.PatchName != "" {
				err = fmt.Errorf("%s: %w", opts.PatchName, err)
			}
			return nil, err
		}
		t = phase("patch", t)
	}

	spec := nsexec.Spec{
		Name: "run-" + res.ID, Dir: dir, Lowers: lowers, Upper: upper, Work: work,
		Target: mountTarget(dir, base.Source), Features: feat, Volatile: !opts.Disk,
		Binds: gitBinds(base.Source), SubIDs: opts.SubIDs,
	}
	if spec.Target == filepath.Join(dir, "merged") {
		_ = os.MkdirAll(spec.Target, 0o700)
	}
	cmd, err := r.buildCommand(spec.Target, ExecOptions{Argv: opts.Argv, Env: opts.Env, Cwd: opts.Cwd, Sandbox: opts.Sandbox})
	if err != nil {
		unlock()
		return nil, err
	}
	stdin, stdout, stderr := opts.Stdin, opts.Stdout, opts.Stderr
	if opts.Output != "" {
		if err := os.MkdirAll(opts.Output, 0o755); err != nil {
			unlock()
			return nil, err
		}
		if stdout, err = os.Create(filepath.Join(opts.Output, "stdout")); err != nil {
			unlock()
			return nil, err
		}
		defer stdout.Close()
		if stderr, err = os.Create(filepath.Join(opts.Output, "stderr")); err != nil {
			unlock()
			return nil, err
		}
		defer stderr.Close()
		res.Output = opts.Output
	}
	if stdin == nil {
		if stdin, err = os.Open(os.DevNull); err != nil {
			unlock()
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
	// The layers are mounted once Run starts the command; gc keeps them
	// for the run's lifetime through its run.json.
	status, runErr := nsexec.Run(rctx, spec, cmd, stdin, stdout, stderr)
	unlock()
	if runErr == nil {
		hintNotFound(status, cmd, spec.Target, opts.Sandbox.Warn)
	}
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

	flavour := overlayfs.FlavourUser
	if nsexec.RealRoot() {
		flavour = overlayfs.FlavourTrusted
	}
	changes, err := overlayfs.Changes(upper, lowers, flavour)
	if err != nil {
		return nil, fmt.Errorf("run: reading the change: %w", err)
	}
	res.Diff = diffStat(changes)
	t = phase("diff", t)

	switch {
	case opts.CommitBranch != "" && res.ExitCode == 0 && !res.TimedOut:
		if err := r.commitRun(ctx, st, res, base, upper, changes, opts); err != nil {
			return res, err
		}
		t = phase("commit", t)
	case opts.Keep:
		name := "run-" + res.ID
		if err := r.adoptRun(ctx, name, res.From, base.Source, dir, upper, work, !opts.Disk, opts.SubIDs); err != nil {
			return res, err
		}
		keepDir = true
		res.Workspace = name
	}
	return res, nil
}

// diffStat counts a change from the upper directory alone: changed files
// and, for text files, inserted and deleted lines against the file beneath.
func diffStat(changes []overlayfs.Change) DiffStat {
	var ds DiffStat
	for _, c := range changes {
		isFile := c.Stat.Mode.IsRegular() || c.Stat.Mode&fs.ModeSymlink != 0
		wasFile := c.Lower != nil && (c.Lower.Mode.IsRegular() || c.Lower.Mode&fs.ModeSymlink != 0)
		if c.Kind == overlayfs.Deleted {
			isFile = false
		}
		if !isFile && !wasFile {
			continue
		}
		if c.Kind == overlayfs.Modified && c.Stat.Mode.IsRegular() {
			if eq, err := c.ContentEqual(); err == nil && eq {
				continue
			}
		}
		ds.Files++
		if len(ds.Paths) < 100 {
			ds.Paths = append(ds.Paths, c.Path)
		} else {
			ds.Truncated = true
		}
		var a, b []byte
		if wasFile && c.Lower.Mode.IsRegular() && c.Lower.Size < 8<<20 {
			a, _ = os.ReadFile(c.LowerPath)
		}
		if isFile && c.Stat.Mode.IsRegular() && c.Stat.Size < 8<<20 {
			b, _ = os.ReadFile(c.UpperPath)
		}
		if textdiff.IsBinary(a) || textdiff.IsBinary(b) {
			continue
		}
		for _, op := range textdiff.Lines(a, b) {
			switch op.Kind {
			case textdiff.Insert:
				ds.Added += op.N
			case textdiff.Delete:
				ds.Deleted += op.N
			}
		}
	}
	return ds
}

// commitRun turns a successful run's change into a commit on
// opts.CommitBranch, after the policy check.
func (r *Repo) commitRun(ctx context.Context, st *store.Store, res *RunResult, base *store.Commit, upper string, changes []overlayfs.Change, opts RunOptions) error {
	wr, err := st.NewWriter(ctx, "run "+res.ID)
	if err != nil {
		return err
	}
	defer wr.Abort()
	ar, err := snapshot.ApplyUpper(ctx, st, wr, base.Tree, upperChanges(changes), snapshot.ApplyOptions{
		BaseStats: &base.Stats, Warn: opts.Warn,
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
func (r *Repo) adoptRun(ctx context.Context, name string, base store.ID, source, dir, upper, work string, tmpfs, subIDs bool) error {
	wsdir := r.wsDir(name)
	if err := mkdirs(0o700, filepath.Join(wsdir, "merged")); err != nil {
		return err
	}
	if !tmpfs {
		// A disk run moves into the workspace directory.
		if err := os.Rename(upper, filepath.Join(wsdir, "upper")); err != nil {
			return err
		}
		if err := os.Rename(work, filepath.Join(wsdir, "work")); err != nil {
			return err
		}
		upper, work = filepath.Join(wsdir, "upper"), filepath.Join(wsdir, "work")
		defer os.RemoveAll(dir)
	} else {
		// A tmpfs run moves out of runs/, which cleanRuns sweeps, to where
		// tmpfs workspaces live (the same filesystem: a rename).
		tdir := filepath.Join(r.tmpfsRoot(), name)
		_ = removeAll(tdir) // a leftover of a removed workspace of that name
		if err := os.Rename(dir, tdir); err != nil {
			return err
		}
		dir = tdir
		upper, work = filepath.Join(tdir, "upper"), filepath.Join(tdir, "work")
	}
	_ = os.Remove(filepath.Join(dir, runStateFile))
	x := wsExtra{Upper: upper, Work: work, Tmpfs: tmpfs, SubIDs: subIDs, Source: source, Fork: base.String(), MountBase: base.String()}
	extra, _ := json.Marshal(x)
	branch := wsBranchPrefix + name
	return r.update(ctx, func(tx *store.Tx) error {
		if err := tx.SetRef(branch, store.ZeroID, base); err != nil {
			return fmt.Errorf("branch %q: %w", branch, err)
		}
		x.Created = true
		extra, _ = json.Marshal(x)
		if err := tx.PutWorkspace(&store.Workspace{Name: name, Branch: branch, Base: base, Dir: wsdir, CreatedNs: time.Now().UnixNano(), Extra: extra}); err != nil {
			return err
		}
		return tx.AppendOp(store.Op{Kind: "ws-create", Ref: branch, New: base, Detail: name + " (kept run)"})
	})
}

// cleanRuns removes the directories of runs whose process is gone (a run
// killed with SIGKILL): cheap enough to do at the start of every run. The
// tmpfs runs of every store of this user are swept, not only this one's:
// a dead run is garbage whatever its store, and a store that was deleted
// would otherwise leave its killed runs in memory until reboot. (Empty
// directories stay: removing one could race with a run being created.)
// The other stores' runs are swept by gc, and by a run at most once every
// sweepEvery (a marker's mtime says when): looking through every store's
// tmpfs directory cost a millisecond a run.
func (r *Repo) cleanRuns(all bool) {
	mine := r.runsRoot(false)
	roots := []string{r.runsRoot(true), mine}
	if all || r.sweepDue() {
		r.sweepDeletedStores()
		others, _ := filepath.Glob(filepath.Join(filepath.Dir(r.tmpfsRoot()), "*", runsDir))
		for _, o := range others {
			if o != mine {
				roots = append(roots, o)
			}
		}
	}
	for _, root := range roots {
		ents, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range ents {
			d := filepath.Join(root, e.Name())
			s, ok := readRunState(d)
			if ok && runAlive(s) {
				continue
			}
			// A run without a readable state file is either being set up
			// right now or was killed before writing it: only old ones go.
			if !ok && recentlyChanged(d, staleAfter) {
				continue
			}
			_ = nsexec.StopKeeper(context.Background(), d)
			_ = removeAll(d)
		}
	}
}

// sweepDeletedStores removes the tmpfs directories of this user's stores
// that no longer exist (their database is gone), with their kept tmpfs
// workspaces and dead runs, which would otherwise hold memory until
// reboot. A directory touched in the last two seconds stays: a store
// created again at the same path (its database is new) may be starting to
// use it.
func (r *Repo) sweepDeletedStores() {
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(r.tmpfsRoot()), "*", tmpfsOwner))
	for _, marker := range dirs {
		d := filepath.Dir(marker)
		home, err := os.ReadFile(marker)
		if err != nil || d == r.tmpfsRoot() {
			continue
		}
		if !missingWithin(filepath.Join(string(home), dbName), time.Second) {
			continue
		}
		if recentlyChanged(d, 2*time.Second) || recentlyChanged(filepath.Join(d, runsDir), 2*time.Second) {
			continue
		}
		_ = removeAll(d)
	}
}

// missingWithin reports whether p does not exist, as a stat answers
// within d. Another store's home may sit on a filesystem that no longer
// answers (a hung NFS or FUSE mount): its stat would block this command
// for good, so after d the store is taken as present and left alone.
func missingWithin(p string, d time.Duration) bool {
	answer := make(chan bool, 1)
	go func() {
		_, err := os.Stat(p)
		answer <- errors.Is(err, fs.ErrNotExist)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case missing := <-answer:
		return missing
	case <-t.C:
		return false
	}
}

// recentlyChanged reports whether p's metadata changed within d.
func recentlyChanged(p string, d time.Duration) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && time.Since(time.Unix(st.Ctim.Unix())) < d
}

// sweepEvery bounds how often a run sweeps other stores' dead runs.
const sweepEvery = time.Minute

// sweepDue reports whether this user's last sweep of every store's runs is
// older than sweepEvery, and if so marks one as started now.
func (r *Repo) sweepDue() bool {
	marker := filepath.Join(filepath.Dir(r.tmpfsRoot()), ".swept")
	var st unix.Stat_t
	if unix.Stat(marker, &st) == nil && time.Since(time.Unix(st.Mtim.Unix())) < sweepEvery {
		return false
	}
	now := time.Now()
	if err := os.Chtimes(marker, now, now); err != nil {
		if os.MkdirAll(filepath.Dir(marker), 0o700) != nil {
			return false
		}
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return false
		}
		f.Close()
	}
	return true
}

// readRunState reads the state file of the run in dir.
func readRunState(dir string) (runState, bool) {
	var s runState
	b, err := os.ReadFile(filepath.Join(dir, runStateFile))
	if err != nil || json.Unmarshal(b, &s) != nil || s.PID <= 0 {
		return s, false
	}
	return s, true
}

// runAlive reports whether the run of state s still has its process.
func runAlive(s runState) bool {
	_, start, err := procStart(s.PID)
	return err == nil && start == s.Start
}

// liveRunBases lists the base commits of the runs in progress, for gc.
func (r *Repo) liveRunBases() []store.ID {
	var out []store.ID
	for _, root := range []string{r.runsRoot(false), r.runsRoot(true)} {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			d := filepath.Join(root, e.Name())
			s, ok := readRunState(d)
			if !ok || !runAlive(s) {
				continue
			}
			if id, err := store.ParseID(s.Base); err == nil {
				out = append(out, id)
			}
		}
	}
	return out
}

func procSelfStart() (int, uint64, error) { return procStart(os.Getpid()) }

// procStart reads a process's start time (clock ticks after boot), which
// tells it from a later process reusing its pid. A process that has
// exited but is not reaped yet (a zombie) is not there.
func procStart(pid int) (int, uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return pid, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return pid, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return pid, 0, errors.New("malformed stat")
	}
	if f[0] == "Z" || f[0] == "X" {
		return pid, 0, fmt.Errorf("process %d has exited", pid)
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return pid, v, err
}
