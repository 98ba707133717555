package seccomp

import (
	"slices"
	"testing"
)

// TestPlanNoNamespaces: the plan is Plan's plus a deny of AF_UNIX sockets
// on every arch (its low 32 bits), and socketcall on i386.
func TestPlanNoNamespaces(t *testing.T) {
	for _, p := range []Policy{Agent(), Strict()} {
		base, err := Plan(p, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		f, err := PlanNoNamespaces(p, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		unixDeny := Rule{Syscall: "socket", Errno: "EPERM", Args: []Arg{{Index: 0, Op: OpMaskedEq, Mask: 0xffffffff, Value: 1}}}
		for i, a := range f.Arches {
			if !slices.ContainsFunc(a.Rules, func(r Rule) bool { return r.Syscall == unixDeny.Syscall && slices.Equal(r.Args, unixDeny.Args) }) {
				t.Errorf("%s: no AF_UNIX deny", a.Arch)
			}
			hasSocketcall := slices.ContainsFunc(a.Rules, func(r Rule) bool { return r.Syscall == "socketcall" })
			if hasSocketcall != (a.Arch == "x86") {
				t.Errorf("%s: socketcall denied %v", a.Arch, hasSocketcall)
			}
			extra := 1
			if a.Arch == "x86" && !p.DenyNetwork {
				extra = 2
			}
			if len(a.Rules) != len(base.Arches[i].Rules)+extra {
				t.Errorf("%s: %d rules, Plan has %d", a.Arch, len(a.Rules), len(base.Arches[i].Rules))
			}
		}
		if f.Key() == base.Key() {
			t.Error("same key as Plan's")
		}
	}
}
