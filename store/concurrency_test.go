package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// helperEnv names the environment variable that turns a re-executed test
// binary into a worker process of TestConcurrentProcesses.
const helperEnv = "STRATA_STORE_HELPER"

// TestHelperProcess is not a test: it is the body of the worker processes
// that the concurrency test starts by re-executing the test binary.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	// mode:id:rounds:dir
	parts := strings.SplitN(spec, ":", 4)
	id, _ := strconv.Atoi(parts[1])
	rounds, _ := strconv.Atoi(parts[2])
	var err error
	switch parts[0] {
	case "work":
		err = concurrencyWorker(parts[3], id, rounds)
	case "gc":
		err = gcWorker(parts[3], rounds)
	case "crash":
		err = crashWorker(parts[3], id)
	default:
		err = fmt.Errorf("unknown helper mode %q", parts[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Content of the files the workers commit is a function of the file
// name, so that the final check can regenerate it: "f-SEED-SIZE".
func fileName(seed uint64, size int) string { return fmt.Sprintf("f-%d-%d", seed, size) }

func fileData(name string) ([]byte, error) {
	var seed uint64
	var size int
	if _, err := fmt.Sscanf(name, "f-%d-%d", &seed, &size); err != nil {
		return nil, fmt.Errorf("file name %q: %w", name, err)
	}
	return randBytes(seed, size), nil
}

var workerSizes = []int{1, 700, 5000, SmallFileMax + 1, 150000, 400000}

// concurrencyWorker commits rounds times to its own branch wID and to the
// shared branch "shared" (with CAS retries), reusing content across
// rounds and workers through dedupe and Retain, and aborting some
// Writers. It opens its own Store, as a separate process would.
func concurrencyWorker(dir string, id, rounds int) error {
	s, err := Open(dir, Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := context.Background()
	branch := fmt.Sprintf("w%d", id)
	type file struct {
		name string
		id   ID
		size int64
	}
	var prev, orphan *file
	for r := range rounds {
		w, err := s.NewWriter(ctx, fmt.Sprintf("worker %d round %d", id, r))
		if err != nil {
			return err
		}
		var files []file
		put := func(seed uint64, size int) error {
			name := fileName(seed, size)
			c, n, err := w.WriteContent(bytes.NewReader(randBytes(seed, size)))
			if err != nil {
				return err
			}
			files = append(files, file{name, c, n})
			return nil
		}
		// Own content, and content every worker writes (dedupe).
		if err := put(uint64(id*1000+r), workerSizes[(id+r)%len(workerSizes)]); err != nil {
			return err
		}
		if err := put(uint64(900000+r%3), 200000); err != nil {
			return err
		}
		// The previous round's file is reachable from our branch, so
		// Retain must find it.
		if prev != nil {
			ok, err := w.Retain(prev.id)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("worker %d: Retain of reachable %s = false", id, prev.id.Short())
			}
			files = append(files, file{"prev-" + prev.name, prev.id, prev.size})
		}
		// An aborted Writer's file is garbage: Retain may or may not find
		// it, as a stat cache hit may or may not; if not, write it again.
		if orphan != nil {
			ok, err := w.Retain(orphan.id)
			if err != nil {
				return err
			}
			if !ok {
				data, _ := fileData(orphan.name)
				c, _, err := w.WriteContent(bytes.NewReader(data))
				if err != nil || c != orphan.id {
					return fmt.Errorf("rewrite orphan: %s, %v", c.Short(), err)
				}
			}
			files = append(files, file{"orphan-" + orphan.name, orphan.id, orphan.size})
			orphan = nil
		}
		var tree Tree
		for _, f := range files {
			tree.Entries = append(tree.Entries, TreeEntry{Name: f.name, Type: TypeFile, Mode: 0o644, Size: f.size, Content: f.id})
		}
		slices.SortFunc(tree.Entries, func(a, b TreeEntry) int { return strings.Compare(a.Name, b.Name) })
		tid, err := w.PutTree(&tree)
		if err != nil {
			return err
		}
		if r%4 == 3 {
			orphan = &files[0]
			if err := w.Flush(); err != nil {
				return err
			}
			if err := w.Abort(); err != nil {
				return err
			}
			continue
		}
		var cid ID
		err = w.Finish(func(tx *Tx) error {
			old, err := tx.Ref(branch)
			var parents []ID
			if errors.Is(err, ErrNotFound) {
				old = ZeroID
			} else if err != nil {
				return err
			} else {
				parents = []ID{old}
			}
			cid, err = tx.PutCommit(&Commit{Tree: tid, Parents: parents, Message: branch, TimeNs: time.Now().UnixNano()})
			if err != nil {
				return err
			}
			if err := tx.SetRef(branch, old, cid); err != nil {
				return err
			}
			return tx.AppendOp(Op{Kind: "commit", Ref: branch, Old: old, New: cid})
		})
		if err != nil {
			return fmt.Errorf("worker %d round %d: finish: %w", id, r, err)
		}
		prev = &files[0]
		// Move the shared branch by CAS; conflicts are expected.
		for attempt := 0; ; attempt++ {
			var old ID
			s.View(ctx, func(tx *Tx) error {
				old, _ = tx.Ref("shared")
				return nil
			})
			err := s.Update(ctx, func(tx *Tx) error { return tx.SetRef("shared", old, cid) })
			if err == nil {
				break
			}
			if !errors.Is(err, ErrConflict) || attempt > 100 {
				return fmt.Errorf("worker %d: move shared: %w", id, err)
			}
		}
	}
	return nil
}

func gcWorker(dir string, rounds int) error {
	s, err := Open(dir, Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	for range rounds {
		if _, err := s.GC(context.Background(), GCOptions{}); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// crashWorker writes content under a lease and exits without Finish or
// Abort, as a killed import would.
func crashWorker(dir string, id int) error {
	s, err := Open(dir, Options{})
	if err != nil {
		return err
	}
	w, err := s.NewWriter(context.Background(), "crash")
	if err != nil {
		return err
	}
	if _, _, err := w.WriteContent(bytes.NewReader(randBytes(uint64(777+id), 500000))); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	os.Exit(0) // no Finish, no Abort, no Close
	return nil
}

func startHelper(t testing.TB, mode string, id, rounds int, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%d:%s", helperEnv, mode, id, rounds, dir))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() && out.Len() > 0 {
			t.Logf("helper %s %d output:\n%s", mode, id, out.String())
		}
	})
	return cmd
}

// TestConcurrentProcesses runs worker goroutines (sharing one Store and
// with Stores of their own) and worker processes, committing, retaining
// and aborting, while gc runs in a goroutine and in a process and one
// process dies holding a lease. Afterwards fsck is clean, the dead lease
// is collected, and every committed file reads back.
func TestConcurrentProcesses(t *testing.T) {
	rounds := 12
	if testing.Short() {
		rounds = 6
	}
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var procs []*exec.Cmd
	procs = append(procs, startHelper(t, "work", 10, rounds, dir))
	procs = append(procs, startHelper(t, "work", 11, rounds, dir))
	procs = append(procs, startHelper(t, "gc", 0, 3*rounds, dir))
	crash := startHelper(t, "crash", 12, 0, dir)

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for id := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := concurrencyWorker(dir, id, rounds); err != nil {
				errs <- err
			}
		}()
	}
	var stop atomic.Bool
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for !stop.Load() {
			if _, err := s.GC(context.Background(), GCOptions{}); err != nil {
				errs <- fmt.Errorf("gc: %w", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	if err := crash.Wait(); err != nil {
		t.Errorf("crash helper: %v", err)
	}
	for _, p := range procs {
		if err := p.Wait(); err != nil {
			t.Errorf("helper %v: %v", p.Args, err)
		}
	}
	wg.Wait()
	stop.Store(true)
	<-gcDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	r, err := s.GC(context.Background(), GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("final gc: %+v", r)
	mustFsckOK(t, s)
	var leases []Lease
	s.View(context.Background(), func(tx *Tx) error {
		leases, err = tx.Leases()
		return err
	})
	if len(leases) != 0 {
		t.Errorf("leases left: %+v", leases)
	}
	checkAllRefsReadable(t, s)
}

// checkAllRefsReadable reads every file of every commit reachable from a
// branch and compares it with the content its name promises.
func checkAllRefsReadable(t testing.TB, s *Store) {
	t.Helper()
	ctx := context.Background()
	var refs []Ref
	s.View(ctx, func(tx *Tx) error {
		var err error
		refs, err = tx.Refs("")
		return err
	})
	if len(refs) < 5 {
		t.Fatalf("only %d branches: %v", len(refs), refs)
	}
	seen := map[ID]bool{}
	files := 0
	for _, ref := range refs {
		queue := []ID{ref.Commit}
		for len(queue) > 0 {
			c := queue[0]
			queue = queue[1:]
			if seen[c] {
				continue
			}
			seen[c] = true
			var tree *Tree
			err := s.View(ctx, func(tx *Tx) error {
				cm, err := tx.Commit(c)
				if err != nil {
					return err
				}
				queue = append(queue, cm.Parents...)
				tree, err = tx.Tree(cm.Tree)
				return err
			})
			if err != nil {
				t.Fatalf("branch %s: %v", ref.Name, err)
			}
			for _, e := range tree.Entries {
				name := e.Name[strings.LastIndex(e.Name, "f-"):]
				want, err := fileData(name)
				if err != nil {
					t.Fatal(err)
				}
				got := readContent(t, s, e.Content)
				if !bytes.Equal(got, want) || e.Size != int64(len(want)) {
					t.Fatalf("branch %s: %s reads back wrong (%d bytes, want %d)", ref.Name, e.Name, len(got), len(want))
				}
				files++
			}
		}
	}
	t.Logf("%d branches, %d commits, %d files read back", len(refs), len(seen), files)
}
