package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/snapshot"
	"github.com/stratafs/strata/store"
)

// One-shot runs of the reflink and copy backends: the run directory
// (under the home: a clone must be on the layer cache's filesystem) holds
// the base's tree cloned as upper/ with its stat index in work/; the
// command runs in the run's own namespaces with the tree bound on its
// target, or without namespaces where they are denied; its change is the
// stat-index scan of the tree; discarding it removes the tree (a Btrfs
// subvolume at once where allowed).

// noNSPlan is a command planned to run without namespaces.
type noNSPlan struct {
	spec     nsexec.NoNSSpec
	cmd      nsexec.Command
	warnings []string
}

// SetBackend makes r a run of backend b (before Prepare): overlay ("")
// changes nothing; reflink and copy clone the base into the run
// directory, which must be on the store's filesystem (NewRun with disk).
func (r *Run) SetBackend(b string) error {
	switch {
	case b == "" || b == BackendOverlay:
		return nil
	case !IsPlain(b):
		return Invalidf("run: backend %q: want overlay, reflink or copy", b)
	case !r.Disk:
		return fmt.Errorf("run: a %s run is cloned on the store's filesystem: make it with disk set", b)
	}
	// NewRun made an empty upper; the clone makes the tree there.
	if err := os.Remove(r.Upper); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("run: %w", err)
	}
	r.plain = b
	return nil
}

// Backend is the run's backend.
func (r *Run) Backend() string {
	if r.plain != "" {
		return r.plain
	}
	return BackendOverlay
}

// record is the run as a plain workspace's record (for the lifecycle's
// functions that take one).
func (r *Run) record(source string) *Record {
	return &Record{Name: "run-" + r.ID, Dir: r.Dir, Upper: r.Upper, Work: r.Work, Backend: r.plain, Base: r.base, Source: source}
}

// preparePlain registers the run (its state file, so that gc keeps the
// base's layers while it clones) and clones the base into the tree.
func (r *Run) preparePlain(ctx context.Context, base store.ID) error {
	_, startTicks, _ := procStart(os.Getpid())
	stb, _ := json.Marshal(runState{PID: os.Getpid(), Start: startTicks, Base: base.String()})
	if err := WriteFileAtomic(layout.RunStateFile(r.Dir), stb, false); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	r.base = base
	if _, err := r.m.plainBackend(r.plain).makeTree(ctx, base, r.Upper, r.Work); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return nil
}

// plainCommand plans the command both ways: in the run's namespaces
// (the tree bound on its target) and without any, for where user
// namespaces turn out to be denied.
func (r *Run) plainCommand(source string, subIDs bool, opts CommandOptions) (*Command, error) {
	if subIDs {
		return nil, fmt.Errorf("run: --subids with the %s backend: %w", r.plain, ErrUnsupported)
	}
	rec := r.record(source)
	target, binds := r.m.plainTarget(rec)
	cmd, err := r.m.buildCommand(target, opts)
	if err != nil {
		return nil, err
	}
	nspec, ncmd, warnings, err := r.m.noNSCommand(rec, opts)
	if err != nil {
		return nil, err
	}
	return &Command{
		spec: nsexec.Spec{Name: "run-" + r.ID, Dir: r.Dir, Target: target, Plain: r.Upper, Binds: binds},
		cmd:  cmd, warn: opts.Sandbox.Warn,
		nons: &noNSPlan{spec: nspec, cmd: ncmd, warnings: warnings},
	}, nil
}

// execPlain runs the command in the run's namespaces, or — where user
// namespaces are denied — without.
func (r *Run) execPlain(ctx context.Context, c *Command, io Stdio) (ExitStatus, error) {
	defer r.release()
	status, err := nsexec.Run(ctx, c.spec, c.cmd, io.Stdin, io.Stdout, io.Stderr)
	if err == nil {
		hotpath.HintNotFound(status, c.cmd, c.spec.Target, c.warn)
		return status, nil
	}
	if !r.m.namespacesDenied(ctx, err) {
		return status, err
	}
	if c.warn != nil {
		for _, w := range c.nons.warnings {
			c.warn(w)
		}
	}
	return nsexec.RunNoNS(ctx, c.nons.spec, c.nons.cmd, io.Stdin, io.Stdout, io.Stderr)
}

// plainChanges scans the tree against its index (the base's tree): the
// run's change, and its summary.
func (r *Run) plainChanges() (DiffStat, []snapshot.UpperChange, error) {
	st, err := r.m.DB()
	if err != nil {
		return DiffStat{}, nil, err
	}
	ctx := context.Background()
	scan, idx, err := r.m.plainBackend(r.plain).scan(ctx, st, r.record(""), nil)
	if err != nil {
		return DiffStat{}, nil, fmt.Errorf("run: reading the change: %w", err)
	}
	return plainDiffStat(ctx, st, idx.Base, scan.Changes), scan.Changes, nil
}

// plainDiffStat counts a plain tree's change: changed files and, for
// text files, inserted and deleted lines against the base tree's
// version (read from the store), as diffStat does for an upper.
func plainDiffStat(ctx context.Context, st *store.Store, base store.ID, changes []snapshot.UpperChange) DiffStat {
	var ds DiffStat
	content := func(e *store.TreeEntry) []byte {
		switch {
		case e.Type == store.TypeSymlink:
			return []byte(e.Target)
		case e.Type != store.TypeFile || e.Size >= 8<<20:
			return nil
		}
		var b bytes.Buffer
		if _, err := st.ReadContentTo(ctx, e.Content, &b); err != nil {
			return nil
		}
		return b.Bytes()
	}
	for _, c := range changes {
		var old *store.TreeEntry
		if c.Kind != snapshot.UpperAdded {
			old, _ = snapshot.Lookup(ctx, st, base, c.Path)
		}
		wasFile := old != nil && (old.Type == store.TypeFile || old.Type == store.TypeSymlink)
		var fi unix.Stat_t
		isFile := c.Kind != snapshot.UpperDeleted && unix.Lstat(c.UpperPath, &fi) == nil &&
			(fi.Mode&unix.S_IFMT == unix.S_IFREG || fi.Mode&unix.S_IFMT == unix.S_IFLNK)
		if !isFile && !wasFile {
			continue
		}
		var a, b []byte
		if wasFile {
			a = content(old)
		}
		if isFile {
			switch {
			case fi.Mode&unix.S_IFMT == unix.S_IFLNK:
				t, _ := os.Readlink(c.UpperPath)
				b = []byte(t)
			case fi.Size < 8<<20:
				b, _ = os.ReadFile(c.UpperPath)
			}
		}
		if wasFile && isFile && c.Kind == snapshot.UpperModified && fi.Mode&unix.S_IFMT == unix.S_IFREG &&
			old.Type == store.TypeFile && old.Size == fi.Size && a != nil && bytes.Equal(a, b) {
			continue // touched, or its mode changed: no change of content
		}
		ds.add(c.Path, a, b)
	}
	return ds
}

// adoptPlain turns the run into workspace name (--keep): its tree and
// work directory move into the workspace directory (one filesystem: the
// run was on disk), the stat index with them.
func (r *Run) adoptPlain(name, branch, source string) (*Record, error) {
	wsdir := r.m.Layout.Workspace(name)
	if err := mkdirs(0o700, layout.MergedDir(wsdir)); err != nil {
		return nil, err
	}
	upper, work := filepath.Join(wsdir, layout.Upper), filepath.Join(wsdir, layout.Work)
	if err := os.Rename(r.Upper, upper); err != nil {
		return nil, err
	}
	if err := os.Rename(r.Work, work); err != nil {
		return nil, err
	}
	_ = RemoveAll(r.Dir)
	return &Record{
		Name: name, Branch: branch, Base: r.base, Dir: wsdir, CreatedNs: time.Now().UnixNano(),
		Backend: r.plain, Upper: upper, Work: work, Source: source,
		CreatedBranch: true, Fork: r.base.String(), MountBase: r.base.String(),
	}, nil
}

// isPlainTree reports whether upper is a plain workspace's (or run's)
// tree rather than an overlay's upper: the work directory beside it
// (work for upper, work.R for upper.R) holds its stat index.
func isPlainTree(upper string) bool {
	dir, name := filepath.Split(filepath.Clean(upper))
	suffix, ok := strings.CutPrefix(name, layout.Upper)
	if !ok || (suffix != "" && suffix[0] != '.') {
		return false
	}
	work := layout.Work + suffix
	fi, err := os.Lstat(filepath.Join(dir, work, plainIndexName))
	return err == nil && fi.Mode().IsRegular()
}
