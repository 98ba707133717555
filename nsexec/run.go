package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
)

// Descriptors of a one-shot init, in Run's ExtraFiles order. Its stdin,
// stdout and stderr are the command's.
const (
	runConfigFD = 3 // configuration pipe (childConfig with Command)
	runStatusFD = 4 // one message: Exited or Error
)

// Run runs cmd once in a fresh workspace namespace for spec: a child in
// new user (rootless), mount and PID namespaces mounts the overlay, runs
// the command as its only child and exits with it. Nothing survives it:
// when the command has exited, that child, PID 1 of the namespace, kills
// and reaps every process left in it before it reports, and Run returns
// then; the kernel unmounts the overlay as the child exits, a moment
// later (no process can write to it any more). No keeper is involved;
// spec.Dir is only where a missing target DIR/merged is created.
//
// SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the caller are forwarded to
// the command's process group while it runs. When ctx is done (a
// timeout), PID 1 is killed, and with it everything; Run then returns
// status 137 (SIGKILL) and ctx's error. Errors are strata's own failures
// (a refused namespace, a failed mount); a command that cannot be
// executed gets status 127 or 126, as in Exec.
func Run(ctx context.Context, spec Spec, cmd Command, stdin, stdout, stderr *os.File) (ExitStatus, error) {
	if err := checkSpec(&spec, false); err != nil {
		return ExitStatus{}, err
	}
	if cmd.Policy != nil && cmd.Landlock == nil && len(cmd.Seccomp) == 0 {
		// A one-shot init serves one command: nothing to keep, so the
		// caller plans, and says what the kernel cannot enforce.
		plan, err := sandbox.Build(*cmd.Policy)
		if err != nil {
			return ExitStatus{}, err
		}
		if cmd.Warn != nil {
			for _, w := range plan.Warnings {
				cmd.Warn(w)
			}
		}
		cmd.Policy, cmd.Landlock, cmd.Seccomp = nil, plan.Landlock, plan.Seccomp
	}
	wc, err := toWireCommand(cmd, commandEnv(cmd))
	if err != nil {
		return ExitStatus{}, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return ExitStatus{}, err
	}
	defer cfgW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return ExitStatus{}, err
	}
	defer stR.Close()

	c := newChild(entryRun, &spec, true)
	// A nil *os.File must stay a nil interface: exec.Cmd then uses
	// /dev/null.
	if stdin != nil {
		c.Stdin = stdin
	}
	if stdout != nil {
		c.Stdout = stdout
	}
	if stderr != nil {
		c.Stderr = stderr
	}
	c.ExtraFiles = []*os.File{cfgR, stW}
	// If the caller dies, so does the workspace.
	c.SysProcAttr.Pdeathsig = unix.SIGKILL

	fwd := forwardSignals()
	defer fwd.stop()

	// The configuration goes into the pipe while the child starts.
	configured := writeConfig(cfgW, newChildConfig(&spec, wc))
	err = startChild(c, &spec)
	cfgR.Close() // unblocks writeConfig if the child never reads
	stW.Close()
	if err != nil {
		<-configured
		return ExitStatus{}, err
	}
	waited := make(chan struct{})
	go func() {
		c.Wait()
		close(waited)
	}()
	if err := <-configured; err != nil {
		c.Process.Kill()
		<-waited
		return ExitStatus{}, fmt.Errorf("nsexec: configure init: %w", err)
	}

	type report struct {
		m   *message
		err error
	}
	reported := make(chan report, 1)
	go func() {
		// EOF when init exits, whether or not it reported.
		m, err := readFrame(stR)
		reported <- report{m, err}
	}()

	done := ctx.Done()
	killed := false
	var r report
	for waiting := true; waiting; {
		select {
		case sig := <-fwd.c:
			c.Process.Signal(sig)
		case <-done:
			done = nil
			killed = true
			c.Process.Kill()
		case r = <-reported:
			// Reported: init has reaped every process of the run, and
			// exits; the kernel tears its namespaces down (unmounting
			// takes up to a millisecond) while the caller goes on.
			// Without a report, it died: wait for that.
			if r.err != nil {
				<-waited
			}
			waiting = false
		}
	}
	switch {
	case r.err == nil && r.m.Exited != nil:
		return *r.m.Exited, nil
	case r.err == nil && r.m.Error != nil:
		return ExitStatus{}, fmt.Errorf("run in %s: %w", spec.Name, r.m.Error.err())
	case killed:
		return ExitStatus{Code: 128 + int(unix.SIGKILL), Signal: unix.SIGKILL}, ctx.Err()
	case r.err != nil && !errors.Is(r.err, os.ErrClosed):
		return ExitStatus{}, fmt.Errorf("run in %s: init exited (%v) without a report: %v", spec.Name, c.ProcessState, r.err)
	}
	return ExitStatus{}, fmt.Errorf("run in %s: init exited (%v) without a report", spec.Name, c.ProcessState)
}

// runMain is the one-shot init: PID 1 of a fresh workspace namespace.
func runMain() int {
	sigs := childInit(forwarded, nil)
	status := os.NewFile(runStatusFD, "status")
	fail := func(err error) int {
		writeFrame(status, &message{Error: toWireError(err)})
		return 125
	}
	cfg, err := readConfig(runConfigFD)
	if err != nil {
		return fail(err)
	}
	if cfg.Command == nil {
		return fail(errors.New("no command"))
	}
	// Warnings (no private /proc) have no one to go to: the command's
	// stderr is the user's.
	hs, err := setupNamespace(cfg)
	if err != nil {
		return fail(err)
	}
	var v *view
	if cfg.Command.View {
		// Two Ps while it builds, as in a keeper (keeper_child.go).
		procs := runtime.GOMAXPROCS(2)
		v, err = hs.buildView(cfg)
		runtime.GOMAXPROCS(procs)
		if err != nil {
			return fail(err)
		}
	}
	caps := settleCaps(cfg)
	// Not dumpable, as a keeper (keeper_child.go).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err))
	}
	r := newReaper(sigs.chld)
	<-sigs.done
	st, err := startCommand(r, cfg.Command, []int{0, 1, 2}, cfg.Target, caps, v)
	if err != nil {
		return fail(err)
	}
	if st.notRun != nil {
		r.killAll()
		writeFrame(status, &message{Exited: st.notRun})
		return st.notRun.Code
	}
	for {
		select {
		case sig := <-sigs.sigs:
			unix.Kill(-st.pid, sig.(unix.Signal))
		case es := <-st.exited:
			// Nothing of the run survives the report: the caller may
			// use the upper directory at once.
			r.killAll()
			writeFrame(status, &message{Exited: &es})
			return es.Code
		}
	}
}
