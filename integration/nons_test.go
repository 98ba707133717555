//go:build integration

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/nsexec"
	"github.com/stratafs/strata/seccomp"
)

// envNoNSInner marks the copy of this test binary that runs where user
// namespaces are denied.
const envNoNSInner = "STRATA_IT_NONS_INNER"

// TestRunNoNSDenied (both passes): where user namespaces are denied —
// inside bwrap --disable-userns, and under a seccomp filter refusing
// CLONE_NEWUSER — a command still runs in a workspace directory without
// any namespace (nsexec.RunNoNS, through strata-init), fenced: it writes
// the workspace and its private TMPDIR, cannot read a file outside (the
// home's stand-in) nor write the host's /tmp, and cannot create a unix
// socket. This binary runs itself (this test, as the inner part) under
// each denial.
func TestRunNoNSDenied(t *testing.T) {
	if os.Getenv(envNoNSInner) == "1" {
		noNSInner(t)
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(self), "strata-init")); err != nil {
		testutil.Skip(t, "strata-init is not beside the test binary (run through scripts/integration.sh): "+err.Error())
	}
	outside, err := os.MkdirTemp("/var/tmp", "strata-it-nons-outside-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outside)
	os.Chmod(outside, 0o755)
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{self, "-test.run", "^TestRunNoNSDenied$", "-test.v", "-test.count=1"}
	for name, cmd := range map[string]*exec.Cmd{
		"bwrap --disable-userns":         underBwrap(t, args...),
		"seccomp refusing CLONE_NEWUSER": underSeccomp(t, args...),
	} {
		t.Run(name, func(t *testing.T) {
			cmd.Env = append(cmd.Environ(), envNoNSInner+"=1", "STRATA_IT_NONS_OUTSIDE="+outside)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if err != nil || !strings.Contains(out.String(), "--- PASS: TestRunNoNSDenied") {
				t.Fatalf("inner run: %v\n%s", err, out.String())
			}
			t.Logf("inner run:\n%s", out.String())
		})
	}
}

func noNSInner(t *testing.T) {
	ctx := context.Background()
	if err := exec.Command("unshare", "-U", "true").Run(); err == nil {
		t.Fatal("user namespaces are not denied here")
	}
	abi, err := landlock.ABI()
	if abi < 1 {
		testutil.Skip(t, "no Landlock: "+err.Error())
	}
	base := t.TempDir()
	spec := nsexec.NoNSSpec{Name: "it", Workspace: filepath.Join(base, "ws"), Tmp: filepath.Join(base, "tmp")}
	for _, d := range []string{spec.Workspace, spec.Tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := landlock.Plan(nsexec.NoNSPolicy(spec.Workspace, spec.Tmp, nil, nil, false), abi)
	if err != nil {
		t.Fatal(err)
	}
	f, err := seccomp.Plan(seccomp.Agent(), runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	progs, err := seccomp.Program(f)
	if err != nil {
		t.Fatal(err)
	}
	deny, err := seccomp.UnixSocketDeny(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	progs = append(progs, deny)
	secret := filepath.Join(os.Getenv("STRATA_IT_NONS_OUTSIDE"), "secret")
	run := func(script string) (nsexec.ExitStatus, string) {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		done := make(chan struct{})
		go func() { out.ReadFrom(r); close(done) }()
		st, err := nsexec.RunNoNS(ctx, spec, nsexec.Command{Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Landlock: rs, Seccomp: progs}, nil, w, w)
		w.Close()
		<-done
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return st, out.String()
	}
	if st, out := run(`echo ok > f && cat f && touch "$TMPDIR/t" && echo "$TMPDIR"`); st.Code != 0 || out != "ok\n"+spec.Tmp+"\n" {
		t.Errorf("workspace: %v %q", st, out)
	}
	if st, out := run("cat " + secret); st.Code == 0 || !strings.Contains(out, "Permission denied") {
		t.Errorf("outside: %v %q", st, out)
	}
	if st, out := run("echo x > /tmp/strata-it-nons-$$"); st.Code == 0 || !strings.Contains(out, "Permission denied") {
		t.Errorf("host /tmp: %v %q", st, out)
	}
	if st, out := run(`python3 -c "import socket; socket.socket(socket.AF_UNIX)"`); st.Code == 0 || !strings.Contains(out, "PermissionError") {
		t.Errorf("unix socket: %v %q", st, out)
	}
	if _, err := os.Stat(filepath.Join(spec.Workspace, "f")); err != nil {
		t.Errorf("the workspace file: %v", err)
	}
}
