package main

// SWE-bench-shaped test images: what examples/swebench runs and the
// environment tests read.
//
//	sweb.env.textkit              = [base, swe-env]
//	sweb.eval.textkit_1776_textkit-1  = [base, swe-env, instance-1]
//	sweb.eval.textkit_1776_textkit-2  = [base, swe-env, instance-2]
//
// base is the images' shared Debian root (python3); swe-env is what
// installing python3-pytest, git and patch from the Debian archive changed
// (the difference of two mmdebstrap roots, whiteouts included) and
// /root/setup_env.sh; an instance layer holds /testbed — the generated
// project "textkit" as a git repository with its history up to the task's
// base commit — SWE-bench's /eval.sh and /root/setup_repo.sh, and a
// whiteout of /root/setup_env.sh. Beside the images, swebench/ holds the
// project's whole repository (textkit/, for `strata import --git`), the
// dataset rows (dataset.json, SWE-bench's fields plus image and
// eval_script) and predictions in SWE-bench's format (gold, empty, a
// patch that breaks the build, one that does not apply).

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// tarEntry is what a root filesystem tar says of one path, for diffing.
type tarEntry struct {
	hdr    *tar.Header
	digest [32]byte // of the content (regular files)
}

func cleanName(n string) string {
	n = strings.TrimPrefix(n, "./")
	n = strings.TrimPrefix(n, "/")
	return strings.TrimSuffix(n, "/")
}

// sameEntry reports whether two entries of a path are the same file as a
// layer records it (mtime aside: two mmdebstrap runs stamp files they
// generate differently).
func sameEntry(a, b tarEntry) bool {
	ha, hb := a.hdr, b.hdr
	if ha.Typeflag != hb.Typeflag || ha.Mode != hb.Mode || ha.Uid != hb.Uid || ha.Gid != hb.Gid ||
		cleanName(ha.Linkname) != cleanName(hb.Linkname) && ha.Typeflag == tar.TypeLink ||
		ha.Linkname != hb.Linkname && ha.Typeflag == tar.TypeSymlink ||
		ha.Devmajor != hb.Devmajor || ha.Devminor != hb.Devminor || a.digest != b.digest {
		return false
	}
	xa, xb := xattrsOf(ha), xattrsOf(hb)
	return xa == xb
}

func xattrsOf(h *tar.Header) string {
	var ks []string
	for k, v := range h.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			ks = append(ks, k+"="+v)
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, "\x00")
}

// readEntries indexes a tar by clean path.
func readEntries(file string) map[string]tarEntry {
	f, err := os.Open(file)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	out := map[string]tarEntry{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			log.Fatalf("%s: %v", file, err)
		}
		e := tarEntry{hdr: h}
		if h.Typeflag == tar.TypeReg {
			sum := sha256.New()
			if _, err := io.Copy(sum, tr); err != nil {
				log.Fatal(err)
			}
			copy(e.digest[:], sum.Sum(nil))
		}
		out[cleanName(h.Name)] = e
	}
}

// diffLayer writes to out the layer that turns the root in lowerTar into
// the one in upperTar: every entry that is new or differs, in upperTar's
// order, and a whiteout for every path gone (not beneath another gone
// path), first. extra entries are appended. It returns the number of
// entries and whiteouts.
func diffLayer(lowerTar, upperTar string, extra []entry, out io.Writer) (changed, whiteouts int) {
	lower := readEntries(lowerTar)
	upper := readEntries(upperTar)
	tw := tar.NewWriter(out)
	var gone []string
	for n := range lower {
		if _, ok := upper[n]; !ok && n != "" && n != "." {
			gone = append(gone, n)
		}
	}
	sort.Strings(gone)
	goneSet := map[string]bool{}
	for _, n := range gone {
		goneSet[n] = true
	}
	for _, n := range gone {
		parentGone := false
		for d := path.Dir(n); d != "." && d != "/"; d = path.Dir(d) {
			if goneSet[d] {
				parentGone = true
				break
			}
		}
		if parentGone {
			continue
		}
		h := &tar.Header{Name: path.Join(path.Dir(n), ".wh."+path.Base(n)), Typeflag: tar.TypeReg, Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			log.Fatal(err)
		}
		whiteouts++
	}
	// What changed; a hard link whose target changed is written again
	// with it, or it would keep the lower file's content.
	include := map[string]bool{}
	for n, e := range upper {
		if l, ok := lower[n]; !ok || !sameEntry(l, e) {
			include[n] = true
		}
	}
	for n, e := range upper {
		if e.hdr.Typeflag == tar.TypeLink && include[cleanName(e.hdr.Linkname)] {
			include[n] = true
		}
	}
	f, err := os.Open(upperTar)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		n := cleanName(h.Name)
		if n == "" || n == "." {
			continue
		}
		if !include[n] {
			continue
		}
		nh := *h
		nh.AccessTime, nh.ChangeTime = time.Time{}, time.Time{}
		nh.Format = tar.FormatPAX
		if err := tw.WriteHeader(&nh); err != nil {
			log.Fatalf("%s: %v", n, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				log.Fatal(err)
			}
		}
		changed++
	}
	if err := tw.Flush(); err != nil {
		log.Fatal(err)
	}
	// The extra entries go into the same archive stream.
	writeEntries(tw, extra)
	if err := tw.Close(); err != nil {
		log.Fatal(err)
	}
	return changed, whiteouts
}

func writeEntries(tw *tar.Writer, es []entry) {
	for _, e := range es {
		h := &tar.Header{
			Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: epoch, Linkname: e.link, Devmajor: e.major, Devminor: e.minor,
			Format: tar.FormatPAX,
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			log.Fatalf("%s: %v", e.name, err)
		}
		if h.Size > 0 {
			if _, err := io.WriteString(tw, e.body); err != nil {
				log.Fatal(err)
			}
		}
	}
}

// dirEntries turns a directory into layer entries under prefix (root
// owned, modes kept, fixed times, sorted: reproducible).
func dirEntries(dir, prefix string) []entry {
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := path.Join(prefix, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out = append(out, entry{name: name + "/", typ: tar.TypeDir, mode: 0o755})
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, symlink(name, t))
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			mode := int64(0o644)
			if fi.Mode()&0o100 != 0 {
				mode = 0o755
			}
			out = append(out, entry{name: name, typ: tar.TypeReg, mode: mode, body: string(b)})
		default:
			return fmt.Errorf("%s: unexpected file type", p)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	return out
}

// A project, its history and its tasks.

// commit is one commit of the generated project: files written (a
// nil-content file is removed) and the message.
type commit struct {
	msg   string
	files map[string]string
}

const slugV1 = `"""Slugs: lower-case ASCII words joined by a separator."""
import re
import unicodedata


def slugify(text, sep="-"):
    """Return text as a slug: accents dropped, lower case, every other
    character replaced by sep, no sep at either end."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^a-z0-9]", sep, text.strip().lower())
    return text.strip(sep)
`

var slugV2 = strings.Replace(slugV1, `re.sub(r"[^a-z0-9]", sep,`, `re.sub(r"[^a-z0-9]+", sep,`, 1)

const wrapV1 = `"""Line wrapping."""


def wrap(text, width):
    """Break text into lines of at most width characters, at spaces."""
    if width < 1:
        raise ValueError("width must be at least 1")
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = ""
        line = word if not line else line + " " + word
    if line:
        lines.append(line)
    return lines
`

var wrapV2 = strings.Replace(wrapV1, `    for word in text.split():
        if line`, `    for word in text.split():
        while len(word) > width:
            # A word longer than a line gets lines of its own.
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if not word:
            continue
        if line`, 1)

const testSlugV1 = `from textkit import slugify


def test_slugify_simple():
    assert slugify("Hello World") == "hello-world"


def test_slugify_accents():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_slugify_custom_separator():
    assert slugify("a b", sep="_") == "a_b"
`

const testSlugV2 = testSlugV1 + `

def test_slugify_collapses_separators():
    assert slugify("Hello,  World!") == "hello-world"
`

const testWrapV1 = `import pytest

from textkit import wrap


def test_wrap_short():
    assert wrap("a b c", 10) == ["a b c"]


def test_wrap_breaks_at_spaces():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_width_checked():
    with pytest.raises(ValueError):
        wrap("a", 0)
`

const testWrapV2 = testWrapV1 + `

def test_wrap_long_word():
    assert wrap("abcdefgh ij", 3) == ["abc", "def", "gh", "ij"]
`

var history = []commit{
	{"Initial commit: textkit with slugify", map[string]string{
		"README.md":           "# textkit\n\nSmall text helpers.\n",
		"pyproject.toml":      "[project]\nname = \"textkit\"\nversion = \"0.1.0\"\nrequires-python = \">=3.9\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n",
		".gitignore":          "__pycache__/\n.pytest_cache/\n",
		"textkit/__init__.py": "\"\"\"textkit: small text helpers.\"\"\"\nfrom .slug import slugify\n\n__all__ = [\"slugify\"]\n",
		"textkit/slug.py":     slugV1,
		"tests/test_slug.py":  testSlugV1,
	}},
	{"Add wrap()", map[string]string{
		"textkit/__init__.py": "\"\"\"textkit: small text helpers.\"\"\"\nfrom .slug import slugify\nfrom .wrap import wrap\n\n__all__ = [\"slugify\", \"wrap\"]\n",
		"textkit/wrap.py":     wrapV1,
		"tests/test_wrap.py":  testWrapV1,
	}},
	{"README: usage", map[string]string{
		"README.md": "# textkit\n\nSmall text helpers.\n\n```python\n>>> from textkit import slugify, wrap\n>>> slugify(\"Hello World\")\n'hello-world'\n>>> wrap(\"the quick brown fox\", 10)\n['the quick', 'brown fox']\n```\n",
	}},
	{"slugify: collapse runs of separators (#1)", map[string]string{
		"textkit/slug.py":    slugV2,
		"tests/test_slug.py": testSlugV2,
	}},
	{"Add a command line: python3 -m textkit slug|wrap", map[string]string{
		"textkit/__main__.py": "import sys\n\nfrom . import slugify, wrap\n\nif __name__ == \"__main__\":\n    cmd, *args = sys.argv[1:] or [\"\"]\n    if cmd == \"slug\":\n        print(slugify(\" \".join(args)))\n    elif cmd == \"wrap\":\n        print(\"\\n\".join(wrap(sys.stdin.read(), int(args[0]))))\n    else:\n        sys.exit(\"usage: python3 -m textkit slug WORDS... | wrap WIDTH\")\n",
	}},
	{"wrap: a word longer than the width gets lines of its own (#2)", map[string]string{
		"textkit/wrap.py":    wrapV2,
		"tests/test_wrap.py": testWrapV2,
	}},
}

// task is a SWE-bench task on the project: at the commit before fix
// (1-based index into history), whose source change is the gold patch
// and whose test change is the test patch.
type task struct {
	id       string
	fix      int
	module   string // what the gold patch changes
	testFile string
	f2p, p2p []string
	issue    string
}

var tasks = []task{
	{"textkit__textkit-1", 4, "textkit/slug.py", "tests/test_slug.py",
		[]string{"tests/test_slug.py::test_slugify_collapses_separators"},
		[]string{"tests/test_slug.py::test_slugify_simple", "tests/test_slug.py::test_slugify_accents", "tests/test_slug.py::test_slugify_custom_separator"},
		"slugify keeps runs of separators: slugify(\"Hello,  World!\") is \"hello---world\", expected \"hello-world\"."},
	{"textkit__textkit-2", 6, "textkit/wrap.py", "tests/test_wrap.py",
		[]string{"tests/test_wrap.py::test_wrap_long_word"},
		[]string{"tests/test_wrap.py::test_wrap_short", "tests/test_wrap.py::test_wrap_breaks_at_spaces", "tests/test_wrap.py::test_wrap_width_checked"},
		"wrap leaves a word longer than the width whole: wrap(\"abcdefgh ij\", 3) should give [\"abc\", \"def\", \"gh\", \"ij\"]."},
}

// git runs git in dir with a fixed identity and time (commits are then the
// same on every build) and no user or system configuration.
func git(dir string, when int, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	date := fmt.Sprintf("%d +0000", epoch.Unix()+int64(when)*3600)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Text Kit", "GIT_AUTHOR_EMAIL=dev@textkit.invalid", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=Text Kit", "GIT_COMMITTER_EMAIL=dev@textkit.invalid", "GIT_COMMITTER_DATE=" + date,
		"LC_ALL=C",
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		log.Fatalf("git %s in %s: %v: %s", strings.Join(args, " "), dir, err, errb.String())
	}
	return out.String()
}

// buildRepo makes dir a git repository holding the first n commits of
// history, checked out, and returns their ids. What git stamps with the
// build's time or the files' inodes (reflogs, the index's stat data) is
// left out, so the repository is the same on every build.
func buildRepo(dir string, n int) []string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	git(dir, 0, "init", "-q", "--template=", "-b", "main")
	var ids []string
	for i, c := range history[:n] {
		for name, body := range c.files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				log.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				log.Fatal(err)
			}
		}
		git(dir, i+1, "add", "-A")
		git(dir, i+1, "-c", "core.logAllRefUpdates=false", "commit", "-q", "-m", c.msg)
		ids = append(ids, strings.TrimSpace(git(dir, i+1, "rev-parse", "HEAD")))
	}
	for _, p := range []string{"logs", "COMMIT_EDITMSG", "index"} {
		os.RemoveAll(filepath.Join(dir, ".git", p))
	}
	// An index without stat data: git refreshes it on first use.
	git(dir, n, "read-tree", "HEAD")
	return ids
}

// patchOf is the diff between two commits of repo, limited to paths.
func patchOf(repo, from, to string, paths ...string) string {
	return git(repo, 0, append([]string{"-c", "diff.noprefix=false", "diff", "--no-color", "--no-ext-diff", from, to, "--"}, paths...)...)
}

// evalScript is SWE-bench's eval script for a task (its
// make_eval_script_list, for a repository without a conda environment or
// install step): the test files reset to the base commit, the test patch
// applied, the tests between the output markers, the test files reset.
func evalScript(base, testFile, testPatch string) string {
	return fmt.Sprintf(`#!/bin/bash
set -uxo pipefail
cd /testbed
git config --global --add safe.directory /testbed
cd /testbed
git status
git show
git -c core.fileMode=false diff %[1]s
git checkout %[1]s %[2]s
git apply -v - <<'EOF_114329324912'
%[3]sEOF_114329324912
: '>>>>> Start Test Output'
python3 -m pytest -rA -p no:cacheprovider %[2]s
: '>>>>> End Test Output'
git checkout %[1]s %[2]s
`, base, testFile, testPatch)
}

// swebench builds the SWE-bench images on baseLayer (the root in
// baseTar) from sweTar (the same root with pytest, git and patch) and
// returns them by tag; the project, rows and predictions go to out/swebench.
func swebench(baseTar, sweTar, out string, baseLayer v1.Layer, mk func(string, []v1.Layer, v1.Config) v1.Image) []tagged {
	work, err := os.MkdirTemp("", "mkimages-swe-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	dst := filepath.Join(out, "swebench")

	setupEnv := file("root/setup_env.sh", "#!/bin/bash\nset -euxo pipefail\napt-get install -y python3-pytest git patch\n").m(0o755)
	// In memory (some 50 MB): the layout reads a layer when it writes it,
	// after this function's temporary directory is gone.
	var envTar bytes.Buffer
	changed, whiteouts := diffLayer(baseTar, sweTar, []entry{dir("root/").m(0o700), setupEnv}, &envTar)
	log.Printf("swe-env layer: %d entries, %d whiteouts, %d bytes", changed, whiteouts, envTar.Len())
	envLayer := bytesLayer(envTar.Bytes())

	// The project's whole history, for import --git.
	repo := filepath.Join(dst, "textkit")
	ids := buildRepo(repo, len(history))

	envPath := "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	images := []tagged{{"sweb.env.textkit", mk("sweb.env.textkit", []v1.Layer{baseLayer, envLayer}, v1.Config{
		Env: []string{envPath, "LANG=C.UTF-8"}, Cmd: []string{"/bin/bash"},
		Labels: map[string]string{"org.strata.test": "sweb.env"},
	})}}

	type row struct {
		Repo          string `json:"repo"`
		InstanceID    string `json:"instance_id"`
		BaseCommit    string `json:"base_commit"`
		Patch         string `json:"patch"`
		TestPatch     string `json:"test_patch"`
		ProblemStmt   string `json:"problem_statement"`
		Version       string `json:"version"`
		FailToPass    string `json:"FAIL_TO_PASS"`
		PassToPass    string `json:"PASS_TO_PASS"`
		EnvSetupSHA   string `json:"environment_setup_commit"`
		Image         string `json:"image"`
		EnvImage      string `json:"env_image"`
		EvalScript    string `json:"eval_script"`
		TestDirective string `json:"test_directive"`
	}
	var rows []row
	type prediction struct {
		InstanceID string  `json:"instance_id"`
		Model      string  `json:"model_name_or_path"`
		Patch      *string `json:"model_patch"`
	}
	preds := map[string][]prediction{}
	str := func(s string) *string { return &s }
	for _, tk := range tasks {
		base, fix := ids[tk.fix-2], ids[tk.fix-1]
		gold := patchOf(repo, base, fix, "textkit")
		testPatch := patchOf(repo, base, fix, "tests")
		script := evalScript(base, tk.testFile, testPatch)

		tb := filepath.Join(work, tk.id)
		buildRepo(tb, tk.fix-1)
		inst := append(dirEntries(tb, "testbed"),
			file("eval.sh", script).m(0o755),
			dir("root/").m(0o700),
			file("root/setup_repo.sh", "#!/bin/bash\nset -euxo pipefail\ngit clone -o origin textkit /testbed\ncd /testbed\ngit reset --hard "+base+"\ngit remote remove origin\n").m(0o755),
			whiteout("root/.wh.setup_env.sh"),
		)
		// SWE-bench's Docker Hub spelling: an OCI reference name has no
		// "__" (skopeo refuses the tag otherwise).
		tag := "sweb.eval." + strings.ReplaceAll(tk.id, "__", "_1776_")
		images = append(images, tagged{tag, mk(tag, []v1.Layer{baseLayer, envLayer, bytesLayer(layerTar(inst))}, v1.Config{
			Env: []string{envPath, "LANG=C.UTF-8"}, WorkingDir: "/testbed", Cmd: []string{"/bin/bash"},
			Labels: map[string]string{"org.strata.test": "sweb.eval", "org.strata.instance": tk.id},
		})})

		f2p, _ := json.Marshal(tk.f2p)
		p2p, _ := json.Marshal(tk.p2p)
		rows = append(rows, row{
			Repo: "textkit/textkit", InstanceID: tk.id, BaseCommit: base, Patch: gold, TestPatch: testPatch,
			ProblemStmt: tk.issue, Version: "0.1", FailToPass: string(f2p), PassToPass: string(p2p), EnvSetupSHA: ids[0],
			Image: tag, EnvImage: "sweb.env.textkit", EvalScript: script, TestDirective: tk.testFile,
		})

		// A patch that applies and breaks the build (a syntax error in
		// the module every test imports), and one that does not apply
		// (the gold patch, for a file the project does not have).
		broken := breakPatch(work, tk.fix-1, tk.module)
		bad := strings.ReplaceAll(gold, tk.module, "textkit/missing.py")
		for kind, p := range map[string]*string{"gold": str(gold), "empty": str(""), "broken": str(broken), "bad": str(bad)} {
			preds[kind] = append(preds[kind], prediction{InstanceID: tk.id, Model: "textkit-" + kind, Patch: p})
		}
	}
	writeJSON(filepath.Join(dst, "dataset.json"), rows)
	for kind, p := range preds {
		writeJSON(filepath.Join(dst, "predictions", kind+".json"), p)
	}
	return images
}

// breakPatch is a patch on the first n commits that leaves file with a
// syntax error.
func breakPatch(work string, n int, file string) string {
	dir := filepath.Join(work, fmt.Sprintf("broken-%d", n))
	buildRepo(dir, n)
	p := filepath.Join(dir, file)
	b, err := os.ReadFile(p)
	if err != nil {
		log.Fatal(err)
	}
	b = bytes.Replace(b, []byte("    return "), []byte("    return ("), 1)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		log.Fatal(err)
	}
	return git(dir, n, "diff", "--no-color")
}

func writeJSON(file string, v any) {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		log.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
}

// tagged is an image and its tag in the layout.
type tagged struct {
	tag string
	img v1.Image
}
