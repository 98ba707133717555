package sandbox

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"github.com/stratafs/strata/seccomp"
)

func agentReq() Request {
	return Request{Target: "/w", Tmp: "/tmp", RO: []string{"/ro"}, RW: []string{"/var/tmp"}, ConnectTCP: []uint16{443}}
}

// TestKey: every field but CacheDir is part of the key.
func TestKey(t *testing.T) {
	base := agentReq()
	if k := base.Key(); k != agentReq().Key() {
		t.Fatal("equal requests, different keys")
	}
	same := agentReq()
	same.CacheDir = "/elsewhere"
	if same.Key() != base.Key() {
		t.Error("CacheDir changed the key")
	}
	for name, mod := range map[string]func(*Request){
		"strict":       func(r *Request) { r.Strict = true },
		"target":       func(r *Request) { r.Target = "/x" },
		"tmp":          func(r *Request) { r.Tmp = "/tmp2" },
		"ro":           func(r *Request) { r.RO = append(r.RO, "/b") },
		"ro to rw":     func(r *Request) { r.RO, r.RW = nil, append(r.RW, "/ro") },
		"path split":   func(r *Request) { r.RO = []string{"/r", "o"} },
		"rw":           func(r *Request) { r.RW = nil },
		"connect":      func(r *Request) { r.ConnectTCP = []uint16{80} },
		"connect→bind": func(r *Request) { r.ConnectTCP, r.BindTCP = nil, []uint16{443} },
		"abi":          func(r *Request) { r.RequireABI = 4 },
	} {
		r := agentReq()
		mod(&r)
		if r.Key() == base.Key() {
			t.Errorf("%s: same key", name)
		}
	}
}

// TestCache: a repeated request is planned once and gets the same plan,
// equal to a fresh Build; another request is planned anew; a failure is
// not kept; the cache stays bounded.
func TestCache(t *testing.T) {
	builds := 0
	c := &Cache{build: func(r Request) (*Plan, error) { builds++; return Build(r) }}
	req := agentReq()
	p1, hit, err := c.Get(req)
	if err != nil || hit {
		t.Fatalf("first Get: hit %v, %v", hit, err)
	}
	req.RO[0] = "/changed" // the caller reuses its slices
	p2, hit, err := c.Get(agentReq())
	if err != nil || !hit || p2 != p1 || builds != 1 {
		t.Fatalf("second Get: hit %v, same plan %v, builds %d, %v", hit, p2 == p1, builds, err)
	}
	fresh, err := Build(agentReq())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fresh, p2) {
		t.Fatalf("cached plan differs from a fresh one:\n%+v\n%+v", p2, fresh)
	}
	strict := agentReq()
	strict.Strict = true
	p3, hit, err := c.Get(strict)
	if err != nil || hit || builds != 2 || reflect.DeepEqual(p3.Seccomp, p1.Seccomp) {
		t.Fatalf("strict: hit %v, builds %d, same program %v, %v", hit, builds, reflect.DeepEqual(p3.Seccomp, p1.Seccomp), err)
	}

	boom := errors.New("boom")
	c2 := &Cache{build: func(Request) (*Plan, error) { builds++; return nil, boom }}
	for i := 0; i < 2; i++ {
		if _, _, err := c2.Get(req); !errors.Is(err, boom) {
			t.Fatal(err)
		}
	}
	if c2.Len() != 0 {
		t.Fatal("a failed plan was kept")
	}

	c3 := &Cache{build: func(Request) (*Plan, error) { return &Plan{}, nil }}
	for i := 0; i < 3*maxCached; i++ {
		r := agentReq()
		r.Target = fmt.Sprint("/w", i)
		if _, _, err := c3.Get(r); err != nil {
			t.Fatal(err)
		}
		if c3.Len() > maxCached {
			t.Fatalf("%d plans kept", c3.Len())
		}
	}
}

// TestBuildSeccomp: the plan's seccomp program is the embedded one for
// the mode (the same BPF libseccomp compiles).
func TestBuildSeccomp(t *testing.T) {
	for _, strict := range []bool{false, true} {
		r := agentReq()
		r.Strict = strict
		p, err := Build(r)
		if err != nil {
			t.Fatal(err)
		}
		pol := seccomp.Agent()
		if strict {
			pol = seccomp.Strict()
		}
		f, _ := seccomp.Plan(pol, runtime.GOARCH)
		want, err := seccomp.Program(f)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.Seccomp, want) {
			t.Errorf("strict=%v: program differs from seccomp.Program", strict)
		}
	}
}

// TestRequireABI: a requirement above the kernel's is an error, and is
// not cached.
func TestRequireABI(t *testing.T) {
	r := agentReq()
	r.RequireABI = 99
	var c Cache
	if _, _, err := c.Get(r); err == nil {
		t.Fatal("ABI 99 required: no error")
	}
	if c.Len() != 0 {
		t.Fatal("failed plan kept")
	}
}
