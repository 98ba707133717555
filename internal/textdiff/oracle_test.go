package textdiff

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stratafs/strata/internal/testutil"
)

// The tests in this file use real git (and GNU patch) as the oracle: the
// patches WritePatch writes must apply, and reproduce the new tree byte for
// byte, modes and symlinks included.

// entry is a file in a test tree: a git mode and the content (a symlink's
// target).
type entry struct {
	mode uint32
	data []byte
}

type tree map[string]entry

// oracleCase is one generated change.
type oracleCase struct {
	kind string
	p    FilePatch
}

// requireTool skips the test (or fails it under STRATA_TEST_NO_SKIP=1) when
// name is not installed.
func requireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testutil.Skip(t, name+" not installed: "+err.Error())
	}
	return p
}

// run runs a command in dir with git isolated from user and system
// configuration, and returns its stdout.
func run(t testing.TB, dir string, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"LC_ALL=C")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %q: %w\n%s%s", name, args, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

func writeTree(t testing.TB, dir string, tr tree) {
	t.Helper()
	for name, e := range tr {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if e.mode == ModeSymlink {
			if err := os.Symlink(string(e.data), p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		perm := os.FileMode(0o644)
		if e.mode == ModeExec {
			perm = 0o755
		}
		if err := os.WriteFile(p, e.data, perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}

// readTree reads the files and symlinks under dir, outside .git.
func readTree(t testing.TB, dir string) tree {
	t.Helper()
	tr := tree{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && rel == ".git":
			return filepath.SkipDir
		case d.IsDir():
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			tr[rel] = entry{ModeSymlink, []byte(target)}
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := ModeFile
			if info.Mode()&0o100 != 0 {
				mode = ModeExec
			}
			tr[rel] = entry{mode, data}
		default:
			return fmt.Errorf("%s: unexpected file type %v", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// diffTrees describes how got differs from want, "" when equal.
func diffTrees(got, want tree) string {
	var out []string
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: missing", QuotePath(name)))
		case g.mode != w.mode:
			out = append(out, fmt.Sprintf("%s: mode %06o, want %06o", QuotePath(name), g.mode, w.mode))
		case !bytes.Equal(g.data, w.data):
			out = append(out, fmt.Sprintf("%s: content %.60q, want %.60q", QuotePath(name), g.data, w.data))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			out = append(out, fmt.Sprintf("%s: unexpected", QuotePath(name)))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// trees returns the old and new trees of cases.
func trees(cases []oracleCase) (tree, tree) {
	before, after := tree{}, tree{}
	for _, c := range cases {
		if c.p.OldMode != 0 {
			before[c.p.OldPath] = entry{c.p.OldMode, c.p.Old}
		}
		if c.p.NewMode != 0 {
			after[c.p.NewPath] = entry{c.p.NewMode, c.p.New}
		}
	}
	return before, after
}

func patchOf(t testing.TB, cases []oracleCase) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, c := range cases {
		if err := WritePatch(&buf, c.p); err != nil {
			t.Fatalf("%s %s: %v", c.kind, QuotePath(c.p.NewPath), err)
		}
	}
	return buf.Bytes()
}

// applyTool applies the patch of cases to their old tree with git apply or
// GNU patch (checking first) and returns the directory, a git repository
// whose HEAD is the old tree.
func applyTool(t testing.TB, tool string, cases []oracleCase) (string, error) {
	t.Helper()
	dir := t.TempDir()
	old, _ := trees(cases)
	writeTree(t, dir, old)
	if _, err := run(t, dir, "git", "init", "-q"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, dir, "git", "add", "-A"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, dir, "git", "commit", "-q", "--allow-empty", "-m", "old"); err != nil {
		t.Fatal(err)
	}
	pf := filepath.Join(t.TempDir(), "p.patch")
	if err := os.WriteFile(pf, patchOf(t, cases), 0o644); err != nil {
		t.Fatal(err)
	}
	var check, apply []string
	switch tool {
	case "git":
		check = []string{"apply", "--check", pf}
		apply = []string{"apply", pf}
	case "patch":
		common := []string{"-p1", "--batch", "--no-backup-if-mismatch", "-i", pf}
		check = append([]string{"--dry-run"}, common...)
		apply = common
	}
	if _, err := run(t, dir, tool, check...); err != nil {
		return dir, err
	}
	_, err := run(t, dir, tool, apply...)
	return dir, err
}

// checkApply applies the cases with tool and compares the result with the
// new tree. On failure it retries case by case to name the culprit.
func checkApply(t *testing.T, tool string, cases []oracleCase) (dir string) {
	t.Helper()
	_, want := trees(cases)
	dir, err := applyTool(t, tool, cases)
	if err == nil {
		if d := diffTrees(readTree(t, dir), want); d != "" {
			err = fmt.Errorf("result differs:\n%s", d)
		}
	}
	if err == nil {
		return dir
	}
	t.Errorf("%s: %d cases: %v", tool, len(cases), err)
	bad := 0
	for _, c := range cases {
		one := []oracleCase{c}
		_, want := trees(one)
		d, err := applyTool(t, tool, one)
		if err == nil {
			if diff := diffTrees(readTree(t, d), want); diff != "" {
				err = fmt.Errorf("result differs:\n%s", diff)
			}
		}
		if err != nil {
			t.Errorf("%s %s: %v\npatch:\n%s", c.kind, QuotePath(c.p.NewPath), err, patchOf(t, one))
			if bad++; bad == 3 {
				break
			}
		}
	}
	return ""
}

// oddNames are path endings git can represent, quoting those it must.
var oddNames = []string{
	"", ".txt", " space", "two  spaces", "tab\there", "new\nline", `q"uote`, `back\slash`,
	"\xff\xfeinvalid", "é", "日本", "ctl\a\x01\x7f", "trail ", " lead", "-dash", "*star?",
	"$dollar", "semi;colon", "#hash", "a\r", "'single'", "@{at}", "x.orig",
}

// genCases generates n changes with distinct paths.
func genCases(r *rand.Rand, n int) []oracleCase {
	var cases []oracleCase
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("d%d/%03d%s", i%4, i, oddNames[r.IntN(len(oddNames))])
		if r.IntN(5) == 0 {
			name = fmt.Sprintf("%03d%s", i, oddNames[r.IntN(len(oddNames))])
		}
		reg := ModeFile
		if r.IntN(4) == 0 {
			reg = ModeExec
		}
		other := func(m uint32) uint32 { return m ^ ModeFile ^ ModeExec }
		text := genText(r)
		p := FilePatch{OldPath: name, NewPath: name, OldMode: reg, NewMode: reg, Old: text}
		var kind string
		switch k := r.IntN(20); {
		case k < 6:
			kind = "modify"
			p.New = editText(r, text)
		case k == 6:
			kind = "create"
			p.OldMode, p.Old = 0, nil
			p.New = genText(r)
		case k == 7:
			kind = "delete"
			p.NewMode = 0
		case k == 8:
			kind = "mode"
			p.NewMode = other(reg)
			p.New = text
		case k == 9:
			kind = "mode+content"
			p.NewMode = other(reg)
			p.New = editText(r, text)
		case k == 10:
			kind = "symlink retarget"
			p.OldMode, p.NewMode = ModeSymlink, ModeSymlink
			p.Old, p.New = genTarget(r), genTarget(r)
		case k == 11:
			kind = "symlink create"
			p.OldMode, p.Old = 0, nil
			p.NewMode, p.New = ModeSymlink, genTarget(r)
		case k == 12:
			kind = "symlink delete"
			p.OldMode, p.Old = ModeSymlink, genTarget(r)
			p.NewMode = 0
		case k == 13:
			kind = "file to symlink"
			p.NewMode, p.New = ModeSymlink, genTarget(r)
		case k == 14:
			kind = "symlink to file"
			p.OldMode, p.Old = ModeSymlink, genTarget(r)
			p.New = genText(r)
		case k == 15:
			kind = "binary modify"
			p.Old = genBinary(r)
			p.New = editBinary(r, p.Old)
		case k == 16:
			switch r.IntN(4) {
			case 0:
				kind = "binary create"
				p.OldMode, p.Old = 0, nil
				p.New = genBinary(r)
			case 1:
				kind = "binary delete"
				p.Old = genBinary(r)
				p.NewMode = 0
			case 2:
				kind = "text to binary"
				p.New = genBinary(r)
			default:
				kind = "binary to text"
				p.Old, p.New = genBinary(r), text
			}
		case k == 17:
			kind = "rename"
			p.OldPath = name + "-old"
			p.NewPath = fmt.Sprintf("r%d/%s-new", r.IntN(2), name)
			p.New = text
			if r.IntN(2) == 0 {
				p.New = editText(r, text)
			}
			if r.IntN(3) == 0 {
				p.NewMode = other(reg)
			}
		case k == 18:
			kind = "empty"
			switch r.IntN(3) {
			case 0:
				p.OldMode, p.Old, p.New = 0, nil, nil
			case 1:
				p.Old, p.NewMode = nil, 0
			default:
				p.Old, p.New = nil, genText(r)
			}
		default:
			kind = "emptied"
			p.Old, p.New = append(genText(r), 'x'), nil
		}
		cases = append(cases, oracleCase{kind, p})
	}
	return cases
}

// genText returns text of one of several shapes: few distinct lines (so
// diffs are ambiguous), numbered lines, CRLF lines, or nothing; the final
// newline is sometimes missing.
func genText(r *rand.Rand) []byte {
	var b bytes.Buffer
	n := r.IntN(60)
	switch r.IntN(5) {
	case 0:
		vocab := []string{"a\n", "b\n", "}\n", "\n", "\tx = 1\n", "func f() {\n"}
		for i := 0; i < n; i++ {
			b.WriteString(vocab[r.IntN(len(vocab))])
		}
	case 1, 2:
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "line %d\n", r.IntN(100))
		}
	case 3:
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "crlf %d\r\n", r.IntN(10))
		}
	default:
		return nil
	}
	out := b.Bytes()
	if len(out) > 0 && r.IntN(4) == 0 {
		out = out[:len(out)-1]
	}
	return out
}

// editText edits text: random line edits, insertions at the start or end,
// toggling the final newline, or replacing it all.
func editText(r *rand.Rand, text []byte) []byte {
	out := bytes.Clone(text)
	for k := r.IntN(3) + 1; k > 0; k-- {
		switch r.IntN(6) {
		case 0:
			out = append([]byte(fmt.Sprintf("first %d\n", r.IntN(9))), out...)
		case 1:
			out = append(out, fmt.Sprintf("last %d\n", r.IntN(9))...)
		case 2:
			if len(out) > 0 && out[len(out)-1] == '\n' {
				out = out[:len(out)-1]
			} else {
				out = append(out, '\n')
			}
		case 3:
			out = genText(r)
		default:
			out = mutate(r, out, 1+r.IntN(6))
		}
	}
	if bytes.Equal(out, text) {
		out = append(out, "changed\n"...)
	}
	return out
}

// genTarget returns a symlink target: never empty, never NUL.
func genTarget(r *rand.Rand) []byte {
	targets := []string{"target", "../up/there", "/abs/path", "sp ace", "nl\nin target", "é", "x\n", "\xff", " "}
	t := targets[r.IntN(len(targets))]
	if r.IntN(2) == 0 {
		t += fmt.Sprint(r.IntN(100))
	}
	return []byte(t)
}

// genBinary returns data with a NUL in its first 8000 bytes, sometimes
// longer than that.
func genBinary(r *rand.Rand) []byte {
	n := 1 + r.IntN(3000)
	if r.IntN(4) == 0 {
		n += 8000
	}
	b := make([]byte, n)
	for i := range b {
		if r.IntN(3) == 0 {
			b[i] = byte(r.IntN(256))
		} else {
			b[i] = "abc\n"[r.IntN(4)]
		}
	}
	b[r.IntN(min(n, 8000))] = 0
	return b
}

func editBinary(r *rand.Rand, b []byte) []byte {
	out := bytes.Clone(b)
	switch r.IntN(3) {
	case 0:
		out[r.IntN(len(out))] ^= 0x55
	case 1:
		more := genBinary(r)
		out = append(out, more[:1+r.IntN(min(50, len(more)))]...)
	default:
		out = out[:r.IntN(len(out))+1]
		out = append(out, 0)
	}
	return out
}

// TestGitApply writes generated changes as one patch per batch and checks
// that git apply --check and git apply accept it and reproduce the new tree.
func TestGitApply(t *testing.T) {
	requireTool(t, "git")
	r := rand.New(rand.NewPCG(7, 8))
	for batch := 0; batch < 6; batch++ {
		cases := genCases(r, 150)
		t.Run(fmt.Sprint(batch), func(t *testing.T) {
			t.Parallel()
			checkApply(t, "git", cases)
		})
	}
}

// TestGNUPatch applies the text-only patches with patch -p1. GNU patch
// (2.7) cannot take binary patches or a change between file and symlink,
// strips trailing white space from file names, and cannot parse names with
// white space from a "diff --git" line alone (renames, mode changes, empty
// files), so those are left out. git's own patches fail the same way.
func TestGNUPatch(t *testing.T) {
	requireTool(t, "git")
	requireTool(t, "patch")
	r := rand.New(rand.NewPCG(9, 10))
	for batch := 0; batch < 3; batch++ {
		var cases []oracleCase
		for _, c := range genCases(r, 150) {
			binary := IsBinary(c.p.Old) || IsBinary(c.p.New)
			typeChange := c.p.OldMode != 0 && c.p.NewMode != 0 && (c.p.OldMode == ModeSymlink) != (c.p.NewMode == ModeSymlink)
			trailing := strings.TrimRight(c.p.OldPath, " \t\r\n") != c.p.OldPath ||
				strings.TrimRight(c.p.NewPath, " \t\r\n") != c.p.NewPath
			// "rename from a -old" fails with "Cannot rename file without
			// two valid file names", for git's own patches too.
			spacedRename := c.p.OldMode != 0 && c.p.NewMode != 0 && c.p.OldPath != c.p.NewPath &&
				strings.ContainsAny(c.p.OldPath+c.p.NewPath, " \t")
			// Without "---"/"+++" lines (a mode change, an empty file)
			// patch takes the name from "diff --git a/x y b/x y", which is
			// ambiguous with white space, and gives up.
			spacedHeader := bytes.Equal(c.p.Old, c.p.New) &&
				strings.ContainsAny(c.p.OldPath+c.p.NewPath, " \t")
			if !binary && !typeChange && !trailing && !spacedRename && !spacedHeader {
				cases = append(cases, c)
			}
		}
		t.Run(fmt.Sprint(batch), func(t *testing.T) {
			checkApply(t, "patch", cases)
		})
	}
}

// TestMatchesGitDiff compares WritePatch with git diff --binary for the
// same changes. Headers (everything but hunks and binary data) must be
// identical; hunks may legitimately differ where git's Myers picks another
// of several minimal diffs, which is counted, not failed.
func TestMatchesGitDiff(t *testing.T) {
	requireTool(t, "git")
	r := rand.New(rand.NewPCG(11, 12))
	var cases []oracleCase
	for _, c := range genCases(r, 150) {
		if c.p.OldPath == c.p.NewPath || c.p.OldMode == 0 || c.p.NewMode == 0 {
			cases = append(cases, c) // renames need -M, whose score differs
		}
	}
	dir := checkApply(t, "git", cases)
	if dir == "" {
		return
	}
	if _, err := run(t, dir, "git", "add", "-A"); err != nil {
		t.Fatal(err)
	}
	same, differ := 0, 0
	for _, c := range cases {
		path := c.p.NewPath
		if c.p.NewMode == 0 {
			path = c.p.OldPath
		}
		want, err := run(t, dir, "git", "diff", "--cached", "--binary", "--no-renames", "--", ":(literal)"+path)
		if err != nil {
			t.Fatal(err)
		}
		got := patchOf(t, []oracleCase{c})
		if bytes.Equal(got, want) {
			same++
			continue
		}
		if hg, hw := patchHeaders(got), patchHeaders(want); hg != hw {
			t.Errorf("%s %s: headers differ:\ngot\n%s\nwant\n%s", c.kind, QuotePath(path), hg, hw)
			continue
		}
		if IsBinary(c.p.Old) || IsBinary(c.p.New) {
			same++ // only the deflated data differs
			continue
		}
		differ++
		if testing.Verbose() {
			t.Logf("%s %s: hunks differ from git's:\n%s\ngit:\n%s", c.kind, QuotePath(path), got, want)
		}
	}
	t.Logf("%d patches identical to git's (binary data aside), %d with different hunks", same, differ)
}

// patchHeaders returns a patch's lines other than hunk lines and binary
// data. git writes a "delta" block where smaller than "literal", so those
// lines go too.
func patchHeaders(p []byte) string {
	var out []string
	inHunk, inBinary := false, false
	for _, l := range strings.SplitAfter(string(p), "\n") {
		switch {
		case strings.HasPrefix(l, "diff --git "):
			inHunk, inBinary = false, false
		case inHunk || inBinary:
			continue
		case strings.HasPrefix(l, "GIT binary patch"):
			inBinary = true
		case strings.HasPrefix(l, "@@ "):
			inHunk = true
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "")
}

// TestGitApplyBinaryNeedsFullIndex pins what git apply requires of a binary
// patch (apply.c apply_binary): the index line must carry full object ids
// ("cannot apply binary patch to '%s' without full index line"), the old id
// must match the file being patched, and the new id must match the result.
// That is why WritePatch computes full SHA-1 blob ids for binary patches
// and ignores abbreviated ones. It also checks that the patch applies
// outside any repository.
func TestGitApplyBinaryNeedsFullIndex(t *testing.T) {
	requireTool(t, "git")
	before, after := []byte("bin\x00ary"), []byte("bin\x00aRy")
	var buf bytes.Buffer
	if err := WritePatch(&buf, FilePatch{OldPath: "bin", NewPath: "bin", OldMode: ModeFile, NewMode: ModeFile, Old: before, New: after, OldHash: "87ae6b6", NewHash: "1db76d7"}); err != nil {
		t.Fatal(err)
	}
	full := buf.String()
	oldID, newID := BlobID(before), BlobID(after)
	tests := []struct {
		name, patch string
		wantErr     string // "" for success
	}{
		{"full ids", full, ""},
		{"abbreviated ids", strings.Replace(full, oldID+".."+newID, oldID[:7]+".."+newID[:7], 1), "without full index line"},
		{"wrong preimage id", strings.Replace(full, oldID+"..", BlobID(nil)+"..", 1), "does not match the current contents"},
		{"wrong result id", strings.Replace(full, ".."+newID, ".."+BlobID(nil), 1), "creates incorrect result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not a repository: keep git from finding one above.
			parent := t.TempDir()
			dir := filepath.Join(parent, "w")
			writeTree(t, dir, tree{"bin": {ModeFile, before}})
			pf := filepath.Join(parent, "p.patch")
			if err := os.WriteFile(pf, []byte(tt.patch), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("GIT_CEILING_DIRECTORIES", parent)
			_, err := run(t, dir, "git", "apply", pf)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr == "":
				if got := readTree(t, dir)["bin"].data; !bytes.Equal(got, after) {
					t.Fatalf("applied %q, want %q", got, after)
				}
			case err == nil || !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestUnifiedMatchesGitNoIndex compares Unified with the hunks of git diff
// --no-index on generated pairs: realistic edits, and short-vocabulary
// texts where many diffs are equally minimal. Identical text is not
// required (git's Myers can pick another of several minimal diffs), but the
// share is logged, and a drop below half means the compaction port broke.
func TestUnifiedMatchesGitNoIndex(t *testing.T) {
	requireTool(t, "git")
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(15, 16))
	const n = 300
	same := 0
	for i := 0; i < n; i++ {
		var a, b []byte
		if i%2 == 0 {
			a = genText(r)
			b = editText(r, a)
		} else {
			vocab := []string{"a\n", "b\n", "}\n", "\n", "\tx\n", "  c\n"}[:2+r.IntN(5)]
			gen := func(n int) []byte {
				var out []byte
				for k := 0; k < n; k++ {
					out = append(out, vocab[r.IntN(len(vocab))]...)
				}
				return out
			}
			a = gen(r.IntN(100))
			b = mutate(r, a, 1+r.IntN(10))
			if r.IntN(3) == 0 {
				b = gen(r.IntN(100))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "a"), a, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "b"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		// Exit status 1 means "differences found".
		out, _ := run(t, dir, "git", "diff", "--no-index", "--", "a", "b")
		if k := bytes.Index(out, []byte("\n@@ ")); k >= 0 {
			out = out[k+1:]
		} else {
			out = nil
		}
		got := Unified(a, b, DefaultContext)
		if bytes.Equal(got, out) {
			same++
		} else if testing.Verbose() {
			t.Logf("pair %d differs:\na=%q\nb=%q\ngot\n%s\ngit\n%s", i, a, b, got, out)
		}
	}
	t.Logf("%d of %d identical to git diff --no-index", same, n)
	if same < n/2 {
		t.Errorf("only %d of %d identical to git's hunks", same, n)
	}
}
