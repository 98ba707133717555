package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/internal/workspace/layout"
	"github.com/stratafs/strata/nsexec"
)

// serve serves a hot verb into a workspace and returns its exit code, or
// says why strata-core must serve it instead: then nothing has changed
// (at most a keeper started from the workspace's spec file, which the
// core finds running). What strata-core would report as an error before
// the command starts — a usage error, a missing store or workspace, a
// sandbox the kernel refuses — is handed over too, so that its message,
// its exit code and its --json form stay the core's alone.
func serve(args []string) (int, handover) {
	r, why := parse(args)
	if why != "" {
		return 0, why
	}
	home := r.home
	if home == "" {
		h, err := layout.DefaultHome()
		if err != nil {
			return 0, "no home"
		}
		home = h
	}
	l := layout.New(home)
	if _, err := os.Stat(l.DB()); err != nil {
		return 0, "no store"
	}
	if !layout.ValidName(r.name) {
		return 0, "not a workspace name"
	}
	dir := l.Workspace(r.name)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0, "no workspace directory"
	}
	if os.Geteuid() == 0 && st.Uid != 0 {
		// Root in another user's workspace: strata-core explains why
		// that cannot work (its keeper is in that user's namespaces).
		return 0, handover("root in uid " + strconv.Itoa(int(st.Uid)) + "'s workspace")
	}
	// A workspace the front may serve has a spec file of this version:
	// the lifecycle writes none for one whose record says anything the
	// front does not know (another backend, an image root).
	if err := hotpath.Servable(dir); err != nil {
		return 0, handover(err.Error())
	}
	settings, err := hotpath.ReadSettings(l.Settings())
	if err != nil {
		return 0, "settings: " + handover(err.Error())
	}
	s := &server{req: r, l: l, dir: dir, planner: &hotpath.Planner{
		Home: l.Home(), Settings: func() (hotpath.Settings, error) { return settings, nil },
	}, settings: settings}
	return s.serve()
}

// server serves one request.
type server struct {
	req      *request
	l        layout.Layout
	dir      string
	spec     *hotpath.SpecFile // read when the keeper is to be started
	settings hotpath.Settings
	planner  *hotpath.Planner
	// warnings are held until the front is sure to serve: a command it
	// hands over gets them from strata-core.
	warnings []string
	serving  bool
}

func (s *server) warn(msg string) {
	switch {
	case s.req.quiet:
	case !s.serving:
		s.warnings = append(s.warnings, msg)
	default:
		fmt.Fprintf(os.Stderr, "strata: warning: %s\n", msg)
	}
}

func (s *server) serve() (int, handover) {
	r := s.req
	k, err := nsexec.FindKeeper(s.dir)
	switch {
	case err == nil:
		nsexec.ThawStale(s.dir)
	case !errors.Is(err, nsexec.ErrNotRunning):
		return 0, handover(err.Error())
	}
	var target string
	if k != nil {
		target = k.Target
	} else {
		// Stopped: its spec file says what its keeper mounts, where.
		if s.spec, err = hotpath.ReadSpec(s.dir); err != nil {
			return 0, handover(err.Error())
		}
		target = s.spec.Spec.Target
	}
	// Plan first: a command strata-core would refuse is handed over
	// before a keeper starts.
	var cmd nsexec.Command
	shell := r.verb == "shell"
	tty := shell && hotpath.IsTerminal(os.Stdin)
	if r.verb != "path" {
		opts := r.opts
		if shell {
			opts.Argv = []string{hotpath.DefaultShell()}
			opts.TTY = tty
		}
		opts.Sandbox.Warn = s.warn
		if cmd, err = s.planner.Command(target, opts); err != nil {
			return 0, handover(err.Error())
		}
	}
	if k == nil {
		if k, err = s.start(); err != nil {
			return 0, handover(err.Error())
		}
		if k.Target != target {
			return 0, "the keeper's target moved"
		}
	}
	if r.verb == "path" {
		fmt.Println(k.Path())
		return 0, ""
	}
	started := false
	cmd.Started = func() { started = true }
	run := func(stdin, stdout, stderr *os.File) (nsexec.ExitStatus, error) {
		s.serving = true
		for _, w := range s.warnings {
			s.warn(w)
		}
		return nsexec.Exec(context.Background(), s.dir, cmd, stdin, stdout, stderr)
	}
	var status nsexec.ExitStatus
	if tty {
		// A sandboxed shell's terminal comes from the view's devpts, or
		// it would have no name inside.
		open := hotpath.OpenPTY
		if r.opts.Sandbox.Mode != hotpath.SandboxNone {
			open = func() (*os.File, *os.File, error) { return nsexec.OpenPTY(s.dir) }
		}
		status, err = hotpath.OnTerminal(os.Stdin, os.Stdout, open, func(slave *os.File) (nsexec.ExitStatus, error) {
			return run(slave, slave, slave)
		})
	} else {
		status, err = run(os.Stdin, os.Stdout, os.Stderr)
	}
	if err != nil {
		if !started {
			// Nothing ran (a keeper that went away, a policy the
			// kernel refuses): strata-core tries again and reports.
			return 0, handover(err.Error())
		}
		fmt.Fprintf(os.Stderr, "strata: %v\n", err)
		return 125, ""
	}
	hotpath.HintNotFound(status, cmd, k.Target, s.warn)
	return status.Code, ""
}

// start starts the workspace's keeper from its spec file, as the
// lifecycle starts it from the registry: under the layer lock (gc evicts
// no layer between the check and the mount), with the view of the
// store's defaults and this process's PATH. A spec that is no longer
// current is an error: the caller hands over.
func (s *server) start() (*nsexec.Keeper, error) {
	unlock, err := hotpath.LayerLock(s.l.LayersLock(), false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.spec.Check(s.l, s.req.name, s.settings); err != nil {
		return nil, err
	}
	spec := s.spec.Spec
	vp, err := s.planner.ViewBinds(os.Environ(), nil)
	if err != nil {
		return nil, err
	}
	spec.View = vp.Binds
	k, err := nsexec.StartKeeper(context.Background(), spec)
	if err != nil {
		return nil, err
	}
	unlock()
	// A reset, rebase or ws rm removes the file before it stops the
	// keeper: one that did so while this keeper started would leave it
	// mounting what the registry no longer names.
	if now, err := hotpath.ReadSpec(s.dir); err != nil || !now.SameMount(s.spec) {
		if k.Fresh {
			_ = nsexec.StopKeeper(context.Background(), s.dir)
		}
		return nil, errors.New("the spec file changed while the keeper started")
	}
	return k, nil
}
