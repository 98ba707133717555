package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stratafs/strata/internal/textdiff"
	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/overlayfs"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// StaleAfter is how old a leftover of an interrupted strata (a workspace
// being created, a tmpfs upper without a workspace, a run directory
// without a state file) must be before it is removed: an operation in
// flight in another process is younger.
const StaleAfter = 10 * time.Minute

// runState is what a run leaves in its directory while it is alive, so
// that gc keeps its layers and a later run or gc can clean up after a run
// that was killed.
type runState struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	Base  string `json:"base"`
	// Root is the environment commit of a project run on one (--root).
	Root string `json:"root,omitempty"`
}

// Run is a one-shot run's directory: an upper and work over its base's
// layer stack, and a state file naming its process and base (runs have
// no registry record). Its keeper runs one command and exits.
type Run struct {
	ID, Dir, Upper, Work string
	Disk                 bool // on the store's filesystem, not the tmpfs
	m                    *Manager
	base                 store.ID
	lowers               []string
	feat                 overlayfs.Features
	unlock               func()
	// An image-rooted run (SetRoot, runroot.go).
	root       *Root
	subIDs     bool
	rootLowers []string
	// The reflink or copy backend (plainrun.go); "" is overlay.
	plain string
}

// NewRun makes the directory of run id: in the tmpfs directory, or with
// disk under the home. The caller removes it with Discard unless it keeps
// it (Adopt).
func (m *Manager) NewRun(id string, disk bool) (*Run, error) {
	if !disk {
		if err := m.markTmpfsRoot(); err != nil {
			return nil, fmt.Errorf("run: tmpfs: %w", err)
		}
	}
	dir := m.Layout.Run(disk, id)
	r := &Run{ID: id, Dir: dir, Upper: filepath.Join(dir, layout.Upper), Work: filepath.Join(dir, layout.Work), Disk: disk, m: m}
	if err := mkdirs(0o700, r.Upper, r.Work); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	return r, nil
}

// Prepare registers the run by its pid and base (so that gc keeps its
// layers and a sweep knows it alive), and makes base's layer stack ready
// under the layer lock, which the run holds until its command has ended.
func (r *Run) Prepare(ctx context.Context, base store.ID) error {
	if r.plain != "" {
		return r.preparePlain(ctx, base)
	}
	_, startTicks, _ := procStart(os.Getpid())
	rs := runState{PID: os.Getpid(), Start: startTicks, Base: base.String()}
	if r.root.OnEnv() {
		rs.Root = r.root.Image
	}
	stb, _ := json.Marshal(rs)
	// Atomically (rename): a concurrent sweep must never read it half
	// written, which would look like a dead run.
	if err := WriteFileAtomic(layout.RunStateFile(r.Dir), stb, false); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	unlock, err := r.m.LayerLock(false)
	if err != nil {
		return err
	}
	r.unlock = unlock
	if r.root != nil {
		return r.prepareRoot(ctx, base)
	}
	if r.lowers, err = r.m.LayerStack(ctx, base); err != nil {
		return err
	}
	if r.feat, err = r.m.Features(ctx); err != nil {
		return err
	}
	r.base = base
	if len(r.lowers) > 0 {
		_ = CopyDirAttrs(r.lowers[0], r.Upper)
	}
	return nil
}

// release releases the layer lock (once the layers are mounted, the
// run's state file keeps them).
func (r *Run) release() {
	if r.unlock != nil {
		r.unlock()
		r.unlock = nil
	}
}

// Discard removes the run's directory.
func (r *Run) Discard() {
	r.release()
	if r.plain != "" {
		_ = RemoveAll(r.Upper) // a subvolume goes at once where Btrfs allows it
	}
	_ = RemoveAll(r.Dir)
}

// Command is a command ready to start in a run.
type Command struct {
	spec nsexec.Spec
	cmd  nsexec.Command
	warn func(string)
	nons *noNSPlan // a plain run's command where user namespaces are denied
}

// Command builds the run's spec (source is its base's Source) and the
// command to run in it.
func (r *Run) Command(source string, subIDs bool, opts CommandOptions) (*Command, error) {
	if r.root != nil {
		return r.rootCommand(subIDs, opts)
	}
	if r.plain != "" {
		return r.plainCommand(source, subIDs, opts)
	}
	spec := r.m.buildSpec(mount{
		Name: "run-" + r.ID, Dir: r.Dir, Lowers: r.lowers, Upper: r.Upper, Work: r.Work,
		Source: source, Volatile: !r.Disk, SubIDs: subIDs,
	}, r.feat)
	if spec.Target == layout.MergedDir(r.Dir) {
		_ = os.MkdirAll(spec.Target, 0o700)
	}
	cmd, err := r.m.buildCommand(spec.Target, opts)
	if err != nil {
		return nil, err
	}
	return &Command{spec: spec, cmd: cmd, warn: opts.Sandbox.Warn}, nil
}

// Exec runs c in its own namespaces: PID 1 runs the command and exits
// with its status; ctx's end kills it, and everything in the run with it.
func (r *Run) Exec(ctx context.Context, c *Command, io Stdio) (ExitStatus, error) {
	if r.plain != "" {
		return r.execPlain(ctx, c, io)
	}
	status, err := nsexec.Run(ctx, c.spec, c.cmd, io.Stdin, io.Stdout, io.Stderr)
	r.release()
	if err == nil && r.root == nil {
		hotpath.HintNotFound(status, c.cmd, c.spec.Target, c.warn)
	}
	return status, err
}

// Changes reads what the run changed: its summary, and the changes to
// apply to its base's tree.
func (r *Run) Changes() (DiffStat, []snapshot.UpperChange, error) {
	if r.plain != "" {
		return r.plainChanges()
	}
	changes, err := overlayfs.Changes(r.Upper, r.lowers, Flavour())
	if err != nil {
		return DiffStat{}, nil, fmt.Errorf("run: reading the change: %w", err)
	}
	if rel := r.root.projectRel(); rel != "" {
		kept := changes[:0:0]
		for _, c := range changes {
			if inScope(c.Path, rel) {
				kept = append(kept, c)
			}
		}
		changes = kept
	}
	return diffStat(changes), UpperChanges(changes), nil
}

// Adopt turns the run into workspace name: its upper and work move to
// where a workspace's live (the workspace directory, or the tmpfs
// directory). It returns the record to register; base's Source is source.
func (r *Run) Adopt(name, branch, source string, subIDs bool) (*Record, error) {
	if r.plain != "" {
		return r.adoptPlain(name, branch, source)
	}
	m := r.m
	wsdir := m.Layout.Workspace(name)
	if err := mkdirs(0o700, layout.MergedDir(wsdir)); err != nil {
		return nil, err
	}
	dir, upper, work := r.Dir, r.Upper, r.Work
	if r.Disk {
		// A disk run moves into the workspace directory.
		if err := os.Rename(upper, filepath.Join(wsdir, layout.Upper)); err != nil {
			return nil, err
		}
		if err := os.Rename(work, filepath.Join(wsdir, layout.Work)); err != nil {
			return nil, err
		}
		upper, work = filepath.Join(wsdir, layout.Upper), filepath.Join(wsdir, layout.Work)
		defer os.RemoveAll(dir)
	} else {
		// A tmpfs run moves out of runs/, which sweeps remove, to where
		// tmpfs workspaces live (the same filesystem: a rename).
		tdir := m.Layout.TmpfsWorkspace(name)
		_ = RemoveAll(tdir) // a leftover of a removed workspace of that name
		if err := os.Rename(dir, tdir); err != nil {
			return nil, err
		}
		dir = tdir
		upper, work = filepath.Join(tdir, layout.Upper), filepath.Join(tdir, layout.Work)
	}
	_ = os.Remove(layout.RunStateFile(dir))
	rec := &Record{
		Name: name, Branch: branch, Base: r.base, Dir: wsdir, CreatedNs: time.Now().UnixNano(),
		Backend: BackendOverlay, Upper: upper, Work: work, Tmpfs: !r.Disk, SubIDs: subIDs, Source: source,
		CreatedBranch: true, Fork: r.base.String(), MountBase: r.base.String(),
	}
	if r.root != nil {
		if err := r.adoptRoot(rec, dir); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// DiffStat summarizes a run's change (the root package's DiffStat).
type DiffStat struct {
	Files     int      `json:"files"`
	Added     int      `json:"insertions"`
	Deleted   int      `json:"deletions"`
	Paths     []string `json:"paths,omitempty"`
	Truncated bool     `json:"paths_truncated,omitempty"`
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
		var a, b []byte
		if wasFile && c.Lower.Mode.IsRegular() && c.Lower.Size < 8<<20 {
			a, _ = os.ReadFile(c.LowerPath)
		}
		if isFile && c.Stat.Mode.IsRegular() && c.Stat.Size < 8<<20 {
			b, _ = os.ReadFile(c.UpperPath)
		}
		ds.add(c.Path, a, b)
	}
	return ds
}

// add counts one changed file at path, a and b its old and new content
// (nil when absent, a directory or too large to read): its lines when
// both are text.
func (ds *DiffStat) add(path string, a, b []byte) {
	ds.Files++
	if len(ds.Paths) < 100 {
		ds.Paths = append(ds.Paths, path)
	} else {
		ds.Truncated = true
	}
	if textdiff.IsBinary(a) || textdiff.IsBinary(b) {
		return
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

// sweeper decides which run and tmpfs directories are garbage. Its clock
// and its test of a run's liveness are fields, for tests.
type sweeper struct {
	l     layout.Layout
	now   func() time.Time
	alive func(runState) bool
	// missing reports whether a path does not exist, answering within d.
	missing func(p string, d time.Duration) bool
}

func (m *Manager) sweeper() *sweeper {
	return &sweeper{l: m.Layout, now: time.Now, alive: runAlive, missing: missingWithin}
}

// CleanRuns removes the directories of runs whose process is gone (a run
// killed with SIGKILL): cheap enough to do at the start of every run. The
// tmpfs runs of every store of this user are swept, not only this one's:
// a dead run is garbage whatever its store, and a store that was deleted
// would otherwise leave its killed runs in memory until reboot. (Empty
// directories stay: removing one could race with a run being created.)
// The other stores' runs are swept with all (gc), and by a run at most
// once every sweepEvery (a marker's mtime says when): looking through
// every store's tmpfs directory cost a millisecond a run.
func (m *Manager) CleanRuns(all bool) { m.sweeper().cleanRuns(all) }

func (s *sweeper) cleanRuns(all bool) {
	mine := s.l.Runs(false)
	roots := []string{s.l.Runs(true), mine}
	if all || s.sweepDue() {
		s.sweepDeletedStores()
		others, _ := filepath.Glob(filepath.Join(s.l.TmpfsUser(), "*", layout.RunsName))
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
			st, ok := readRunState(d)
			if ok && s.alive(st) {
				continue
			}
			// A run without a readable state file is either being set up
			// right now or was killed before writing it: only old ones go.
			if !ok && changedWithin(d, StaleAfter, s.now()) {
				continue
			}
			_ = Stop(context.Background(), d)
			_ = RemoveAll(d)
		}
	}
}

// sweepDeletedStores removes the tmpfs directories of this user's stores
// that no longer exist (their database is gone), with their kept tmpfs
// workspaces and dead runs, which would otherwise hold memory until
// reboot. A directory touched in the last two seconds stays: a store
// created again at the same path (its database is new) may be starting to
// use it.
func (s *sweeper) sweepDeletedStores() {
	dirs, _ := filepath.Glob(filepath.Join(s.l.TmpfsUser(), "*", layout.TmpfsOwner))
	for _, marker := range dirs {
		d := filepath.Dir(marker)
		home, err := os.ReadFile(marker)
		if err != nil || d == s.l.Tmpfs() {
			continue
		}
		if !s.missing(layout.New(string(home)).DB(), time.Second) {
			continue
		}
		now := s.now()
		if changedWithin(d, 2*time.Second, now) || changedWithin(filepath.Join(d, layout.RunsName), 2*time.Second, now) {
			continue
		}
		_ = RemoveAll(d)
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

// sweepEvery bounds how often a run sweeps other stores' dead runs.
const sweepEvery = time.Minute

// sweepDue reports whether this user's last sweep of every store's runs is
// older than sweepEvery, and if so marks one as started now.
func (s *sweeper) sweepDue() bool {
	marker := filepath.Join(s.l.TmpfsUser(), layout.SweepMarker)
	now := s.now()
	if fi, err := os.Stat(marker); err == nil && now.Sub(fi.ModTime()) < sweepEvery {
		return false
	}
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
	b, err := os.ReadFile(layout.RunStateFile(dir))
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

// LiveRunBases lists the base commits of the runs in progress, for gc.
func (m *Manager) LiveRunBases() []store.ID { return m.sweeper().liveRunBases() }

func (s *sweeper) liveRunBases() []store.ID {
	var out []store.ID
	for _, root := range []string{s.l.Runs(false), s.l.Runs(true)} {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			d := filepath.Join(root, e.Name())
			st, ok := readRunState(d)
			if !ok || !s.alive(st) {
				continue
			}
			if id, err := store.ParseID(st.Base); err == nil {
				out = append(out, id)
			}
			if id, err := store.ParseID(st.Root); err == nil {
				out = append(out, id)
			}
		}
	}
	return out
}

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
