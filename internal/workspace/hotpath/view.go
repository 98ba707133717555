package hotpath

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stratafs/strata/nsexec"
)

// The view: what a sandboxed command sees (nsexec.Command.View, built by
// the keeper; docs/sandbox.md, "The view"). Besides the system, the
// workspace and its private directories, it holds binds of host paths:
// the store's defaults (Settings.ViewRO, ViewRW: `strata init --ro`),
// the toolchains the command's PATH reaches under the home directory,
// and the command's --ro and --rw. This file decides which, for the
// lifecycle and the front alike.

// systemView are the host directories every view shows read-only
// (nsexec's systemDirs): a PATH entry or a bind beneath them needs no
// bind of its own.
var systemView = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// Toolchain roots directly under the home directory that a PATH entry
// beneath them stands for: the whole root is bound read-only (a shim in
// bin/ needs the versions beside it), with the variable its tools look
// the root up in when HOME, which points elsewhere in a sandbox, would
// mislead them (pyenv's shims read $PYENV_ROOT, rustup's proxies
// $RUSTUP_HOME). rustup's root goes with cargo's bin/, which holds
// rustup's proxies; of ~/.cargo only bin/ is bound (credentials.toml
// holds registry tokens; inside, cargo keeps its own home under HOME).
var homeToolchains = map[string]string{
	".pyenv":     "PYENV_ROOT",
	".nvm":       "NVM_DIR",
	".rustup":    "RUSTUP_HOME",
	".cargo":     "", // bin/ only, see above
	"go":         "",
	".go":        "",
	".volta":     "VOLTA_HOME",
	".bun":       "BUN_INSTALL",
	".deno":      "DENO_INSTALL",
	".asdf":      "ASDF_DATA_DIR",
	".rbenv":     "RBENV_ROOT",
	".nodenv":    "NODENV_ROOT",
	".goenv":     "GOENV_ROOT",
	".sdkman":    "SDKMAN_DIR",
	".pixi":      "",
	"miniconda3": "",
	"anaconda3":  "",
	"miniforge3": "",
	"mambaforge": "",
	".juliaup":   "",
	".ghcup":     "",
}

// homeBinDirs are PATH entries under the home directory that are bound as
// just that directory (not their parent).
var homeBinDirs = []string{".local/bin", "bin"}

// neverBound are directories under the home directory that no default
// bind ever shows, nor contains: credentials, configuration, data.
var neverBound = []string{".ssh", ".aws", ".config", ".gnupg", ".docker", ".kube", ".local/share", ".password-store", ".netrc", ".azure", ".gcloud"}

// toolchain is a default bind for a PATH entry, with its environment.
type toolchain struct {
	Dir string // the bound directory (as PATH names it, not resolved)
	Env string // "" or a variable to point at Dir
	For string // the PATH entry that brought it in
}

// pathToolchains returns the toolchain directories the PATH entries in
// path reach outside the system view: under home, a known toolchain root
// (homeToolchains) or one of homeBinDirs, never one of neverBound, never
// the store or a directory holding it. Entries that do not exist, or are
// not directories, are left out.
func pathToolchains(path, home, store string) []toolchain {
	if home == "" || !filepath.IsAbs(home) {
		return nil
	}
	home = filepath.Clean(home)
	var out []toolchain
	seen := map[string]bool{}
	add := func(dir, env, entry string) {
		if seen[dir] || overlaps(dir, store) || !isDir(dir) {
			return
		}
		for _, n := range neverBound {
			if overlaps(dir, filepath.Join(home, n)) {
				return
			}
		}
		seen[dir] = true
		out = append(out, toolchain{Dir: dir, Env: env, For: entry})
	}
	for _, e := range filepath.SplitList(path) {
		if !filepath.IsAbs(e) {
			continue
		}
		e = filepath.Clean(e)
		rel, ok := strings.CutPrefix(e, home+"/")
		if !ok || inSystemView(e) {
			continue
		}
		if slices.Contains(homeBinDirs, rel) {
			add(e, "", e)
			continue
		}
		first, _, _ := strings.Cut(rel, "/")
		env, known := homeToolchains[first]
		if !known {
			continue
		}
		switch first {
		case ".cargo":
			add(filepath.Join(home, ".cargo", "bin"), "", e)
			add(filepath.Join(home, ".rustup"), "RUSTUP_HOME", e)
			continue
		case ".rustup":
			add(filepath.Join(home, ".cargo", "bin"), "", e)
		}
		add(filepath.Join(home, first), env, e)
	}
	return out
}

// overlaps reports whether a and b are the same path or one holds the
// other.
func overlaps(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return Within(a, b) || Within(b, a)
}

// Within reports whether p is dir or beneath it (clean, absolute paths).
func Within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func inSystemView(p string) bool {
	for _, d := range systemView {
		if Within(p, d) {
			return true
		}
	}
	return false
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// ViewPlan is what a sandboxed command's view holds beyond the system:
// its binds, and the environment its toolchains need.
type ViewPlan struct {
	Binds []nsexec.Bind
	Env   []string // K=V for toolchains (not set when env has K)
	RO    []string // for Landlock: the read-only binds
	RW    []string // for Landlock: the read-write binds
}

// ViewBinds plans the binds of a view for a command with environment env
// and the sandbox options o (nil: only the defaults, for a keeper): the
// store's defaults, the toolchains env's PATH reaches, then o's --ro and
// --rw. An --ro or --rw path that does not exist, or that holds the store
// or lies in it, is an error naming it; a store default that vanished is
// skipped with a warning.
func (pl *Planner) ViewBinds(env []string, o *SandboxOptions) (*ViewPlan, error) {
	p := &ViewPlan{}
	seen := map[nsexec.Bind]bool{}
	add := func(path string, rw bool) {
		b := nsexec.Bind{Source: path, Target: path, RW: rw}
		if seen[b] {
			return
		}
		seen[b] = true
		p.Binds = append(p.Binds, b)
		if rw {
			p.RW = append(p.RW, path)
		} else {
			p.RO = append(p.RO, path)
		}
	}
	warn := func(string) {}
	if o != nil && o.Warn != nil {
		warn = o.Warn
	}
	s, err := pl.settings()
	if err != nil {
		return nil, err
	}
	for _, d := range []struct {
		paths []string
		rw    bool
	}{{s.ViewRO, false}, {s.ViewRW, true}} {
		for _, path := range d.paths {
			if _, err := os.Stat(path); err != nil {
				warn(fmt.Sprintf("sandbox: the store's default bind %s is missing; left out (strata init --forget %s)", path, path))
				continue
			}
			add(path, d.rw)
		}
	}
	home, _ := os.UserHomeDir()
	for _, tc := range pathToolchains(envValue(env, "PATH"), home, pl.Home) {
		add(tc.Dir, false)
		if tc.Env != "" && !HasEnv(env, tc.Env) && !slices.ContainsFunc(p.Env, func(kv string) bool { return strings.HasPrefix(kv, tc.Env+"=") }) {
			p.Env = append(p.Env, tc.Env+"="+tc.Dir)
		}
	}
	if o == nil {
		return p, nil
	}
	for _, d := range []struct {
		flag  string
		paths []string
		rw    bool
	}{{"--ro", o.RO, false}, {"--rw", o.RW, true}} {
		for _, path := range d.paths {
			if err := pl.CheckBind(d.flag, path); err != nil {
				return nil, err
			}
			add(filepath.Clean(path), d.rw)
		}
	}
	return p, nil
}

// CheckBind refuses a bind path that is not absolute, does not exist, or
// holds the store or lies in it (invariant 7: nothing of the store is in
// a sandboxed command's mount namespace).
func (pl *Planner) CheckBind(flag, path string) error {
	home := pl.Home
	if !filepath.IsAbs(path) {
		return Invalidf("%s %q: give an absolute path", flag, path)
	}
	path = filepath.Clean(path)
	if _, err := os.Stat(path); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return Invalidf("%s %s: %v", flag, path, err)
	}
	store := home
	if real, err := filepath.EvalSymlinks(store); err == nil {
		store = real
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	if overlaps(real, store) || overlaps(path, home) {
		return Invalidf("%s %s: the strata store (%s) would be visible in the sandbox; bind a directory that neither holds it nor lies in it", flag, path, home)
	}
	return nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// notFoundHint explains a sandboxed command that exited 127 (not found)
// because what it needs lies outside the view: argv[0] (or the interpreter
// of its #! line, or what `env` was asked to run) exists on the host under
// a directory the view does not show. It returns the --ro that fixes it,
// or "".
func notFoundHint(argv []string, env []string, cwd string, shown func(string) bool) string {
	if len(argv) == 0 {
		return ""
	}
	path := envValue(env, "PATH")
	find := func(name string) string {
		if strings.Contains(name, "/") {
			if !filepath.IsAbs(name) {
				name = filepath.Join(cwd, name)
			}
			if _, err := os.Stat(name); err == nil {
				return name
			}
			return ""
		}
		for _, d := range filepath.SplitList(path) {
			if !filepath.IsAbs(d) {
				continue
			}
			p := filepath.Join(d, name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
		return ""
	}
	hint := func(name, found string) string {
		if found == "" || shown(found) {
			return ""
		}
		dir := bindFor(found)
		return fmt.Sprintf("%s is %s on the host, outside the sandbox's view; add --ro %s (or make it a default: strata init --ro %s)", name, found, dir, dir)
	}
	found := find(argv[0])
	if h := hint(argv[0], found); h != "" || found == "" {
		return h
	}
	// Found and shown: a script whose interpreter is not.
	interp := shebang(found)
	if len(interp) == 0 {
		return ""
	}
	if filepath.Base(interp[0]) == "env" {
		for _, a := range interp[1:] {
			if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") {
				return hint(a, find(a))
			}
		}
		return ""
	}
	return hint(interp[0], find(interp[0]))
}

// bindFor is the directory to bind for a file the view lacks: the
// toolchain root under the home directory it lies in, else its directory.
func bindFor(file string) string {
	home, _ := os.UserHomeDir()
	if home != "" {
		if rel, ok := strings.CutPrefix(file, filepath.Clean(home)+"/"); ok {
			first, _, _ := strings.Cut(rel, "/")
			if _, known := homeToolchains[first]; known {
				return filepath.Join(home, first)
			}
		}
	}
	return filepath.Dir(file)
}

// shebang returns the interpreter and arguments of a file's #! line.
func shebang(file string) []string {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return nil
	}
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return nil
	}
	return strings.Fields(rest)
}

// ViewEntry is one line of what a sandboxed command sees (doctor).
type ViewEntry struct {
	Path   string `json:"path"`
	Access string `json:"access"` // read-only, read-write, hidden, symlink
	What   string `json:"what"`
}

// DescribeView says what a sandboxed command of the store at home sees,
// for a command with environment env (its PATH's toolchains) and the
// store's default binds ro and rw: the view (docs/sandbox.md, "The view").
func DescribeView(home string, env []string, ro, rw []string) []ViewEntry {
	var out []ViewEntry
	add := func(p, access, what string) { out = append(out, ViewEntry{Path: p, Access: access, What: what}) }
	for _, d := range systemView {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			t, _ := os.Readlink(d)
			add(d, "symlink", "→ "+t+", as on the host")
		default:
			add(d, "read-only", "the system")
		}
	}
	add("(the project's path)", "read-write", "the workspace, where it was imported from")
	add("/tmp", "read-write", "the workspace's private /tmp (its --sandbox none commands share it)")
	add("/var/tmp", "read-write", "private to the workspace's sandboxed commands")
	add("/dev", "read-only", "null, zero, full, random, urandom, tty (the host's); pts (a devpts of its own), ptmx; fd, stdin, stdout, stderr; shm (private, read-write)")
	add("/proc", "read-only", "the workspace's PID namespace: its processes only")
	add("/sys", "read-only", "the host's (Landlock narrows reads to CPU, NUMA, cgroup and huge page information)")
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if real, err := filepath.EvalSymlinks(f); err == nil && !inSystemView(real) {
			add(real, "read-only", "what "+f+" resolves to (DNS under --net host)")
		}
	}
	for _, p := range ro {
		add(p, "read-only", "the store's default (strata init --ro)")
	}
	for _, p := range rw {
		add(p, "read-write", "the store's default (strata init --rw)")
	}
	uhome, _ := os.UserHomeDir()
	for _, tc := range pathToolchains(envValue(env, "PATH"), uhome, home) {
		what := "a toolchain PATH reaches (" + tc.For + ")"
		if tc.Env != "" {
			what += "; " + tc.Env + " points at it"
		}
		add(tc.Dir, "read-only", what)
	}
	hidden := "the rest of your home directory, other users' (/home, /root), /run and /var/run (sockets: session bus, ssh-agent, docker), /mnt, /media, /srv, the host's /tmp and /var/tmp, the store (" + home + ")"
	add("everything else", "hidden", hidden)
	return out
}
