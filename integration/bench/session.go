package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// A session is a long-lived sh that reads commands on its stdin: on the
// host, in a FUSE mount, or inside `strata exec`. Timing a command through
// it measures the command alone, not the cost of getting into the place
// where it runs, so the read scenario compares file systems, not process
// start-up.
type session struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	label  string
}

const sessionMarker = "__STRATA_BENCH_DONE__"

// startSession starts argv (a shell) in dir.
func startSession(label, dir string, argv ...string) (*session, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &session{cmd: cmd, in: in, out: bufio.NewReader(out), stderr: &bytes.Buffer{}, label: label}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// A first round trip proves the shell is up (and, inside strata, that
	// the workspace is running) before anything is timed.
	if _, _, err := s.run("true"); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// run runs one shell command line and returns its output and the time
// from sending it to reading the end marker.
func (s *session) run(script string) (string, time.Duration, error) {
	line := fmt.Sprintf("%s\necho \"%s $?\"\n", script, sessionMarker)
	start := time.Now()
	if _, err := io.WriteString(s.in, line); err != nil {
		return "", 0, fmt.Errorf("%s: %w (stderr: %s)", s.label, err, s.stderr.String())
	}
	var out strings.Builder
	for {
		l, err := s.out.ReadString('\n')
		if err != nil {
			return out.String(), 0, fmt.Errorf("%s: %q: %w (stderr: %s)", s.label, script, err, s.stderr.String())
		}
		if rest, ok := strings.CutPrefix(l, sessionMarker+" "); ok {
			d := time.Since(start)
			if code := strings.TrimSpace(rest); code != "0" {
				return out.String(), d, fmt.Errorf("%s: %q exited %s (stderr: %s)", s.label, script, code, s.stderr.String())
			}
			return out.String(), d, nil
		}
		out.WriteString(l)
	}
}

// close ends the shell (its stdin closes) and waits for it.
func (s *session) close() {
	s.in.Close()
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}
