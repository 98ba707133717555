package landlock_test

// This file is an external test package because it applies both sandbox
// halves, as nsexec does; the landlock package itself does not import
// seccomp.

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/testutil"
	"github.com/stratafs/strata/landlock"
	"github.com/stratafs/strata/seccomp"
)

// TestAgentTools runs real tools under the Agent Landlock policy and the
// agent seccomp filter, as a workspace command runs: they must work inside
// the workspace and fail, without crashing, outside it.
func TestAgentTools(t *testing.T) {
	if abi, err := landlock.ABI(); abi < 2 {
		testutil.Skip(t, "needs Landlock ABI 2 (refer): "+errString(err))
	}
	if ok, why := seccomp.Available(); !ok {
		testutil.Skip(t, why)
	}
	// A warm Go build cache, shared read-write like --rw ~/.cache/go-build:
	// with an empty one, go build compiles the runtime (20 s on 2 CPUs).
	if !landlock.IsChild() {
		if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
			dir := strings.TrimSpace(string(out))
			// Warm: it holds compiled outputs ("-d" files), as after
			// any go test run; a fresh cache has none.
			if outputs, _ := filepath.Glob(filepath.Join(dir, "*", "*-d")); len(outputs) > 500 {
				t.Setenv("STRATA_TEST_GOCACHE", dir)
			}
		}
	}
	for _, v := range landlock.Variants {
		t.Run(v, func(t *testing.T) {
			if !landlock.InChild(t, v) {
				return
			}
			base, err := os.MkdirTemp("", "tools-")
			if err != nil {
				t.Fatal(err)
			}
			ws, tmp, outside := filepath.Join(base, "ws"), filepath.Join(base, "tmp"), filepath.Join(base, "outside")
			for _, d := range []string{ws, tmp, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(outside+"/secret", []byte("secret"), 0o644); err != nil {
				t.Fatal(err)
			}

			abi, _ := landlock.ABI()
			var extraRW []string
			gocache := os.Getenv("STRATA_TEST_GOCACHE")
			if gocache != "" && unix.Access(gocache, unix.W_OK) == nil {
				extraRW = append(extraRW, gocache)
			} else {
				gocache = ""
			}
			r, err := landlock.Plan(landlock.Agent(ws, tmp, nil, extraRW), abi)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range r.Warnings {
				t.Log(w)
			}
			f, err := seccomp.Plan(seccomp.Agent(), runtime.GOARCH)
			if err != nil {
				t.Fatal(err)
			}
			if err := landlock.Apply(r); err != nil {
				t.Fatal(err)
			}
			if err := seccomp.Apply(f); err != nil {
				t.Fatal(err)
			}

			env := []string{
				"PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin",
				"HOME=" + tmp, "TMPDIR=" + tmp, "WS=" + ws, "OUTSIDE=" + outside, "LANG=C.UTF-8",
				"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com",
				"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com",
			}
			tests := []struct {
				name, script, want string
				fail               bool // the script must fail, with want in its output
				needs              string
				skip               bool
			}{
				{name: "sh", script: `echo hi > $WS/x && cat $WS/x`, want: "hi"},
				{name: "mv across dirs", script: `mkdir $WS/m1 $WS/m2 && echo z > $WS/m1/f && mv $WS/m1/f $WS/m2/f && mv $WS/m2 $WS/m1/ && cat $WS/m1/m2/f`, want: "z"},
				{name: "git", needs: "git", script: `git --version && git init -q $WS/r && cd $WS/r && echo a > a && git add a && git commit -qm one && mkdir d && git mv a d/a && git commit -qm two && git gc -q && git log --oneline | wc -l`, want: "2"},
				{name: "python3", needs: "python3", script: `python3 -c "open('$WS/p','w').write('x'); import os, multiprocessing as m; l = m.Lock(); l.acquire(); print(os.cpu_count() > 0, open('$WS/p').read())"`, want: "True x"},
				{name: "gcc", needs: "gcc", script: `cd $WS && printf '#include <stdio.h>\nint main(void){puts("hello");return 0;}\n' > h.c && gcc -O2 -o h h.c && ./h`, want: "hello"},
				{name: "node", needs: "node", script: `node -e 'const fs = require("fs"); fs.writeFileSync(process.env.WS + "/n", "1"); console.log(fs.readFileSync(process.env.WS + "/n", "utf8"), require("os").cpus().length > 0)'`, want: "1 true"},
				// Asynchronous fs goes through libuv, which tries io_uring
				// (denied with EPERM) and falls back to its thread pool.
				{name: "node async fs", needs: "node", script: `node -e 'require("fs/promises").writeFile(process.env.WS + "/a", "async").then(() => require("fs/promises").readFile(process.env.WS + "/a", "utf8")).then(console.log)'`, want: "async"},
				{name: "npm", needs: "npm", script: `npm --version`, want: "."},
				{name: "make", needs: "make", script: `make -v && printf 'all:\n\t@echo made > $$WS/made\n' > $WS/Makefile && make -s -C $WS && cat $WS/made`, want: "made"},
				{name: "go", needs: "go", script: `go version && go env GOROOT`, want: "go version"},
				{name: "go build", needs: "go", skip: gocache == "", script: `cd $WS && printf 'package main\nimport "fmt"\nfunc main() { fmt.Println("built") }\n' > m.go && GOCACHE=` + gocache + ` go build -o m m.go && ./m`, want: "built"},
				{name: "bash /dev/fd", needs: "bash", script: `bash -c 'cat <(echo procsub) && echo out > /dev/stdout && echo err > /dev/stderr'`, want: "procsub\nout\nerr"},
				// A pty: /dev/ptmx and /dev/pts/N opened, with ioctls, after the sandbox.
				{name: "pty", needs: "script", script: `script -qc tty /dev/null`, want: "/dev/pts/"},
				{name: "python pty", needs: "python3", script: `python3 -c "import pty, os; m, s = pty.openpty(); os.write(m, b'x\n'); print(os.ttyname(s), os.read(s, 2))"`, want: "/dev/pts/"},
				{name: "read outside", script: `cat $OUTSIDE/secret`, fail: true, want: "Permission denied"},
				{name: "write outside", script: `echo x > $OUTSIDE/new`, fail: true, want: "Permission denied"},
				{name: "home is not visible", script: `ls /root /home`, fail: true, want: "Permission denied"},
				{name: "unshare", needs: "unshare", script: `unshare -U true`, fail: true, want: "Operation not permitted"},
			}
			for _, tt := range tests {
				if tt.skip {
					t.Logf("%s: no writable warm Go build cache for this user, skipped", tt.name)
					continue
				}
				if tt.needs != "" {
					if _, err := exec.LookPath(tt.needs); err != nil {
						t.Logf("%s: %s not installed, skipped", tt.name, tt.needs)
						continue
					}
				}
				cmd := exec.Command("/bin/sh", "-c", tt.script)
				cmd.Dir, cmd.Env = ws, env
				start := time.Now()
				out, err := cmd.CombinedOutput()
				t.Logf("%s (%v): %s", tt.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
				if tt.fail != (err != nil) || !strings.Contains(string(out), tt.want) {
					t.Errorf("%s: %v; want fail=%v and %q in:\n%s", tt.name, err, tt.fail, tt.want, out)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
