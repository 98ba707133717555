package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// examples shown under `strata help COMMAND` for the main verbs, keyed by
// command path.
var examples = map[string][]string{
	"import": {
		"strata import ~/proj                      # everything, node_modules and .git included",
		"strata import ~/proj -b dev -m 'nightly'  # onto branch dev",
		"strata import --git ~/proj@v1.2           # a git commit + the repo's ignored dependency dirs",
	},
	"log":       {"strata log -n1", "strata log ws/agent1 --json"},
	"ws create": {"strata ws create agent1                 # on a new branch ws/agent1 from main", "strata ws create fix --from dev --tmpfs"},
	"exec": {
		"strata exec agent1 -- npm test",
		"strata exec agent1 --cwd src --env CI=1 -- make",
		"strata exec agent1 --net none --ro ~/.cache/pip -- pytest -x",
	},
	"diff":    {"strata diff agent1              # a git-style patch, uncommitted changes included", "strata diff agent1 --stat", "strata diff main~1..main --name-status"},
	"commit":  {"strata commit agent1 -m 'fix the router'"},
	"promote": {"strata promote agent1              # into the branch it was forked from", "strata promote ws/agent1 --into release"},
	"apply":   {"strata apply agent1 --to ~/proj"},
	"run": {
		"strata run --patch fix.diff --timeout 5m -- npm test",
		"strata run --from dev --commit passed/fix --protect '.github/**' -- make test",
		"git diff | strata run --patch - --json -- pytest",
	},
	"batch": {
		"strata batch jobs.jsonl --parallel 4 --out results.jsonl",
		`# jobs.jsonl: {"id": "t1", "patch": "t1.diff", "cmd": ["npm", "test"], "timeout": "2m"}`,
	},
}

// addExamples appends each command's examples to its description.
func addExamples(cmds []*cli.Command, path string) {
	for _, c := range cmds {
		p := strings.TrimSpace(path + " " + c.Name)
		if ex, ok := examples[p]; ok {
			if c.Description != "" {
				c.Description += "\n\n"
			}
			c.Description += "Examples:\n   " + strings.Join(ex, "\n   ")
		}
		addExamples(c.Subcommands, p)
	}
}
