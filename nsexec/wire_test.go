package nsexec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/overlayfs"
)

// TestCodec: configurations and frames survive the trip to the child.
func TestCodec(t *testing.T) {
	prog := bpfProgram{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, Jf: 2, K: 0xc000003e},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	cmd := &wireCommand{
		Argv: []string{"sh", "-c", "echo \x00 ü"}, Env: []string{"A=1", "B="}, Dir: "/w", TTY: true, NetNone: true,
		Landlock: &landlock.Ruleset{ABI: 7, KernelABI: 9, HandledFS: 1<<16 - 1, HandledNet: 3, Scoped: 3, Flags: 2,
			Paths: []landlock.PathRule{{Path: "/w", Access: 7}, {Path: "/usr", Access: 1}},
			Ports: []landlock.PortRule{{Port: 443, Access: 2}}},
		Seccomp: []bpfProgram{prog, prog[:1]},
		View:    true, Binds: []Bind{{Source: "/h/.pyenv", Target: "/h/.pyenv"}, {Source: "/c", Target: "/c", RW: true}},
	}
	policyCmd := &wireCommand{Argv: []string{"true"}, View: true,
		Policy: &sandbox.Request{Strict: true, Target: "/w", Tmp: "/tmp", RO: []string{"/a", ""}, RW: []string{"/var/tmp"},
			ConnectTCP: []uint16{443, 65535}, BindTCP: []uint16{8080}, RequireABI: 4}}
	cfg := &childConfig{Version: protoVersion, Name: "ws", Dir: "/s", Target: "/t",
		Mount:  overlayfs.Config{Lowers: []string{"/l1", "/l2"}, Upper: "/u", Work: "/w", UserXattr: true, Volatile: true},
		Method: overlayfs.FsconfigFD, UserNS: true, SubIDs: true, Command: cmd,
		Binds: []Bind{{Source: "/r/.git/objects", Target: "/tmp/o"}}, View: []Bind{{Source: "/v", Target: "/v", RW: true}}}
	var e encoder
	e.config(cfg)
	d := decoder{b: e.b}
	back, err := d.config()
	if err != nil || !reflect.DeepEqual(back, cfg) {
		t.Errorf("config: %+v, %v;\nwant %+v", back, err, cfg)
	}
	for cut := range len(e.b) {
		d := decoder{b: e.b[:cut]}
		if _, err := d.config(); err == nil {
			t.Fatalf("config cut at %d of %d decoded", cut, len(e.b))
		}
	}
	e = encoder{}
	e.config(&childConfig{Version: 1})
	d = decoder{b: e.b}
	if _, err := d.config(); err == nil || !strings.Contains(err.Error(), "same build") {
		t.Errorf("version mismatch: %v", err)
	}

	for _, m := range []*message{
		{Version: protoVersion, Command: cmd},
		{Version: protoVersion, Command: policyCmd},
		{Signal: 2},
		{Started: 12345},
		{Started: 12345, Warnings: []string{"Landlock ABI 3: no network rules", "w2"}},
		{Version: protoVersion, PTY: true},
		{Exited: &ExitStatus{Code: 130, Signal: unix.SIGINT}},
		{Error: &wireError{Msg: "m", Errno: 2, Sentinel: "x", PathOp: "open", Path: "/p", Mount: &wireMount{Target: "/t", Op: "fsmount", Options: "o", Log: []string{"e a", "e b"}}}},
	} {
		var buf bytes.Buffer
		if err := writeFrame(&buf, m); err != nil {
			t.Fatal(err)
		}
		back, err := readFrame(&buf)
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Errorf("frame: %+v, %v; want %+v", back, err, m)
		}
	}
	if _, err := toWireCommand(Command{Argv: []string{"x"}, Seccomp: [][]unix.SockFilter{{}}}, nil); err == nil {
		t.Error("an empty seccomp program was accepted")
	}
	if _, err := toWireCommand(Command{}, nil); err == nil {
		t.Error("an empty command was accepted")
	}
	if _, err := toWireCommand(Command{Argv: []string{"x"}, Policy: &sandbox.Request{}, Seccomp: [][]unix.SockFilter{{{Code: 6}}}}, nil); err == nil {
		t.Error("a command with both a policy and a plan was accepted")
	}
	// A port above 65535 is refused, not truncated to another port.
	e = encoder{}
	e.uint(1)
	e.uint(70000)
	d = decoder{b: e.b}
	if d.ports(); d.err == nil {
		t.Error("port 70000 decoded")
	}
}

// FuzzDecode: the child's decoders reject garbage without panicking or
// allocating much, and whatever decodes re-encodes to bytes that decode to
// an equal value (decode → encode → decode is the identity).
func FuzzDecode(f *testing.F) {
	cmd := &wireCommand{Argv: []string{"a"}, Env: []string{"K=v"}, Dir: "/d", TTY: true,
		Landlock: &landlock.Ruleset{ABI: 4, HandledFS: 3, Paths: []landlock.PathRule{{Path: "/", Access: 1}}, Ports: []landlock.PortRule{{Port: 80, Access: 2}}},
		Seccomp:  []bpfProgram{{{Code: 6, Jt: 1, Jf: 2, K: 3}}}}
	var e encoder
	e.config(&childConfig{Version: protoVersion, Name: "n", Mount: overlayfs.Config{Lowers: []string{"/l"}, Volatile: true},
		Binds: []Bind{{Source: "/s", Target: "/t"}}, Command: cmd})
	f.Add(e.b)
	for _, m := range []*message{
		{Version: protoVersion, Command: cmd, Freeze: true},
		{Version: protoVersion, Command: &wireCommand{Argv: []string{"a"}, Policy: &sandbox.Request{Target: "/w", RO: []string{"/r"}, ConnectTCP: []uint16{1}}}},
		{Signal: -2, Started: 7, Exited: &ExitStatus{Code: 130, Signal: unix.SIGINT}, Warnings: []string{"w"}},
		{Error: &wireError{Msg: "m", Errno: 2, Path: "/p", Mount: &wireMount{Target: "/t", Log: []string{"e"}}}},
	} {
		e = encoder{}
		e.message(m)
		f.Add(e.b)
	}
	f.Add([]byte{protoVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := decoder{b: b}
		if c, err := d.config(); err == nil {
			var e encoder
			e.config(c)
			d := decoder{b: e.b}
			back, err := d.config()
			if err != nil || !reflect.DeepEqual(back, c) {
				t.Errorf("config %s re-encoded decodes to %s, %v", asJSON(c), asJSON(back), err)
			}
		}
		d = decoder{b: b}
		if m, err := d.message(); err == nil {
			var e encoder
			e.message(m)
			d := decoder{b: e.b}
			back, err := d.message()
			if err != nil || !reflect.DeepEqual(back, m) {
				t.Errorf("message %s re-encoded decodes to %s, %v", asJSON(m), asJSON(back), err)
			}
		}
	})
}

// asJSON shows a decoded value with what its pointers point to.
func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v (%v)", v, err)
	}
	return string(b)
}

// TestWireFields fails when a type the codec copies field by field gains
// a field: the codec must then carry it (or say why not), lest the child
// apply less than the parent planned.
func TestWireFields(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		// Skipped and Warnings are for the parent only.
		{landlock.Ruleset{}, "ABI KernelABI HandledFS HandledNet Scoped Flags Paths Ports Skipped Warnings"},
		{landlock.PathRule{}, "Path Access"},
		{landlock.PortRule{}, "Port Access"},
		{overlayfs.Config{}, "Lowers Upper Work UserXattr RedirectDir Volatile"},
		{ExitStatus{}, "Code Signal"},
		{overlayfs.MountError{}, "Target Op Options Log Err"},
		// CacheDir is the CLI's and unused.
		{sandbox.Request{}, "Strict Target Tmp RO RW ConnectTCP BindTCP RequireABI CacheDir"},
	} {
		var names []string
		typ := reflect.TypeOf(tc.v)
		for i := range typ.NumField() {
			names = append(names, typ.Field(i).Name)
		}
		if got := strings.Join(names, " "); got != tc.want {
			t.Errorf("%s has fields %s; the codec in wire.go knows %s", typ, got, tc.want)
		}
	}
}

// TestWireError: a child's error keeps what callers branch on.
func TestWireError(t *testing.T) {
	roundTrip := func(err error) error {
		var buf bytes.Buffer
		if werr := writeFrame(&buf, &message{Error: toWireError(err)}); werr != nil {
			t.Fatal(werr)
		}
		m, rerr := readFrame(&buf)
		if rerr != nil {
			t.Fatal(rerr)
		}
		return m.Error.err()
	}
	mount := &overlayfs.MountError{Target: "/ws", Op: "fsconfig create", Options: "lowerdir+=x", Log: []string{"e overlay: bad"}, Err: unix.EINVAL}
	got := roundTrip(mount)
	var me *overlayfs.MountError
	if !errors.As(got, &me) || !errors.Is(got, unix.EINVAL) || me.Target != "/ws" || me.Op != "fsconfig create" || got.Error() != mount.Error() {
		t.Errorf("MountError: %#v %q; want %q", got, got, mount)
	}

	prep := &overlayfs.MountError{Target: "/ws", Op: "prepare", Err: &fs.PathError{Op: "stat", Path: "/l", Err: unix.ENOENT}}
	got = roundTrip(prep)
	var pe *fs.PathError
	if !errors.As(got, &pe) || !errors.Is(got, fs.ErrNotExist) || pe.Path != "/l" || got.Error() != prep.Error() {
		t.Errorf("PathError: %q; want %q", got, prep)
	}

	dirty := &overlayfs.MountError{Target: "/ws", Op: "prepare", Err: fmt.Errorf("%w: marker", overlayfs.ErrVolatileDirty)}
	if got := roundTrip(dirty); !errors.Is(got, overlayfs.ErrVolatileDirty) || got.Error() != dirty.Error() {
		t.Errorf("volatile: %q", got)
	}
	plain := fmt.Errorf("listen: %w", unix.EADDRINUSE)
	if got := roundTrip(plain); !errors.Is(got, unix.EADDRINUSE) || got.Error() != plain.Error() {
		t.Errorf("plain: %q", got)
	}
}

// TestLookPath: command resolution and the shell's 126/127.
func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "data"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(bin, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "local"), []byte("#!/bin/sh\n"), 0o755)
	for _, tt := range []struct {
		name, path string
		want       string
		code       int
	}{
		{"tool", "/nonexistent:" + bin, bin + "/tool", 0},
		{"data", bin, "", 126},
		{"sub", bin, "", 127},
		{"missing", bin, "", 127},
		{"local", ":" + bin, "./local", 0}, // an empty entry is the working directory
		{"tool", "bin", "./bin/tool", 0},   // relative entries too
		{"./local", "", "./local", 0},
		{"./missing", "", "", 127},
		{"bin", "", "", 127},
		{"./bin", "", "", 126},
		{"./data-not-here", bin, "", 127},
	} {
		got, code, msg := lookPath(tt.name, tt.path, dir)
		if got != tt.want || code != tt.code {
			t.Errorf("lookPath(%q, %q) = %q, %d (%s); want %q, %d", tt.name, tt.path, got, code, msg, tt.want, tt.code)
		}
	}
	if v := envValue([]string{"PATH=/a", "X=1", "PATH=/b"}, "PATH", "def"); v != "/b" {
		t.Errorf("envValue: %q", v)
	}
	if v := envValue(nil, "PATH", "def"); v != "def" {
		t.Errorf("envValue default: %q", v)
	}
}

// TestFrames: frames with descriptors across a socket pair.
func TestFrames(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newConn(fds[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newConn(fds[1], "b")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	r, w, _ := os.Pipe()
	defer r.Close()
	big := &wireCommand{Argv: []string{"x"}, Env: []string{"BIG=" + string(bytes.Repeat([]byte("v"), 1<<20))}}
	go func() {
		writeFrameFDs(a, &message{Version: protoVersion, Command: big}, []int{int(w.Fd()), int(w.Fd()), int(w.Fd())})
		writeFrame(a, &message{Signal: 2})
	}()
	m, got, err := readFrameFDs(b, 3)
	if err != nil || len(got) != 3 || m.Command == nil || m.Command.Env[0] != big.Env[0] {
		t.Fatalf("readFrameFDs: %d fds, %v", len(got), err)
	}
	for _, fd := range got {
		if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("received fd %d is not close-on-exec", fd)
		}
	}
	unix.Write(got[1], []byte("through"))
	for _, fd := range got {
		unix.Close(fd)
	}
	w.Close()
	buf := make([]byte, 16)
	if n, _ := r.Read(buf); string(buf[:n]) != "through" {
		t.Errorf("passed descriptor: read %q", buf[:n])
	}
	if m, err := readFrame(b); err != nil || m.Signal != 2 {
		t.Errorf("second frame: %+v, %v", m, err)
	}
}
