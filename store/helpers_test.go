package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// newStore opens a fresh store in a temporary directory and closes it at
// the end of the test.
func newStore(tb testing.TB) *Store {
	tb.Helper()
	s, err := Open(tb.TempDir(), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// textBytes returns n bytes of compressible, text-like content.
func textBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"func", "return", "err", "nil", "store", "import", "if", "for", "range", "package", "\n\t", " ", "{", "}", "(", ")", "x", "id"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(7) == 0 {
			fmt.Fprintf(&b, "%d", r.IntN(1000))
		}
	}
	return b.Bytes()[:n]
}

// writeContent stores b through a fresh Writer and finishes it.
func writeContent(tb testing.TB, s *Store, b []byte) (ID, WriterStats) {
	tb.Helper()
	w, err := s.NewWriter(context.Background(), "test")
	if err != nil {
		tb.Fatal(err)
	}
	id, n, err := w.WriteContent(bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	if n != int64(len(b)) {
		tb.Fatalf("WriteContent read %d bytes, want %d", n, len(b))
	}
	if err := w.Finish(nil); err != nil {
		tb.Fatal(err)
	}
	return id, w.Stats()
}

// readContent reads content back through OpenContent.
func readContent(tb testing.TB, s *Store, id ID) []byte {
	tb.Helper()
	rc, err := s.OpenContent(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// commitFile writes a commit whose tree holds one file with content b on
// branch, moving it from old. It returns the commit id.
func commitFile(tb testing.TB, s *Store, branch string, old ID, name string, b []byte) ID {
	tb.Helper()
	ctx := context.Background()
	w, err := s.NewWriter(ctx, "commit "+branch)
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Abort()
	content, size, err := w.WriteContent(bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	tree, err := w.PutTree(&Tree{Entries: []TreeEntry{{Name: name, Type: TypeFile, Mode: 0o644, Size: size, Content: content}}})
	if err != nil {
		tb.Fatal(err)
	}
	var cid ID
	err = w.Finish(func(tx *Tx) error {
		var parents []ID
		if !old.IsZero() {
			parents = []ID{old}
		}
		var err error
		cid, err = tx.PutCommit(&Commit{Tree: tree, Parents: parents, Message: "test", TimeNs: 1, Stats: CommitStats{Files: 1, Bytes: size}})
		if err != nil {
			return err
		}
		if err := tx.SetRef(branch, old, cid); err != nil {
			return err
		}
		return tx.AppendOp(Op{Kind: "commit", Ref: branch, Old: old, New: cid})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return cid
}

// fileOf returns the content id of the single file of a commitFile commit.
func fileOf(tb testing.TB, s *Store, commit ID) ID {
	tb.Helper()
	var content ID
	err := s.View(context.Background(), func(tx *Tx) error {
		c, err := tx.Commit(commit)
		if err != nil {
			return err
		}
		t, err := tx.Tree(c.Tree)
		if err != nil {
			return err
		}
		content = t.Entries[0].Content
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return content
}

func mustFsckOK(tb testing.TB, s *Store) *FsckReport {
	tb.Helper()
	rep, err := s.Fsck(context.Background(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	if !rep.OK() {
		for _, p := range rep.Problems {
			tb.Errorf("fsck: %s %s: %s (affects %v)", p.Kind, p.Object.Short(), p.Detail, p.Affected)
		}
		tb.FailNow()
	}
	return rep
}
