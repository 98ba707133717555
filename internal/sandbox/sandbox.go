// Package sandbox turns a sandbox mode into what nsexec applies right
// before exec: a Landlock rule set planned for this kernel's ABI and a
// seccomp program (the BPF libseccomp compiled at generate time, embedded
// in package seccomp). Terms: a *mode* is agent (Landlock fence + seccomp
// deny list) or strict (agent without network); a *request*, or policy,
// names the mode and the paths and ports the fence lets through; a *plan*
// is the result, ready for nsexec.Command. A keeper plans each request it
// is sent once and keeps the plan (Cache), so a repeated exec sends the
// small request and applies a ready plan.
//
// It links no SQLite and no cgo: the CLI and the keeper (strata-init)
// both use it.
package sandbox

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"

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
	// CacheDir is not used: the seccomp programs are embedded (package
	// seccomp). Kept until the CLI's call site stops setting it.
	CacheDir string
}

// Key is the request's identity as a cache key: equal requests (CacheDir
// aside) have equal keys, and any difference in mode, a path, its order,
// a port or the ABI requirement gives another key.
func (r Request) Key() string {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	strs := func(ss []string) {
		b = binary.AppendUvarint(b, uint64(len(ss)))
		for _, s := range ss {
			str(s)
		}
	}
	ports := func(ps []uint16) {
		b = binary.AppendUvarint(b, uint64(len(ps)))
		for _, p := range ps {
			b = binary.AppendUvarint(b, uint64(p))
		}
	}
	if r.Strict {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	str(r.Target)
	str(r.Tmp)
	strs(r.RO)
	strs(r.RW)
	ports(r.ConnectTCP)
	ports(r.BindTCP)
	b = binary.AppendVarint(b, int64(r.RequireABI))
	return string(b)
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
	pol := landlock.Agent(req.Target, req.Tmp, req.RO, req.RW)
	if req.Strict {
		pol = landlock.Strict(req.Target, req.Tmp, req.RO, req.RW)
	}
	return plan(req, pol, req.Strict)
}

// plan completes Landlock policy pol with the request's ports and ABI
// floor and plans it, with the agent's seccomp program, or the strict one.
func plan(req Request, pol landlock.Policy, strict bool) (*Plan, error) {
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
	if strict {
		sp = seccomp.Strict()
	}
	f, err := seccomp.Plan(sp, runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	if out.Seccomp, err = seccomp.Program(f); err != nil {
		return nil, err
	}
	return out, nil
}

// maxCached bounds a Cache: a keeper serves a handful of policies (the
// modes, and the --ro/--rw/--allow-* sets its commands use); one that is
// sent more distinct ones starts over rather than grow.
const maxCached = 64

// Cache keeps the plan of each request, so that a keeper plans a policy
// once: Landlock's ruleset and the seccomp program are ready for every
// later command with the same request. A failed plan is not kept. Plans
// are shared: callers must not modify them.
type Cache struct {
	mu    sync.Mutex
	plans map[string]*Plan
	// build plans a request on a miss (Build; tests count calls).
	build func(Request) (*Plan, error)
}

// Get returns the plan of req, planning it on the first request.
func (c *Cache) Get(req Request) (plan *Plan, hit bool, err error) {
	key := req.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.plans[key]; ok {
		return p, true, nil
	}
	build := c.build
	if build == nil {
		build = Build
	}
	// Planned under the lock: concurrent first requests of one policy
	// plan it once, and planning takes microseconds.
	p, err := build(cloneRequest(req))
	if err != nil {
		return nil, false, err
	}
	if c.plans == nil || len(c.plans) >= maxCached {
		c.plans = map[string]*Plan{}
	}
	c.plans[key] = p
	return p, false, nil
}

// Len is the number of plans kept.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.plans)
}

// cloneRequest copies req's slices: a kept plan must not change when the
// caller reuses its request's backing arrays.
func cloneRequest(r Request) Request {
	r.RO, r.RW = slices.Clone(r.RO), slices.Clone(r.RW)
	r.ConnectTCP, r.BindTCP = slices.Clone(r.ConnectTCP), slices.Clone(r.BindTCP)
	return r
}
