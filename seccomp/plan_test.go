package seccomp

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
)

func names(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		if !slices.Contains(out, r.Syscall) {
			out = append(out, r.Syscall)
		}
	}
	return out
}

func find(rules []Rule, syscall string) []Rule {
	var out []Rule
	for _, r := range rules {
		if r.Syscall == syscall {
			out = append(out, r)
		}
	}
	return out
}

func TestPlanArches(t *testing.T) {
	tests := []struct {
		goarch string
		arches []string
	}{
		{"amd64", []string{"amd64", "x86", "x32"}},
		{"386", []string{"x86"}},
		{"arm64", []string{"arm64", "arm"}},
		{"arm", []string{"arm"}},
	}
	for _, tt := range tests {
		f, err := Plan(Agent(), tt.goarch)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range f.Arches {
			got = append(got, a.Arch)
		}
		if !slices.Equal(got, tt.arches) {
			t.Errorf("%s: arches %v; want %v", tt.goarch, got, tt.arches)
		}
	}
	if _, err := Plan(Agent(), "riscv64"); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("riscv64: err = %v; want ErrUnsupportedArch", err)
	}
}

// TestPlanRules pins, per arch and policy, what is denied and how.
func TestPlanRules(t *testing.T) {
	always := []string{
		"ptrace", "process_vm_readv", "process_vm_writev",
		"mount", "umount2", "pivot_root", "move_mount", "fsopen", "fsmount", "fsconfig", "fspick", "open_tree", "mount_setattr", "open_tree_attr",
		"kexec_load", "init_module", "finit_module", "delete_module", "bpf", "perf_event_open", "userfaultfd",
		"keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
		"unshare", "setns", "clone", "clone3", "reboot", "swapon", "swapoff", "syslog", "acct",
		"settimeofday", "clock_settime", "clock_adjtime",
	}
	tests := []struct {
		arch        string
		policy      Policy
		has, hasNot []string
		sockets     int // socket rules
	}{
		{arch: "amd64", policy: Agent(), has: []string{"kexec_file_load", "iopl", "ioperm"},
			hasNot: []string{"socketcall", "stime", "umount", "vm86", "clock_settime64", "adjtimex", "socket"}},
		{arch: "x86", policy: Agent(), has: []string{"stime", "umount", "vm86", "vm86old", "clock_settime64", "clock_adjtime64", "iopl"},
			hasNot: []string{"kexec_file_load", "socketcall", "socket"}},
		{arch: "x32", policy: Agent(), has: []string{"kexec_file_load", "iopl"}, hasNot: []string{"socketcall", "stime"}},
		{arch: "arm64", policy: Agent(), has: []string{"kexec_file_load"}, hasNot: []string{"iopl", "stime", "clock_settime64"}},
		{arch: "arm", policy: Agent(), has: []string{"clock_settime64"}, hasNot: []string{"iopl", "socketcall"}},
		{arch: "amd64", policy: Strict(), has: []string{"socket"}, hasNot: []string{"socketcall"}, sockets: 17},
		{arch: "x86", policy: Strict(), has: []string{"socket", "socketcall"}, sockets: 17},
		{arch: "arm64", policy: Strict(), has: []string{"socket"}, sockets: 17},
	}
	goarch := map[string]string{"amd64": "amd64", "x86": "amd64", "x32": "amd64", "arm64": "arm64", "arm": "arm64"}
	for _, tt := range tests {
		f, err := Plan(tt.policy, goarch[tt.arch])
		if err != nil {
			t.Fatal(err)
		}
		rules := f.Rules(tt.arch)
		got := names(rules)
		for _, n := range append(slices.Clone(always), tt.has...) {
			if !slices.Contains(got, n) {
				t.Errorf("%s %+v: %s not denied", tt.arch, tt.policy, n)
			}
		}
		for _, n := range tt.hasNot {
			if slices.Contains(got, n) {
				t.Errorf("%s %+v: %s denied", tt.arch, tt.policy, n)
			}
		}
		if n := len(find(rules, "socket")); n != tt.sockets {
			t.Errorf("%s %+v: %d socket rules; want %d", tt.arch, tt.policy, n, tt.sockets)
		}
		for _, r := range rules {
			want := "EPERM"
			if r.Syscall == "clone3" {
				want = "ENOSYS" // so that glibc falls back to clone
			}
			if r.Errno != want {
				t.Errorf("%s: %s fails with %s; want %s", tt.arch, r.Syscall, r.Errno, want)
			}
		}
	}
}

// TestPlanNamespaceFlags: unshare and clone are denied exactly when a
// CLONE_NEW* flag is set; clone leaves out CLONE_NEWTIME, which shares its
// bit with clone's exit signal.
func TestPlanNamespaceFlags(t *testing.T) {
	f, err := Plan(Agent(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	matches := func(rules []Rule, flags uint64) bool {
		for _, r := range rules {
			a := r.Args[0]
			if a.Index != 0 || a.Op != OpMaskedEq {
				t.Fatalf("unexpected condition %+v", a)
			}
			if flags&a.Mask == a.Value {
				return true
			}
		}
		return false
	}
	unshare, clone := find(f.Rules("amd64"), "unshare"), find(f.Rules("amd64"), "clone")
	for _, tt := range []struct {
		flags          uint64
		unshare, clone bool
	}{
		{flags: 0},
		{flags: 0x00000200 | 0x00000400},      // CLONE_FS|CLONE_FILES
		{flags: 0x00004000 | 0x00000100 | 17}, // vfork: CLONE_VFORK|CLONE_VM|SIGCHLD
		{flags: 0x003d0f00 | 17},              // pthread_create's flags
		{flags: cloneNewUser, unshare: true, clone: true},
		{flags: cloneNewNS | 17, unshare: true, clone: true},
		{flags: cloneNewNet | cloneNewPID, unshare: true, clone: true},
		{flags: cloneNewCgroup, unshare: true, clone: true},
		{flags: cloneNewUTS, unshare: true, clone: true},
		{flags: cloneNewIPC, unshare: true, clone: true},
		{flags: cloneNewTime, unshare: true, clone: false},
	} {
		if got := matches(unshare, tt.flags); got != tt.unshare {
			t.Errorf("unshare(%#x) denied = %v; want %v", tt.flags, got, tt.unshare)
		}
		if got := matches(clone, tt.flags); got != tt.clone {
			t.Errorf("clone(%#x) denied = %v; want %v", tt.flags, got, tt.clone)
		}
	}
}

// TestPlanSocketFamilies evaluates strict's socket rules like the kernel's
// BPF would, for each address family.
func TestPlanSocketFamilies(t *testing.T) {
	f, err := Plan(Strict(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	rules := find(f.Rules("amd64"), "socket")
	denied := func(args ...uint64) bool {
		for _, r := range rules {
			all := true
			for _, a := range r.Args {
				v := args[a.Index]
				switch a.Op {
				case OpEq:
					all = all && v == a.Value
				case OpNe:
					all = all && v != a.Value
				case OpGt:
					all = all && v > a.Value
				case OpMaskedEq:
					all = all && v&a.Mask == a.Value
				}
			}
			if all {
				return true
			}
		}
		return false
	}
	for fam := uint64(0); fam < 64; fam++ {
		want := fam != afUnix && fam != afNetlink
		if got := denied(fam, 1, 0); got != want {
			t.Errorf("socket(%d, SOCK_STREAM, 0) denied = %v; want %v", fam, got, want)
		}
	}
	if !denied(afNetlink, 3, 9) {
		t.Error("NETLINK_AUDIT allowed")
	}
	if !denied(1<<32|afUnix, 1, 0) {
		t.Error("AF_UNIX with garbage in the upper half allowed: the kernel would see AF_UNIX, but rules must fail closed")
	}
}

// TestPlanGenericNumbers: syscalls numbered 424+ carry their number so an
// older libseccomp can filter them; on x32 with the x32 bit.
func TestPlanGenericNumbers(t *testing.T) {
	f, err := Plan(Strict(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	for arch, want := range map[string]int{"amd64": 467, "x86": 467, "x32": 467 | x32SyscallBit} {
		if r := find(f.Rules(arch), "open_tree_attr"); len(r) != 1 || r[0].Nr != want {
			t.Errorf("%s open_tree_attr: %+v; want nr %d", arch, r, want)
		}
	}
	for _, arch := range []string{"amd64", "x86", "x32"} {
		if r := find(f.Rules(arch), "socket"); r[0].Nr != 0 {
			t.Errorf("%s socket nr = %d; want resolved by name", arch, r[0].Nr)
		}
	}
	if r := find(f.Rules("amd64"), "ptrace"); r[0].Nr != 0 {
		t.Errorf("ptrace nr = %d; want resolved by name", r[0].Nr)
	}
}

func TestPlanAllow(t *testing.T) {
	f, err := Plan(Policy{Allow: []string{"ptrace", "clone3"}}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range f.Arches {
		if len(find(a.Rules, "ptrace"))+len(find(a.Rules, "clone3")) != 0 {
			t.Errorf("%s: allowed syscalls still denied", a.Arch)
		}
		if len(find(a.Rules, "process_vm_readv")) != 1 {
			t.Errorf("%s: Allow removed too much", a.Arch)
		}
	}
	for _, bad := range []string{"read", "socket", ""} {
		if _, err := Plan(Policy{Allow: []string{bad}}, "amd64"); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Allow %q: err = %v; want ErrInvalidPolicy", bad, err)
		}
	}
}

func TestFilterJSON(t *testing.T) {
	f, err := Plan(Strict(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var back Filter
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, f) {
		t.Error("JSON round trip changed the filter")
	}
}

func TestFilterKey(t *testing.T) {
	a, err := Plan(Agent(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(Agent(), "amd64")
	if a.Key() != b.Key() {
		t.Fatal("equal plans, different keys")
	}
	s, _ := Plan(Strict(), "amd64")
	if s.Key() == a.Key() {
		t.Fatal("agent and strict plans share a key")
	}
	// Every field counts.
	for name, change := range map[string]func(f *Filter){
		"arch":    func(f *Filter) { f.Arches[0].Arch = "x" },
		"syscall": func(f *Filter) { f.Arches[0].Rules[0].Syscall += "x" },
		"errno":   func(f *Filter) { f.Arches[0].Rules[0].Errno = "ENOSYS" + f.Arches[0].Rules[0].Errno },
		"nr":      func(f *Filter) { f.Arches[0].Rules[0].Nr++ },
		"arg": func(f *Filter) {
			f.Arches[0].Rules[0].Args = append(f.Arches[0].Rules[0].Args, Arg{Index: 1, Op: "eq", Value: 2})
		},
		"rule": func(f *Filter) { f.Arches[0].Rules = f.Arches[0].Rules[1:] },
	} {
		c, _ := Plan(Agent(), "amd64")
		change(c)
		if c.Key() == a.Key() {
			t.Errorf("changing the %s does not change the key", name)
		}
	}
}
