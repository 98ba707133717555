package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func countObjects(tb testing.TB, s *Store) int64 {
	tb.Helper()
	m, err := s.ObjectCount(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, c := range m {
		n += c
	}
	return n
}

func gc(tb testing.TB, s *Store, opts GCOptions) *GCResult {
	tb.Helper()
	r, err := s.GC(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestGCRemovesGarbageOnly(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	big := randBytes(1, 2<<20)
	small := textBytes(2, 5000)
	c1 := commitFile(t, s, "main", ZeroID, "big", big)
	c2 := commitFile(t, s, "main", c1, "small", small)
	keep := countObjects(t, s)

	// Garbage: an unreferenced object put directly, and an aborted
	// Writer's content.
	s.Update(ctx, func(tx *Tx) error { _, err := tx.Put(KindChunk, []byte("garbage")); return err })
	w, _ := s.NewWriter(ctx, "aborted")
	w.WriteContent(bytes.NewReader(randBytes(3, 1<<20)))
	w.Flush()
	w.Abort()
	total := countObjects(t, s)
	if total <= keep+1 {
		t.Fatalf("setup: %d objects, %d kept", total, keep)
	}

	dry := gc(t, s, GCOptions{DryRun: true})
	if !dry.DryRun || dry.Removed != total-keep || countObjects(t, s) != total {
		t.Fatalf("dry run = %+v; %d objects left of %d, want %d removable", dry, countObjects(t, s), total, total-keep)
	}
	var phases []string
	r := gc(t, s, GCOptions{Progress: func(phase string, done, total int64) {
		if len(phases) == 0 || phases[len(phases)-1] != phase {
			phases = append(phases, phase)
		}
	}})
	if r.Removed != total-keep || r.RemovedBytes <= 1<<20 || r.Marked != keep {
		t.Fatalf("gc = %+v, want %d removed, %d marked", r, total-keep, keep)
	}
	if strings.Join(phases, ",") != "mark,sweep" {
		t.Errorf("progress phases = %v", phases)
	}
	if got := countObjects(t, s); got != keep {
		t.Fatalf("%d objects after gc, want %d", got, keep)
	}
	// Both commits of the history are intact: c2's parent is c1.
	if got := readContent(t, s, fileOf(t, s, c1)); !bytes.Equal(got, big) {
		t.Fatal("c1 content damaged")
	}
	if got := readContent(t, s, fileOf(t, s, c2)); !bytes.Equal(got, small) {
		t.Fatal("c2 content damaged")
	}
	mustFsckOK(t, s)
	if r := gc(t, s, GCOptions{}); r.Removed != 0 {
		t.Fatalf("second gc removed %d", r.Removed)
	}
}

func TestGCRootsWorkspacesAndPrune(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c1 := commitFile(t, s, "main", ZeroID, "f", []byte("one"))
	c2 := commitFile(t, s, "other", ZeroID, "f", []byte("two"))
	// A workspace keeps c2 after its branch is deleted.
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.PutWorkspace(&Workspace{Name: "w", Branch: "other", Base: c2, Dir: "/x"}); err != nil {
			return err
		}
		if err := tx.SetRef("other", c2, ZeroID); err != nil {
			return err
		}
		if err := tx.SetRef("main", c1, ZeroID); err != nil {
			return err
		}
		return tx.AppendOp(Op{Kind: "branch-delete", Ref: "main", Old: c1})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The op log names c1 within the prune window.
	gc(t, s, GCOptions{Prune: time.Hour})
	s.View(ctx, func(tx *Tx) error {
		for _, c := range []ID{c1, c2} {
			if _, err := tx.Commit(c); err != nil {
				t.Errorf("commit %s gone: %v", c.Short(), err)
			}
		}
		return nil
	})
	// Without a prune window, c1 goes; the workspace still holds c2.
	gc(t, s, GCOptions{})
	s.View(ctx, func(tx *Tx) error {
		if _, err := tx.Commit(c1); !errors.Is(err, ErrNotFound) {
			t.Errorf("c1 survived gc without prune: %v", err)
		}
		if _, err := tx.Commit(c2); err != nil {
			t.Errorf("workspace base gone: %v", err)
		}
		return nil
	})
	if got := readContent(t, s, fileOf(t, s, c2)); string(got) != "two" {
		t.Errorf("workspace content = %q", got)
	}
	s.Update(ctx, func(tx *Tx) error { return tx.DeleteWorkspace("w") })
	gc(t, s, GCOptions{})
	if n := countObjects(t, s); n != 0 {
		t.Errorf("%d objects left with no roots", n)
	}
	mustFsckOK(t, s)
}

// TestGCKeepsLiveWriterObjects: what a live Writer wrote or retained is
// never swept, even before anything references it.
func TestGCKeepsLiveWriterObjects(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// An unreferenced object the Writer will retain.
	var orphan ID
	s.Update(ctx, func(tx *Tx) error {
		var err error
		orphan, err = tx.Put(KindChunk, []byte("orphan content"))
		return err
	})
	w, err := s.NewWriter(ctx, "live")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	data := randBytes(11, 3<<20)
	content, size, err := w.WriteContent(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.Retain(orphan); !ok || err != nil {
		t.Fatalf("Retain(orphan) = %v, %v", ok, err)
	}
	if ok, err := w.Retain(ID{7}); ok || err != nil {
		t.Fatalf("Retain(missing) = %v, %v", ok, err)
	}
	if ok, _ := w.RetainAll([]ID{orphan, ID{7}, ZeroID}); !ok[0] || ok[1] || !ok[2] {
		t.Fatalf("RetainAll = %v", ok)
	}
	r := gc(t, s, GCOptions{})
	if r.Removed != 0 {
		t.Fatalf("gc removed %d objects of a live writer", r.Removed)
	}
	tree, err := w.PutTree(&Tree{Entries: []TreeEntry{
		{Name: "big", Type: TypeFile, Mode: 0o644, Size: size, Content: content},
		{Name: "orphan", Type: TypeFile, Mode: 0o644, Size: 14, Content: orphan},
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Finish(func(tx *Tx) error {
		c, err := tx.PutCommit(&Commit{Tree: tree, Message: "m"})
		if err != nil {
			return err
		}
		return tx.SetRef("main", ZeroID, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := gc(t, s, GCOptions{}); r.Removed != 0 {
		t.Fatalf("gc after Finish removed %d", r.Removed)
	}
	if got := readContent(t, s, content); !bytes.Equal(got, data) {
		t.Fatal("content damaged")
	}
	mustFsckOK(t, s)
}

// deadPID returns the pid of a process that has exited.
func deadPID(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("cannot run true: %v", err)
	}
	return cmd.Process.Pid
}

func TestGCCollectsStaleLeases(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  string
		arg  func(t *testing.T) any
	}{
		{"dead pid", "pid = ?", func(t *testing.T) any { return deadPID(t) }},
		{"pid reused", "start_ticks = start_ticks + ?", func(*testing.T) any { return 1 }},
		{"other boot", "boot_id = ?", func(*testing.T) any { return "00000000-0000-0000-0000-000000000000" }},
		{"other pid ns, old", "pid_ns = 'pid:[1]', created_ns = ?", func(*testing.T) any { return time.Now().Add(-48 * time.Hour).UnixNano() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			ctx := context.Background()
			w, err := s.NewWriter(ctx, "doomed")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.WriteContent(bytes.NewReader(randBytes(12, 1<<20))); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.db.Exec(`UPDATE leases SET `+tc.set+` WHERE id = ?`, tc.arg(t), w.lease); err != nil {
				t.Fatal(err)
			}
			rep, err := s.Fsck(ctx, nil)
			if err != nil || !rep.OK() || rep.StaleLeases != 1 || len(rep.Info) != 1 {
				t.Fatalf("fsck = %+v, %v; want 1 stale lease as info", rep, err)
			}
			n := countObjects(t, s)
			r := gc(t, s, GCOptions{})
			if r.StaleLeases != 1 || r.Removed != n || countObjects(t, s) != 0 {
				t.Fatalf("gc = %+v with %d objects", r, n)
			}
			// The Writer finds out its lease is gone instead of committing
			// references to collected objects.
			if err := w.Finish(nil); err == nil || !strings.Contains(err.Error(), "lease") {
				t.Fatalf("Finish after losing the lease = %v", err)
			}
			w.Abort()
		})
	}
	t.Run("other pid ns, recent", func(t *testing.T) {
		s := newStore(t)
		w, _ := s.NewWriter(context.Background(), "container")
		defer w.Abort()
		w.WriteBytes([]byte("x"))
		w.Flush()
		s.db.Exec(`UPDATE leases SET pid_ns = 'pid:[1]' WHERE id = ?`, w.lease)
		if r := gc(t, s, GCOptions{}); r.StaleLeases != 0 || r.Removed != 0 {
			t.Fatalf("gc took an unverifiable recent lease: %+v", r)
		}
	})
}

func TestParseProcStat(t *testing.T) {
	b := []byte("1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 ...")
	ticks, zombie, err := parseProcStat(b)
	if err != nil || ticks != 987654 || zombie {
		t.Fatalf("parseProcStat = %d, %v, %v", ticks, zombie, err)
	}
	if _, z, _ := parseProcStat([]byte("1 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0")); !z {
		t.Error("zombie not recognized")
	}
	if _, _, err := parseProcStat([]byte("garbage")); err == nil {
		t.Error("garbage accepted")
	}
	me, err := selfProcess()
	if err != nil || me.pid != os.Getpid() || me.bootID == "" {
		t.Fatalf("selfProcess = %+v, %v", me, err)
	}
}

func TestStatCache(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	root := t.TempDir()
	c := commitFile(t, s, "main", ZeroID, "f", []byte("hello"))
	content := fileOf(t, s, c)
	entries := map[string]StatEntry{
		"f":     {Dev: 1 << 63, Ino: 2, Mode: 0o100644, Size: 5, MtimeNs: 100, CtimeNs: 100, Content: content},
		"empty": {Dev: 1, Ino: 3, Mode: 0o100644, MtimeNs: 100, CtimeNs: 100},
		"racy":  {Dev: 1, Ino: 4, Mode: 0o100644, Size: 1, MtimeNs: 1000, CtimeNs: 100, Content: content},
		"gone":  {Dev: 1, Ino: 5, Mode: 0o100644, Size: 1, MtimeNs: 100, CtimeNs: 100, Content: ID{9}},
		"d/e/ü": {Dev: 1, Ino: 6, Mode: 0o100600, Size: 5, MtimeNs: 100, CtimeNs: 100, Content: content},
	}
	if err := s.SaveStatCache(ctx, root, entries, 1000); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStatCache(ctx, "relative", entries, 1000); err == nil {
		t.Error("relative root accepted")
	}
	got, err := s.LoadStatCache(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["racy"]; ok || len(got) != 4 {
		t.Fatalf("LoadStatCache = %v; want all but the racy entry", got)
	}
	if got["f"] != entries["f"] || got["d/e/ü"] != entries["d/e/ü"] || got["empty"] != entries["empty"] {
		t.Errorf("entries differ: %+v", got)
	}
	if other, _ := s.LoadStatCache(ctx, "/elsewhere"); len(other) != 0 {
		t.Errorf("unknown root has %d entries", len(other))
	}
	// Replace.
	s.SaveStatCache(ctx, root, map[string]StatEntry{"f": entries["f"], "gone": entries["gone"]}, 1000)
	if got, _ := s.LoadStatCache(ctx, root); len(got) != 2 {
		t.Fatalf("after replace: %v", got)
	}
	// gc drops the entry whose content does not exist; then the one whose
	// content it collects.
	r := gc(t, s, GCOptions{})
	if got, _ := s.LoadStatCache(ctx, root); len(got) != 2 || r.StatCacheFreed != 0 {
		t.Fatalf("nothing removed, yet stat cache = %v, freed %d", got, r.StatCacheFreed)
	}
	s.Update(ctx, func(tx *Tx) error { return tx.SetRef("main", c, ZeroID) })
	r = gc(t, s, GCOptions{})
	if got, _ := s.LoadStatCache(ctx, root); len(got) != 0 || r.StatCacheFreed != 2 {
		t.Fatalf("after gc: stat cache = %v, freed %d", got, r.StatCacheFreed)
	}
}

// TestSweepOrderParentsFirst: the sweep deletes a garbage object only
// after everything that references it, so that an object still present
// between sweep transactions always has its whole subtree.
func TestSweepOrderParentsFirst(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	var c1, c2, t1, t2, k ID
	err := s.Update(ctx, func(tx *Tx) error {
		c1, _ = tx.Put(KindChunk, []byte("c1"))
		c2, _ = tx.Put(KindChunk, []byte("c2"))
		t2, _ = tx.PutTree(&Tree{Entries: []TreeEntry{{Name: "c2", Type: TypeFile, Content: c2}}})
		t1, _ = tx.PutTree(&Tree{Entries: []TreeEntry{
			{Name: "c1", Type: TypeFile, Content: c1}, {Name: "sub", Type: TypeDir, Content: t2}}})
		var err error
		k, err = tx.PutCommit(&Commit{Tree: t1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var order []ID
	s.View(ctx, func(tx *Tx) error {
		rows, _ := tx.query(`SELECT rowid, id, kind FROM objects ORDER BY rowid`)
		var cands []candidate
		for rows.Next() {
			var c candidate
			var id []byte
			rows.Scan(&c.rowid, &id, &c.kind)
			c.id = ID(id)
			cands = append(cands, c)
		}
		rows.Close()
		sorted, err := parentsFirst(tx, cands)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range sorted {
			order = append(order, c.id)
		}
		return nil
	})
	pos := func(id ID) int { return slices.Index(order, id) }
	for _, e := range [][2]ID{{k, t1}, {t1, c1}, {t1, t2}, {t2, c2}} {
		if pos(e[0]) > pos(e[1]) {
			t.Errorf("%s deleted after its child %s", e[0].Short(), e[1].Short())
		}
	}
}

// TestFinishChecksExternalRefs: a tree may reference an object the Writer
// did not write or retain only if it still exists at Finish.
func TestFinishChecksExternalRefs(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c := commitFile(t, s, "main", ZeroID, "f", []byte("x"))
	reachable := fileOf(t, s, c)
	for _, tc := range []struct {
		content ID
		ok      bool
	}{{reachable, true}, {ID{3}, false}} {
		w, _ := s.NewWriter(ctx, "external")
		tree, _ := w.PutTree(&Tree{Entries: []TreeEntry{{Name: "f", Type: TypeFile, Size: 1, Content: tc.content}}})
		err := w.Finish(func(tx *Tx) error {
			_, err := tx.PutCommit(&Commit{Tree: tree})
			return err
		})
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, ErrNotFound) {
			t.Errorf("Finish with external %s = %v", tc.content.Short(), err)
		}
		w.Abort()
	}
}

// TestGCReturnsSpace: after gc removes most of the store, the database
// file shrinks (incremental vacuum) and the WAL is truncated, so an
// unattended loop does not keep its peak size on disk.
func TestGCReturnsSpace(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c := commitFile(t, s, "main", ZeroID, "big", randBytes(31, 16<<20))
	size := func() int64 {
		var n int64
		for _, suffix := range []string{"", "-wal"} {
			if fi, err := os.Stat(s.path + suffix); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	before := size()
	s.Update(ctx, func(tx *Tx) error { return tx.SetRef("main", c, ZeroID) })
	r := gc(t, s, GCOptions{})
	after := size()
	t.Logf("removed %d objects, %d bytes; files %d → %d bytes", r.Removed, r.RemovedBytes, before, after)
	if after > before/4 {
		t.Errorf("database and WAL still %d bytes after removing %d of %d", after, r.RemovedBytes, before)
	}
}

func leaseRows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM leases`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWriterLeaseIsLazy: a Writer whose objects fit in one batch writes
// them in Finish's transaction and never takes a lease; one that flushes
// takes it with its first batch and drops it in Finish.
func TestWriterLeaseIsLazy(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	id, err := w.WriteBytes([]byte("one small file"))
	if err != nil {
		t.Fatal(err)
	}
	if n := leaseRows(t, s); n != 0 {
		t.Fatalf("%d leases before any transaction, want 0", n)
	}
	if err := w.Finish(func(tx *Tx) error { return tx.SetRef("main", ZeroID, id) }); err == nil {
		t.Fatal("a ref to a content object was accepted") // SetRef wants a commit
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if n := leaseRows(t, s); n != 0 {
		t.Fatalf("%d leases after Abort of an unflushed Writer", n)
	}

	c := commitFile(t, s, "main", ZeroID, "f", []byte("content"))
	if n := leaseRows(t, s); n != 0 {
		t.Fatalf("%d leases after a small commit, want 0", n)
	}
	if !mustHave(t, s, c) {
		t.Fatal("commit missing")
	}

	w, err = s.NewWriter(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteBytes(randBytes(3, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := leaseRows(t, s); n != 1 {
		t.Fatalf("%d leases after Flush, want 1", n)
	}
	if err := w.Flush(); err != nil { // a second batch reuses the lease
		t.Fatal(err)
	}
	if _, err := w.WriteBytes(randBytes(4, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := leaseRows(t, s); n != 1 {
		t.Fatalf("%d leases after a second Flush, want 1", n)
	}
	if err := w.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if n := leaseRows(t, s); n != 0 {
		t.Fatalf("%d leases after Finish, want 0", n)
	}
}

func mustHave(t *testing.T, s *Store, id ID) bool {
	t.Helper()
	var ok bool
	if err := s.View(context.Background(), func(tx *Tx) error {
		var err error
		ok, err = tx.Has(id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestOptimisticWriter: Retain on an optimistic Writer claims nothing;
// Finish checks in its transaction that the object still exists and fails
// with ErrNotFound when gc took it meanwhile.
func TestOptimisticWriter(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// An object nothing references: gc takes it.
	loose, _ := writeContent(t, s, randBytes(5, 4096))
	w, err := s.NewWriter(ctx, "optimistic")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	w.Optimistic()
	ok, err := w.Retain(loose)
	if err != nil || !ok {
		t.Fatalf("Retain = %v, %v", ok, err)
	}
	if n := leaseRows(t, s); n != 0 {
		t.Fatalf("optimistic Retain took a lease (%d)", n)
	}
	gc(t, s, GCOptions{})
	if mustHave(t, s, loose) {
		t.Fatal("gc kept an unreferenced object")
	}
	if err := w.Finish(nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Finish after gc took a retained object = %v, want ErrNotFound", err)
	}

	// Without gc in between, the same Finish succeeds.
	kept, _ := writeContent(t, s, randBytes(6, 4096))
	w2, err := s.NewWriter(ctx, "optimistic 2")
	if err != nil {
		t.Fatal(err)
	}
	w2.Optimistic()
	if ok, err := w2.RetainAll([]ID{kept}); err != nil || !ok[0] {
		t.Fatalf("RetainAll = %v, %v", ok, err)
	}
	if err := w2.Finish(nil); err != nil {
		t.Fatal(err)
	}
}
