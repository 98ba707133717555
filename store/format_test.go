package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestObjectIDGolden pins the object id scheme: changing the header or
// the hash changes every id in every store.
func TestObjectIDGolden(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		p    []byte
		want string
	}{
		{KindChunk, []byte("hello"), "cd8a8d9bc19b5c44984a9e6f99391c64e35318f768ddc98a4e6f99daebd5681b"},
		{KindTree, []byte{0}, "9d2f4660b0cec99d86bcef466283d031ef530b16527f81f2f8bb51a33f09159e"},
	} {
		if got := HashObject(tc.kind, tc.p).String(); got != tc.want {
			t.Errorf("HashObject(%v, %q) = %s, want %s", tc.kind, tc.p, got, tc.want)
		}
	}
	// The empty tree encodes as a single zero count.
	p, err := EncodeTree(&Tree{})
	if err != nil || !bytes.Equal(p, []byte{0}) {
		t.Errorf("EncodeTree(empty) = %x, %v", p, err)
	}
}

// TestGearGolden pins the Gear table and the cut points: they are part of
// the format, since they decide the ids of large files.
func TestGearGolden(t *testing.T) {
	if gear[0] != 0xfd2b3b0e100360b2 || gear[255] != 0xbe2a98350736ad00 {
		t.Errorf("gear[0], gear[255] = %#x, %#x", gear[0], gear[255])
	}
	data := randBytes(1, 1<<20)
	var cuts []int
	for off := 0; off < len(data); {
		n := defaultCDC.cut(data[off:])
		off += n
		cuts = append(cuts, off)
	}
	want := []int{47596, 86288, 131595, 183357, 243170}
	if !slices.Equal(cuts[:5], want) {
		t.Errorf("first cut points = %v, want %v", cuts[:5], want)
	}
}

func sampleTree() *Tree {
	id1 := HashObject(KindChunk, []byte("a"))
	id2 := HashObject(KindTree, []byte{0})
	return &Tree{Entries: []TreeEntry{
		{Name: "\n odd name\xff", Type: TypeFile, Mode: 04755, UID: 1000, GID: 1000, MtimeNs: -5, Size: 1, Content: id1,
			Xattrs: []Xattr{{Name: "user.a", Value: []byte("1")}, {Name: "user.b", Value: nil}}, LinkGroup: "x/y"},
		{Name: "dir", Type: TypeDir, Mode: 01777, Content: id2},
		{Name: "dev", Type: TypeCharDev, Mode: 0o600, Rdev: 1<<32 | 5},
		{Name: "link", Type: TypeSymlink, Mode: 0o777, Target: "../../etc/\x01passwd", Size: 17},
	}}
}

func sortedEntries(t *Tree) *Tree {
	slices.SortFunc(t.Entries, func(a, b TreeEntry) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return t
}

func TestTreeRoundTrip(t *testing.T) {
	for _, tr := range []*Tree{{}, sortedEntries(sampleTree())} {
		p, err := EncodeTree(tr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTree(p)
		if err != nil {
			t.Fatal(err)
		}
		if !treesEqual(got, tr) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, tr)
		}
	}
}

// treesEqual compares trees, treating nil and empty slices alike.
func treesEqual(a, b *Tree) bool {
	if len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		x, y := a.Entries[i], b.Entries[i]
		if len(x.Xattrs) != len(y.Xattrs) {
			return false
		}
		for j := range x.Xattrs {
			if x.Xattrs[j].Name != y.Xattrs[j].Name || !bytes.Equal(x.Xattrs[j].Value, y.Xattrs[j].Value) {
				return false
			}
		}
		x.Xattrs, y.Xattrs = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func TestEncodeTreeRejects(t *testing.T) {
	ok := TreeEntry{Name: "a", Type: TypeFile, Mode: 0o644}
	with := func(f func(e *TreeEntry)) *Tree {
		e := ok
		f(&e)
		return &Tree{Entries: []TreeEntry{e}}
	}
	for name, tr := range map[string]*Tree{
		"empty name":     with(func(e *TreeEntry) { e.Name = "" }),
		"dot":            with(func(e *TreeEntry) { e.Name = "." }),
		"dotdot":         with(func(e *TreeEntry) { e.Name = ".." }),
		"slash":          with(func(e *TreeEntry) { e.Name = "a/b" }),
		"nul":            with(func(e *TreeEntry) { e.Name = "a\x00" }),
		"bad type":       with(func(e *TreeEntry) { e.Type = 9 }),
		"mode bits":      with(func(e *TreeEntry) { e.Mode = 0o100644 }),
		"negative size":  with(func(e *TreeEntry) { e.Size = -1 }),
		"xattr unsorted": with(func(e *TreeEntry) { e.Xattrs = []Xattr{{Name: "user.b"}, {Name: "user.a"}} }),
		"xattr dup":      with(func(e *TreeEntry) { e.Xattrs = []Xattr{{Name: "user.a"}, {Name: "user.a"}} }),
		"xattr empty":    with(func(e *TreeEntry) { e.Xattrs = []Xattr{{Name: ""}} }),
		"unsorted":       {Entries: []TreeEntry{{Name: "b", Type: TypeFile}, {Name: "a", Type: TypeFile}}},
		"duplicate":      {Entries: []TreeEntry{{Name: "a", Type: TypeFile}, {Name: "a", Type: TypeDir}}},
	} {
		if _, err := EncodeTree(tr); err == nil {
			t.Errorf("%s: EncodeTree accepted %+v", name, tr.Entries)
		}
	}
}

// encodeRawEntry writes one tree entry without any validation, to build
// inputs EncodeTree refuses to produce.
func encodeRawEntry(b []byte, name string, typ byte, mode uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = append(b, typ)
	b = binary.AppendUvarint(b, mode)
	b = append(b, 0, 0) // uid, gid
	b = append(b, 0)    // mtime
	b = append(b, 0, 0) // size, rdev
	b = append(b, 0, 0) // target, link group
	b = append(b, 0)    // xattrs
	return append(b, make([]byte, 32)...)
}

func rawTree(entries ...[]byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(entries)))
	for _, e := range entries {
		b = append(b, e...)
	}
	return b
}

func TestDecodeTreeRejects(t *testing.T) {
	good := rawTree(encodeRawEntry(nil, "a", 1, 0o644), encodeRawEntry(nil, "b", 2, 0o755))
	if _, err := DecodeTree(good); err != nil {
		t.Fatalf("valid raw tree rejected: %v", err)
	}
	overlong := rawTree(encodeRawEntry(nil, "a", 1, 0o644))
	// Re-encode the mode 0o644 (2 bytes: 0xa4 0x03) as 3 bytes.
	i := bytes.Index(overlong, []byte{0xa4, 0x03})
	overlong = slices.Concat(overlong[:i], []byte{0xa4, 0x83, 0x00}, overlong[i+2:])
	for name, p := range map[string][]byte{
		"empty input":    {},
		"trailing bytes": append(slices.Clone(good), 0),
		"truncated":      good[:len(good)-1],
		"unsorted":       rawTree(encodeRawEntry(nil, "b", 1, 0), encodeRawEntry(nil, "a", 1, 0)),
		"duplicate":      rawTree(encodeRawEntry(nil, "a", 1, 0), encodeRawEntry(nil, "a", 1, 0)),
		"empty name":     rawTree(encodeRawEntry(nil, "", 1, 0)),
		"dot":            rawTree(encodeRawEntry(nil, ".", 1, 0)),
		"dotdot":         rawTree(encodeRawEntry(nil, "..", 1, 0)),
		"slash":          rawTree(encodeRawEntry(nil, "a/b", 1, 0)),
		"nul":            rawTree(encodeRawEntry(nil, "a\x00b", 1, 0)),
		"bad type":       rawTree(encodeRawEntry(nil, "a", 0, 0)),
		"type too big":   rawTree(encodeRawEntry(nil, "a", 8, 0)),
		"mode bits":      rawTree(encodeRawEntry(nil, "a", 1, 0o170000)),
		"mode overflow":  rawTree(encodeRawEntry(nil, "a", 1, 1<<40)),
		"overlong":       overlong,
		"huge count":     binary.AppendUvarint(nil, 1<<40),
		"name too long":  {1, 200, 'a'},
	} {
		if tr, err := DecodeTree(p); err == nil {
			t.Errorf("%s: DecodeTree(%x) accepted: %+v", name, p, tr)
		}
	}
}

func TestCommitRoundTripAndRejects(t *testing.T) {
	tree := HashObject(KindTree, []byte{0})
	p1 := HashObject(KindCommit, []byte("1"))
	p2 := HashObject(KindCommit, []byte("2"))
	c := &Commit{Tree: tree, Parents: []ID{p1, p2}, Message: "msg\n\xff", TimeNs: -1, Source: "git:/r@v",
		Stats: CommitStats{Files: 1, Dirs: 2, Other: 3, Bytes: 1 << 40}}
	b, err := EncodeCommit(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCommit(b)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	for name, bad := range map[string]*Commit{
		"zero tree":      {},
		"zero parent":    {Tree: tree, Parents: []ID{ZeroID}},
		"dup parent":     {Tree: tree, Parents: []ID{p1, p1}},
		"negative stats": {Tree: tree, Stats: CommitStats{Files: -1}},
	} {
		if _, err := EncodeCommit(bad); err == nil {
			t.Errorf("%s: EncodeCommit accepted", name)
		}
	}
	for name, p := range map[string][]byte{
		"trailing":  append(slices.Clone(b), 0),
		"truncated": b[:len(b)-1],
		"zero tree": append(make([]byte, 32), b[32:]...),
		"empty":     nil,
	} {
		if _, err := DecodeCommit(p); err == nil {
			t.Errorf("%s: DecodeCommit accepted", name)
		}
	}
}

func TestFileNodeRoundTripAndRejects(t *testing.T) {
	a := HashObject(KindChunk, []byte("a"))
	n := &FileNode{Level: 1, Refs: []ChunkRef{{a, 1}, {a, 300}}}
	b, err := EncodeFileNode(n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFileNode(b)
	if err != nil || !reflect.DeepEqual(got, n) {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	many := make([]ChunkRef, MaxFileNodeRefs+1)
	for i := range many {
		many[i] = ChunkRef{a, 1}
	}
	for name, bad := range map[string]*FileNode{
		"no refs":                {},
		"zero ref above level 0": {Level: 1, Refs: []ChunkRef{{ZeroID, 1}}},
		"hole of zero size":      {Refs: []ChunkRef{{ZeroID, 0}}},
		"zero size":              {Refs: []ChunkRef{{a, 0}}},
		"too deep":               {Level: maxFileLevel + 1, Refs: []ChunkRef{{a, 1}}},
		"too many":               {Refs: many},
		"overflow":               {Refs: []ChunkRef{{a, 1 << 62}, {a, 1 << 62}}},
	} {
		if _, err := EncodeFileNode(bad); err == nil {
			t.Errorf("%s: EncodeFileNode accepted", name)
		}
	}
	for name, p := range map[string][]byte{
		"trailing":  append(slices.Clone(b), 0),
		"truncated": b[:len(b)-1],
		"empty":     nil,
		"no refs":   {0, 0},
	} {
		if _, err := DecodeFileNode(p); err == nil {
			t.Errorf("%s: DecodeFileNode accepted", name)
		}
	}
}

// --- property tests ----------------------------------------------------------

func genID(t *rapid.T, label string) ID {
	var id ID
	copy(id[:], rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, label))
	return id
}

func genName() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		b := rapid.SliceOfN(rapid.ByteRange(1, 255), 1, 12).Draw(t, "name")
		for i := range b {
			if b[i] == '/' {
				b[i] = '_'
			}
		}
		s := string(b)
		if s == "." || s == ".." {
			s += "x"
		}
		return s
	})
}

func genTree(t *rapid.T) *Tree {
	names := rapid.SliceOfNDistinct(genName(), 0, 8, func(s string) string { return s }).Draw(t, "names")
	slices.Sort(names)
	tr := &Tree{}
	for _, n := range names {
		e := TreeEntry{
			Name:      n,
			Type:      EntryType(rapid.IntRange(1, 7).Draw(t, "type")),
			Mode:      rapid.Uint32Range(0, 07777).Draw(t, "mode"),
			UID:       rapid.Uint32().Draw(t, "uid"),
			GID:       rapid.Uint32().Draw(t, "gid"),
			MtimeNs:   rapid.Int64().Draw(t, "mtime"),
			Size:      rapid.Int64Min(0).Draw(t, "size"),
			LinkGroup: rapid.String().Draw(t, "linkgroup"),
			Target:    string(rapid.SliceOf(rapid.Byte()).Draw(t, "target")),
			Rdev:      rapid.Uint64().Draw(t, "rdev"),
		}
		if rapid.Bool().Draw(t, "hascontent") {
			e.Content = genID(t, "content")
		}
		xn := rapid.SliceOfNDistinct(rapid.StringMatching(`user\.[a-z]{1,5}`), 0, 3, func(s string) string { return s }).Draw(t, "xattrs")
		slices.Sort(xn)
		for _, x := range xn {
			e.Xattrs = append(e.Xattrs, Xattr{Name: x, Value: rapid.SliceOf(rapid.Byte()).Draw(t, "xv")})
		}
		tr.Entries = append(tr.Entries, e)
	}
	return tr
}

func TestRapidTreeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := genTree(t)
		p, err := EncodeTree(tr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTree(p)
		if err != nil {
			t.Fatal(err)
		}
		if !treesEqual(got, tr) {
			t.Fatalf("round trip differs")
		}
		p2, _ := EncodeTree(got)
		if !bytes.Equal(p, p2) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func TestRapidCommitRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := &Commit{
			Tree:    genID(t, "tree"),
			Message: rapid.String().Draw(t, "msg"),
			TimeNs:  rapid.Int64().Draw(t, "time"),
			Source:  rapid.String().Draw(t, "source"),
			Stats: CommitStats{
				Files: rapid.Int64Min(0).Draw(t, "files"), Dirs: rapid.Int64Min(0).Draw(t, "dirs"),
				Other: rapid.Int64Min(0).Draw(t, "other"), Bytes: rapid.Int64Min(0).Draw(t, "bytes"),
			},
		}
		if c.Tree.IsZero() {
			c.Tree[0] = 1
		}
		for range rapid.IntRange(0, 3).Draw(t, "nparents") {
			p := genID(t, "parent")
			if !p.IsZero() && !slices.Contains(c.Parents, p) {
				c.Parents = append(c.Parents, p)
			}
		}
		b, err := EncodeCommit(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommit(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip = %+v, %v", got, err)
		}
	})
}

func TestRapidFileNodeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := &FileNode{Level: uint8(rapid.IntRange(0, maxFileLevel).Draw(t, "level"))}
		for range rapid.IntRange(1, 40).Draw(t, "nrefs") {
			id := genID(t, "id")
			if id.IsZero() {
				id[0] = 1
			}
			n.Refs = append(n.Refs, ChunkRef{ID: id, Size: rapid.Int64Range(1, 1<<40).Draw(t, "size")})
		}
		b, err := EncodeFileNode(n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeFileNode(b)
		if err != nil || !reflect.DeepEqual(got, n) {
			t.Fatalf("round trip = %+v, %v", got, err)
		}
	})
}

// --- fuzzing -----------------------------------------------------------------

// Each decoder must never panic, and whatever it accepts must re-encode
// to the same bytes: that is what canonical means.

func FuzzDecodeTree(f *testing.F) {
	p, _ := EncodeTree(sortedEntries(sampleTree()))
	f.Add(p)
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, p []byte) {
		tr, err := DecodeTree(p)
		if err != nil {
			return
		}
		q, err := EncodeTree(tr)
		if err != nil {
			t.Fatalf("decoded tree does not encode: %v", err)
		}
		if !bytes.Equal(p, q) {
			t.Fatalf("non-canonical input accepted:\n in %x\nout %x", p, q)
		}
	})
}

func FuzzDecodeTreeIndex(f *testing.F) {
	f.Add(encodeTreeIndex([]treeRun{{3, ID{1}}, {4, ID{2}}}))
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		runs, total, err := decodeTreeIndex(p)
		if err != nil {
			return
		}
		sum := 0
		for _, r := range runs {
			sum += r.Entries
		}
		if len(runs) < 2 || sum != total {
			t.Fatalf("accepted %d runs of %d entries for %d", len(runs), sum, total)
		}
		if q := encodeTreeIndex(runs); !bytes.Equal(p, q) {
			t.Fatalf("non-canonical input accepted:\n in %x\nout %x", p, q)
		}
	})
}

func FuzzDecodeRunIndex(f *testing.F) {
	f.Add(encodeRunIndex([]TreeRun{{"a", 500, 40000, ID{1}}, {"b", 600, 40000, ID{2}}}))
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		runs, total, err := decodeRunIndex(p)
		if err != nil {
			return
		}
		sum, size := 0, uvarintLen(uint64(total))
		for i, r := range runs {
			sum += r.Entries
			size += r.Size
			if ValidateName(r.First) != nil || (i > 0 && r.First <= runs[i-1].First) || r.Entries < 1 || r.Tree.IsZero() {
				t.Fatalf("accepted run %d: %+v", i, r)
			}
		}
		if len(runs) < 2 || sum != total || size <= treeSplitMin {
			t.Fatalf("accepted %d runs of %d entries for %d, %d bytes", len(runs), sum, total, size)
		}
		if q := encodeRunIndex(runs); !bytes.Equal(p, q) {
			t.Fatalf("non-canonical input accepted:\n in %x\nout %x", p, q)
		}
	})
}

func FuzzDecodeCommit(f *testing.F) {
	b, _ := EncodeCommit(&Commit{Tree: ID{1}, Parents: []ID{{2}}, Message: "m", TimeNs: 5})
	f.Add(b)
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := DecodeCommit(p)
		if err != nil {
			return
		}
		q, err := EncodeCommit(c)
		if err != nil || !bytes.Equal(p, q) {
			t.Fatalf("non-canonical input accepted: %x → %x, %v", p, q, err)
		}
	})
}

func FuzzDecodeFileNode(f *testing.F) {
	b, _ := EncodeFileNode(&FileNode{Level: 0, Refs: []ChunkRef{{ID{1}, 100}, {ID{2}, 1 << 20}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, p []byte) {
		n, err := DecodeFileNode(p)
		if err != nil {
			return
		}
		q, err := EncodeFileNode(n)
		if err != nil || !bytes.Equal(p, q) {
			t.Fatalf("non-canonical input accepted: %x → %x, %v", p, q, err)
		}
	})
}

// FuzzDecodeRecord fuzzes the decoding of a stored object row: any codec,
// size and bytes must give either the verified payload or ErrCorrupt.
func FuzzDecodeRecord(f *testing.F) {
	payload := textBytes(1, 4000)
	codec, data := compress(payload)
	f.Add(uint8(KindChunk), int64(codec), int64(len(payload)), data, payload)
	f.Add(uint8(KindTree), int64(codecNone), int64(1), []byte{0}, []byte{0})
	f.Fuzz(func(t *testing.T, kind uint8, codec, size int64, data, idSource []byte) {
		k := Kind(kind%7 + 1) // includes an invalid kind
		var id ID
		if validKind(k) {
			id = HashObject(k, idSource)
		}
		p, err := decodeRecord(id, k, codec, size, data, nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(p, idSource) {
			t.Fatalf("verified payload differs from what hashes to the id")
		}
	})
}

// TestWriteFuzzSeeds regenerates the hand-made seeds of testdata/fuzz:
// STRATA_WRITE_SEEDS=1 go test -run WriteFuzzSeeds.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("STRATA_WRITE_SEEDS") == "" {
		t.Skip("set STRATA_WRITE_SEEDS=1 to rewrite testdata/fuzz seeds")
	}
	write := func(fuzz, name string, args ...any) {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			switch v := a.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			case uint8:
				fmt.Fprintf(&b, "byte(%q)\n", v)
			case int64:
				fmt.Fprintf(&b, "int64(%d)\n", v)
			}
		}
		dir := filepath.Join("testdata", "fuzz", fuzz)
		os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tree, _ := EncodeTree(sortedEntries(sampleTree()))
	write("FuzzDecodeTree", "sample", tree)
	write("FuzzDecodeTree", "empty", []byte{0})
	write("FuzzDecodeRunIndex", "sample", encodeRunIndex([]TreeRun{{"a", 500, 40000, ID{1}}, {"b", 600, 40000, ID{2}}}))
	write("FuzzDecodeRunIndex", "firsts-unsorted", encodeRunIndex([]TreeRun{{"b", 500, 40000, ID{1}}, {"a", 600, 40000, ID{2}}}))
	write("FuzzDecodeTree", "unsorted", rawTree(encodeRawEntry(nil, "b", 1, 0), encodeRawEntry(nil, "a", 1, 0)))
	commit, _ := EncodeCommit(&Commit{Tree: ID{1}, Parents: []ID{{2}, {3}}, Message: "m", TimeNs: -5, Source: "/src",
		Stats: CommitStats{Files: 3, Dirs: 1, Bytes: 1 << 33}})
	write("FuzzDecodeCommit", "sample", commit)
	node, _ := EncodeFileNode(&FileNode{Level: 1, Refs: []ChunkRef{{ID{1}, 100}, {ID{2}, 1 << 20}}})
	write("FuzzDecodeFileNode", "sample", node)
	payload := textBytes(1, 4000)
	codec, data := compress(payload)
	write("FuzzDecodeRecord", "zstd", uint8(KindChunk), int64(codec), int64(len(payload)), data, payload)
	write("FuzzDecodeRecord", "raw", uint8(KindTree), int64(codecNone), int64(1), []byte{0}, []byte{0})
}

// FuzzChunker: FastCDC cuts any input into chunks of 1..ChunkMax bytes
// (at least ChunkMin except the last) that cover it exactly.
func FuzzChunker(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add(randBytes(1, 300000), uint16(7))
	f.Fuzz(func(t *testing.T, seed []byte, rep uint16) {
		// Stretch the input so that it reaches the interesting sizes.
		data := bytes.Repeat(seed, int(rep%64)+1)
		total := 0
		for total < len(data) {
			n := defaultCDC.cut(data[total:])
			if n <= 0 || n > ChunkMax || (n < ChunkMin && total+n != len(data)) {
				t.Fatalf("chunk of %d bytes at %d of %d", n, total, len(data))
			}
			total += n
		}
	})
}
