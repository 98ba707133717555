package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
	"github.com/stratafs/strata/snapshot"
)

func changeCommands(e *env) []*cli.Command {
	return []*cli.Command{
		{
			Name:      "diff",
			Usage:     "what changed: in a workspace (uncommitted included), in REF, or between A..B",
			ArgsUsage: "NAME | REF | A..B",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "stat", Usage: "per-file line counts, as git diff --stat"},
				&cli.BoolFlag{Name: "name-status", Usage: "one line per path: A, D, M or T and the path"},
				&cli.BoolFlag{Name: "patch", Aliases: []string{"p"}, DefaultText: "on unless --stat or --name-status", Usage: "a git-style patch that git apply accepts"},
				&cli.StringFlag{Name: "big-file-threshold", Value: "512MiB", Usage: "a patch shows files above `SIZE` as \"Binary files ... differ\", unread but for their hash (git's core.bigFileThreshold); \"none\" puts every file in full, each read whole into memory"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usagef("diff needs exactly one NAME, REF or A..B")
				}
				n := 0
				for _, f := range []string{"stat", "name-status", "patch"} {
					if c.Bool(f) {
						n++
					}
				}
				if n > 1 {
					return usagef("--stat, --name-status and --patch exclude each other")
				}
				var opt strata.PatchOptions
				if v := c.String("big-file-threshold"); v == "none" {
					opt.BigFileThreshold = -1
				} else if b, err := humanize.ParseBytes(v); err != nil || b == 0 || b > 1<<62 {
					return usagef("--big-file-threshold %q: want a size (512MiB, 2GB) or none", v)
				} else {
					opt.BigFileThreshold = int64(b)
				}
				r, err := e.open(strata.OpenOptions{ReadOnly: readOnlyFS(e.home)}) // diff stores nothing
				if err != nil {
					return err
				}
				defer r.Close()
				_, changes, err := r.Diff(c.Context, c.Args().First())
				if err != nil {
					return err
				}
				if c.Bool("patch") || (n == 0 && !e.json) {
					big, err := r.WritePatchOptions(c.Context, e.stdout, changes, opt)
					for _, p := range big {
						e.warn(p, "above the big-file threshold ("+c.String("big-file-threshold")+"): shown as \"Binary files ... differ\", which git apply cannot apply; strata apply, export and promote carry it exactly; --big-file-threshold none (or a larger SIZE) puts it in the patch in full, read whole into memory")
					}
					return err
				}
				files, err := r.FileChanges(c.Context, changes, c.Bool("stat") || e.json)
				if err != nil {
					return err
				}
				if e.json {
					for _, f := range files {
						if err := e.out(f, nil); err != nil {
							return err
						}
					}
					return nil
				}
				if c.Bool("name-status") {
					for _, f := range files {
						fmt.Fprintf(e.stdout, "%s\t%s\n", f.Status, quotePath(f.Path))
					}
					return nil
				}
				printStat(e.stdout, files)
				return nil
			},
		},
		{
			Name:      "commit",
			Usage:     "store the workspace's changes as a commit on its branch",
			ArgsUsage: "NAME",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "commit message"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usagef("commit needs exactly one NAME")
				}
				r, err := e.open(strata.OpenOptions{})
				if err != nil {
					return err
				}
				defer r.Close()
				res, err := r.Commit(c.Context, c.Args().First(), strata.CommitOptions{Message: c.String("message"), Warn: e.warn})
				if err != nil {
					return err
				}
				return e.out(res, func(w io.Writer) {
					if res.Clean {
						fmt.Fprintf(w, "nothing to commit: workspace %s is at %s\n", res.Workspace, res.Commit.Short())
						return
					}
					fmt.Fprintf(w, "committed %s on %s: %s, %s (%s) in %s\n", res.Commit.Short(), res.Branch,
						count(res.Changed, "changed path", "changed paths"), count(res.NewObjects, "new object", "new objects"), ibytes(res.NewBytes), time.Duration(res.DurationNs).Round(time.Microsecond))
				})
			},
		},
		{
			Name:      "reset",
			Usage:     "drop uncommitted changes (ends the workspace's processes); optionally move it and its branch to REF",
			ArgsUsage: "NAME [REF]",
			Action: func(c *cli.Context) error {
				if c.NArg() < 1 || c.NArg() > 2 {
					return usagef("reset needs NAME and at most one REF")
				}
				r, err := e.open(strata.OpenOptions{})
				if err != nil {
					return err
				}
				defer r.Close()
				name := c.Args().Get(0)
				id, err := r.Reset(c.Context, name, c.Args().Get(1))
				if err != nil {
					return err
				}
				return e.out(map[string]any{"workspace": name, "commit": id}, func(w io.Writer) {
					fmt.Fprintf(w, "workspace %s reset to %s\n", name, id.Short())
				})
			},
		},
		{
			Name:      "rebase",
			Usage:     "move a workspace (its commits and uncommitted changes) onto REF (default: its branch's head), merging three ways; exit 3 on conflict, nothing changed",
			ArgsUsage: "NAME [REF]",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "conflict", Value: "fail", Usage: "fail (exit 3, list the paths, change nothing) or markers (write git-style conflict markers into the files)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() < 1 || c.NArg() > 2 {
					return usagef("rebase needs NAME and at most one REF")
				}
				var opts strata.RebaseOptions
				switch c.String("conflict") {
				case "fail", "":
				case "markers":
					opts.Markers = true
				default:
					return usagef("--conflict is fail or markers, not %q", c.String("conflict"))
				}
				r, err := e.open(strata.OpenOptions{})
				if err != nil {
					return err
				}
				defer r.Close()
				name := c.Args().Get(0)
				res, err := r.Rebase(c.Context, name, c.Args().Get(1), opts)
				if err != nil {
					return err
				}
				return e.out(res, func(w io.Writer) {
					if res.How == "up-to-date" {
						fmt.Fprintf(w, "workspace %s already contains %s\n", name, res.Onto)
						return
					}
					fmt.Fprintf(w, "workspace %s rebased onto %s (base %s)\n", name, res.Onto, res.Base.Short())
					for _, p := range res.Markers {
						fmt.Fprintf(w, "conflict markers written: %s\n", p)
					}
				})
			},
		},
		{
			Name:      "promote",
			Usage:     "merge a workspace's branch (or a branch) into the branch it was forked from, or --into",
			ArgsUsage: "NAME|BRANCH",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "into", Usage: "target branch (default: the branch the workspace or branch was forked from, else main)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usagef("promote needs exactly one NAME or BRANCH")
				}
				r, err := e.open(strata.OpenOptions{})
				if err != nil {
					return err
				}
				defer r.Close()
				res, err := r.Promote(c.Context, c.Args().First(), c.String("into"))
				if err != nil {
					return err
				}
				var pending int64 // a workspace's uncommitted bytes
				if res.How == "up-to-date" {
					wss, _ := r.Workspaces(c.Context)
					for _, w := range wss {
						if w.Name == c.Args().First() {
							pending = w.Changes
						}
					}
				}
				return e.out(res, func(w io.Writer) {
					fmt.Fprintf(w, "promoted %s into %s (%s): %s\n", res.From, res.Into, res.How, res.Commit.Short())
					if pending > 0 {
						// Promote merges commits; uncommitted changes are
						// not in any.
						fmt.Fprintf(w, "  workspace %s has uncommitted changes (%s), which promote does not carry: `strata commit %s -m MSG` first\n",
							c.Args().First(), ibytes(pending), c.Args().First())
					}
				})
			},
		},
		{
			Name:      "apply",
			Usage:     "write the change (base..REF) into a real directory",
			ArgsUsage: "REF|NAME|A..B",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "to", Usage: "the directory to write into (required)"},
				&cli.BoolFlag{Name: "force", Usage: "overwrite files that differ from the base version"},
				keepSpecialFlag(),
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 || c.String("to") == "" {
					return usagef("apply needs REF, NAME or A..B and --to DIR")
				}
				r, err := e.open(strata.OpenOptions{ReadOnly: readOnlyFS(e.home)}) // apply stores nothing
				if err != nil {
					return err
				}
				defer r.Close()
				res, err := r.Apply(c.Context, c.Args().First(), c.String("to"), strata.ApplyOptions{Force: c.Bool("force"), KeepSpecial: c.Bool("keep-special")})
				if err != nil {
					return err
				}
				e.reportStripped(res.Stripped)
				if e.json {
					return e.out(res, nil)
				}
				for _, w := range res.Written {
					fmt.Fprintf(e.stdout, "%s\t%s\n", w.Op, quotePath(w.Path))
				}
				what := res.From.Short() + ".." + res.To.Short()
				if res.Workspace != "" {
					// base..base would read as "nothing"; the change is the
					// workspace's, uncommitted included.
					what = "workspace " + res.Workspace + "'s change since " + res.From.Short() + " (uncommitted included)"
				}
				fmt.Fprintf(e.stdout, "applied %s to %s: %s\n", what, res.Dir, count(len(res.Written), "path", "paths"))
				return nil
			},
		},
		{
			Name:      "export-git",
			Usage:     "the change base..REF as a git commit on a new branch of the repository it was imported from",
			ArgsUsage: "REF|NAME",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "repo", Usage: "the git repository (default: the one REF's base was imported from)"},
				&cli.StringFlag{Name: "branch", Usage: "the new branch (required)"},
				&cli.BoolFlag{Name: "force", Usage: "overwrite an existing branch (never one that is checked out)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 || c.String("branch") == "" {
					return usagef("export-git needs REF and --branch NAME")
				}
				if err := needGit(); err != nil {
					return err
				}
				r, err := e.open(strata.OpenOptions{})
				if err != nil {
					return err
				}
				defer r.Close()
				res, err := r.ExportGit(c.Context, c.Args().First(), c.String("repo"), c.String("branch"), c.Bool("force"))
				if err != nil {
					return err
				}
				return e.out(res, func(w io.Writer) {
					fmt.Fprintf(w, "branch %s of %s: commit %s on %s (%s)\n", res.Branch, res.Repo, res.Commit[:12], res.Parent[:12], count(res.Files, "path", "paths"))
				})
			},
		},
	}
}

// printStat prints git diff --stat style lines and the summary.
func printStat(w io.Writer, files []strata.FileChange) {
	if len(files) == 0 {
		return
	}
	width := 0
	for _, f := range files {
		if l := len(quotePath(f.Path)); l > width {
			width = l
		}
	}
	if width > 60 {
		width = 60
	}
	var ins, del int
	for _, f := range files {
		name := quotePath(f.Path)
		if f.Binary {
			fmt.Fprintf(w, " %-*s | Bin\n", width, name)
			continue
		}
		ins += f.Added
		del += f.Deleted
		n := f.Added + f.Deleted
		bar := strings.Repeat("+", min(f.Added, 40)) + strings.Repeat("-", min(f.Deleted, 40))
		fmt.Fprintf(w, " %-*s | %d %s\n", width, name, n, bar)
	}
	fmt.Fprintf(w, " %d file%s changed, %d insertion%s(+), %d deletion%s(-)\n",
		len(files), plural(len(files)), ins, plural(ins), del, plural(del))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// keepSpecialFlag is apply's and export's --keep-special.
func keepSpecialFlag() cli.Flag {
	return &cli.BoolFlag{Name: "keep-special", Usage: "write setuid/setgid bits and device nodes a workspace's change has (by default files are written without the bits, device nodes not at all, and each is listed)"}
}

// reportStripped lists on stderr what apply or export did not write (the
// --json result carries it as "stripped").
func (e *env) reportStripped(s []snapshot.Stripped) {
	if len(s) == 0 || e.json {
		return
	}
	for _, x := range s {
		e.warn(x.Path, x.Reason+": "+x.Action+" (--keep-special writes it)")
	}
}
