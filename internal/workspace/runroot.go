package workspace

import (
	"context"
	"os"
	"path/filepath"

	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/store"
)

// Image-rooted one-shot runs (`run --from IMAGE`, `run --root IMAGE --at
// PATH`, batch jobs with "root"): the run's upper is the root's (or, on an
// environment, the project's, with a root upper beside it in the run
// directory, discarded with it).

// SetRoot makes the run image-rooted (before Prepare); subIDs as the
// run's. root comes from Manager.NewRoot.
func (r *Run) SetRoot(root *Root, subIDs bool) {
	r.root, r.subIDs = root, subIDs
	if root.OnEnv() {
		root.Upper, root.Work = filepath.Join(r.Dir, layout.RootUpper), filepath.Join(r.Dir, layout.RootWork)
	}
}

// Root is the run's root (nil: the host view).
func (r *Run) Root() *Root { return r.root }

// prepareRoot is Prepare for an image-rooted run: the stacks, and the
// uppers ready to mount.
func (r *Run) prepareRoot(ctx context.Context, base store.ID) error {
	var err error
	if r.root.OnEnv() {
		if r.lowers, err = r.m.LayerStack(ctx, base); err != nil {
			return err
		}
		if r.rootLowers, err = r.m.rootStack(ctx, r.root.ImageID(), r.subIDs); err != nil {
			return err
		}
		if err := readyUpper(r.root.Upper, r.root.Work, r.rootLowers); err != nil {
			return err
		}
	} else if r.lowers, err = r.m.rootStack(ctx, base, r.subIDs); err != nil {
		return err
	}
	if r.feat, err = r.m.Features(ctx); err != nil {
		return err
	}
	r.base = base
	return readyUpper(r.Upper, r.Work, r.lowers)
}

// rootCommand builds the spec and command of an image-rooted run: the
// image's resolv.conf and hosts unless the command uses the host's
// network, the command's binds captured when the run starts (their mount
// points come from the root's init layer: nothing lands in the upper).
func (r *Run) rootCommand(subIDs bool, opts CommandOptions) (*Command, error) {
	root := r.root
	cmd, err := r.m.rootCommand(&rootFile{Cwd: root.Cwd, Env: root.Env}, opts)
	if err != nil {
		return nil, err
	}
	cmd.Binds = append(append([]Bind(nil), root.Binds...), cmd.Binds...)
	cmd.View = cmd.View || len(cmd.Binds) > 0
	spec := nsexec.Spec{
		Name: "run-" + r.ID, Dir: r.Dir, Target: root.Target(), Features: r.feat,
		Volatile: !r.Disk, SubIDs: subIDs,
		Root: &nsexec.Root{Lowers: r.lowers, Upper: r.Upper, Work: r.Work, HostNet: !cmd.NetNone, User: root.User},
	}
	if root.OnEnv() {
		spec.Lowers, spec.Upper, spec.Work = r.lowers, r.Upper, r.Work
		spec.Root.Lowers, spec.Root.Upper, spec.Root.Work = r.rootLowers, root.Upper, root.Work
	}
	return &Command{spec: spec, cmd: cmd, warn: opts.Sandbox.Warn}, nil
}

// Owners maps the owners of the run's upper to the ones a commit records
// (nil: as they are): an image root's, when the run is its own root.
func (r *Run) Owners() (func(uid, gid uint32) (uint32, uint32), error) {
	if r.root == nil || r.root.OnEnv() {
		return nil, nil
	}
	return RootOwners(r.subIDs)
}

// PatchDir is where a patch given to the run applies, relative to its
// upper: the project directory of a run that is its own root ("" the
// upper's root).
func (r *Run) PatchDir() string { return r.root.projectRel() }

// adoptRoot gives a kept run's record its root: the root upper moves with
// the run's (dir is where the run's files are now), and the workspace
// directory gets its root file.
func (r *Run) adoptRoot(rec *Record, dir string) error {
	root := *r.root
	if root.OnEnv() {
		if r.Disk {
			wsdir := rec.Dir
			for _, n := range []string{layout.RootUpper, layout.RootWork} {
				if err := os.Rename(filepath.Join(dir, n), filepath.Join(wsdir, n)); err != nil {
					return err
				}
			}
			dir = wsdir
		}
		root.Upper, root.Work = filepath.Join(dir, layout.RootUpper), filepath.Join(dir, layout.RootWork)
	}
	rec.Root = &root
	return writeRootFile(rec.Dir, &root)
}
