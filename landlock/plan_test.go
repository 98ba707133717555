package landlock

import (
	"encoding/json"
	"errors"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fakeFS answers plan's stat from a table: true is a directory, false a
// file, absent does not exist.
type fakeFS map[string]bool

func (f fakeFS) stat(path string) (bool, error) {
	isDir, ok := f[path]
	if !ok {
		return false, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
	return isDir, nil
}

// A machine without /lib32, /libx32, /opt and /run/systemd/resolve.
var machine = fakeFS{
	"/ws": true, "/tmp/ws": true, "/dev/shm": true,
	"/usr": true, "/bin": true, "/sbin": true, "/lib": true, "/lib64": true, "/etc": true,
	"/proc": true, "/sys/devices/system/cpu": true, "/sys/devices/system/node": true,
	"/sys/fs/cgroup": true, "/sys/kernel/mm/transparent_hugepage": true,
	"/dev/null": false, "/dev/zero": false, "/dev/full": false, "/dev/random": false,
	"/dev/urandom": false, "/dev/tty": false, "/dev/ptmx": false, "/dev/pts": true,
	"/home/u/.gitconfig": false, "/data": true,
}

func TestPlanAgentPerABI(t *testing.T) {
	agent := Agent("/ws", "/tmp/ws", nil, nil)
	tests := []struct {
		abi       int
		fs        FSAccess
		scope     Scope
		warnings  []string // substrings, one per warning, in order
		wantRules bool
	}{
		{abi: 0, warnings: []string{"not available on this kernel (ABI 0)"}},
		{abi: 1, warnings: []string{"ABI 1: files are not restricted", "cannot enforce scope abstract_unix_socket,signal (needs ABI 6)"}},
		{abi: 2, fs: supportedFS(2), wantRules: true, warnings: []string{"cannot enforce truncate (needs ABI 3)", "ioctl_dev (needs ABI 5)", "(needs ABI 6)"}},
		{abi: 3, fs: supportedFS(3), wantRules: true, warnings: []string{"ioctl_dev (needs ABI 5)", "(needs ABI 6)"}},
		{abi: 4, fs: supportedFS(4), wantRules: true, warnings: []string{"ioctl_dev (needs ABI 5)", "(needs ABI 6)"}},
		{abi: 5, fs: fsAll, wantRules: true, warnings: []string{"ABI 5: cannot enforce scope abstract_unix_socket,signal (needs ABI 6)"}},
		{abi: 6, fs: fsAll, scope: ScopeSignal | ScopeAbstractUnixSocket, wantRules: true},
		{abi: 7, fs: fsAll, scope: ScopeSignal | ScopeAbstractUnixSocket, wantRules: true},
	}
	for _, tt := range tests {
		t.Run("abi"+string(rune('0'+tt.abi)), func(t *testing.T) {
			r, err := plan(agent, tt.abi, machine.stat)
			if err != nil {
				t.Fatal(err)
			}
			if r.ABI != tt.abi || r.KernelABI != tt.abi {
				t.Errorf("ABI %d, KernelABI %d; want %d", r.ABI, r.KernelABI, tt.abi)
			}
			if r.HandledFS != tt.fs {
				t.Errorf("HandledFS = %v; want %v", r.HandledFS, tt.fs)
			}
			if r.HandledNet != 0 {
				t.Errorf("HandledNet = %v; agent leaves TCP alone", r.HandledNet)
			}
			if r.Scoped != tt.scope {
				t.Errorf("Scoped = %v; want %v", r.Scoped, tt.scope)
			}
			if r.Flags != 0 {
				t.Errorf("Flags = %v; want none", r.Flags)
			}
			checkWarnings(t, r.Warnings, tt.warnings)
			if got := len(r.Paths) > 0; got != tt.wantRules {
				t.Fatalf("rules: %v; want rules %v", r.Paths, tt.wantRules)
			}
			if !tt.wantRules {
				return
			}
			if !slices.Equal(r.Skipped, []string{"/lib32", "/libx32", "/opt", "/run/systemd/resolve"}) {
				t.Errorf("Skipped = %q", r.Skipped)
			}
			for _, pr := range r.Paths {
				if pr.Access&^r.HandledFS != 0 {
					t.Errorf("%s: grants %v, not handled", pr.Path, pr.Access&^r.HandledFS)
				}
				if !machine[pr.Path] && pr.Access&^fsFile != 0 {
					t.Errorf("%s is a file but gets directory rights %v", pr.Path, pr.Access&^fsFile)
				}
			}
			want := map[string]FSAccess{
				"/ws":       fsRW & tt.fs,
				"/tmp/ws":   fsRW & tt.fs,
				"/dev/shm":  fsRW & tt.fs,
				"/usr":      fsRO,
				"/proc":     fsRO,
				"/dev/null": fsRWFiles & tt.fs,
				"/dev/pts":  fsRWFiles & tt.fs,
			}
			for path, access := range want {
				if got := ruleFor(r, path); got != access {
					t.Errorf("%s: %v; want %v", path, got, access)
				}
			}
			if tt.abi >= 2 && ruleFor(r, "/ws")&FSRefer == 0 {
				t.Error("workspace lacks refer: cross-directory renames would fail with EXDEV")
			}
			for _, outside := range []string{"/home", "/root", "/", "/tmp", "/dev", "/sys", "/var"} {
				if ruleFor(r, outside) != 0 {
					t.Errorf("agent grants %s", outside)
				}
			}
		})
	}
}

func TestPlanNetwork(t *testing.T) {
	tests := []struct {
		name     string
		policy   Policy
		abi      int
		net      NetAccess
		ports    []PortRule
		warnings []string
	}{
		{
			name:   "agent leaves TCP alone",
			policy: Agent("/ws", "", nil, nil), abi: 7,
		},
		{
			name:   "strict denies all TCP",
			policy: Strict("/ws", "", nil, nil), abi: 4,
			net: NetBindTCP | NetConnectTCP, ports: []PortRule{},
			warnings: []string{"ioctl_dev (needs ABI 5)", "(needs ABI 6)"},
		},
		{
			name:   "strict with ports",
			policy: withPorts(Strict("/ws", "", nil, nil), []uint16{443, 8080}, []uint16{8080}), abi: 7,
			net:   NetBindTCP | NetConnectTCP,
			ports: []PortRule{{443, NetConnectTCP}, {8080, NetConnectTCP | NetBindTCP}},
		},
		{
			name:   "allow-connect alone restricts connect only",
			policy: Policy{ConnectTCP: []uint16{5432}}, abi: 6,
			net: NetConnectTCP, ports: []PortRule{{5432, NetConnectTCP}},
		},
		{
			name:   "allow-bind alone restricts bind only",
			policy: Policy{BindTCP: []uint16{0, 3000}}, abi: 4,
			net: NetBindTCP, ports: []PortRule{{0, NetBindTCP}, {3000, NetBindTCP}},
		},
		{
			name:   "ABI 3 cannot enforce TCP",
			policy: withPorts(Strict("/ws", "", nil, nil), []uint16{443}, nil), abi: 3,
			warnings: []string{"ABI 3: cannot enforce bind_tcp,connect_tcp (needs ABI 4)", "ioctl_dev (needs ABI 5)", "(needs ABI 6)"},
		},
		{
			name:     "ABI 0",
			policy:   Policy{ConnectTCP: []uint16{1}},
			warnings: []string{"not available"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := plan(tt.policy, tt.abi, machine.stat)
			if err != nil {
				t.Fatal(err)
			}
			if r.HandledNet != tt.net {
				t.Errorf("HandledNet = %v; want %v", r.HandledNet, tt.net)
			}
			if tt.ports == nil {
				tt.ports = []PortRule{}
			}
			if !reflect.DeepEqual(r.Ports, tt.ports) {
				t.Errorf("Ports = %v; want %v", r.Ports, tt.ports)
			}
			if !tt.policy.restrictsFS() && (r.HandledFS != 0 || len(r.Paths) != 0) {
				t.Errorf("network-only policy restricts files: %v %v", r.HandledFS, r.Paths)
			}
			checkWarnings(t, r.Warnings, tt.warnings)
		})
	}
}

func withPorts(p Policy, connect, bind []uint16) Policy {
	p.ConnectTCP, p.BindTCP = connect, bind
	return p
}

func TestPlanPaths(t *testing.T) {
	p := Policy{
		RW:      []string{"/ws", "/ws/", "/nope", "/home/u/.gitconfig"},
		RO:      []string{"/usr", "/ws", "/nope"},
		ROFiles: []string{"/data"},
	}
	r, err := plan(p, 7, machine.stat)
	if err != nil {
		t.Fatal(err)
	}
	want := []PathRule{
		{"/ws", fsRW},
		{"/home/u/.gitconfig", fsRW & fsFile},
		{"/usr", fsRO},
		{"/data", fsROFiles},
	}
	if !reflect.DeepEqual(r.Paths, want) {
		t.Errorf("Paths =\n%v\nwant\n%v", r.Paths, want)
	}
	if !slices.Equal(r.Skipped, []string{"/nope"}) {
		t.Errorf("Skipped = %q", r.Skipped)
	}
	if len(r.Warnings) != 0 {
		t.Errorf("Warnings = %q", r.Warnings)
	}

	// A read-only policy needs no refer, so ABI 1 still restricts files.
	r, err = plan(Policy{RO: []string{"/usr"}}, 1, machine.stat)
	if err != nil {
		t.Fatal(err)
	}
	if r.HandledFS != supportedFS(1) || len(r.Paths) != 1 {
		t.Errorf("read-only on ABI 1: handled %v, paths %v", r.HandledFS, r.Paths)
	}
	checkWarnings(t, r.Warnings, []string{"ABI 1: cannot enforce truncate (needs ABI 3)", "ABI 1: cannot enforce ioctl_dev (needs ABI 5)"})

	// Stat errors other than "missing" are errors: the user named a path
	// strata cannot see.
	denied := func(string) (bool, error) { return false, fs.ErrPermission }
	if _, err := plan(Policy{RO: []string{"/root/x"}}, 7, denied); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("unreadable path: err = %v; want ErrPermission", err)
	}
}

func TestPlanLogging(t *testing.T) {
	p := Agent("/ws", "", nil, nil)
	p.LogExec = true
	r, err := plan(p, 6, machine.stat)
	if err != nil {
		t.Fatal(err)
	}
	checkWarnings(t, r.Warnings, []string{"ABI 6: cannot enforce log_new_exec_on (needs ABI 7)"})
	if r.Flags != 0 {
		t.Errorf("ABI 6 Flags = %v", r.Flags)
	}
	r, err = plan(p, 7, machine.stat)
	if err != nil {
		t.Fatal(err)
	}
	if r.Flags != LogNewExecOn {
		t.Errorf("ABI 7 Flags = %v; want log_new_exec_on", r.Flags)
	}
}

func TestPlanErrors(t *testing.T) {
	need := func(n int) Policy { p := Agent("/ws", "", nil, nil); p.RequireABI = n; return p }
	for abi := 0; abi <= MaxABI; abi++ {
		for n := 1; n <= MaxABI; n++ {
			_, err := plan(need(n), abi, machine.stat)
			if n <= abi {
				if err != nil {
					t.Errorf("require %d on ABI %d: %v", n, abi, err)
				}
				continue
			}
			var ae *ABIError
			if !errors.As(err, &ae) || ae.Have != abi || ae.Need != n || !errors.Is(err, ErrUnsupported) {
				t.Errorf("require %d on ABI %d: err = %v; want *ABIError{%d, %d}", n, abi, err, abi, n)
			}
		}
	}
	for _, p := range []Policy{
		need(MaxABI + 1),
		need(-1),
		{RW: []string{"ws"}},
		{RWFiles: []string{""}},
	} {
		if _, err := plan(p, 7, machine.stat); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%+v: err = %v; want ErrInvalidPolicy", p, err)
		}
	}
	if _, err := plan(Policy{}, -1, machine.stat); err == nil {
		t.Error("negative ABI accepted")
	}
}

// A kernel newer than MaxABI gets MaxABI's ruleset; Apply still learns the
// kernel's ABI for TSYNC.
func TestPlanNewerKernel(t *testing.T) {
	r, err := plan(Agent("/ws", "", nil, nil), 11, machine.stat)
	if err != nil {
		t.Fatal(err)
	}
	if r.ABI != MaxABI || r.KernelABI != 11 || r.HandledFS != fsAll {
		t.Errorf("ABI %d KernelABI %d HandledFS %v", r.ABI, r.KernelABI, r.HandledFS)
	}
}

func TestRulesetJSON(t *testing.T) {
	p := withPorts(Strict("/ws", "/tmp/ws", nil, nil), []uint16{443}, []uint16{0})
	p.LogExec = true
	r, err := plan(p, 7, machine.stat)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"handled_net":["bind_tcp","connect_tcp"]`, `"scoped":["abstract_unix_socket","signal"]`, `"refer"`, `"flags":["log_new_exec_on"]`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("JSON lacks %s:\n%s", s, b)
		}
	}
	var back Ruleset
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, r) {
		t.Errorf("round trip:\n%+v\n%+v", back, *r)
	}
	if err := json.Unmarshal([]byte(`{"handled_fs":["read_file","fly"]}`), &back); err == nil {
		t.Error("unknown right accepted")
	}
	if _, err := json.Marshal(FSAccess(1 << 40)); err == nil {
		t.Error("unknown bit marshalled")
	}
}

func ruleFor(r *Ruleset, path string) FSAccess {
	for _, pr := range r.Paths {
		if pr.Path == path {
			return pr.Access
		}
	}
	return 0
}

func checkWarnings(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("warnings:\n  %s\nwant %d matching %q", strings.Join(got, "\n  "), len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("warning %d = %q; want it to contain %q", i, got[i], want[i])
		}
	}
}
