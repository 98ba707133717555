package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestParse: the command lines the front serves, read as strata-core
// reads them (flags before or after NAME, global flags after the verb,
// exec's command line left alone after its first word, urfave/cli's
// comma-split lists), and the ones it hands over.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string // "" for a hand-over
	}{
		{"exec w -- true", "exec home= quiet=false name=w argv=[true] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"exec w true -x", "exec home= quiet=false name=w argv=[true -x] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"--home /h exec --cwd src w -- ls -la", "exec home=/h quiet=false name=w argv=[ls -la] cwd=src env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"exec w --cwd src --env A=1 --env B=2,C=3 ls --cwd x", "exec home= quiet=false name=w argv=[ls --cwd x] cwd=src env=[A=1 B=2 C=3] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"exec --sandbox=strict --net none --ro /a --rw=/b --allow-connect 80 --allow-bind 8080 --sandbox-require-abi 4 w true", "exec home= quiet=false name=w argv=[true] cwd= env=[] sandbox=strict net=none ro=[/a] rw=[/b] connect=[80] bind=[8080] abi=4"},
		{"-q exec w -- true", "exec home= quiet=true name=w argv=[true] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		// Global flags after the verb, as strata-core moves them.
		{"exec w --home /h -q true", "exec home=/h quiet=true name=w argv=[true] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"exec w true --home /h", "exec home= quiet=false name=w argv=[true --home /h] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"exec w -- sh -c 'x' -- y", "exec home= quiet=false name=w argv=[sh -c 'x' -- y] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"exec w echo -- x", "exec home= quiet=false name=w argv=[echo x] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"exec -- w echo -- x", "exec home= quiet=false name=w argv=[echo -- x] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"--home=/h exec w echo", "exec home=/h quiet=false name=w argv=[echo] cwd= env=[] sandbox=agent net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"shell w --sandbox none", "shell home= quiet=false name=w argv=[] cwd= env=[] sandbox=none net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"ws path w", "path home= quiet=false name=w argv=[] cwd= env=[] sandbox= net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		{"--quiet ws path -- w", "path home= quiet=true name=w argv=[] cwd= env=[] sandbox= net= ro=[] rw=[] connect=[] bind=[] abi=0"},
		// strata-core's ordering counts a flag's value as a positional
		// when it looks for global flags: -q here is exec's, which it
		// does not have (a usage error of strata-core's).
		{"exec --cwd src w -q true", ""},
		// Handed over.
		{"--json exec w true", ""},
		{"exec --json w true", ""},
		{"--version", ""},
		{"exec --help", ""},
		{"exec w -h", ""},
		{"exec w", ""},
		{"exec --bogus w true", ""},
		{"exec --allow-connect http w true", ""},
		{"exec --env NOVALUE w true", ""},
		{"exec --sandbox-require-abi x w true", ""},
		{"shell", ""},
		{"shell a b", ""},
		{"shell w --json", ""},
		{"ws path", ""},
		{"ws path a b", ""},
		{"ws path w --sandbox none", ""},
		{"ws list", ""},
		{"ws", ""},
		{"commit w", ""},
		{"help exec", ""},
		{"", ""},
		{"-- exec w true", ""},
	} {
		args := append([]string{"strata"}, strings.Fields(tc.args)...)
		r, why := parse(args)
		got := ""
		if why == "" {
			got = describe(r)
		}
		if got != tc.want {
			t.Errorf("parse(%q) = %q (%s)\n want %q", tc.args, got, why, tc.want)
		}
	}
}

func describe(r *request) string {
	o, sb := r.opts, r.opts.Sandbox
	f, sprint := fmt.Sprint, fmt.Sprint
	return strings.Join([]string{r.verb, "home=" + r.home, "quiet=" + sprint(r.quiet), "name=" + r.name, "argv=" + f(o.Argv),
		"cwd=" + o.Cwd, "env=" + f(o.Env), "sandbox=" + sb.Mode, "net=" + sb.Net, "ro=" + f(sb.RO), "rw=" + f(sb.RW),
		"connect=" + f(sb.AllowConnect), "bind=" + f(sb.AllowBind), "abi=" + sprint(sb.RequireABI)}, " ")
}

// TestFlagsMatchDoc: the front knows exactly the flags docs/cli.md gives
// exec, shell and ws path, and the global ones — the flags strata-core
// has (TestCLIDocMatchesHelp holds docs/cli.md to its --help). A flag
// added to the core and the doc, and not here, fails this test: the
// front would hand every command using it over, silently slower.
func TestFlagsMatchDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, ref, _ := strings.Cut(doc, "\n## Reference\n")
	sections := regexp.MustCompile(`(?m)^### strata (.+)$`)
	flagRe := regexp.MustCompile("(?m)^- `--([a-z0-9][a-z0-9-]*)`[^:]*: (.*)$")
	locs := sections.FindAllStringSubmatchIndex(ref, -1)
	docFlags := map[string][]string{}
	for i, l := range locs {
		end := len(ref)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := ref[l[2]:l[3]]
		for _, m := range flagRe.FindAllStringSubmatch(ref[l[1]:end], -1) {
			kind := "string"
			switch {
			case strings.Contains(m[2], "repeatable"):
				kind = "list"
			case strings.Contains(m[2], "(default 0)"):
				kind = "int"
			}
			docFlags[name] = append(docFlags[name], m[1]+":"+kind)
		}
	}
	var ours []string
	for _, f := range commandFlags {
		ours = append(ours, f.name+":"+[]string{"string", "list", "int"}[f.kind])
	}
	sort.Strings(ours)
	for _, verb := range []string{"exec", "shell"} {
		got := docFlags[verb]
		sort.Strings(got)
		if !slices.Equal(got, ours) {
			t.Errorf("strata %s: docs/cli.md has %v; the front %v", verb, got, ours)
		}
	}
	if got := docFlags["ws path"]; len(got) != 0 {
		t.Errorf("strata ws path: docs/cli.md has flags %v; the front none", got)
	}
	// The global flags: the synopsis's first line.
	globals := regexp.MustCompile(`\[--([a-z]+)[^\]]*\]`).FindAllStringSubmatch(strings.SplitN(strings.SplitN(doc, "```\n", 2)[1], "\n", 2)[0], -1)
	var docGlobals, ourGlobals []string
	for _, m := range globals {
		docGlobals = append(docGlobals, m[1])
	}
	for _, f := range globalFlags {
		ourGlobals = append(ourGlobals, f.Names[0])
	}
	sort.Strings(docGlobals)
	sort.Strings(ourGlobals)
	if !slices.Equal(docGlobals, ourGlobals) {
		t.Errorf("global flags: docs/cli.md has %v; the front %v", docGlobals, ourGlobals)
	}
}
