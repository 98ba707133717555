package main

import (
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestCLIDocMatchesHelp: docs/cli.md's reference has a section for every
// command `strata help` lists and none other, and each section names
// exactly the flags that command's --help shows (issue 19: the contract
// lives in the repository and cannot drift from the binary).
func TestCLIDocMatchesHelp(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := docSections(string(b))
	help := helpSections(t)

	for path, flags := range help {
		dflags, ok := doc[path]
		if !ok {
			t.Errorf("docs/cli.md has no section \"### strata %s\"", path)
			continue
		}
		if !slices.Equal(flags, dflags) {
			t.Errorf("strata %s: --help shows flags %v, docs/cli.md %v", path, flags, dflags)
		}
	}
	for path := range doc {
		if _, ok := help[path]; !ok {
			t.Errorf("docs/cli.md documents \"strata %s\", which strata does not have", path)
		}
	}
}

var (
	sectionRe = regexp.MustCompile(`(?m)^### strata (.+)$`)
	flagRe    = regexp.MustCompile("(?m)^- `(--?[a-z0-9][a-z0-9-]*)`")
	// A flag line in --help output: "   --name value, -n value   usage".
	helpFlagRe = regexp.MustCompile(`(?m)^   (--?[a-z0-9][a-z0-9-]*)`)
)

// docSections maps each "### strata PATH" of docs/cli.md's reference to
// the flags its bullets name, sorted.
func docSections(doc string) map[string][]string {
	_, ref, _ := strings.Cut(doc, "\n## Reference\n")
	out := map[string][]string{}
	locs := sectionRe.FindAllStringSubmatchIndex(ref, -1)
	for i, l := range locs {
		end := len(ref)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		var flags []string
		for _, m := range flagRe.FindAllStringSubmatch(ref[l[1]:end], -1) {
			flags = append(flags, m[1])
		}
		sort.Strings(flags)
		out[ref[l[2]:l[3]]] = flags
	}
	return out
}

// helpSections runs `strata PATH --help` for every command in the tree and
// maps PATH to the flags the help text lists (primary names, --help
// left out), sorted.
func helpSections(t *testing.T) map[string][]string {
	t.Helper()
	app := newApp(&env{stdout: io.Discard, stderr: io.Discard})
	out := map[string][]string{}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			p := strings.TrimSpace(path + " " + c.Name)
			code, text, stderr := strataRun(t, append(strings.Fields(p), "--help")...)
			if code != 0 {
				t.Fatalf("strata %s --help: exit %d: %s", p, code, stderr)
			}
			_, opts, _ := strings.Cut(text, "\nOPTIONS:\n")
			var flags []string
			for _, m := range helpFlagRe.FindAllStringSubmatch(opts, -1) {
				if m[1] != "--help" {
					flags = append(flags, m[1])
				}
			}
			sort.Strings(flags)
			out[p] = flags
			walk(p, c.Subcommands)
		}
	}
	walk("", app.Commands)
	return out
}
