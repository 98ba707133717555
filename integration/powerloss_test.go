//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratafs/strata/internal/lazyfs"
	"github.com/stratafs/strata/internal/testutil"
)

// The power-loss harness: the store lives on lazyfs (internal/lazyfs), a
// FUSE filesystem that forgets every write a file had not fsynced when the
// "power" goes. Each trial arms a crash point (the Nth mutating operation
// of the filesystem, chosen at random within the operation's measured
// length, or past its end), runs one operation — import, commit (a run
// committed to a branch), promote, gc, branch create/delete, ws create,
// a workspace's commit, rebase (with and without conflict markers) — as a
// process, cuts the power, kills the process, remounts, and checks: fsck
// is clean, every commit an operation acknowledged (exit 0) is present,
// every branch is at the head last acknowledged for it or, for the branch
// of the interrupted operation, at the complete commit it was making, and
// every workspace is consistent (checkWorkspaces, checkRebase).
//
// STRATA_POWERLOSS_TRIALS sets the number of trials (make powerloss: 320;
// make test: a short run).

type plHarness struct {
	t       *testing.T
	h       *home
	backing string
	mnt     string
	l       *lazyfs.FS
	src     string
	rng     *rand.Rand
	// acked: commits acknowledged by a successful operation.
	acked map[string]string // commit → what made it
	// heads: the branch heads as last acknowledged or verified.
	heads map[string]string
	// opLen: mutating filesystem operations of the last uninterrupted
	// run of each operation kind.
	opLen map[string]int64
	n     int
	// lateCrash counts operations that succeeded though the crash point
	// fell inside them.
	lateCrash int
	// collected counts acknowledged commits no branch reached any more,
	// which a gc --prune 0s was free to take.
	collected int
	// ws: the workspaces known to exist (acknowledged, or found after an
	// interrupted creation) → their upper directory.
	ws map[string]string
	// edit: per workspace, the last edit written (durably) to its upper
	// before a commit: after the commit, acknowledged or not, it is in the
	// workspace's base tree or still in its diff.
	edit map[string]string
	// wsChecks counts workspace checks after power losses; wsBaseBehind
	// counts workspaces whose base was not their branch's head.
	wsChecks, wsBaseBehind int
	// wsRecovered counts interrupted creations that left no workspace.
	wsRecovered int
	// wsLeftDir counts those whose directory ws rm --force did not remove.
	wsLeftDir int
	// rebased: the acknowledged answer of this trial's rebase, or nil.
	rebased *rebaseResult
	// rebasedOnto: per workspace, the head of imp it was created from or
	// last rebased onto (a rebase onto it again is up-to-date).
	rebasedOnto map[string]string
	// unc: per workspace, the uncommitted files written (durably) into
	// its upper before a rebase, with their content; marked: those of
	// them that conflict with the rebase's REF (markers expected).
	unc, marked map[string]map[string]string
	// rebases counts rebase trials by what the power cut left: the
	// workspace as it was, or fully rebased.
	rebaseOld, rebaseNew int
}

func (p *plHarness) mount() {
	p.t.Helper()
	l, err := lazyfs.Mount(p.backing, p.mnt)
	if err != nil {
		p.t.Fatal(err)
	}
	p.l = l
}

// strata runs the CLI with the store on the mount, with a timeout (a
// process that hangs after the power is cut is killed).
func (p *plHarness) strata(args ...string) (stdout string, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := p.h.runIn(ctx, "", nil, args...)
	if r.code != 0 {
		return r.stdout + r.stderr, false
	}
	return r.stdout, true
}

func (p *plHarness) branches() map[string]string {
	p.t.Helper()
	out, ok := p.strata("--json", "branch", "list")
	if !ok {
		p.t.Fatalf("branch list failed after a power loss")
	}
	m := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var b struct {
			Name   string `json:"name"`
			Commit string `json:"commit"`
		}
		if err := dec.Decode(&b); err != nil {
			p.t.Fatalf("branch list: %v in %q", err, out)
		}
		m[b.Name] = b.Commit
	}
	return m
}

// parents returns the parents of commit, or ok false if it cannot be shown.
func (p *plHarness) parents(commit string) ([]string, bool) {
	out, ok := p.strata("--json", "show", commit)
	if !ok {
		return nil, false
	}
	var s struct {
		Commit struct {
			ID      string   `json:"id"`
			Parents []string `json:"parents"`
		} `json:"commit"`
	}
	if json.Unmarshal([]byte(out), &s) != nil || s.Commit.ID != commit {
		return nil, false
	}
	return s.Commit.Parents, true
}

// op is one operation of a trial: what it runs, the branch it moves.
type plOp struct {
	kind   string
	branch string
	args   []string
	from   string // branch create: the branch it starts at
	ws     string // the workspace of wscreate, wscommit and rebase
	// rebase: the workspace's base, upper and branch head before it, and
	// the head of the REF it rebases onto.
	oldBase, oldUpper, oldHead, onto string
}

func (p *plHarness) nextOp() plOp {
	p.n++
	// Change the source a little: a new file, an edit, a removal.
	os.WriteFile(filepath.Join(p.src, fmt.Sprintf("f%03d.txt", p.n%40)), []byte(strings.Repeat(fmt.Sprintf("trial %d\n", p.n), 200+p.rng.IntN(3000))), 0o644)
	os.Remove(filepath.Join(p.src, fmt.Sprintf("f%03d.txt", (p.n+17)%40)))
	// Imports go to their own branch, imp: an import is a snapshot of src
	// and would delete on main what the feature branches added there,
	// making every later promote a conflict. Features fork from imp,
	// write files of their own names, and are promoted into main.
	imp := func() plOp {
		return plOp{kind: "import", branch: "imp", args: []string{"--json", "import", "-b", "imp", "-m", "trial " + strconv.Itoa(p.n), p.src}}
	}
	if p.heads["imp"] == "" {
		return imp()
	}
	if p.heads["main"] == "" {
		return plOp{kind: "branch", branch: "main", from: "imp", args: []string{"--json", "branch", "create", "--from", "imp", "main"}}
	}
	switch k := p.rng.IntN(15); {
	case k >= 12:
		return p.rebaseOp(imp)
	case k >= 10:
		// A workspace: created from imp, then edited (in its upper
		// directory, as the agent's writes land there; fsynced, so the
		// edit itself survives) and committed.
		w := fmt.Sprintf("ws%d", p.rng.IntN(2))
		upper, ok := p.ws[w]
		if !ok {
			return plOp{kind: "wscreate", branch: "ws/" + w, from: "imp", ws: w, args: []string{"--json", "ws", "create", "--from", "imp", w}}
		}
		name := fmt.Sprintf("e%d.txt", p.n)
		f, err := os.Create(filepath.Join(upper, name))
		if err != nil {
			p.t.Fatalf("edit of workspace %s: %v", w, err)
		}
		fmt.Fprintf(f, "edit %d\n%s", p.n, strings.Repeat("x", p.rng.IntN(100000)))
		if err := f.Sync(); err != nil {
			p.t.Fatal(err)
		}
		f.Close()
		p.edit[w] = name
		// The commit takes the uncommitted files of earlier rebase
		// trials along: they are no longer followed.
		delete(p.unc, w)
		delete(p.marked, w)
		return plOp{kind: "wscommit", branch: "ws/" + w, ws: w, args: []string{"--json", "commit", w, "-m", "trial " + strconv.Itoa(p.n)}}
	case k < 3:
		return imp()
	case k < 6:
		b := fmt.Sprintf("feat%d", p.rng.IntN(3))
		if _, ok := p.heads[b]; !ok {
			return plOp{kind: "branch", branch: b, from: "imp", args: []string{"--json", "branch", "create", "--from", "imp", b}}
		}
		script := fmt.Sprintf("echo %d >> log-%s.txt; head -c %d /dev/urandom > blob%d-%s.bin", p.n, b, 1000+p.rng.IntN(200000), p.n%5, b)
		return plOp{kind: "commit", branch: b, args: []string{"--json", "run", "--sandbox", "none", "--from", b, "--commit", b, "--", "/bin/sh", "-ec", script}}
	case k < 8:
		for _, b := range []string{"feat0", "feat1", "feat2"} {
			if h, ok := p.heads[b]; ok && h != p.heads["main"] {
				return plOp{kind: "promote", branch: "main", args: []string{"--json", "promote", "--into", "main", b}}
			}
		}
		return imp()
	default:
		if b := fmt.Sprintf("feat%d", p.rng.IntN(3)); p.heads[b] != "" && p.rng.IntN(3) == 0 {
			return plOp{kind: "branch", branch: b, args: []string{"--json", "branch", "delete", b}}
		}
		if p.rng.IntN(2) == 0 {
			// Nothing kept by the prune window: the sweep deletes.
			return plOp{kind: "gc", args: []string{"--json", "gc", "--prune", "0s"}}
		}
		return plOp{kind: "gc", args: []string{"--json", "gc"}}
	}
}

// writeUpper writes a file into a workspace's upper directory, as the
// workspace's processes would, and fsyncs it: the edit itself survives
// the power loss.
func (p *plHarness) writeUpper(upper, name, content string) {
	p.t.Helper()
	f, err := os.Create(filepath.Join(upper, name))
	if err != nil {
		p.t.Fatalf("edit of %s: %v", upper, err)
	}
	if _, err := f.WriteString(content); err != nil {
		p.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		p.t.Fatal(err)
	}
	f.Close()
}

type plWorkspace struct{ base, upper string }

// wsList returns the registered workspaces.
func (p *plHarness) wsList() (map[string]plWorkspace, string, bool) {
	out, ok := p.strata("--json", "ws", "list")
	if !ok {
		return nil, out, false
	}
	listed := map[string]plWorkspace{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var w struct {
			Name  string `json:"name"`
			Base  string `json:"base"`
			Upper string `json:"upper"`
		}
		if err := dec.Decode(&w); err != nil {
			p.t.Fatalf("ws list: %v in %q", err, out)
		}
		listed[w.Name] = plWorkspace{w.Base, w.Upper}
	}
	return listed, out, true
}

// rebaseOp prepares a rebase of a workspace onto imp, which imports move:
// a new uncommitted file written (durably) into its upper and, for a
// rebase with --conflict=markers, an uncommitted edit of a file imp
// changed since the workspace's base, which conflicts and gets markers.
// The workspace's commits (files of their own names) never conflict.
// A workspace not created yet is created first; one that has imp's head
// already (a rebase would be up-to-date) gets an import to rebase onto.
func (p *plHarness) rebaseOp(imp func() plOp) plOp {
	w := fmt.Sprintf("ws%d", p.rng.IntN(2))
	upper, ok := p.ws[w]
	if !ok {
		return plOp{kind: "wscreate", branch: "ws/" + w, from: "imp", ws: w, args: []string{"--json", "ws", "create", "--from", "imp", w}}
	}
	if p.rebasedOnto[w] == p.heads["imp"] {
		return imp()
	}
	listed, out, ok := p.wsList()
	if !ok {
		p.t.Fatalf("ws list: %s", out)
	}
	base := listed[w].base
	if p.unc[w] == nil {
		p.unc[w], p.marked[w] = map[string]string{}, map[string]string{}
	}
	name := fmt.Sprintf("r%d.txt", p.n)
	content := fmt.Sprintf("uncommitted %d\n%s", p.n, strings.Repeat("r", p.rng.IntN(50000)))
	p.writeUpper(upper, name, content)
	p.unc[w][name] = content
	op := plOp{kind: "rebase", branch: "ws/" + w, ws: w, args: []string{"--json", "rebase", w, "imp"},
		oldBase: base, oldUpper: upper, oldHead: p.heads["ws/"+w], onto: p.heads["imp"]}
	if p.rng.IntN(2) == 0 {
		op.kind, op.args = "rebase-markers", []string{"--json", "rebase", "--conflict=markers", w, "imp"}
		changed, ok := p.strata("diff", "--name-status", base+"..imp")
		if !ok {
			p.t.Fatalf("diff %s..imp: %s", base, changed)
		}
		for _, l := range strings.Split(changed, "\n") {
			if f, found := strings.CutPrefix(l, "M\t"); found && !strings.Contains(f, "/") && p.marked[w][f] == "" {
				c := fmt.Sprintf("workspace edit %d of %s\n", p.n, f)
				p.writeUpper(upper, f, c)
				p.unc[w][f], p.marked[w][f] = c, c
				break
			}
		}
	}
	return op
}

// rebaseResult is a rebase's --json answer.
type rebaseResult struct {
	Base    string   `json:"base"`
	How     string   `json:"how"`
	Markers []string `json:"markers"`
}

// trial runs one operation with a crash point, cuts the power and checks
// the store. It returns whether the crash point fell inside the operation.
func (p *plHarness) trial(op plOp) (interrupted, acked bool) {
	t := p.t
	t.Helper()
	n := p.opLen[op.kind]
	var at int64
	if n > 0 && p.rng.IntN(8) != 0 { // 1 in 8 runs to the end, then loses power
		at = 1 + p.rng.Int64N(n)
	}
	// A gc with --prune 0s may take acknowledged commits that no branch
	// reaches any more (a deleted branch's): only reachable ones must stay.
	var reachable map[string]bool
	if op.kind == "gc" && contains(op.args, "0s") {
		reachable = map[string]bool{}
		for b := range p.branches() {
			out, ok := p.strata("--json", "log", b, "-n", "100000")
			if !ok {
				t.Fatalf("log %s: %s", b, out)
			}
			dec := json.NewDecoder(strings.NewReader(out))
			for dec.More() {
				var c struct {
					ID string `json:"id"`
				}
				if err := dec.Decode(&c); err != nil {
					t.Fatalf("log %s: %v", b, err)
				}
				reachable[c.ID] = true
			}
		}
	}
	start := p.l.Ops()
	p.l.CrashAt(at)
	out, ok := p.strata(op.args...)
	interrupted = p.l.Crashed()
	ran := p.l.Ops() - start
	// An operation may succeed though the crash point fell inside it:
	// SQLite's checkpoint after a durable commit, or cleanup of caches,
	// may fail without undoing what was acknowledged. It is acknowledged
	// like any other, and must survive the power loss the same way.
	if interrupted && ok {
		p.lateCrash++
	}
	if !interrupted && !ok {
		t.Logf("trial %d: %v failed without a crash: %s", p.n, op.args, out)
	}
	before := map[string]string{}
	for k, v := range p.heads {
		before[k] = v
	}
	p.rebased = nil
	if ok {
		// Acknowledged: what it says it made must survive.
		switch op.kind {
		case "import", "commit", "promote", "wscommit":
			var r struct {
				Commit string `json:"commit"`
			}
			json.Unmarshal([]byte(firstLine(out)), &r)
			if r.Commit == "" {
				t.Fatalf("%v: no commit in %q", op.args, out)
			}
			p.acked[r.Commit] = op.kind
			p.heads[op.branch] = r.Commit
		case "wscreate":
			var r struct {
				Base  string `json:"base"`
				Upper string `json:"upper"`
			}
			json.Unmarshal([]byte(firstLine(out)), &r)
			if r.Base == "" || r.Upper == "" {
				t.Fatalf("%v: no base or upper in %q", op.args, out)
			}
			p.ws[op.ws] = r.Upper
			p.heads[op.branch] = r.Base
			p.rebasedOnto[op.ws] = r.Base
		case "rebase", "rebase-markers":
			var r rebaseResult
			if err := json.Unmarshal([]byte(firstLine(out)), &r); err != nil || r.Base == "" {
				t.Fatalf("%v: no base in %q", op.args, out)
			}
			p.rebased = &r
			if r.How == "rebased" {
				p.heads[op.branch] = r.Base
			}
		case "branch":
			if op.args[2] == "delete" {
				delete(p.heads, op.branch)
			} else {
				p.heads[op.branch] = p.heads[op.from]
			}
		}
	}
	if !interrupted && ok && (p.rebased == nil || p.rebased.How == "rebased") {
		// The length of a run that did the whole operation: a refused
		// or up-to-date rebase stops early and would narrow later
		// crash points.
		p.opLen[op.kind] = ran
	}
	if _, err := p.l.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	// The operation's process is gone (its filesystem calls fail); the
	// keeper-less run leaves nothing behind on the mount.
	if err := p.l.Unmount(); err != nil {
		t.Fatal(err)
	}
	p.mount()

	if out, ok := p.strata("fsck"); !ok {
		t.Fatalf("trial %d (%s, crash at %d of %d): fsck after the power loss:\n%s", p.n, op.kind, at, n, out)
	}
	for c := range p.acked {
		if reachable != nil && !reachable[c] {
			delete(p.acked, c)
			p.collected++
		}
	}
	for c, what := range p.acked {
		if _, ok := p.parents(c); !ok {
			t.Errorf("trial %d: the acknowledged %s commit %s is gone", p.n, what, c[:12])
		}
	}
	got := p.branches()
	for b, want := range p.heads {
		if b == op.branch && !ok {
			continue
		}
		if got[b] != want {
			t.Errorf("trial %d (%s, crash at %d of %d): branch %s at %q, want %q (acknowledged)", p.n, op.kind, at, n, b, got[b], want)
		}
	}
	if op.branch != "" && !ok {
		// Interrupted: the branch is where it was, or at the complete
		// commit the operation was making (fsck proved it complete).
		old, now := before[op.branch], got[op.branch]
		switch {
		case now == old:
		case (op.kind == "branch" || op.kind == "wscreate") && op.from != "" && now == p.heads[op.from]:
		case op.kind == "branch" && now == "": // the delete went through
		case strings.HasPrefix(op.kind, "rebase") && now == op.onto:
			// Rebased with no commits of its own to carry: the
			// workspace's branch is at REF.
		default:
			if ps, okp := p.parents(now); !okp || (old != "" && !contains(ps, old) && op.kind != "promote") {
				t.Errorf("trial %d (%s interrupted at %d of %d): branch %s moved from %q to %q, not a child of it", p.n, op.kind, at, n, op.branch, old, now)
			}
		}
		if now == "" {
			delete(p.heads, op.branch)
		} else {
			p.heads[op.branch] = now
		}
	}
	p.checkWorkspaces(op, ok, got)
	return interrupted, ok
}

// checkWorkspaces checks, after a power loss, every workspace that must
// exist (its creation acknowledged) or does (an interrupted creation that
// went through): ws list shows it, its base commit is present with its
// tree, strata diff works on it, and the last edit committed from it is in
// its base tree or still in its diff. A workspace whose creation was
// interrupted may be absent.
func (p *plHarness) checkWorkspaces(op plOp, ok bool, branches map[string]string) {
	t := p.t
	t.Helper()
	out, lok := p.strata("--json", "ws", "list")
	if !lok {
		t.Errorf("trial %d (%s): ws list after the power loss: %s", p.n, op.kind, out)
		return
	}
	listed := map[string]struct{ base, upper string }{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var w struct {
			Name  string `json:"name"`
			Base  string `json:"base"`
			Upper string `json:"upper"`
		}
		if err := dec.Decode(&w); err != nil {
			t.Fatalf("ws list: %v in %q", err, out)
		}
		listed[w.Name] = struct{ base, upper string }{w.Base, w.Upper}
	}
	if op.kind == "wscreate" && !ok {
		if w, found := listed[op.ws]; found {
			p.ws[op.ws] = w.upper // the creation went through
			p.rebasedOnto[op.ws] = w.base
		} else {
			// Absent, as it may be; what the crash left of it (its
			// directory, the branch) is cleared as ws create's refusal
			// says, so that a later trial creates it again.
			p.wsRecovered++
			if out, okr := p.strata("ws", "rm", "--force", op.ws); !okr {
				if !strings.Contains(out, "not found") {
					t.Errorf("trial %d: ws rm --force %s after an interrupted creation: %s", p.n, op.ws, out)
				}
				// Not in the registry, ws rm leaves the directory that
				// ws create then refuses (the advice does not work yet:
				// a workspace-lifecycle fix). Remove that directory.
				p.wsLeftDir++
				if err := os.RemoveAll(filepath.Join(p.h.dir, "workspaces", op.ws)); err != nil {
					t.Fatal(err)
				}
			}
			if h, found := p.branches()[op.branch]; found {
				p.heads[op.branch] = h
			} else {
				delete(p.heads, op.branch)
			}
		}
	}
	for name := range p.ws {
		w, found := listed[name]
		if !found {
			t.Errorf("trial %d (%s): workspace %s, acknowledged, is not in ws list:\n%s", p.n, op.kind, name, out)
			continue
		}
		p.wsChecks++
		if _, okp := p.parents(w.base); !okp {
			t.Errorf("trial %d (%s): workspace %s's base commit %q is gone", p.n, op.kind, name, w.base)
			continue
		}
		if out, okt := p.strata("--json", "show", w.base+":"); !okt {
			t.Errorf("trial %d (%s): the tree of workspace %s's base %s: %s", p.n, op.kind, name, w.base, out)
		}
		if branches["ws/"+name] != w.base {
			p.wsBaseBehind++
		}
		diff, okd := p.strata("diff", "--name-status", name)
		if !okd {
			t.Errorf("trial %d (%s): diff %s after the power loss: %s", p.n, op.kind, name, diff)
			continue
		}
		if e := p.edit[name]; e != "" {
			_, inBase := p.strata("show", w.base+":"+e)
			if !inBase && !strings.Contains(diff, "A\t"+e+"\n") {
				t.Errorf("trial %d (%s): workspace %s's edit %s is neither in its base %s nor in its diff:\n%s", p.n, op.kind, name, e, w.base, diff)
			}
			if op.kind == "wscommit" && op.ws == name && ok && !inBase {
				t.Errorf("trial %d: the acknowledged commit of workspace %s: its edit %s is not in the base %s", p.n, name, e, w.base)
			}
		}
	}
	if strings.HasPrefix(op.kind, "rebase") {
		p.checkRebase(op, ok, plWorkspace{listed[op.ws].base, listed[op.ws].upper}, branches[op.branch])
		// The conflicting edit is resolved by taking REF's version
		// (its file leaves the upper), so that no commit of the
		// workspace carries it into conflicts with later imports.
		for f := range p.marked[op.ws] {
			os.Remove(filepath.Join(listed[op.ws].upper, f))
			delete(p.unc[op.ws], f)
			delete(p.marked[op.ws], f)
		}
	}
	// Uncommitted files of other workspaces are where they were.
	for name, files := range p.unc {
		if strings.HasPrefix(op.kind, "rebase") && name == op.ws {
			continue
		}
		for f, c := range files {
			if got, err := os.ReadFile(filepath.Join(listed[name].upper, f)); err != nil || string(got) != c {
				t.Errorf("trial %d (%s): workspace %s's uncommitted %s: %d bytes (%v), want the %d written", p.n, op.kind, name, f, len(got), err, len(c))
			}
		}
	}
}

// checkRebase checks what a power cut during a rebase left of the
// workspace. Either all of it as it was: its base, its branch, its upper
// with every uncommitted file exactly as written. Or all of it rebased:
// a new base — REF, or a commit on REF (parents REF and the old base)
// carrying its commits — that its branch points to, and a new upper
// holding every uncommitted file, exactly, or with conflict markers
// around the workspace's edit where it conflicted with REF. Never a mix
// (a new base over the old upper would show REF's changes reverted; the
// old base over the new upper would show them as the workspace's), nor a
// lost or torn uncommitted file. An acknowledged rebase is complete, its
// answer's base and markers as found. What an interrupted one leaves
// besides (a half-written upper.*, the old upper after the switch) is
// garbage for gc, not checked here.
func (p *plHarness) checkRebase(op plOp, ok bool, w plWorkspace, head string) {
	t := p.t
	t.Helper()
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(w.upper, f))
		if err != nil {
			t.Errorf("trial %d (%s): workspace %s's uncommitted %s: %v", p.n, op.kind, op.ws, f, err)
		}
		return string(b)
	}
	if w.upper == op.oldUpper {
		p.rebaseOld++
		if w.base != op.oldBase || head != op.oldHead {
			t.Errorf("trial %d (%s): workspace %s kept its upper but its base moved %s → %s (branch %s → %s)", p.n, op.kind, op.ws, op.oldBase, w.base, op.oldHead, head)
		}
		if ok && p.rebased.How == "rebased" {
			t.Errorf("trial %d (%s): the acknowledged rebase of %s onto %s is not there after the power loss", p.n, op.kind, op.ws, p.rebased.Base)
		}
		for f, c := range p.unc[op.ws] {
			if got := read(f); got != c {
				t.Errorf("trial %d (%s, not rebased): workspace %s's uncommitted %s is %d bytes, want the %d written", p.n, op.kind, op.ws, f, len(got), len(c))
			}
		}
		return
	}
	p.rebaseNew++
	p.ws[op.ws] = w.upper
	p.rebasedOnto[op.ws] = op.onto
	switch {
	case w.base == op.oldBase:
		t.Errorf("trial %d (%s): workspace %s has a new upper %s over its old base %s", p.n, op.kind, op.ws, w.upper, w.base)
	case head != w.base:
		t.Errorf("trial %d (%s): workspace %s rebased onto %s, its branch at %s", p.n, op.kind, op.ws, w.base, head)
	case ok && w.base != p.rebased.Base:
		t.Errorf("trial %d (%s): workspace %s at %s, the acknowledged rebase said %s", p.n, op.kind, op.ws, w.base, p.rebased.Base)
	case w.base != op.onto:
		if ps, okp := p.parents(w.base); !okp || len(ps) != 2 || ps[0] != op.onto || ps[1] != op.oldBase {
			t.Errorf("trial %d (%s): workspace %s's new base %s has parents %v, want [%s %s]", p.n, op.kind, op.ws, w.base, ps, op.onto, op.oldBase)
		}
	}
	for f, c := range p.unc[op.ws] {
		got := read(f)
		if p.marked[op.ws][f] == "" {
			if got != c {
				t.Errorf("trial %d (%s, rebased): workspace %s's uncommitted %s is %d bytes, want the %d written", p.n, op.kind, op.ws, f, len(got), len(c))
			}
			continue
		}
		marked := strings.HasPrefix(got, "<<<<<<< ") && strings.Contains(got, "\n=======\n") && strings.Contains(got, c) && strings.Contains(got, ">>>>>>> ")
		if got != c && !marked {
			t.Errorf("trial %d (%s, rebased): workspace %s's conflicting %s is neither its edit nor marked:\n%s", p.n, op.kind, op.ws, f, got)
		}
		if ok && contains(p.rebased.Markers, f) && !marked {
			t.Errorf("trial %d (%s): the acknowledged rebase marked %s, which has no markers:\n%s", p.n, op.kind, f, got)
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestPowerLoss(t *testing.T) {
	testutil.AsRootBecause(t, "the power-loss harness mounts FUSE (/dev/fuse is 0600 here)")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Skip(t, "no /dev/fuse: "+err.Error())
	}
	trials := 40
	if s := os.Getenv("STRATA_POWERLOSS_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("STRATA_POWERLOSS_TRIALS=%q", s)
		}
		trials = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STRATA_POWERLOSS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (STRATA_POWERLOSS_SEED), %d trials", seed, trials)
	dir := t.TempDir()
	p := &plHarness{t: t, backing: filepath.Join(dir, "backing"), mnt: filepath.Join(dir, "mnt"),
		src: filepath.Join(dir, "src"), rng: rand.New(rand.NewPCG(seed, 18)),
		acked: map[string]string{}, heads: map[string]string{}, opLen: map[string]int64{},
		ws: map[string]string{}, edit: map[string]string{},
		unc: map[string]map[string]string{}, marked: map[string]map[string]string{}, rebasedOnto: map[string]string{}}
	for _, d := range []string{p.backing, p.mnt, p.src} {
		os.MkdirAll(d, 0o755)
	}
	p.mount()
	defer func() { p.l.Unmount() }()
	p.h = &home{t: t, dir: filepath.Join(p.mnt, "store")}
	sh(t, p.src, "mkdir -p a/b && echo hello > a/b/c && head -c 300000 /dev/urandom > big.bin")
	if _, ok := p.strata("init"); !ok {
		t.Fatal("init on lazyfs failed")
	}
	// Calibrate: each kind once, uninterrupted.
	counts := map[string][3]int{} // kind → trials, interrupted, acknowledged
	for i := 0; i < trials; i++ {
		op := p.nextOp()
		intr, ack := p.trial(op)
		c := counts[op.kind]
		c[0]++
		if intr {
			c[1]++
		}
		if ack {
			c[2]++
		}
		counts[op.kind] = c
		if t.Failed() {
			break
		}
	}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	total := [3]int{}
	for _, k := range kinds {
		c := counts[k]
		t.Logf("%-8s trials %4d  crashed mid-operation %4d  acknowledged %4d  (last length %d fs ops)", k, c[0], c[1], c[2], p.opLen[k])
		for i := range total {
			total[i] += c[i]
		}
	}
	// The property must not shrink to nothing: most trials cut an
	// operation short, and enough of them were acknowledged.
	if trials >= 40 && (total[1] < trials/4 || total[2] < trials/8) {
		t.Errorf("%d of %d trials interrupted, %d acknowledged: too few to show anything", total[1], trials, total[2])
	}
	t.Logf("acknowledged though the crash point fell inside them (after their commit point): %d", p.lateCrash)
	t.Logf("rebases: the power loss left the workspace as it was %d, fully rebased %d (uncommitted files exact or marked, base and branch together)", p.rebaseOld, p.rebaseNew)
	t.Logf("workspaces checked after power losses %d (base present with its tree, diff works, the last committed edit in the base or the diff); base not at the branch head %d; interrupted creations that left none %d (%d left its directory, which ws rm --force did not remove)", p.wsChecks, p.wsBaseBehind, p.wsRecovered, p.wsLeftDir)
	t.Logf("total    trials %4d  crashed mid-operation %4d  acknowledged %4d; acknowledged commits present %d (and %d unreachable ones left to gc --prune 0s); fsck clean after every power loss",
		total[0], total[1], total[2], len(p.acked), p.collected)
}

// TestPowerLossLyingDisk: the harness's checks can fail. On a disk whose
// fsync makes nothing durable, an acknowledged import does not survive the
// power loss, and the checks TestPowerLoss makes see it.
func TestPowerLossLyingDisk(t *testing.T) {
	testutil.AsRootBecause(t, "the power-loss harness mounts FUSE (/dev/fuse is 0600 here)")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Skip(t, "no /dev/fuse: "+err.Error())
	}
	dir := t.TempDir()
	p := &plHarness{t: t, backing: filepath.Join(dir, "backing"), mnt: filepath.Join(dir, "mnt"), src: filepath.Join(dir, "src")}
	for _, d := range []string{p.backing, p.mnt, p.src} {
		os.MkdirAll(d, 0o755)
	}
	p.mount()
	defer func() { p.l.Unmount() }()
	p.h = &home{t: t, dir: filepath.Join(p.mnt, "store")}
	sh(t, p.src, "echo hello > a && head -c 100000 /dev/urandom > b")
	if out, ok := p.strata("init"); !ok {
		t.Fatal(out)
	}
	// The store's creation is durable; from here on, fsync lies.
	p.l.PowerLoss()
	p.l.Unmount()
	p.mount()
	p.l.LieAboutSync(true)
	out, ok := p.strata("--json", "import", p.src)
	if !ok {
		t.Fatal(out)
	}
	var r struct {
		Commit string `json:"commit"`
	}
	json.Unmarshal([]byte(firstLine(out)), &r)
	p.l.PowerLoss()
	p.l.Unmount()
	p.mount()
	_, fsckOK := p.strata("fsck")
	_, present := p.parents(r.Commit)
	if fsckOK && present {
		t.Fatalf("the acknowledged import %s survived a disk that made nothing durable: the harness could not see a loss", r.Commit)
	}
	t.Logf("on a lying disk: fsck clean %v, the acknowledged commit present %v", fsckOK, present)
}
