package nsexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// forwarded are the signals Exec and Run pass on to the command while it
// runs, instead of letting them end the caller.
var forwarded = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT}

// signalForward relays the forwarded signals sent to this process.
type signalForward struct {
	c     chan os.Signal
	ready chan struct{}
}

// forwardSignals starts relaying the forwarded signals to c. Each
// signal.Notify and signal.Stop is a round trip with the Go runtime's
// signal-mask thread (about 60 µs a signal here, 0.5 ms for a Run), so
// both happen in the background: a signal that arrives before the relay
// is in place has its usual effect, one that arrives as it is taken down
// goes nowhere.
func forwardSignals() *signalForward {
	f := &signalForward{c: make(chan os.Signal, 4), ready: make(chan struct{})}
	go func() {
		signal.Notify(f.c, forwarded...)
		close(f.ready)
	}()
	return f
}

func (f *signalForward) stop() {
	go func() {
		<-f.ready
		signal.Stop(f.c)
	}()
}

// killWait is how long Exec waits for the keeper to report a command it
// asked it to kill.
const killWait = 5 * time.Second

// Exec runs cmd in the live keeper of the workspace whose state directory
// is dir, with stdin, stdout and stderr (nil: /dev/null) as the command's,
// and returns its exit status. It fails with ErrNotRunning when there is
// no keeper.
//
// While the command runs, SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the
// caller are forwarded to the command's process group (they do not end
// the caller). If the caller goes away, the keeper kills that process
// group. When ctx is done the command's process group is killed
// (SIGKILL) and Exec returns its status with ctx's error. A command that
// cannot be executed gets status 127 (not found) or 126 (not executable),
// with a message on its stderr, as a shell does; errors are strata's own
// failures.
func Exec(ctx context.Context, dir string, cmd Command, stdin, stdout, stderr *os.File) (ExitStatus, error) {
	ThawStale(dir)
	wc, err := toWireCommand(cmd, commandEnv(cmd))
	if err != nil {
		return ExitStatus{}, err
	}
	files, closeFiles, err := stdioFiles(stdin, stdout, stderr)
	if err != nil {
		return ExitStatus{}, err
	}
	defer closeFiles()
	c, err := dialKeeper(dir)
	if err != nil {
		return ExitStatus{}, err
	}
	defer c.Close()

	fwd := forwardSignals()
	defer fwd.stop()

	// Fd puts the files in blocking mode, as os/exec does: the command
	// shares their open file descriptions and expects blocking I/O.
	fds := []int{int(files[0].Fd()), int(files[1].Fd()), int(files[2].Fd())}
	err = writeFrameFDs(c, &message{Version: protoVersion, Command: wc}, fds)
	runtime.KeepAlive(files) // no finalizer closes them before they are sent
	if err != nil {
		return ExitStatus{}, lostKeeper(dir, fmt.Errorf("send command: %w", err))
	}

	type reply struct {
		m   *message
		err error
	}
	replies := make(chan reply, 1)
	go func() {
		for {
			m, err := readFrame(c)
			replies <- reply{m, err}
			if err != nil || m.Exited != nil || m.Error != nil {
				return
			}
		}
	}()
	done := ctx.Done()
	started := false
	var killTimeout <-chan time.Time
	for {
		select {
		case sig := <-fwd.c:
			if s, ok := sig.(syscall.Signal); ok {
				writeFrame(c, &message{Signal: int(s)})
			}
		case <-done:
			done = nil
			writeFrame(c, &message{Signal: int(unix.SIGKILL)})
			killTimeout = time.After(killWait)
		case <-killTimeout:
			// Hanging up makes the keeper kill the process group.
			return ExitStatus{Code: 128 + int(unix.SIGKILL), Signal: unix.SIGKILL}, ctx.Err()
		case r := <-replies:
			if r.err == nil && cmd.Warn != nil {
				for _, w := range r.m.Warnings {
					cmd.Warn(w)
				}
			}
			switch {
			case r.err != nil:
				if errors.Is(r.err, io.EOF) || errors.Is(r.err, io.ErrUnexpectedEOF) {
					r.err = errors.New("the keeper hung up (was the workspace stopped?)")
				}
				if !started {
					return ExitStatus{}, lostKeeper(dir, r.err)
				}
				return ExitStatus{}, fmt.Errorf("nsexec: exec in %s: %w", dir, r.err)
			case r.m.Error != nil:
				if err := r.m.Error.err(); errors.Is(err, errPolicy) {
					return ExitStatus{}, err // as if planned here: nothing ran
				}
				return ExitStatus{}, fmt.Errorf("nsexec: exec in %s: %w", dir, r.m.Error.err())
			case r.m.Started > 0:
				started = true
				if cmd.Started != nil {
					cmd.Started()
				}
			case r.m.Exited != nil:
				if done == nil {
					return *r.m.Exited, ctx.Err()
				}
				return *r.m.Exited, nil
			}
		}
	}
}

// lostKeeper explains a connection to a keeper that failed before the
// command started: a keeper that was exiting as the client connected
// (its socket outlives its lock by a moment) is not running.
func lostKeeper(dir string, err error) error {
	if _, ferr := FindKeeper(dir); errors.Is(ferr, ErrNotRunning) {
		return fmt.Errorf("%w: %s (%v)", ErrNotRunning, dir, err)
	}
	return fmt.Errorf("nsexec: exec in %s: %w", dir, err)
}
