//go:build integration

package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCLIInterruptExit130: SIGINT ends strata with 130 and SIGTERM with
// 143, as shells, git and docker do (issue 19: it exited 1). The batch is
// interrupted while its job runs (the job has made its marker).
func TestCLIInterruptExit130(t *testing.T) {
	h := newHome(t)
	src := filepath.Join(t.TempDir(), "proj")
	baseTree(t, src)
	h.ok("import", src)
	for _, tc := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		shared := t.TempDir()
		os.Chmod(shared, 0o777)
		marker := filepath.Join(shared, "started")
		file := filepath.Join(t.TempDir(), "jobs.jsonl")
		os.WriteFile(file, []byte(`{"id": "slow", "cmd": "touch `+marker+`; sleep 60"}`+"\n"), 0o644)
		cmd := exec.Command(bin(t), "--home", h.dir, "batch", file, "--rw", shared)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Signal(tc.sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.want {
			t.Errorf("%v: %v, want exit %d; stderr %q", tc.sig, err, tc.want, errb.String())
		}
	}
}

// TestCLIUnwritableHome: a --home the user cannot write says "permission
// denied: DIR" and what to do, not SQLite's "unable to open database file
// (14)" (issue 19). As root, strata runs as nobody against a root-owned
// directory.
func TestCLIUnwritableHome(t *testing.T) {
	tmp := t.TempDir()
	os.Chmod(tmp, 0o755)
	os.Chmod(filepath.Dir(tmp), 0o755) // nobody must reach dir
	dir := filepath.Join(tmp, "ro")
	os.Mkdir(dir, 0o755)
	if os.Getuid() != 0 {
		os.Chmod(dir, 0o555)
		defer os.Chmod(dir, 0o755)
	}
	for _, args := range [][]string{{"init"}, {"ws", "create", "x"}, {"import", t.TempDir()}} {
		for _, home := range []string{dir, filepath.Join(dir, "sub")} {
			cmd := exec.Command(bin(t), append([]string{"--home", home}, args...)...)
			if os.Getuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !bytes.Contains(out, []byte("permission denied: "+dir+":")) ||
				!bytes.Contains(out, []byte("--home DIR")) || bytes.Contains(out, []byte("unable to open database")) {
				t.Errorf("--home %s %v: %v: %s", home, args, err, out)
			}
		}
	}
}
