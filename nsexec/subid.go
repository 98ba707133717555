package nsexec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Subordinate ids. A workspace created with --subids maps more than the
// caller's own uid and gid: the caller stays itself (uid U is U inside, so
// the project keeps its owner), and the ranges /etc/subuid and /etc/subgid
// delegate to the user fill the other ids from 0 up, around U. Commands keep
// the capabilities that act on ids (idCaps, settleCaps), so chown to another id, setuid
// to another user and files owned by them work inside; nothing else.
//
// Only newuidmap and newgidmap (setuid root, Debian package uidmap) may
// write such maps, and only for a process that already exists: the child is
// started in a new user namespace with no maps and waits (subidsEnv) until
// the parent has run them. The host side then holds files owned by ids the
// user can read or remove only through the same namespace: the CLI
// re-executes itself into one (EnterSubIDs) to start keepers and read
// uppers, and RemoveAll falls back to a helper child there.

// IDRange maps Size consecutive ids from Inner (inside the namespace) to
// Host (in the caller's namespace).
type IDRange struct {
	Inner, Host, Size uint32
}

// IDMaps are a user namespace's uid and gid maps.
type IDMaps struct {
	UIDs, GIDs []IDRange
}

// ErrNoSubIDs: subordinate ids are not available to the caller.
var ErrNoSubIDs = errors.New("subordinate ids not available")

// ErrNeedSubIDNS: the work (starting a --subids workspace, reading its
// files) must be done from the subordinate-id namespace (EnterSubIDs).
var ErrNeedSubIDNS = errors.New("needs the user namespace of the subordinate ids")

// subidsEnv names the descriptor a child started by startMapped reads to
// its end before anything else: its maps are written then. It is removed
// from the environment at once, so commands never see it.
const subidsEnv = "STRATA_SUBIDS_FD"

// inSubIDNS is set in a process that startMapped started: it runs in a
// user namespace that maps the caller's subordinate ids, as the caller's
// uid, holding that namespace's capabilities.
var inSubIDNS bool

func init() {
	v, ok := os.LookupEnv(subidsEnv)
	if !ok {
		return
	}
	os.Unsetenv(subidsEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "strata: malformed %s=%q\n", subidsEnv, v)
		os.Exit(125)
	}
	f := os.NewFile(uintptr(fd), "subids")
	io.Copy(io.Discard, f) // EOF: the parent wrote the maps, or gave up
	f.Close()
	if b, err := os.ReadFile("/proc/self/uid_map"); err != nil || len(strings.TrimSpace(string(b))) == 0 {
		fmt.Fprintln(os.Stderr, "strata: the subordinate id maps were not written")
		os.Exit(125)
	}
	inSubIDNS = true
}

// InSubIDNS reports whether this process runs in the subordinate-id user
// namespace that EnterSubIDs (or RemoveAll's helper) made.
func InSubIDNS() bool { return inSubIDNS }

// NeedSubIDNS reports whether work on a workspace that maps subordinate
// ids — starting its keeper or init, reading its upper directory — must
// first enter their namespace (EnterSubIDs): not as real root, whose ids
// are all its own, and not once inside.
func NeedSubIDNS() bool { return !inSubIDNS && !RealRoot() }

// SubIDMaps returns the maps of a subordinate-id namespace for the
// caller: its own uid and gid to themselves, and its ranges from
// /etc/subuid and /etc/subgid (by user name or number, in file order) on
// the ids from 0 up, skipping its own. It fails with ErrNoSubIDs, saying
// what is missing, when newuidmap or newgidmap is not installed or the
// user has no range.
func SubIDMaps() (IDMaps, error) {
	for _, tool := range []string{"newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			return IDMaps{}, fmt.Errorf("%w: %s is not installed (Debian package uidmap)", ErrNoSubIDs, tool)
		}
	}
	uid, gid := os.Getuid(), os.Getgid()
	name := userName(uid)
	var m IDMaps
	for _, x := range []struct {
		file string
		id   int
		out  *[]IDRange
	}{{"/etc/subuid", uid, &m.UIDs}, {"/etc/subgid", gid, &m.GIDs}} {
		f, err := os.Open(x.file)
		if err != nil {
			return IDMaps{}, fmt.Errorf("%w: %v", ErrNoSubIDs, err)
		}
		ranges := parseSubIDs(f, name, x.id)
		f.Close()
		if len(ranges) == 0 {
			return IDMaps{}, fmt.Errorf("%w: no range for %s in %s (usermod --add-subuids/--add-subgids, as root)", ErrNoSubIDs, name, x.file)
		}
		*x.out = mapAround(uint32(x.id), ranges)
	}
	return m, nil
}

// userName is uid's name in /etc/passwd, or the number. (os/user would
// link cgo into strata-init; /etc/subuid names local users, and accepts
// numbers for the rest.)
func userName(uid int) string {
	id := strconv.Itoa(uid)
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return id
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), ":", 4)
		if len(fields) >= 3 && fields[2] == id {
			return fields[0]
		}
	}
	return id
}

// parseSubIDs reads the ranges of /etc/subuid's format ("NAME:START:COUNT"
// per line) that belong to the user called name or numbered id, as
// IDRanges with Host and Size set.
func parseSubIDs(r io.Reader, name string, id int) []IDRange {
	var out []IDRange
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || (f[0] != name && f[0] != strconv.Itoa(id)) {
			continue
		}
		start, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 || start+count > 1<<32-1 {
			continue
		}
		out = append(out, IDRange{Host: uint32(start), Size: uint32(count)})
	}
	return out
}

// maxMapLines is the kernel's limit on lines of a uid_map (Linux 4.15+).
const maxMapLines = 340

// mapAround lays host ranges (Host, Size) on inner ids from 0 up, leaving
// out own, which maps to itself; a range that would cover own is split.
// A host range that contains own loses it (it is mapped once, as itself).
func mapAround(own uint32, host []IDRange) []IDRange {
	out := []IDRange{{Inner: own, Host: own, Size: 1}}
	next := uint32(0) // the next free inner id
	add := func(h, n uint32) {
		for n > 0 && len(out) < maxMapLines {
			if next == own {
				next++
			}
			size := n
			if next < own && next+size > own {
				size = own - next
			}
			if next > ^uint32(0)-size {
				return
			}
			out = append(out, IDRange{Inner: next, Host: h, Size: size})
			next += size
			h += size
			n -= size
		}
	}
	for _, r := range host {
		if own >= r.Host && own-r.Host < r.Size {
			add(r.Host, own-r.Host)
			add(own+1, r.Size-(own-r.Host)-1)
			continue
		}
		add(r.Host, r.Size)
	}
	return out
}

// writeIDMaps writes pid's maps with newuidmap and newgidmap.
func writeIDMaps(pid int, m IDMaps) error {
	for _, x := range []struct {
		tool   string
		ranges []IDRange
	}{{"newuidmap", m.UIDs}, {"newgidmap", m.GIDs}} {
		args := []string{strconv.Itoa(pid)}
		for _, r := range x.ranges {
			args = append(args, strconv.FormatUint(uint64(r.Inner), 10), strconv.FormatUint(uint64(r.Host), 10), strconv.FormatUint(uint64(r.Size), 10))
		}
		if out, err := exec.Command(x.tool, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %v: %s", x.tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// startMapped starts cmd in a new user namespace mapped by m, holding all
// of its capabilities (ambient, so that they survive execve as a non-zero
// uid). The child waits in its package init until the maps are written.
func startMapped(cmd *exec.Cmd, m IDMaps) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer w.Close()
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	// Clip: never append into a caller's (or childEnv's) backing array.
	cmd.Env = append(slices.Clip(cmd.Env), subidsEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
	cmd.SysProcAttr.AmbientCaps = allCaps()
	err = cmd.Start()
	r.Close()
	if err != nil {
		return userNSError(err)
	}
	if err := writeIDMaps(cmd.Process.Pid, m); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("map subordinate ids: %w", err)
	}
	return nil
}

// EnterSubIDs re-executes the running program, with the same arguments,
// environment and standard files, in a new user namespace that maps the
// caller's subordinate ids (SubIDMaps), and exits with its exit status.
// There the program holds the capabilities that starting a subordinate-id
// workspace and reading or removing its files need. It returns nil at once
// when there is no need (NeedSubIDNS), and otherwise only on failure.
//
// The parent forwards SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2, and SIGINT and
// SIGQUIT unless they come from the terminal (then the child, in the same
// process group, has them already); the child dies with it (PDEATHSIG).
func EnterSubIDs() error {
	if !NeedSubIDNS() {
		return nil
	}
	m, err := SubIDMaps()
	if err != nil {
		return err
	}
	// PDEATHSIG fires when the thread that started the child ends: keep it.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2, unix.SIGINT, unix.SIGQUIT)
	cmd := &exec.Cmd{
		Path: Self, Args: os.Args,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL},
	}
	if err := startMapped(cmd, m); err != nil {
		signal.Stop(sigs)
		return err
	}
	foreground := false
	if pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && pgrp == unix.Getpgrp() {
		foreground = true
	}
	go func() {
		for sig := range sigs {
			if foreground && (sig == unix.SIGINT || sig == unix.SIGQUIT) {
				continue
			}
			cmd.Process.Signal(sig)
		}
	}()
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(ws.ExitStatus())
	return nil
}

const entryRemove = "remove"

func init() { Register(entryRemove, removeMain) }

// RemoveAll removes path like os.RemoveAll. A tree that holds files of
// subordinate ids (a --subids workspace's upper, after a command chowned
// something) may refuse the caller; then, when the caller has subordinate
// ids, a helper child removes it from their namespace, where the caller
// may remove anything their ids own.
func RemoveAll(path string) error {
	err := os.RemoveAll(path)
	if err == nil || !(errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) || !NeedSubIDNS() {
		return err
	}
	m, merr := SubIDMaps()
	if merr != nil {
		return err
	}
	var out strings.Builder
	cmd := &exec.Cmd{
		Path: InitPath(), Args: []string{argv0Prefix + entryRemove, path},
		Env: childEnv, Dir: "/", Stderr: &out,
	}
	if serr := startMapped(cmd, m); serr != nil {
		return fmt.Errorf("%w (and in the subordinate-id namespace: %v)", err, serr)
	}
	if werr := cmd.Wait(); werr != nil {
		return fmt.Errorf("%w (and in the subordinate-id namespace: %v: %s)", err, werr, strings.TrimSpace(out.String()))
	}
	return nil
}

func removeMain() int {
	for _, p := range os.Args[1:] {
		if err := os.RemoveAll(p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
