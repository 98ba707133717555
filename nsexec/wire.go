package nsexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/overlayfs"
)

// What travels between strata and its children — a child's
// configuration, the keeper protocol's frames — is encoded by hand in a
// compact binary form (varints and length-prefixed strings). The child is
// a fresh process on the hot path, and encoding/json spends 0.3 to 0.5 ms
// there decoding a configuration (reflection on first use), more than
// the rest of a child's own work but mounting.

// protoVersion numbers these formats. strata and strata-init from
// different builds may disagree; a mismatch is refused with a message
// instead of misread.
//
// 6: a command may carry a sandbox policy (sandbox.Request) instead of a
// Landlock ruleset and BPF programs, and a keeper's Started reply carries
// the policy's warnings; a config may carry Root (an image root, root.go).
// 7: a config may carry Plain (a reflink or copy workspace, plain.go).
const protoVersion = 7

// ProtocolVersion is the keeper protocol's version (protoVersion): a
// strata and a keeper or strata-init of another version refuse each other.
const ProtocolVersion = protoVersion

// childConfig is what the parent writes to a child (keeper or one-shot
// init) on its configuration pipe: what to mount where, computed by the
// parent from a Spec.
type childConfig struct {
	Version int
	Name    string
	Dir     string // the state directory (keepers)
	Target  string
	// Mount and Method are the overlay to mount on Target
	// (overlayfs.DefaultConfig of the Spec, and its Features' method).
	Mount  overlayfs.Config
	Method overlayfs.Method
	// UserNS: the child runs in a user namespace of its own, holding that
	// namespace's capabilities, which the commands it starts must not.
	UserNS bool
	// SubIDs: the namespace maps subordinate ids, and commands keep
	// idCaps (Spec.SubIDs).
	SubIDs bool
	// Binds are read-only bind mounts made inside (Spec.Binds).
	Binds []Bind
	// View are the binds of the keeper's view (Spec.View).
	View []Bind
	// Command is the one-shot init's command (Run).
	Command *wireCommand
	// Root is the image root (Spec.Root), nil for the host view.
	Root *wireRoot
	// Plain is the plain directory bound on Target (Spec.Plain).
	Plain string
}

func newChildConfig(spec *Spec, cmd *wireCommand) *childConfig {
	cfg := overlayfs.DefaultConfig(spec.Lowers, spec.Upper, spec.Work, spec.Features)
	cfg.Volatile = spec.Volatile
	return &childConfig{
		Version: protoVersion,
		Name:    spec.Name,
		Dir:     spec.Dir,
		Target:  spec.Target,
		Mount:   cfg,
		Method:  spec.Features.Method(),
		UserNS:  spec.userNS(),
		SubIDs:  spec.SubIDs && spec.userNS(),
		Binds:   spec.Binds,
		View:    spec.View,
		Command: cmd,
		Root:    newWireRoot(spec),
		Plain:   spec.Plain,
	}
}

// features returns what overlayfs.Mount needs of Features to use method.
func methodFeatures(m overlayfs.Method) overlayfs.Features {
	return overlayfs.Features{LayerFDs: m == overlayfs.FsconfigFD, LowerdirPlus: m == overlayfs.Fsconfig || m == overlayfs.FsconfigFD}
}

// wireCommand is Command as it travels: to a one-shot init in its
// configuration, to a keeper in a request.
type wireCommand struct {
	Argv     []string
	Env      []string
	Dir      string
	TTY      bool
	Landlock *landlock.Ruleset
	Seccomp  []bpfProgram
	NetNone  bool
	View     bool
	Binds    []Bind
	// Policy is planned by whoever starts the command (Command.Policy).
	Policy *sandbox.Request
}

func toWireCommand(c Command, env []string) (*wireCommand, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return nil, errors.New("nsexec: empty command")
	}
	if c.Policy != nil && (c.Landlock != nil || len(c.Seccomp) > 0) {
		return nil, errors.New("nsexec: a command carries a sandbox policy or a planned sandbox (Landlock, Seccomp), not both")
	}
	w := &wireCommand{Argv: c.Argv, Env: env, Dir: c.Dir, TTY: c.TTY, Landlock: c.Landlock, NetNone: c.NetNone, View: c.View, Binds: c.Binds, Policy: c.Policy}
	for i, p := range c.Seccomp {
		if len(p) == 0 || len(p) > bpfMaxInsns {
			return nil, fmt.Errorf("nsexec: seccomp program %d has %d instructions (1 to %d)", i, len(p), bpfMaxInsns)
		}
		w.Seccomp = append(w.Seccomp, bpfProgram(p))
	}
	return w, nil
}

// bpfProgram is a classic BPF program.
type bpfProgram []unix.SockFilter

const (
	sockFilterSize = 8    // sizeof(struct sock_filter), Linux: include/uapi/linux/filter.h
	bpfMaxInsns    = 4096 // BPF_MAXINSNS, Linux: include/uapi/linux/bpf_common.h
)

// message is one frame of the keeper protocol. The client sends Command
// first, with its stdin, stdout and stderr as SCM_RIGHTS, then Signal
// frames; the keeper answers Started, then Exited or Error. A keeper
// reports ready (Started: its pid) or Error to its parent, and a one-shot
// init reports Exited or Error, with the same frames.
type message struct {
	Version int
	Command *wireCommand
	Signal  int
	Started int // the command's pid in the namespace; a keeper's own pid
	// Freeze asks a keeper to stop every process of the workspace until
	// the client hangs up; the keeper answers with Freeze when they are.
	Freeze bool
	// PTY asks a keeper for a new pty of its view's devpts; it answers
	// with PTY and the master as SCM_RIGHTS.
	PTY    bool
	Exited *ExitStatus
	Error  *wireError
	// Warnings ride on a keeper's Started reply: what the kernel cannot
	// enforce of the command's Policy.
	Warnings []string
}

// wireError carries an error from a child to its parent, keeping what
// callers branch on: the errno, a sentinel, a path, and
// *overlayfs.MountError with its fields.
type wireError struct {
	Msg      string
	Errno    int
	Sentinel string
	PathOp   string
	Path     string
	Mount    *wireMount
}

// wireMount is an *overlayfs.MountError; wireError's other fields then
// describe its Err.
type wireMount struct {
	Target  string
	Op      string
	Options string
	Log     []string
}

// encoder appends values: unsigned and signed varints, and
// length-prefixed strings and lists.
type encoder struct{ b []byte }

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }

func (e *encoder) bool(v bool) {
	if v {
		e.uint(1)
	} else {
		e.uint(0)
	}
}

func (e *encoder) str(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) strs(ss []string) {
	e.uint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

// decoder reads what encoder wrote; the first error sticks and every
// later read returns zero values.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("nsexec: truncated message")

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bool() bool { return d.uint() != 0 }

// count reads a length and checks that at least min bytes per element
// remain, so that a corrupt length cannot allocate much.
func (d *decoder) count(min int) int {
	n := d.uint()
	if d.err == nil && n > uint64(len(d.b)/max(min, 1)) {
		d.err = errShort
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func (d *decoder) raw() []byte {
	n := d.count(1)
	if d.err != nil {
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) str() string { return string(d.raw()) }

func (d *decoder) strs() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.str()
	}
	return ss
}

func (e *encoder) config(c *childConfig) {
	e.uint(uint64(c.Version))
	e.str(c.Name)
	e.str(c.Dir)
	e.str(c.Target)
	m := &c.Mount
	e.strs(m.Lowers)
	e.str(m.Upper)
	e.str(m.Work)
	e.bool(m.UserXattr)
	e.bool(m.RedirectDir)
	e.bool(m.Volatile)
	e.uint(uint64(c.Method))
	e.bool(c.UserNS)
	e.bool(c.SubIDs)
	e.binds(c.Binds)
	e.binds(c.View)
	e.command(c.Command)
	e.root(c.Root)
	e.str(c.Plain)
}

func (e *encoder) binds(bs []Bind) {
	e.uint(uint64(len(bs)))
	for _, b := range bs {
		e.str(b.Source)
		e.str(b.Target)
		e.bool(b.RW)
	}
}

// maxBinds bounds a list of binds in a message.
const maxBinds = 1024

func (d *decoder) binds() []Bind {
	n := d.count(3)
	if d.err == nil && n > maxBinds {
		d.err = fmt.Errorf("nsexec: %d bind mounts: malformed message", n)
	}
	if d.err != nil || n == 0 {
		return nil
	}
	out := make([]Bind, n)
	for i := range out {
		out[i] = Bind{Source: d.str(), Target: d.str(), RW: d.bool()}
	}
	return out
}

func (d *decoder) config() (*childConfig, error) {
	c := &childConfig{Version: int(d.uint())}
	if d.err == nil && c.Version != protoVersion {
		return nil, versionError(c.Version)
	}
	c.Name = d.str()
	c.Dir = d.str()
	c.Target = d.str()
	c.Mount.Lowers = d.strs()
	c.Mount.Upper = d.str()
	c.Mount.Work = d.str()
	c.Mount.UserXattr = d.bool()
	c.Mount.RedirectDir = d.bool()
	c.Mount.Volatile = d.bool()
	c.Method = overlayfs.Method(d.uint())
	c.UserNS = d.bool()
	c.SubIDs = d.bool()
	c.Binds = d.binds()
	c.View = d.binds()
	c.Command = d.command()
	c.Root = d.root()
	c.Plain = d.str()
	return c, d.err
}

func versionError(v int) error {
	return fmt.Errorf("strata and %s speak different versions (%d and %d): install strata and strata-init from the same build, and restart running workspaces (strata ws stop)", InitName, v, protoVersion)
}

func (e *encoder) command(c *wireCommand) {
	e.bool(c != nil)
	if c == nil {
		return
	}
	e.strs(c.Argv)
	e.strs(c.Env)
	e.str(c.Dir)
	e.bool(c.TTY)
	e.bool(c.NetNone)
	e.bool(c.View)
	e.binds(c.Binds)
	e.ruleset(c.Landlock)
	e.policy(c.Policy)
	e.uint(uint64(len(c.Seccomp)))
	for _, p := range c.Seccomp {
		e.uint(uint64(len(p)))
		for _, in := range p {
			e.b = binary.NativeEndian.AppendUint16(e.b, in.Code)
			e.b = append(e.b, in.Jt, in.Jf)
			e.b = binary.NativeEndian.AppendUint32(e.b, in.K)
		}
	}
}

func (d *decoder) command() *wireCommand {
	if !d.bool() {
		return nil
	}
	c := &wireCommand{Argv: d.strs(), Env: d.strs(), Dir: d.str(), TTY: d.bool(), NetNone: d.bool(), View: d.bool(), Binds: d.binds()}
	c.Landlock = d.ruleset()
	c.Policy = d.policy()
	if n := d.count(1); n > 0 {
		c.Seccomp = make([]bpfProgram, n)
		for i := range c.Seccomp {
			m := d.count(sockFilterSize)
			if d.err != nil {
				return nil
			}
			if m == 0 || m > bpfMaxInsns {
				d.err = fmt.Errorf("nsexec: seccomp program of %d instructions", m)
				return nil
			}
			p := make(bpfProgram, m)
			for j := range p {
				b := d.b[j*sockFilterSize:]
				p[j] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
			}
			d.b = d.b[m*sockFilterSize:]
			c.Seccomp[i] = p
		}
	}
	return c
}

// policy encodes a sandbox request. TestPolicyFields fails when
// sandbox.Request gains a field, so that none is silently dropped here.
func (e *encoder) policy(r *sandbox.Request) {
	e.bool(r != nil)
	if r == nil {
		return
	}
	e.bool(r.Strict)
	e.str(r.Target)
	e.str(r.Tmp)
	e.strs(r.RO)
	e.strs(r.RW)
	e.ports(r.ConnectTCP)
	e.ports(r.BindTCP)
	e.int(int64(r.RequireABI))
}

func (e *encoder) ports(ps []uint16) {
	e.uint(uint64(len(ps)))
	for _, p := range ps {
		e.uint(uint64(p))
	}
}

func (d *decoder) policy() *sandbox.Request {
	if !d.bool() {
		return nil
	}
	r := &sandbox.Request{Strict: d.bool(), Target: d.str(), Tmp: d.str(), RO: d.strs(), RW: d.strs()}
	r.ConnectTCP = d.ports()
	r.BindTCP = d.ports()
	r.RequireABI = int(d.int())
	return r
}

func (d *decoder) ports() []uint16 {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	ps := make([]uint16, n)
	for i := range ps {
		v := d.uint()
		if v > 0xffff && d.err == nil {
			d.err = fmt.Errorf("nsexec: port %d: malformed message", v)
		}
		ps[i] = uint16(v)
	}
	return ps
}

// ruleset encodes what landlock.Apply uses of a Ruleset. Skipped and
// Warnings are for the parent only. TestRulesetFields fails when
// landlock.Ruleset gains a field, so that none is silently dropped here.
func (e *encoder) ruleset(r *landlock.Ruleset) {
	e.bool(r != nil)
	if r == nil {
		return
	}
	e.uint(uint64(r.ABI))
	e.uint(uint64(r.KernelABI))
	e.uint(uint64(r.HandledFS))
	e.uint(uint64(r.HandledNet))
	e.uint(uint64(r.Scoped))
	e.uint(uint64(r.Flags))
	e.uint(uint64(len(r.Paths)))
	for _, p := range r.Paths {
		e.str(p.Path)
		e.uint(uint64(p.Access))
	}
	e.uint(uint64(len(r.Ports)))
	for _, p := range r.Ports {
		e.uint(uint64(p.Port))
		e.uint(uint64(p.Access))
	}
}

func (d *decoder) ruleset() *landlock.Ruleset {
	if !d.bool() {
		return nil
	}
	r := &landlock.Ruleset{
		ABI:        int(d.uint()),
		KernelABI:  int(d.uint()),
		HandledFS:  landlock.FSAccess(d.uint()),
		HandledNet: landlock.NetAccess(d.uint()),
		Scoped:     landlock.Scope(d.uint()),
		Flags:      landlock.RestrictFlags(d.uint()),
	}
	if n := d.count(2); n > 0 {
		r.Paths = make([]landlock.PathRule, n)
		for i := range r.Paths {
			r.Paths[i] = landlock.PathRule{Path: d.str(), Access: landlock.FSAccess(d.uint())}
		}
	}
	if n := d.count(2); n > 0 {
		r.Ports = make([]landlock.PortRule, n)
		for i := range r.Ports {
			r.Ports[i] = landlock.PortRule{Port: uint16(d.uint()), Access: landlock.NetAccess(d.uint())}
		}
	}
	return r
}

func (e *encoder) message(m *message) {
	e.uint(uint64(m.Version))
	e.command(m.Command)
	e.int(int64(m.Signal))
	e.int(int64(m.Started))
	e.bool(m.Freeze)
	e.bool(m.PTY)
	e.bool(m.Exited != nil)
	if m.Exited != nil {
		e.int(int64(m.Exited.Code))
		e.int(int64(m.Exited.Signal))
	}
	e.strs(m.Warnings)
	e.bool(m.Error != nil)
	if w := m.Error; w != nil {
		e.str(w.Msg)
		e.int(int64(w.Errno))
		e.str(w.Sentinel)
		e.str(w.PathOp)
		e.str(w.Path)
		e.bool(w.Mount != nil)
		if w.Mount != nil {
			e.str(w.Mount.Target)
			e.str(w.Mount.Op)
			e.str(w.Mount.Options)
			e.strs(w.Mount.Log)
		}
	}
}

func (d *decoder) message() (*message, error) {
	m := &message{Version: int(d.uint())}
	m.Command = d.command()
	m.Signal = int(d.int())
	m.Started = int(d.int())
	m.Freeze = d.bool()
	m.PTY = d.bool()
	if d.bool() {
		m.Exited = &ExitStatus{Code: int(d.int()), Signal: syscall.Signal(d.int())}
	}
	m.Warnings = d.strs()
	if d.bool() {
		w := &wireError{Msg: d.str(), Errno: int(d.int()), Sentinel: d.str(), PathOp: d.str(), Path: d.str()}
		if d.bool() {
			w.Mount = &wireMount{Target: d.str(), Op: d.str(), Options: d.str(), Log: d.strs()}
		}
		m.Error = w
	}
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}

// maxFrame bounds a frame: a request carries the environment, a Landlock
// ruleset and BPF programs, far below this.
const maxFrame = 16 << 20

// frame encodes m with its 4-byte length.
func frame(m *message) ([]byte, error) {
	e := encoder{b: make([]byte, 4, 256)}
	e.message(m)
	n := len(e.b) - 4
	if n > maxFrame {
		return nil, fmt.Errorf("nsexec: message of %d bytes exceeds %d", n, maxFrame)
	}
	binary.BigEndian.PutUint32(e.b, uint32(n))
	return e.b, nil
}

func writeFrame(w io.Writer, m *message) error {
	b, err := frame(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func readFrame(r io.Reader) (*message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	return readPayload(r, hdr[:])
}

func readPayload(r io.Reader, hdr []byte) (*message, error) {
	n := binary.BigEndian.Uint32(hdr)
	if n > maxFrame {
		return nil, fmt.Errorf("nsexec: frame of %d bytes exceeds %d", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, unexpectedEOF(err)
	}
	d := decoder{b: b}
	return d.message()
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writeFrameFDs sends m with fds attached (SCM_RIGHTS) to its first bytes.
func writeFrameFDs(c *conn, m *message, fds []int) error {
	b, err := frame(m)
	if err != nil {
		return err
	}
	// The descriptors ride on the 4-byte header; the payload follows as
	// plain stream data (a single sendmsg on a stream socket may be cut
	// short, Write is not).
	n, err := c.sendmsg(b[:4], fds)
	if err != nil {
		return err
	}
	_, err = c.Write(b[n:])
	return err
}

// readFrameFDs reads one frame and the descriptors attached to it, close
// on exec. The caller owns (and must close) the descriptors, even on error.
func readFrameFDs(c *conn, maxFDs int) (*message, []int, error) {
	hdr := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, flags, err := c.recvmsg(hdr, oob)
	var fds []int
	if oobn > 0 {
		cmsgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, cm := range cmsgs {
				if got, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if err != nil {
		return nil, fds, err
	}
	if n == 0 {
		return nil, fds, io.EOF
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return nil, fds, errors.New("nsexec: too many descriptors in request")
	}
	if n < 4 {
		if _, err := io.ReadFull(c, hdr[n:]); err != nil {
			return nil, fds, unexpectedEOF(err)
		}
	}
	m, err := readPayload(c, hdr)
	return m, fds, err
}

// sentinels are the error categories a child's error keeps across the
// pipe, by name.
var sentinels = map[string]error{
	"volatile_dirty":     overlayfs.ErrVolatileDirty,
	"invalid_config":     overlayfs.ErrInvalidConfig,
	"options_too_long":   overlayfs.ErrOptionsTooLong,
	"landlock_unsupport": landlock.ErrUnsupported,
	"no_userns":          ErrNoUserNS,
	"no_sandbox":         ErrNoSandbox,
	"sandbox_policy":     errPolicy,
}

func toWireError(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{}
	var me *overlayfs.MountError
	if errors.As(err, &me) && me.Err != nil {
		w.Mount = &wireMount{Target: me.Target, Op: me.Op, Options: me.Options, Log: me.Log}
		err = me.Err
	}
	w.Msg = err.Error()
	var errno syscall.Errno
	if errors.As(err, &errno) {
		w.Errno = int(errno)
	}
	for name, s := range sentinels {
		if errors.Is(err, s) {
			w.Sentinel = name
			break
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && w.Errno != 0 && pe.Err == errno {
		w.PathOp, w.Path = pe.Op, pe.Path
	}
	return w
}

func (w *wireError) err() error {
	var err error = &remoteError{msg: w.Msg, errno: syscall.Errno(w.Errno), sentinel: sentinels[w.Sentinel]}
	if w.Path != "" && w.Errno != 0 && w.Sentinel == "" {
		err = &fs.PathError{Op: w.PathOp, Path: w.Path, Err: syscall.Errno(w.Errno)}
	}
	if w.Mount != nil {
		return &overlayfs.MountError{Target: w.Mount.Target, Op: w.Mount.Op, Options: w.Mount.Options, Log: w.Mount.Log, Err: err}
	}
	return err
}

// remoteError is an error that happened in a child: its message, and
// what errors.Is can still match.
type remoteError struct {
	msg      string
	errno    syscall.Errno
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Unwrap() []error {
	var errs []error
	if e.errno != 0 {
		errs = append(errs, e.errno)
	}
	if e.sentinel != nil {
		errs = append(errs, e.sentinel)
	}
	return errs
}
