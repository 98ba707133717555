package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Issue "commit": the commit CLI end to end after a 1-file edit, in trees
// of 1k, 22k (the corpus) and 100k files (one of them with a directory of
// 4,000 entries), and after adding a 100 MB file;
// against an incremental `restic backup` and `git add -A && git commit`
// in a shadow repository of the same tree; and how much each store grows
// per commit against the compressed size of what changed.

// A commitTree is one tree the commit scenario runs on.
type commitTree struct {
	key     string // measure key prefix
	label   string
	src     string // the read-only original
	editRel string // the file the 1-file edits append to
	big     bool   // the 100 MB commits run on this tree
}

// commitTrees are the trees of this run (the 100k tree is left out of a
// quick run).
func (b *Bench) commitTrees() ([]commitTree, error) {
	t1k, err := tree1k.ensure(b.cfg.cache, b.logf)
	if err != nil {
		return nil, err
	}
	trees := []commitTree{
		{key: "t1k", label: "1k files", src: t1k, editRel: tree1k.editRel, big: true},
		{key: "corpus", label: "22k (the corpus)", src: b.cfg.corpus, editRel: "src/server.js"},
	}
	if !b.cfg.quick {
		t100k, err := tree100k.ensure(b.cfg.cache, b.logf)
		if err != nil {
			return nil, err
		}
		trees = append(trees, commitTree{key: "t100k", label: "100k files", src: t100k, editRel: tree100k.editRel})
		wide, err := tree100kWide.ensure(b.cfg.cache, b.logf)
		if err != nil {
			return nil, err
		}
		trees = append(trees, commitTree{key: "t100kwide", label: "100k files, a 4k-entry directory", src: wide, editRel: tree100kWide.editRel})
	}
	return trees, nil
}

// commitResult is what `strata --json commit` reports.
type commitResult struct {
	Commit   string `json:"commit"`
	Changed  int    `json:"changed"`
	NewBytes int64  `json:"new_bytes"`
}

// peerRepos is one tree's writable copy with a restic repository and a
// shadow git repository of it, both holding a first full snapshot.
type peerRepos struct {
	tree, restic, git string
	resticEnv, gitEnv []string
}

func (b *Bench) setupPeers(t commitTree) (*peerRepos, error) {
	dir := filepath.Join(b.work, "peers-"+t.key)
	p := &peerRepos{tree: filepath.Join(dir, "tree"), restic: filepath.Join(dir, "restic"), git: filepath.Join(dir, "shadow.git")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := b.must("", "cp", "-a", t.src, p.tree); err != nil {
		return nil, err
	}
	p.resticEnv = []string{"RESTIC_REPOSITORY=" + p.restic, "RESTIC_PASSWORD=strata-bench", "RESTIC_CACHE_DIR=" + filepath.Join(dir, "restic-cache")}
	p.gitEnv = []string{"GIT_DIR=" + p.git, "GIT_WORK_TREE=" + p.tree,
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.invalid",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.invalid"}
	b.logf("commit: first restic backup and git commit of %s (untimed)", t.label)
	if _, _, err := b.run(dir, p.resticEnv, "restic", "init", "-q"); err != nil {
		return nil, err
	}
	_, d, err := b.run(dir, p.resticEnv, "restic", "backup", "-q", p.tree)
	if err != nil {
		return nil, err
	}
	b.record("commit-setup", t.key+"/restic-first", unitNS, []float64{float64(d)}, "")
	if _, _, err := b.run(dir, p.gitEnv, "git", "init", "-q"); err != nil {
		return nil, err
	}
	// No automatic gc inside a measurement. -f: the shadow repository holds
	// the whole tree, ignored files (node_modules) included, as strata does.
	start := time.Now()
	for _, argv := range [][]string{
		{"git", "config", "gc.auto", "0"},
		{"git", "add", "-A", "-f"},
		{"git", "commit", "-q", "-m", "base"},
	} {
		if _, _, err := b.run(dir, p.gitEnv, argv...); err != nil {
			return nil, err
		}
	}
	b.record("commit-setup", t.key+"/git-first", unitNS, []float64{float64(time.Since(start))}, "")
	syncFS()
	return p, nil
}

// peerCommit times one incremental restic backup and one git add + commit
// of the peer tree, and records each repository's growth.
func (b *Bench) peerCommit(p *peerRepos, msg string) (restic, git time.Duration, rGrow, gGrow int64, err error) {
	dir := filepath.Dir(p.tree)
	syncFS()
	before := duBytes(p.restic)
	if _, restic, err = b.run(dir, p.resticEnv, "restic", "backup", "-q", p.tree); err != nil {
		return
	}
	rGrow = duBytes(p.restic) - before
	syncFS()
	before = duBytes(p.git)
	_, d1, err := b.run(dir, p.gitEnv, "git", "add", "-A")
	if err != nil {
		return
	}
	_, d2, err := b.run(dir, p.gitEnv, "git", "commit", "-q", "-m", msg)
	if err != nil {
		return
	}
	git = d1 + d2
	gGrow = duBytes(p.git) - before
	return
}

// dbBytes is the size of the store's database files (strata.db and its
// WAL); the layer cache and workspaces are derived and not counted.
func (b *Bench) dbBytes() int64 {
	var n int64
	for _, f := range []string{"strata.db", "strata.db-wal"} {
		if fi, err := os.Stat(filepath.Join(b.home, f)); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func runCommit(b *Bench) error {
	trees, err := b.commitTrees()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(b.home, "strata.db")); err != nil {
		if _, _, err := b.st("-q", "init"); err != nil {
			return err
		}
	}
	// The peers measure tools that do not depend on who runs them; they
	// run in one pass (root's, or the only one).
	peers := b.cfg.peersHere(b.pass)
	if peers {
		for _, tool := range []string{"restic", "git"} {
			if !lookTool(tool) {
				b.skip("commit", "peers", tool+" is not installed (bash scripts/deps.sh --bench)")
				peers = false
			}
		}
	}
	for _, t := range trees {
		if err := b.commitOn(t, peers); err != nil {
			return err
		}
	}
	return b.commitSeries()
}

// seriesCommits is the length of the successive-commit series.
const seriesCommits = 100

// commitSeries makes 100 successive 1-file commits in one workspace on the
// corpus, each editing a different file (spread over the tree), as an
// agent checkpointing every step does: a commit reads only what changed
// since the previous one, so the 100th costs what the first does.
func (b *Bench) commitSeries() error {
	if err := b.ensureCorpus(); err != nil {
		return err
	}
	var files []string
	_ = filepath.WalkDir(b.cfg.corpus, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.Contains(p, "/.git/") {
			files = append(files, strings.TrimPrefix(p, b.cfg.corpus+"/"))
		}
		return nil
	})
	if len(files) < seriesCommits {
		return fmt.Errorf("commit series: the corpus has %d files, want %d", len(files), seriesCommits)
	}
	ws := "commit-series"
	if _, _, err := b.st("-q", "ws", "create", ws, "--from", "main"); err != nil {
		return err
	}
	defer b.st("-q", "ws", "rm", "--force", ws)
	var ds []time.Duration
	var read []float64
	for i := 0; i < seriesCommits; i++ {
		if err := b.cancelled(); err != nil {
			return err
		}
		path, err := b.wsPath(ws)
		if err != nil {
			return err
		}
		rel := files[i*len(files)/seriesCommits]
		if err := appendLine(filepath.Join(path, rel), fmt.Sprintf("// series %d", i)); err != nil {
			return err
		}
		syncFS()
		var cr struct {
			Changed   int   `json:"changed"`
			FilesRead int64 `json:"files_read"`
		}
		d, err := b.stJSON(&cr, "commit", ws, "-m", rel)
		if err != nil {
			return err
		}
		ds, read = append(ds, d), append(read, float64(cr.FilesRead))
	}
	k := "corpus/series"
	b.record("commit", k+"/first10", unitNS, durs(ds[:10]), "")
	b.record("commit", k+"/last10", unitNS, durs(ds[len(ds)-10:]), "")
	b.record("commit", k+"/read-first", unitCount, read[:1], "")
	b.record("commit", k+"/read-last", unitCount, read[len(read)-1:], "")
	return nil
}

func (b *Bench) commitOn(t commitTree, peers bool) error {
	branch, ws := "bench-"+t.key, "commit-"+t.key
	if t.src == b.cfg.corpus {
		// The corpus is on main already (imported once per pass).
		if err := b.ensureCorpus(); err != nil {
			return err
		}
		branch = "main"
	} else {
		b.logf("commit: importing %s (untimed)", t.label)
		_, d, err := b.st("-q", "import", t.src, "-b", branch)
		if err != nil {
			return err
		}
		b.record("commit-setup", t.key+"/import", unitNS, []float64{float64(d)}, "")
	}
	if _, _, err := b.st("-q", "ws", "create", ws, "--from", branch); err != nil {
		return err
	}
	defer b.st("-q", "ws", "rm", "--force", ws)
	var p *peerRepos
	var err error
	switch {
	case peers && b.cfg.quick && t.src == b.cfg.corpus:
		b.skip("commit", t.key+"/edit/restic", "quick run: no peers on the corpus (their first backup and commit take about 40 s)")
	case peers:
		if p, err = b.setupPeers(t); err != nil {
			return err
		}
	}

	// 1-file edits: append a line through `ws path`, commit; the peers get
	// the same edit in their copy of the tree.
	var st, rs, gt []time.Duration
	var nb, rg, gg, zs []float64
	method := ""
	for i := 0; i < b.cfg.n.commit; i++ {
		if err := b.cancelled(); err != nil {
			return err
		}
		path, err := b.wsPath(ws)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("// bench edit %d", i)
		edited := filepath.Join(path, t.editRel)
		if err := appendLine(edited, line); err != nil {
			return err
		}
		syncFS()
		var cr commitResult
		d, err := b.stJSON(&cr, "commit", ws, "-m", line)
		if err != nil {
			return err
		}
		if cr.Changed != 1 {
			return fmt.Errorf("commit %s: %d paths changed, want 1", ws, cr.Changed)
		}
		st, nb = append(st, d), append(nb, float64(cr.NewBytes))
		z, m, err := compressedSize(edited)
		if err != nil {
			return err
		}
		zs, method = append(zs, float64(z)), m
		if p != nil && i < b.cfg.n.peerCommit {
			if err := appendLine(filepath.Join(p.tree, t.editRel), line); err != nil {
				return err
			}
			r, g, rgrow, ggrow, err := b.peerCommit(p, line)
			if err != nil {
				return err
			}
			rs, gt, rg, gg = append(rs, r), append(gt, g), append(rg, float64(rgrow)), append(gg, float64(ggrow))
		}
	}
	k := t.key + "/edit"
	b.record("commit", k+"/strata", unitNS, durs(st), "")
	b.record("commit", k+"/strata-bytes", unitBytes, nb, "")
	b.record("commit", k+"/compressed", unitBytes, zs, "compressed size: "+method+" of the whole changed file (the 1-file edits) or of the new file (100 MB)")
	if p != nil {
		b.record("commit", k+"/restic", unitNS, durs(rs), "")
		b.record("commit", k+"/git", unitNS, durs(gt), "")
		b.record("commit", k+"/restic-bytes", unitBytes, rg, "")
		b.record("commit", k+"/git-bytes", unitBytes, gg, "")
	}
	if !t.big {
		return nil
	}

	// 100 MB changes: a new file of random data, and one of source-like
	// text, each written (untimed) and then committed.
	for _, kind := range []string{"random", "text"} {
		var st, rs, gt []time.Duration
		var nb, lg, rg, gg, zs []float64
		for i := 0; i < b.cfg.n.big; i++ {
			if err := b.cancelled(); err != nil {
				return err
			}
			path, err := b.wsPath(ws)
			if err != nil {
				return err
			}
			rel := fmt.Sprintf("big-%s-%d.bin", kind, i)
			seed := uint64(1000*len(kind) + i)
			if err := writeBig(filepath.Join(path, rel), 100<<20, kind == "text", seed); err != nil {
				return err
			}
			z, _, err := compressedSize(filepath.Join(path, rel))
			if err != nil {
				return err
			}
			syncFS()
			dbBefore := b.dbBytes()
			var cr commitResult
			d, err := b.stJSON(&cr, "commit", ws, "-m", rel)
			if err != nil {
				return err
			}
			st, nb, zs = append(st, d), append(nb, float64(cr.NewBytes)), append(zs, float64(z))
			lg = append(lg, float64(b.dbBytes()-dbBefore))
			if p != nil && i < b.cfg.n.big {
				if err := writeBig(filepath.Join(p.tree, rel), 100<<20, kind == "text", seed); err != nil {
					return err
				}
				r, g, rgrow, ggrow, err := b.peerCommit(p, rel)
				if err != nil {
					return err
				}
				rs, gt, rg, gg = append(rs, r), append(gt, g), append(rg, float64(rgrow)), append(gg, float64(ggrow))
			}
		}
		k := t.key + "/" + kind
		b.record("commit", k+"/strata", unitNS, durs(st), "")
		b.record("commit", k+"/strata-bytes", unitBytes, nb, "")
		b.record("commit", k+"/db-bytes", unitBytes, lg, "")
		b.record("commit", k+"/compressed", unitBytes, zs, "")
		if p != nil {
			b.record("commit", k+"/restic", unitNS, durs(rs), "")
			b.record("commit", k+"/git", unitNS, durs(gt), "")
			b.record("commit", k+"/restic-bytes", unitBytes, rg, "")
			b.record("commit", k+"/git-bytes", unitBytes, gg, "")
		}
	}
	return nil
}

// commitRows are the changes of the commit tables.
var commitRows = []struct{ key, label string }{
	{"t1k/edit", "1-file edit, 1k files"},
	{"corpus/edit", "1-file edit, 22k files (the corpus)"},
	{"t100k/edit", "1-file edit, 100k files"},
	{"t100kwide/edit", "1-file edit in a 4k-entry directory, 100k files"},
	{"t1k/random", "new 100 MB file, random data (in the 1k tree)"},
	{"t1k/text", "new 100 MB file, source-like text (in the 1k tree)"},
}

func reportCommit(r *Results) []Table {
	if !r.has("commit") {
		return nil
	}
	peerPass := ""
	for _, p := range r.Passes {
		if m, ok := r.get(p, "commit", "t1k/edit/restic"); ok && m.Skip == "" {
			peerPass = p
			break
		}
	}
	t := Table{
		Title:  "Commit, end to end (the CLI call)",
		Header: []string{"change"},
	}
	for _, p := range r.Passes {
		t.Header = append(t.Header, "strata "+p+" p50", "strata "+p+" p99")
	}
	t.Header = append(t.Header, "N strata", "restic backup p50", "git add -A + commit p50", "N peers", "strata ÷ restic", "strata ÷ git")
	for _, row := range commitRows {
		if _, ok := r.get(r.Passes[0], "commit", row.key+"/strata"); !ok {
			if _, ok := r.get(r.Passes[len(r.Passes)-1], "commit", row.key+"/strata"); !ok {
				continue
			}
		}
		cells := []string{row.label}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, "commit", row.key+"/strata", "p50"), r.cell(p, "commit", row.key+"/strata", "p99"))
		}
		cells = append(cells, nOf(r, "commit", row.key+"/strata"))
		if peerPass != "" {
			cells = append(cells,
				r.cell(peerPass, "commit", row.key+"/restic", "p50"),
				r.cell(peerPass, "commit", row.key+"/git", "p50"),
				r.cell(peerPass, "commit", row.key+"/restic", "n"),
				r.ratio(peerPass, "commit", row.key+"/strata", row.key+"/restic", "p50"),
				r.ratio(peerPass, "commit", row.key+"/strata", row.key+"/git", "p50"))
		} else {
			cells = append(cells, "—", "—", "—", "—", "—")
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = []string{
		"strata: `strata --json commit WS -m MSG` after appending one line to one file through `strata ws path` (or writing the new file there); the edit and a `sync` are outside the timed part. Target from the issue: under 10 ms, flat across tree sizes.",
		"restic: `restic backup -q TREE` into a repository that already holds a first backup of the tree (incremental). git: `git add -A` + `git commit -q` in a shadow repository (`GIT_DIR` beside the tree) that already holds the whole tree, ignored files included (`gc.auto=0`). Both get the same edit in their own `cp -a` copy of the tree.",
	}
	if peerPass != "" && len(r.Passes) > 1 {
		t.Notes = append(t.Notes, fmt.Sprintf("The peers ran in the %s pass only (they do not depend on who runs them); the ratios are against strata in that pass.", peerPass))
	}
	t.Notes = append(t.Notes, r.skips("commit")...)

	g := Table{
		Title:  "Store growth per commit, p50 (what each tool adds to its repository)",
		Header: []string{"change", "compressed change"},
	}
	for _, p := range r.Passes {
		g.Header = append(g.Header, "strata "+p+" new_bytes")
	}
	g.Header = append(g.Header, "strata ÷ compressed", "strata.db + WAL files", "restic repo", "git repo")
	for _, row := range commitRows {
		first := ""
		for _, p := range r.Passes {
			if _, ok := r.get(p, "commit", row.key+"/strata-bytes"); ok {
				first = p
				break
			}
		}
		if first == "" {
			continue
		}
		cells := []string{row.label, r.cell(first, "commit", row.key+"/compressed", "p50")}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, "commit", row.key+"/strata-bytes", "p50"))
		}
		cells = append(cells, r.ratio(first, "commit", row.key+"/strata-bytes", row.key+"/compressed", "p50"))
		if _, ok := r.get(first, "commit", row.key+"/db-bytes"); ok {
			cells = append(cells, r.cell(first, "commit", row.key+"/db-bytes", "p50"))
		} else {
			cells = append(cells, "—")
		}
		if peerPass != "" {
			cells = append(cells, r.cell(peerPass, "commit", row.key+"/restic-bytes", "p50"), r.cell(peerPass, "commit", row.key+"/git-bytes", "p50"))
		} else {
			cells = append(cells, "—", "—")
		}
		g.Rows = append(g.Rows, cells)
	}
	g.Notes = append(r.notes("commit"),
		"strata: `new_bytes` from `strata --json commit` (objects added to strata.db, compressed, including the trees along the changed path). strata.db + WAL files: growth of the database files on disk (measured for the 100 MB changes; the WAL is checkpointed into strata.db over time, so this is approximate). restic / git: growth of the repository directory (`du -b`; git writes loose zlib objects, no packing).",
		"Target from the issue: strata's growth equals the compressed size of the change.")

	s := Table{
		Title:  "Setup of the commit scenario (once per tree, untimed above), and the first commit of each workspace (in the figures above)",
		Header: []string{"tree"},
	}
	for _, p := range r.Passes {
		s.Header = append(s.Header, "strata import, "+p, "first strata commit, "+p)
	}
	s.Header = append(s.Header, "first restic backup", "first git add -A -f + commit")
	for _, tk := range []struct{ key, label string }{{"t1k", "1k files"}, {"corpus", "22k (the corpus)"}, {"t100k", "100k files"}} {
		sc, key := "commit-setup", tk.key+"/import"
		if tk.key == "corpus" {
			sc, key = "setup", "import" // the pass's one import of the corpus, on main
		}
		if !anyPass(r, "commit", tk.key+"/edit/strata") {
			continue
		}
		cells := []string{tk.label}
		for _, p := range r.Passes {
			cells = append(cells, r.cell(p, sc, key, "p50"), r.cell(p, "commit", tk.key+"/edit/strata", "first"))
		}
		pp := peerPass
		if pp == "" {
			pp = r.Passes[0]
		}
		cells = append(cells, r.cell(pp, "commit-setup", tk.key+"/restic-first", "p50"), r.cell(pp, "commit-setup", tk.key+"/git-first", "p50"))
		s.Rows = append(s.Rows, cells)
	}
	q := Table{
		Title:  fmt.Sprintf("%d successive 1-file commits in one workspace (the corpus)", seriesCommits),
		Header: []string{"pass", "commits 1-10 p50", "commits 91-100 p50", "91-100 ÷ 1-10", "files_read, 1st commit", "files_read, 100th commit"},
	}
	for _, p := range r.Passes {
		k := "corpus/series"
		if _, ok := r.get(p, "commit", k+"/first10"); !ok {
			continue
		}
		q.Rows = append(q.Rows, []string{p, r.cell(p, "commit", k+"/first10", "p50"), r.cell(p, "commit", k+"/last10", "p50"),
			r.ratio(p, "commit", k+"/last10", k+"/first10", "p50"),
			r.cell(p, "commit", k+"/read-first", "first"), r.cell(p, "commit", k+"/read-last", "first")})
	}
	q.Notes = []string{"Each commit appends a line to a different file of the corpus (100 files spread over the tree) through `strata ws path`, then `strata --json commit`. A commit reads and applies only what changed since the previous one (the committed-state index, docs/workspaces.md); target from issue 12: the 100th reads one file and costs within 1.5× the first."}
	out := []Table{t, g, s}
	if len(q.Rows) > 0 {
		out = append(out, q)
	}
	return out
}

func anyPass(r *Results, sc, key string) bool {
	for _, p := range r.Passes {
		if _, ok := r.get(p, sc, key); ok {
			return true
		}
	}
	return false
}
