// Package sandbox turns a sandbox mode into what nsexec applies right
// before exec: a Landlock rule set planned for this kernel's ABI and a
// seccomp program compiled to BPF, with the compiled programs cached on
// disk. Terms: a *mode* is agent (Landlock fence + seccomp deny list) or
// strict (agent without network); a *request* names the paths the fence
// lets through; a *plan* is the result, ready for nsexec.Command.
package sandbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/seccomp"
)

// Request is what a sandboxed command may reach.
type Request struct {
	Strict bool // strict mode: no network
	// Target is the workspace in the command's view; Tmp its private
	// temporary directory.
	Target, Tmp string
	RO, RW      []string // further paths, read-only / read-write
	ConnectTCP  []uint16 // TCP ports connect(2) may reach (Landlock ABI 4+)
	BindTCP     []uint16 // TCP ports bind(2) may use (Landlock ABI 4+)
	RequireABI  int      // refuse when Landlock's ABI is older
	// CacheDir holds compiled seccomp programs; empty: no cache.
	CacheDir string
}

// Plan is a request planned for this kernel.
type Plan struct {
	// Landlock is nil when the kernel enforces nothing of the request.
	Landlock *landlock.Ruleset
	Seccomp  [][]unix.SockFilter
	// Warnings say what the kernel cannot enforce.
	Warnings []string
}

// Build plans the Landlock and seccomp policies of a request.
func Build(req Request) (*Plan, error) {
	var pol landlock.Policy
	if req.Strict {
		pol = landlock.Strict(req.Target, req.Tmp, req.RO, req.RW)
	} else {
		pol = landlock.Agent(req.Target, req.Tmp, req.RO, req.RW)
	}
	pol.ConnectTCP = append(pol.ConnectTCP, req.ConnectTCP...)
	pol.BindTCP = append(pol.BindTCP, req.BindTCP...)
	pol.RequireABI = req.RequireABI
	abi, _ := landlock.ABI()
	rs, err := landlock.Plan(pol, abi)
	if err != nil {
		return nil, err
	}
	out := &Plan{Warnings: rs.Warnings}
	if rs.Enforced() {
		out.Landlock = rs
	}
	sp := seccomp.Agent()
	if req.Strict {
		sp = seccomp.Strict()
	}
	f, err := seccomp.Plan(sp, runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	if out.Seccomp, err = compile(f, req.CacheDir); err != nil {
		return nil, err
	}
	return out, nil
}

// compile compiles a filter to BPF, through a cache in dir: libseccomp's
// compile costs about a millisecond, which every sandboxed exec would pay
// (the sandbox's target is to add under 1 ms). The key covers the plan and
// libseccomp's version, which decide the program.
func compile(f *seccomp.Filter, dir string) ([][]unix.SockFilter, error) {
	var file string
	if dir != "" {
		key := f.Key()
		_, lib := seccomp.Available()
		sum := sha256.Sum256(append(append(key[:], 0), lib...))
		file = filepath.Join(dir, "seccomp-"+hex.EncodeToString(sum[:12])+".bpf")
		if b, err := os.ReadFile(file); err == nil {
			if progs, ok := decodeBPF(b); ok {
				return progs, nil
			}
		}
	}
	progs, err := seccomp.Compile(f)
	if err != nil {
		return nil, err
	}
	// A cache that cannot be written (a read-only store) only costs time.
	if file != "" && os.MkdirAll(dir, 0o700) == nil {
		_ = writeAtomic(file, encodeBPF(progs))
	}
	return progs, nil
}

// writeAtomic writes b into a temporary file beside path and renames it
// into place: no reader sees a cache entry half written.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// encodeBPF lays out programs as: count, then per program its length and
// its instructions (code u16, jt u8, jf u8, k u32), little endian.
func encodeBPF(progs [][]unix.SockFilter) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(progs)))
	for _, p := range progs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		for _, in := range p {
			b = binary.LittleEndian.AppendUint16(b, in.Code)
			b = append(b, in.Jt, in.Jf)
			b = binary.LittleEndian.AppendUint32(b, in.K)
		}
	}
	return b
}

func decodeBPF(b []byte) ([][]unix.SockFilter, bool) {
	if len(b) < 4 {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if n == 0 || n > 16 {
		return nil, false
	}
	progs := make([][]unix.SockFilter, 0, n)
	for i := uint32(0); i < n; i++ {
		if len(b) < 4 {
			return nil, false
		}
		m := binary.LittleEndian.Uint32(b)
		b = b[4:]
		// BPF_MAXINSNS is 4096 (include/uapi/linux/bpf_common.h).
		if m == 0 || m > 4096 || uint64(len(b)) < uint64(m)*8 {
			return nil, false
		}
		p := make([]unix.SockFilter, m)
		for j := range p {
			p[j] = unix.SockFilter{Code: binary.LittleEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.LittleEndian.Uint32(b[4:])}
			b = b[8:]
		}
		progs = append(progs, p)
	}
	return progs, len(b) == 0
}
