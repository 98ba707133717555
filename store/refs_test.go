package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestValidateBranchName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"main", true},
		{"ws/agent-1", true},
		{"feature/x.y_z", true},
		{"ünïcode", true},
		{"a@b", true},
		{strings.Repeat("a", 255), true},
		{"", false},
		{strings.Repeat("a", 256), false},
		{"-x", false},
		{"/x", false},
		{".x", false},
		{"ws/.x", false},
		{"x/", false},
		{"x.", false},
		{"x.lock", false},
		{"ws/x.lock/y", false},
		{"a..b", false},
		{"a//b", false},
		{"a@{b", false},
		{"@", false},
		{"a b", false},
		{"a~b", false},
		{"a^b", false},
		{"a:b", false},
		{"a?b", false},
		{"a*b", false},
		{"a[b", false},
		{"a\\b", false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a\x7fb", false},
		{"a\xffb", false},
	} {
		err := ValidateBranchName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateBranchName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateBranchName(%q) = %v, not ErrInvalidName", tc.name, err)
		}
	}
}

// emptyCommit stores a commit of the empty tree with message msg.
func emptyCommit(t testing.TB, s *Store, msg string) ID {
	t.Helper()
	var id ID
	err := s.Update(context.Background(), func(tx *Tx) error {
		tree, err := tx.PutTree(&Tree{})
		if err != nil {
			return err
		}
		id, err = tx.PutCommit(&Commit{Tree: tree, Message: msg})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSetRefCAS(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c1, c2 := emptyCommit(t, s, "1"), emptyCommit(t, s, "2")
	tree := HashObject(KindTree, []byte{0})
	set := func(name string, old, new ID) error {
		return s.Update(ctx, func(tx *Tx) error { return tx.SetRef(name, old, new) })
	}
	steps := []struct {
		what          string
		name          string
		old, new      ID
		wantErr       error
		alsoErr       error
		want          ID // ZeroID: branch absent afterwards
		wantExistsErr bool
	}{
		{"create", "main", ZeroID, c1, nil, nil, c1, false},
		{"create again", "main", ZeroID, c2, ErrConflict, ErrExists, c1, false},
		{"move from stale", "main", c2, c2, ErrConflict, nil, c1, false},
		{"move", "main", c1, c2, nil, nil, c2, false},
		{"to a tree", "main", c2, tree, ErrNotFound, nil, c2, false},
		{"to a missing object", "main", c2, ID{9}, ErrNotFound, nil, c2, false},
		{"delete stale", "main", c1, ZeroID, ErrConflict, nil, c2, false},
		{"delete", "main", c2, ZeroID, nil, nil, ZeroID, false},
		{"move absent", "main", c2, c1, ErrConflict, ErrNotFound, ZeroID, false},
		{"delete absent with zero old", "main", ZeroID, ZeroID, nil, nil, ZeroID, false},
		{"invalid name", "a..b", ZeroID, c1, ErrInvalidName, nil, ZeroID, false},
	}
	for _, st := range steps {
		err := set(st.name, st.old, st.new)
		if st.wantErr == nil && err != nil || st.wantErr != nil && !errors.Is(err, st.wantErr) {
			t.Fatalf("%s: SetRef = %v, want %v", st.what, err, st.wantErr)
		}
		if st.alsoErr != nil && !errors.Is(err, st.alsoErr) {
			t.Fatalf("%s: SetRef = %v, want also %v", st.what, err, st.alsoErr)
		}
		var got ID
		err = s.View(ctx, func(tx *Tx) error {
			var err error
			got, err = tx.Ref(st.name)
			return err
		})
		if st.want.IsZero() {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: Ref = %s, %v; want ErrNotFound", st.what, got.Short(), err)
			}
		} else if err != nil || got != st.want {
			t.Fatalf("%s: Ref = %s, %v; want %s", st.what, got.Short(), err, st.want.Short())
		}
	}
}

func TestRefsPrefix(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c := emptyCommit(t, s, "x")
	names := []string{"ws/b", "main", "ws/a", "wsx", "ws", "a"}
	err := s.Update(ctx, func(tx *Tx) error {
		for _, n := range names {
			if err := tx.SetRef(n, ZeroID, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string]string{
		"":    "a main ws ws/a ws/b wsx",
		"ws/": "ws/a ws/b",
		"ws":  "ws ws/a ws/b wsx",
		"z":   "",
	} {
		var refs []Ref
		s.View(ctx, func(tx *Tx) error {
			refs, err = tx.Refs(prefix)
			return err
		})
		var got []string
		for _, r := range refs {
			got = append(got, r.Name)
			if r.Commit != c {
				t.Errorf("ref %s = %s", r.Name, r.Commit.Short())
			}
		}
		if strings.Join(got, " ") != want || err != nil {
			t.Errorf("Refs(%q) = %v, %v; want %s", prefix, got, err, want)
		}
	}
}

func TestOpsAndWorkspaces(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c1, c2 := emptyCommit(t, s, "1"), emptyCommit(t, s, "2")
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.AppendOp(Op{Kind: "import", Ref: "main", New: c1, Detail: "/src"}); err != nil {
			return err
		}
		if err := tx.AppendOp(Op{Kind: "commit", Ref: "ws/a", Old: c1, New: c2, TimeNs: 42}); err != nil {
			return err
		}
		return tx.AppendOp(Op{Kind: "gc"})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.View(ctx, func(tx *Tx) error {
		all, err := tx.Ops("", 0)
		if err != nil || len(all) != 3 || all[0].Kind != "gc" || all[2].Kind != "import" {
			t.Fatalf("Ops(all) = %+v, %v", all, err)
		}
		if all[2].TimeNs == 0 || all[2].New != c1 || !all[2].Old.IsZero() || all[2].Detail != "/src" {
			t.Errorf("import op = %+v", all[2])
		}
		one, err := tx.Ops("ws/a", 10)
		if err != nil || len(one) != 1 || one[0].Old != c1 || one[0].New != c2 || one[0].TimeNs != 42 {
			t.Errorf("Ops(ws/a) = %+v, %v", one, err)
		}
		lim, _ := tx.Ops("", 2)
		if len(lim) != 2 || lim[0].Seq <= lim[1].Seq {
			t.Errorf("Ops limit 2 = %+v", lim)
		}
		return nil
	})

	w := Workspace{Name: "a", Branch: "ws/a", Base: c1, Dir: "/tmp/a", CreatedNs: 7, Extra: []byte(`{"tmpfs":true}`)}
	if err := s.Update(ctx, func(tx *Tx) error { return tx.PutWorkspace(&w) }); err != nil {
		t.Fatal(err)
	}
	bad := Workspace{Name: "b", Base: ID{1}}
	if err := s.Update(ctx, func(tx *Tx) error { return tx.PutWorkspace(&bad) }); !errors.Is(err, ErrNotFound) {
		t.Errorf("PutWorkspace with a missing base = %v, want ErrNotFound", err)
	}
	w.Base = c2
	if err := s.Update(ctx, func(tx *Tx) error { return tx.PutWorkspace(&w) }); err != nil {
		t.Fatal(err)
	}
	s.View(ctx, func(tx *Tx) error {
		got, err := tx.Workspace("a")
		if err != nil || got.Base != c2 || got.Branch != "ws/a" || string(got.Extra) != `{"tmpfs":true}` || got.CreatedNs != 7 {
			t.Errorf("Workspace(a) = %+v, %v", got, err)
		}
		if _, err := tx.Workspace("nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Workspace(nope) = %v", err)
		}
		all, err := tx.Workspaces()
		if err != nil || len(all) != 1 {
			t.Errorf("Workspaces = %+v, %v", all, err)
		}
		return nil
	})
	if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteWorkspace("a") }); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteWorkspace("a") }); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteWorkspace = %v", err)
	}
}

func TestUpdateRollsBack(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c := emptyCommit(t, s, "x")
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.SetRef("main", ZeroID, c); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v", err)
	}
	func() {
		defer func() { recover() }()
		s.Update(ctx, func(tx *Tx) error {
			tx.SetRef("main", ZeroID, c)
			panic("in fn")
		})
	}()
	s.View(ctx, func(tx *Tx) error {
		if _, err := tx.Ref("main"); !errors.Is(err, ErrNotFound) {
			t.Errorf("ref survived a rolled back transaction: %v", err)
		}
		if _, err := tx.Put(KindChunk, []byte("x")); !errors.Is(err, ErrReadOnly) {
			t.Errorf("Put in View = %v, want ErrReadOnly", err)
		}
		return nil
	})
	// The store is usable after the panic.
	if err := s.Update(ctx, func(tx *Tx) error { return tx.SetRef("main", ZeroID, c) }); err != nil {
		t.Fatal(err)
	}
}

func TestGetVerifies(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	var id ID
	payload := textBytes(3, 10000)
	s.Update(ctx, func(tx *Tx) error {
		var err error
		id, err = tx.Put(KindChunk, payload)
		return err
	})
	s.View(ctx, func(tx *Tx) error {
		k, p, err := tx.Get(id)
		if err != nil || k != KindChunk || string(p) != string(payload) {
			t.Fatalf("Get = %v, %d bytes, %v", k, len(p), err)
		}
		if _, _, err := tx.Get(ID{1}); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(missing) = %v", err)
		}
		if _, err := tx.Tree(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Tree(chunk) = %v, want ErrNotFound", err)
		}
		return nil
	})
	// A stored row whose data does not match its id.
	if _, err := s.db.Exec(`UPDATE objects SET data = ?, codec = 0, size = 3 WHERE id = ?`, []byte("abc"), id[:]); err != nil {
		t.Fatal(err)
	}
	s.View(ctx, func(tx *Tx) error {
		if _, _, err := tx.Get(id); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get(tampered) = %v, want ErrCorrupt", err)
		}
		return nil
	})
}

func TestResolvePrefix(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c := emptyCommit(t, s, "x")
	tree := HashObject(KindTree, []byte{0})
	s.View(ctx, func(tx *Tx) error {
		for _, tc := range []struct {
			prefix string
			kind   Kind
			want   ID
			err    error
		}{
			{c.String()[:4], KindCommit, c, nil},
			{strings.ToUpper(c.String()[:9]), KindCommit, c, nil},
			{c.String(), 0, c, nil},
			{tree.String()[:7], KindTree, tree, nil},
			{tree.String()[:7], KindCommit, ZeroID, ErrNotFound},
			{c.String()[:3], KindCommit, ZeroID, ErrNotFound},
			{"zzzz", 0, ZeroID, ErrNotFound},
		} {
			got, err := tx.ResolvePrefix(tc.prefix, tc.kind)
			if got != tc.want || (tc.err == nil) != (err == nil) || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("ResolvePrefix(%q, %v) = %s, %v; want %s, %v", tc.prefix, tc.kind, got.Short(), err, tc.want.Short(), tc.err)
			}
		}
		return nil
	})
	// Two of 1000 chunks share their first 4 hex digits (the inputs are
	// fixed, so this is deterministic).
	seen := map[string]bool{}
	var dup string
	s.Update(ctx, func(tx *Tx) error {
		for i := range 1000 {
			id, _ := tx.Put(KindChunk, []byte(fmt.Sprint(i)))
			p := id.String()[:4]
			if seen[p] && dup == "" {
				dup = p
			}
			seen[p] = true
		}
		return nil
	})
	s.View(ctx, func(tx *Tx) error {
		if _, err := tx.ResolvePrefix(dup, KindChunk); err == nil || !strings.Contains(err.Error(), "ambiguous") {
			t.Errorf("ResolvePrefix(%q) of two objects = %v", dup, err)
		}
		return nil
	})
}
