package textdiff

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

// TestWritePatch pins WritePatch's text against what git diff --binary
// (2.39) printed for the same change in a scratch repository.
func TestWritePatch(t *testing.T) {
	const (
		reg  = ModeFile
		exe  = ModeExec
		link = ModeSymlink
	)
	tests := []struct {
		name string
		p    FilePatch
		want string
	}{
		{"unchanged", FilePatch{OldPath: "f", NewPath: "f", OldMode: reg, NewMode: reg, Old: []byte("x\n"), New: []byte("x\n")}, ""},
		{"modified",
			FilePatch{OldPath: "t", NewPath: "t", OldMode: reg, NewMode: reg, Old: []byte("a\nb\nc\n"), New: []byte("a\nB\nc")},
			"diff --git a/t b/t\nindex de98044..36ef1ba 100644\n--- a/t\n+++ b/t\n@@ -1,3 +1,3 @@\n a\n-b\n-c\n+B\n+c\n\\ No newline at end of file\n"},
		{"given hashes",
			FilePatch{OldPath: "t", NewPath: "t", OldMode: reg, NewMode: reg, Old: []byte("a\n"), New: []byte("b\n"), OldHash: "1234abcd", NewHash: "5678ef01"},
			"diff --git a/t b/t\nindex 1234abcd..5678ef01 100644\n--- a/t\n+++ b/t\n@@ -1 +1 @@\n-a\n+b\n"},
		{"one hash given sets the length",
			FilePatch{OldPath: "t", NewPath: "t", OldMode: reg, NewMode: reg, Old: []byte("a\nb\nc\n"), New: []byte("a\nB\nc"), OldHash: "de98044d"},
			"diff --git a/t b/t\nindex de98044d..36ef1ba5 100644\n--- a/t\n+++ b/t\n@@ -1,3 +1,3 @@\n a\n-b\n-c\n+B\n+c\n\\ No newline at end of file\n"},
		{"space in name",
			FilePatch{OldPath: "sp ace", NewPath: "sp ace", OldMode: reg, NewMode: reg, Old: []byte("x"), New: []byte("xy\n")},
			"diff --git a/sp ace b/sp ace\nindex c1b0730..5aad937 100644\n--- a/sp ace\t\n+++ b/sp ace\t\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+xy\n"},
		{"new file, quoted name",
			FilePatch{NewPath: `new "q"`, NewMode: reg, New: []byte("new\n")},
			"diff --git \"a/new \\\"q\\\"\" \"b/new \\\"q\\\"\"\nnew file mode 100644\nindex 0000000..3e75765\n--- /dev/null\n+++ \"b/new \\\"q\\\"\"\t\n@@ -0,0 +1 @@\n+new\n"},
		{"deleted file, newline in name",
			FilePatch{OldPath: "nl\nx", OldMode: reg, Old: []byte("z\n")},
			"diff --git \"a/nl\\nx\" \"b/nl\\nx\"\ndeleted file mode 100644\nindex b680253..0000000\n--- \"a/nl\\nx\"\n+++ /dev/null\n@@ -1 +0,0 @@\n-z\n"},
		{"non-ASCII name",
			FilePatch{OldPath: "é", NewPath: "é", OldMode: reg, NewMode: reg, Old: []byte("e"), New: []byte("hi\n")},
			"diff --git \"a/\\303\\251\" \"b/\\303\\251\"\nindex 9cbe6ea..45b983b 100644\n--- \"a/\\303\\251\"\n+++ \"b/\\303\\251\"\n@@ -1 +1 @@\n-e\n\\ No newline at end of file\n+hi\n"},
		{"new empty file", FilePatch{NewPath: "newempty", NewMode: reg},
			"diff --git a/newempty b/newempty\nnew file mode 100644\nindex 0000000..e69de29\n"},
		{"deleted empty file", FilePatch{OldPath: "empty", OldMode: reg, Old: []byte{}},
			"diff --git a/empty b/empty\ndeleted file mode 100644\nindex e69de29..0000000\n"},
		{"emptied file",
			FilePatch{OldPath: "f", NewPath: "f", OldMode: reg, NewMode: reg, Old: []byte("a\n")},
			"diff --git a/f b/f\nindex 7898192..e69de29 100644\n--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-a\n"},
		{"mode only",
			FilePatch{OldPath: "mode", NewPath: "mode", OldMode: reg, NewMode: exe, Old: []byte("m\n"), New: []byte("m\n")},
			"diff --git a/mode b/mode\nold mode 100644\nnew mode 100755\n"},
		{"mode canonicalized",
			FilePatch{OldPath: "mode", NewPath: "mode", OldMode: 0o664, NewMode: 0o100700, Old: []byte("m\n"), New: []byte("m\n")},
			"diff --git a/mode b/mode\nold mode 100644\nnew mode 100755\n"},
		{"mode and content",
			FilePatch{OldPath: "modec", NewPath: "modec", OldMode: reg, NewMode: exe, Old: []byte("y\n"), New: []byte("y\nz\n")},
			"diff --git a/modec b/modec\nold mode 100644\nnew mode 100755\nindex 975fbec..2795c87\n--- a/modec\n+++ b/modec\n@@ -1 +1,2 @@\n y\n+z\n"},
		{"symlink retargeted",
			FilePatch{OldPath: "lnk", NewPath: "lnk", OldMode: link, NewMode: link, Old: []byte("target"), New: []byte("other")},
			"diff --git a/lnk b/lnk\nindex 1de5659..27fa349 120000\n--- a/lnk\n+++ b/lnk\n@@ -1 +1 @@\n-target\n\\ No newline at end of file\n+other\n\\ No newline at end of file\n"},
		{"symlink created",
			FilePatch{NewPath: "newlink", NewMode: link, New: []byte("sp ace")},
			"diff --git a/newlink b/newlink\nnew file mode 120000\nindex 0000000..cfe8f0c\n--- /dev/null\n+++ b/newlink\n@@ -0,0 +1 @@\n+sp ace\n\\ No newline at end of file\n"},
		{"symlink deleted",
			FilePatch{OldPath: "l", OldMode: link, Old: []byte("foo")},
			"diff --git a/l b/l\ndeleted file mode 120000\nindex 1910281..0000000\n--- a/l\n+++ /dev/null\n@@ -1 +0,0 @@\n-foo\n\\ No newline at end of file\n"},
		{"file becomes symlink",
			FilePatch{OldPath: "file2link", NewPath: "file2link", OldMode: reg, NewMode: link, Old: []byte("f\n"), New: []byte("bar")},
			"diff --git a/file2link b/file2link\ndeleted file mode 100644\nindex 6a69f92..0000000\n--- a/file2link\n+++ /dev/null\n@@ -1 +0,0 @@\n-f\n" +
				"diff --git a/file2link b/file2link\nnew file mode 120000\nindex 0000000..ba0e162\n--- /dev/null\n+++ b/file2link\n@@ -0,0 +1 @@\n+bar\n\\ No newline at end of file\n"},
		{"symlink becomes file",
			FilePatch{OldPath: "link2file", NewPath: "link2file", OldMode: link, NewMode: reg, Old: []byte("foo"), New: []byte("data\n")},
			"diff --git a/link2file b/link2file\ndeleted file mode 120000\nindex 1910281..0000000\n--- a/link2file\n+++ /dev/null\n@@ -1 +0,0 @@\n-foo\n\\ No newline at end of file\n" +
				"diff --git a/link2file b/link2file\nnew file mode 100644\nindex 0000000..1269488\n--- /dev/null\n+++ b/link2file\n@@ -0,0 +1 @@\n+data\n"},
		{"pure rename",
			FilePatch{OldPath: "bindel", NewPath: "binnew2", OldMode: reg, NewMode: reg, Old: []byte("bb\x00\n"), New: []byte("bb\x00\n")},
			"diff --git a/bindel b/binnew2\nsimilarity index 100%\nrename from bindel\nrename to binnew2\n"},
		{"rename with mode change",
			FilePatch{OldPath: "r1", NewPath: "r2", OldMode: reg, NewMode: exe, Old: []byte("base\nq\n"), New: []byte("base\nq\n")},
			"diff --git a/r1 b/r2\nold mode 100644\nnew mode 100755\nsimilarity index 100%\nrename from r1\nrename to r2\n"},
		{"rename with edit",
			FilePatch{OldPath: "d/o ld", NewPath: "d/n\tew", OldMode: reg, NewMode: reg, Old: []byte("1\n2\n3\n4\n"), New: []byte("1\n2\n3\n5\n")},
			"diff --git a/d/o ld \"b/d/n\\tew\"\nsimilarity index 75%\nrename from d/o ld\nrename to \"d/n\\tew\"\nindex 94ebaf9..e0d13b0 100644\n--- a/d/o ld\t\n+++ \"b/d/n\\tew\"\n@@ -1,4 +1,4 @@\n 1\n 2\n 3\n-4\n+5\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WritePatch(&buf, tt.p); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestWritePatchBinary checks the header of binary patches against git's
// and decodes both literal blocks (git's zlib output differs from
// compress/zlib's, so the data lines cannot be compared as text).
func TestWritePatchBinary(t *testing.T) {
	const reg = ModeFile
	big := bytes.Repeat([]byte("0123456789\x00"), 1000)
	tests := []struct {
		name   string
		p      FilePatch
		header string
	}{
		{"modified",
			FilePatch{OldPath: "bin", NewPath: "bin", OldMode: reg, NewMode: reg, Old: []byte("bin\x00ary"), New: []byte("bin\x00aRy"), OldHash: "87ae6b6", NewHash: "1db76d7"},
			"diff --git a/bin b/bin\nindex 87ae6b695deceaf160611414f7dcd5c7366b2e79..1db76d7e50465d16e738c35cf1f44f9f9463b908 100644\nGIT binary patch\n"},
		{"created",
			FilePatch{NewPath: "binnew2", NewMode: reg, New: []byte("bb\x00\n")},
			"diff --git a/binnew2 b/binnew2\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..ef1d3fb96f3ae5fcc46756034da1daf28a73def5\nGIT binary patch\n"},
		{"deleted",
			FilePatch{OldPath: "bindel", OldMode: reg, Old: []byte("bb\x00\n")},
			"diff --git a/bindel b/bindel\ndeleted file mode 100644\nindex ef1d3fb96f3ae5fcc46756034da1daf28a73def5..0000000000000000000000000000000000000000\nGIT binary patch\n"},
		{"text becomes binary, mode change",
			FilePatch{OldPath: "m", NewPath: "m", OldMode: reg, NewMode: ModeExec, Old: []byte("text\n"), New: big},
			"diff --git a/m b/m\nold mode 100644\nnew mode 100755\nindex 8e27be7d6154a1f68ea9160ef0e18691d20560dc..069949acb546abb0c4969fb9aa3a6999dc753b9a\nGIT binary patch\n"},
		{"NUL only after 8000 bytes is text",
			FilePatch{OldPath: "late", NewPath: "late", OldMode: reg, NewMode: reg, Old: nil, New: append(bytes.Repeat([]byte("x"), 8000), 0)},
			"diff --git a/late b/late\nindex e69de29..696085b 100644\n--- a/late\n+++ b/late\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WritePatch(&buf, tt.p); err != nil {
				t.Fatal(err)
			}
			got := buf.String()
			if !strings.HasPrefix(got, tt.header) {
				t.Fatalf("got\n%.600s\nwant prefix\n%s", got, tt.header)
			}
			if !strings.HasSuffix(tt.header, "GIT binary patch\n") {
				return
			}
			fwd, rest, err := decodeLiteral(got[len(tt.header):])
			if err != nil {
				t.Fatal(err)
			}
			rev, rest, err := decodeLiteral(rest)
			if err != nil {
				t.Fatal(err)
			}
			if rest != "" {
				t.Errorf("trailing %q", rest)
			}
			if !bytes.Equal(fwd, tt.p.New) || !bytes.Equal(rev, tt.p.Old) {
				t.Errorf("literal blocks decode to %q and %q", fwd, rev)
			}
		})
	}
}

// decodeLiteral decodes one "literal" block of a GIT binary patch, as
// apply.c parse_binary_hunk does, and returns the text after it.
func decodeLiteral(s string) ([]byte, string, error) {
	line, s, _ := strings.Cut(s, "\n")
	size, err := strconv.Atoi(strings.TrimPrefix(line, "literal "))
	if err != nil || !strings.HasPrefix(line, "literal ") {
		return nil, "", fmt.Errorf("bad block header %q", line)
	}
	var z []byte
	for {
		line, s, _ = strings.Cut(s, "\n")
		if line == "" {
			break
		}
		var n int
		switch c := line[0]; {
		case 'A' <= c && c <= 'Z':
			n = int(c-'A') + 1
		case 'a' <= c && c <= 'z':
			n = int(c-'a') + 27
		default:
			return nil, "", fmt.Errorf("bad length byte in %q", line)
		}
		if (len(line)-1)%5 != 0 || (n+3)/4*5 != len(line)-1 {
			return nil, "", fmt.Errorf("bad line length %q", line)
		}
		var dec []byte
		for g := line[1:]; g != ""; g = g[5:] {
			var acc uint64
			for k := 0; k < 5; k++ {
				i := strings.IndexByte(base85, g[k])
				if i < 0 {
					return nil, "", fmt.Errorf("bad base85 %q", g[k])
				}
				acc = acc*85 + uint64(i)
			}
			if acc > 0xffffffff {
				return nil, "", fmt.Errorf("base85 group overflows in %q", line)
			}
			dec = append(dec, byte(acc>>24), byte(acc>>16), byte(acc>>8), byte(acc))
		}
		z = append(z, dec[:n]...)
	}
	zr, err := zlib.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, "", err
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, "", err
	}
	if len(data) != size {
		return nil, "", fmt.Errorf("literal %d inflates to %d bytes", size, len(data))
	}
	return data, s, nil
}

func TestWritePatchErrors(t *testing.T) {
	tests := []struct {
		name string
		p    FilePatch
		want error
	}{
		{"both absent", FilePatch{OldPath: "a", NewPath: "a"}, nil},
		{"empty path", FilePatch{NewMode: ModeFile}, ErrInvalidPath},
		{"absolute", FilePatch{NewPath: "/etc/passwd", NewMode: ModeFile}, ErrInvalidPath},
		{"dot-dot", FilePatch{OldPath: "a/../b", OldMode: ModeFile}, ErrInvalidPath},
		{"trailing slash", FilePatch{NewPath: "a/", NewMode: ModeFile}, ErrInvalidPath},
		{"NUL", FilePatch{NewPath: "a\x00b", NewMode: ModeFile}, ErrInvalidPath},
		// git apply: "error: invalid path 'sub/.GiT/x'".
		{".git inside", FilePatch{OldPath: "sub/.GiT/x", NewPath: "sub/.GiT/x", OldMode: ModeFile, NewMode: ModeFile}, ErrInvalidPath},
		{"directory", FilePatch{NewPath: "d", NewMode: 0o040755}, errors.ErrUnsupported},
		{"gitlink", FilePatch{OldPath: "d", OldMode: 0o160000}, errors.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WritePatch(&buf, tt.p)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %q", buf.String())
			}
		})
	}
}

func TestQuotePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain/path.go", "plain/path.go"},
		{"sp ace", "sp ace"},
		{"-dash", "-dash"},
		{"tab\there", `"tab\there"`},
		{"nl\nx", `"nl\nx"`},
		{`q"uote`, `"q\"uote"`},
		{`back\slash`, `"back\\slash"`},
		{"ctl\a\b\v\f\r\x01\x7f", `"ctl\a\b\v\f\r\001\177"`},
		{"é", `"\303\251"`},
		{"bad\xffutf8", `"bad\377utf8"`},
		{"a/b/日本", `"a/b/\346\227\245\346\234\254"`},
	}
	for _, tt := range tests {
		if got := QuotePath(tt.in); got != tt.want {
			t.Errorf("QuotePath(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestIsBinary(t *testing.T) {
	tests := []struct {
		in   []byte
		want bool
	}{
		{nil, false},
		{[]byte("text\n"), false},
		{[]byte("\x00"), true},
		{[]byte("\xff\xfe utf-16 without NUL is text to git"), false},
		{append(bytes.Repeat([]byte("x"), 7999), 0), true},
		{append(bytes.Repeat([]byte("x"), 8000), 0), false},
	}
	for _, tt := range tests {
		if got := IsBinary(tt.in); got != tt.want {
			t.Errorf("IsBinary(%.20q… len %d) = %v", tt.in, len(tt.in), got)
		}
	}
}

// TestWritePatchSummary pins a summary section against git 2.39's
// `git -c core.bigFileThreshold=10 diff` of the same change, with the
// hashes streamed through NewBlobHash.
func TestWritePatchSummary(t *testing.T) {
	id := func(s string) string {
		h := NewBlobHash(int64(len(s)))
		io.WriteString(h, s)
		return fmt.Sprintf("%x", h.Sum(nil))
	}
	if got, want := id("hello world, big\n"), BlobID([]byte("hello world, big\n")); got != want {
		t.Fatalf("NewBlobHash: %s; BlobID %s", got, want)
	}
	tests := []struct {
		name string
		p    FilePatch
		want string
	}{
		{"modified, mode changed",
			FilePatch{OldPath: "big", NewPath: "big", OldMode: ModeFile, NewMode: ModeExec, OldHash: id("hello world, big\n"), NewHash: id("hello world, bigger\n"), Summary: true},
			"diff --git a/big b/big\nold mode 100644\nnew mode 100755\nindex 36498cd..36e1a64\nBinary files a/big and b/big differ\n"},
		{"modified, data ignored",
			FilePatch{OldPath: "big", NewPath: "big", OldMode: ModeFile, NewMode: ModeFile, Old: []byte("x\n"), New: []byte("x\n"), OldHash: id("hello world, big\n"), NewHash: id("hello world, bigger\n"), Summary: true},
			"diff --git a/big b/big\nindex 36498cd..36e1a64 100644\nBinary files a/big and b/big differ\n"},
		{"new",
			FilePatch{NewPath: "new", NewMode: ModeFile, NewHash: id("a new one, big too\n"), Summary: true},
			"diff --git a/new b/new\nnew file mode 100644\nindex 0000000..d6427b9\nBinary files /dev/null and b/new differ\n"},
		{"deleted",
			FilePatch{OldPath: "del", OldMode: ModeFile, OldHash: id("gone gone gone gone\n"), Summary: true},
			"diff --git a/del b/del\ndeleted file mode 100644\nindex 7c2c2c0..0000000\nBinary files a/del and /dev/null differ\n"},
		{"same hashes, mode only",
			FilePatch{OldPath: "m", NewPath: "m", OldMode: ModeFile, NewMode: ModeExec, OldHash: id("m\n"), NewHash: id("m\n"), Summary: true},
			"diff --git a/m b/m\nold mode 100644\nnew mode 100755\n"},
		{"unchanged",
			FilePatch{OldPath: "m", NewPath: "m", OldMode: ModeFile, NewMode: ModeFile, OldHash: id("m\n"), NewHash: id("m\n"), Summary: true}, ""},
	}
	for _, tt := range tests {
		var b strings.Builder
		if err := WritePatch(&b, tt.p); err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tt.name, b.String(), tt.want)
		}
	}
	if err := WritePatch(io.Discard, FilePatch{NewPath: "n", NewMode: ModeFile, Summary: true}); err == nil {
		t.Errorf("a summary without NewHash: no error")
	}
}
