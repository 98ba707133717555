package nsexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Files in a workspace's state directory (Spec.Dir).
const (
	// lockName is flock'ed exclusively by the keeper for its whole life,
	// and before that by the process starting it: held means a keeper is
	// alive or starting, free means none is.
	lockName = "keeper.lock"
	// sockName is the keeper's unix socket (SOCK_STREAM).
	sockName = "keeper.sock"
	// infoName is keeperInfo as JSON, written by the keeper once it
	// serves, removed when it stops.
	infoName = "keeper.json"
	// logName collects the keeper's own messages (not its commands').
	logName = "keeper.log"
)

// maxLogSize caps keeper.log: a keeper that starts beyond it truncates it.
const maxLogSize = 1 << 20

// stopGrace is how long StopKeeper waits after SIGTERM before SIGKILL.
const stopGrace = 3 * time.Second

// startTimeout bounds StartKeeper when ctx has no deadline.
const startTimeout = time.Minute

// keeperInfo is keeper.json.
type keeperInfo struct {
	// PID is the keeper's pid in the PID namespace of the process that
	// started it; StartTime its start time in clock ticks after boot
	// (/proc/PID/stat field 22), which tells it from a later process
	// with the same pid.
	PID       int       `json:"pid"`
	StartTime uint64    `json:"start_time"`
	Name      string    `json:"name"`
	Target    string    `json:"target"`
	Started   time.Time `json:"started"`
	// Init is the binary the keeper runs.
	Init string `json:"init"`
}

// FindKeeper returns the live keeper of the workspace whose state
// directory is dir, or an error matching ErrNotRunning. It is cheap — a
// few small reads and an flock probe — for the exec hot path.
func FindKeeper(dir string) (*Keeper, error) {
	info, err := readInfo(dir)
	if err != nil {
		return nil, err
	}
	held, err := lockHeld(dir)
	if err != nil {
		return nil, err
	}
	if !held || !alive(info.PID, info.StartTime) {
		return nil, fmt.Errorf("%w: %s: the keeper (pid %d) has exited", ErrNotRunning, dir, info.PID)
	}
	return &Keeper{PID: info.PID, Target: info.Target, Started: info.Started}, nil
}

func readInfo(dir string) (*keeperInfo, error) {
	b, err := os.ReadFile(filepath.Join(dir, infoName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("nsexec: %w", err)
	}
	info, err := decodeInfo(b)
	if err != nil || info.PID <= 0 {
		// A torn file cannot be: it is written by rename.
		return nil, fmt.Errorf("%w: %s: unreadable %s", ErrNotRunning, dir, infoName)
	}
	return info, nil
}

// lockHeld reports whether someone (a keeper, or a process starting one)
// holds the workspace's keeper.lock.
func lockHeld(dir string) (bool, error) {
	fd, err := unix.Open(filepath.Join(dir, lockName), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nsexec: open %s: %w", filepath.Join(dir, lockName), err)
	}
	defer unix.Close(fd)
	switch err := flock(fd, unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil:
		return false, nil // closing fd releases it
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	default:
		return false, fmt.Errorf("nsexec: flock %s: %w", filepath.Join(dir, lockName), err)
	}
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// alive reports whether pid is the process that started at start and has
// not exited (a zombie has).
func alive(pid int, start uint64) bool {
	state, st, err := procStat(strconv.Itoa(pid))
	return err == nil && st == start && state != 'Z' && state != 'X'
}

// StartKeeper returns the workspace's live keeper, starting one if there
// is none: a child in new user (rootless), mount and PID namespaces that
// mounts the overlay and serves commands until StopKeeper. It returns
// once the overlay is mounted and the keeper accepts commands, or with
// the child's error (an *overlayfs.MountError for a failed mount). Calls
// for one workspace are serialized across processes by keeper.lock; a
// dead keeper's leftovers are removed first.
func StartKeeper(ctx context.Context, spec Spec) (*Keeper, error) {
	if err := checkSpec(&spec, true); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	lockPath := filepath.Join(spec.Dir, lockName)
	wait := time.Millisecond
	for {
		if k, err := FindKeeper(spec.Dir); err == nil {
			return k, nil
		} else if !errors.Is(err, ErrNotRunning) {
			return nil, err
		}
		lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("nsexec: %w", err)
		}
		err = flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			k, err := startLocked(ctx, &spec, lock)
			lock.Close() // the keeper holds the lock from here on
			return k, err
		}
		lock.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("nsexec: flock %s: %w", lockPath, err)
		}
		// Another process is starting a keeper, or one is stopping.
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("nsexec: waiting for the keeper of %s: %w", spec.Dir, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// removeStale removes what a dead keeper left; the caller holds the lock.
func removeStale(dir string) {
	os.Remove(filepath.Join(dir, infoName))
	os.Remove(filepath.Join(dir, sockName))
}

// startLocked starts a keeper while holding lock, which the child
// inherits and holds for its life.
func startLocked(ctx context.Context, spec *Spec, lock *os.File) (*Keeper, error) {
	removeStale(spec.Dir)
	logPath := filepath.Join(spec.Dir, logName)
	if fi, err := os.Stat(logPath); err == nil && fi.Size() > maxLogSize {
		os.Truncate(logPath, 0)
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("nsexec: keeper log: %w", err)
	}
	defer logf.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return nil, err
	}
	defer readyR.Close()

	cmd := newChild(entryKeeper, spec, true)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{cfgR, lock, readyW} // keeperFDs
	configured := writeConfig(cfgW, newChildConfig(spec, nil))
	err = startChild(cmd, spec)
	cfgR.Close() // unblocks writeConfig if the child never reads
	readyW.Close()
	if err != nil {
		<-configured
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		// Reap the keeper whenever it ends, in case this process lives
		// longer than it.
		cmd.Wait()
		close(exited)
	}()
	fail := func(err error) (*Keeper, error) {
		cmd.Process.Kill()
		<-exited
		return nil, err
	}

	if err := <-configured; err != nil {
		return fail(fmt.Errorf("nsexec: configure keeper: %w", err))
	}

	if dl, ok := ctx.Deadline(); ok {
		readyR.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { readyR.SetReadDeadline(time.Now()) })
	defer stop()
	m, err := readFrame(readyR)
	switch {
	case err == nil && m.Error != nil:
		return fail(fmt.Errorf("keeper %s: %w", spec.Name, m.Error.err()))
	case err == nil && m.Started > 0:
		info, err := readInfo(spec.Dir)
		if err != nil {
			return fail(err)
		}
		return &Keeper{PID: info.PID, Target: info.Target, Started: info.Started, Fresh: true}, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fail(fmt.Errorf("keeper %s: not ready: %w", spec.Name, context.Cause(ctx)))
	}
	// The child died before it could report.
	cmd.Process.Kill()
	<-exited
	return nil, fmt.Errorf("keeper %s exited before it was ready (%v): %s", spec.Name, cmd.ProcessState, logTail(logPath))
}

// logTail returns the end of a log file, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no log: " + err.Error()
	}
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return "log " + path + " is empty"
	}
	return "log " + path + ": " + string(b)
}

// StopKeeper ends the workspace's keeper: SIGTERM, then SIGKILL after a
// grace period. It returns when the keeper has exited, and with it, as
// PID 1 of the workspace's PID namespace, every process of the
// workspace; the mount namespace and its overlay go with them. Stopping a
// workspace that has no keeper is not an error.
func StopKeeper(ctx context.Context, dir string) error {
	k, err := FindKeeper(dir)
	if errors.Is(err, ErrNotRunning) {
		cleanIfUnlocked(dir)
		return nil
	}
	if err != nil {
		return err
	}
	info, err := readInfo(dir)
	if err != nil {
		return err
	}
	pidfd, err := unix.PidfdOpen(k.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nsexec: stop keeper %d: pidfd_open: %w", k.PID, err)
	}
	defer unix.Close(pidfd)
	// The pidfd pins the process: check it is still the keeper, not a
	// process that got its pid since.
	if !alive(info.PID, info.StartTime) {
		return nil
	}
	for _, step := range []struct {
		sig   unix.Signal
		grace time.Duration
	}{{unix.SIGTERM, stopGrace}, {unix.SIGKILL, 10 * time.Second}} {
		if err := unix.PidfdSendSignal(pidfd, step.sig, nil, 0); err != nil {
			if errors.Is(err, unix.ESRCH) {
				break
			}
			return fmt.Errorf("nsexec: stop keeper %d: %s: %w", k.PID, unix.SignalName(step.sig), err)
		}
		gone, err := waitPidfd(ctx, pidfd, step.grace)
		if err != nil {
			return fmt.Errorf("nsexec: stop keeper %d: %w", k.PID, err)
		}
		if gone {
			break
		}
	}
	cleanIfUnlocked(dir)
	return nil
}

// waitPidfd waits up to d for the process to exit. A pidfd polls readable
// when the process has exited — for PID 1 of a PID namespace, after the
// kernel has killed and reaped every other process in it.
func waitPidfd(ctx context.Context, pidfd int, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, 50*time.Millisecond).Milliseconds())+1)
		if err != nil && err != unix.EINTR {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return true, nil
		}
	}
}

// cleanIfUnlocked removes a dead keeper's socket and keeper.json, unless
// a keeper is alive or starting.
func cleanIfUnlocked(dir string) {
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer lock.Close()
	if flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		removeStale(dir)
	}
}

// dialKeeper connects to the keeper's socket. A socket path longer than
// sun_path (108 bytes) is reached through /proc/self/fd of the directory.
func dialKeeper(dir string) (*conn, error) {
	path := filepath.Join(dir, sockName)
	if len(path) < len(unix.RawSockaddrUnix{}.Path) {
		c, err := dial(&unix.SockaddrUnix{Name: path})
		if err != nil {
			return nil, keeperDialError(dir, err)
		}
		return c, nil
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, keeperDialError(dir, err)
	}
	defer unix.Close(dfd)
	c, err := dial(sockAddr(dfd, sockName))
	if err != nil {
		return nil, keeperDialError(dir, err)
	}
	return c, nil
}

func keeperDialError(dir string, err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: %s", ErrNotRunning, dir)
	}
	return fmt.Errorf("nsexec: connect to the keeper of %s: %w", dir, err)
}
