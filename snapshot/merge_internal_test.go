package snapshot

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stratafs/strata/snapshot/snapshottest"
)

// TestMergeCost: changes on both sides in different subtrees of a wide
// tree read only the trees on their paths (subtrees equal on two sides
// are decided by id) and write only the trees above the merged paths.
func TestMergeCost(t *testing.T) {
	mem := newMemStore()
	var es []snapshottest.Entry
	for i := 0; i < 20; i++ {
		for j := 0; j < 5; j++ {
			es = append(es, fileE(filepath.Join("d"+string(rune('a'+i)), "s"+string(rune('a'+j)), "f"), string(rune('a'+i))+string(rune('a'+j))))
		}
	}
	tree := func(edit map[string]string) *ImportResult {
		dir := filepath.Join(t.TempDir(), "src")
		list := append([]snapshottest.Entry(nil), es...)
		for i := range list {
			if v, ok := edit[list[i].Path]; ok {
				list[i].Data = []byte(v)
			}
			list[i].MtimeNs = tA
		}
		for i := 0; i < 20; i++ {
			list = append(list, snapshottest.Entry{Path: "d" + string(rune('a'+i)), Kind: snapshottest.Dir, MtimeNs: tA})
			for j := 0; j < 5; j++ {
				list = append(list, snapshottest.Entry{Path: "d" + string(rune('a'+i)) + "/s" + string(rune('a'+j)), Kind: snapshottest.Dir, MtimeNs: tA})
			}
		}
		snapshottest.Build(t, dir, list)
		res, _ := importFake(t, mem, dir, ImportOptions{}, testCfg())
		return res
	}
	base := tree(nil)
	ours := tree(map[string]string{"da/sa/f": "ours"})
	theirs := tree(map[string]string{"db/sb/f": "theirs"})
	want := tree(map[string]string{"da/sa/f": "ours", "db/sb/f": "theirs"})

	r := &countingReader{memStore: mem}
	w := mem.writer()
	res, err := mergeTrees(context.Background(), r, w, base.Tree, ours.Tree, theirs.Tree, MergeOptions{OursStats: &ours.Stats})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tree != want.Tree || res.Stats != want.Stats {
		t.Fatalf("merged %s %+v, want %s %+v", res.Tree.Short(), res.Stats, want.Tree.Short(), want.Stats)
	}
	// The three roots; theirs' db and db/sb against ours' (ours left them
	// as in base): 4 more. da is ours' change alone: not read.
	if n := r.trees.Load(); n != 7 {
		t.Errorf("read %d trees, want 7", n)
	}
	if st := w.Stats(); st.NewObjects+st.ReusedObjects != 1 {
		n := st.NewObjects + st.ReusedObjects
		t.Errorf("wrote %d objects, want 1 (the root: da and db are taken whole)", n)
	}
}
