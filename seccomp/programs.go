package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

//go:generate go run ./internal/gen

// ErrNotCompiled means no compiled program is embedded for a plan: strata
// embeds programs for Presets on every GOARCHes arch only, compiled by
// libseccomp at `go generate` time (see programs_gen.go).
var ErrNotCompiled = errors.New("seccomp: no compiled program for this plan")

// Preset is a named policy the CLI asks for (--sandbox agent|strict).
type Preset struct {
	Name   string
	Policy Policy
}

// Presets are the policies whose programs are compiled and embedded.
func Presets() []Preset { return []Preset{{"agent", Agent()}, {"strict", Strict()}} }

// GOARCHes are the Go architectures Plan knows, sorted.
func GOARCHes() []string {
	var out []string
	for a := range archFamilies {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// compiledPlan is one embedded program set (programs_gen.go).
type compiledPlan struct {
	goarch, policy string
	key            string // Filter.Key, as 32 raw bytes
	progs          string // EncodePrograms
}

// CompiledBy names the libseccomp that compiled the embedded programs.
func CompiledBy() string { return compiledBy }

// lookup returns the encoded programs of the plan whose key is key.
func lookup(key [32]byte) (compiledPlan, bool) {
	for _, c := range compiled {
		if c.key == string(key[:]) {
			return c, true
		}
	}
	return compiledPlan{}, false
}

func notCompiled(f *Filter) error {
	var arches []string
	for _, a := range f.Arches {
		arches = append(arches, a.Arch)
	}
	return fmt.Errorf("%w (arches %s): strata embeds programs for --sandbox agent and strict on %s, compiled by %s; a plan of its own needs `go generate ./seccomp` with libseccomp (seccomp/internal/gen)",
		ErrNotCompiled, strings.Join(arches, ","), strings.Join(GOARCHes(), ", "), compiledBy)
}

// Instruction is one classic BPF instruction, as struct sock_filter
// (Linux: include/uapi/linux/filter.h).
type Instruction struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// EncodePrograms lays out programs as: count, then per program its length
// and its instructions (code u16, jt u8, jf u8, k u32), little endian.
func EncodePrograms(progs [][]Instruction) []byte {
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

// bpfMaxInsns is BPF_MAXINSNS (Linux: include/uapi/linux/bpf_common.h):
// the kernel refuses a longer classic program.
const bpfMaxInsns = 4096

// DecodePrograms reverses EncodePrograms; ok is false for anything it
// did not write (truncated, trailing bytes, empty or oversized programs).
func DecodePrograms(b []byte) (progs [][]Instruction, ok bool) {
	if len(b) < 4 {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if n == 0 || n > 16 {
		return nil, false
	}
	progs = make([][]Instruction, 0, n)
	for i := uint32(0); i < n; i++ {
		if len(b) < 4 {
			return nil, false
		}
		m := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if m == 0 || m > bpfMaxInsns || uint64(len(b)) < uint64(m)*8 {
			return nil, false
		}
		p := make([]Instruction, m)
		for j := range p {
			p[j] = Instruction{Code: binary.LittleEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.LittleEndian.Uint32(b[4:])}
			b = b[8:]
		}
		progs = append(progs, p)
	}
	return progs, len(b) == 0
}

// Compiled returns the programs compiled for f, which the plan's key
// alone selects; ErrNotCompiled when none is embedded.
func Compiled(f *Filter) ([][]Instruction, error) {
	if f == nil || len(f.Arches) == 0 {
		return nil, fmt.Errorf("seccomp: %w: empty filter", ErrInvalidPolicy)
	}
	c, ok := lookup(f.Key())
	if !ok {
		return nil, notCompiled(f)
	}
	progs, ok := DecodePrograms([]byte(c.progs))
	if !ok {
		return nil, fmt.Errorf("seccomp: the embedded program of %s/%s does not decode: regenerate programs_gen.go", c.policy, c.goarch)
	}
	return progs, nil
}
