package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
	"github.com/stratafs/strata/nsexec"
)

func runCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "fork, apply a patch, run a command, report, then discard (default), keep or commit",
		ArgsUsage: "-- CMD [ARG...]",
		Flags: append(sandboxFlags(),
			&cli.StringFlag{Name: "from", Usage: "REF to fork (default main)"},
			&cli.StringFlag{Name: "patch", Usage: "apply this git-style unified diff first (- for stdin)"},
			&cli.BoolFlag{Name: "tmpfs", Value: true, Usage: "keep changes on a tmpfs; --tmpfs=false keeps them on disk"},
			&cli.DurationFlag{Name: "timeout", DefaultText: "0s: no limit", Usage: "kill the command and everything it started after DUR (exit 124)"},
			&cli.BoolFlag{Name: "keep", Usage: "keep the workspace whatever the outcome (named run-ID)"},
			&cli.StringFlag{Name: "commit", Usage: "commit the change to BRANCH when the command exits 0 and the change passes the policy check"},
			&cli.StringSliceFlag{Name: "protect", Usage: "with --commit: refuse changes to paths matching GLOB (repeatable; ** spans directories)"},
			&cli.StringFlag{Name: "output", Usage: "write the command's stdout, stderr and result.json into DIR"},
			&cli.StringFlag{Name: "cwd", Usage: "working directory: relative to the workspace root, or absolute as the command sees it"},
			&cli.StringSliceFlag{Name: "env", Usage: "K=V added to the command's environment (repeatable)"},
			subIDsFlag(),
			&cli.StringFlag{Name: "root", Usage: "IMAGE (an imported image's ref) whose tree is / under --from's tree, mounted at --at"},
			&cli.StringFlag{Name: "at", Usage: "with --root: PATH inside the image where the project appears (e.g. /testbed)"},
			&cli.StringFlag{Name: "scope", Usage: "an image-rooted run's diff and commit: project (its working directory; default) or all"},
			backendFlag(),
		),
		Action: func(c *cli.Context) error {
			if c.NArg() < 1 {
				return usagef("run needs -- CMD [ARG...]")
			}
			if err := enterSubIDs(c); err != nil {
				return err
			}
			sb, err := sandboxOptions(e, c)
			if err != nil {
				return err
			}
			opts := strata.RunOptions{
				From: c.String("from"), Disk: !c.Bool("tmpfs"), Timeout: c.Duration("timeout"),
				Keep: c.Bool("keep"), CommitBranch: c.String("commit"), Protect: c.StringSlice("protect"),
				Output: c.String("output"), Argv: c.Args().Slice(), Env: c.StringSlice("env"), Cwd: c.String("cwd"),
				Sandbox: sb, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Warn: e.warn,
				SubIDs: c.Bool("subids"), Root: c.String("root"), At: c.String("at"), Scope: c.String("scope"),
				Backend: c.String("backend"),
			}
			if e.json && opts.Output == "" {
				// stdout carries the result object; the command's output
				// goes to stderr.
				opts.Stdout = os.Stderr
			}
			if p := c.String("patch"); p != "" {
				var b []byte
				if p == "-" {
					b, err = io.ReadAll(os.Stdin)
					opts.Stdin = nil
				} else {
					b, err = os.ReadFile(p)
				}
				if err != nil {
					return &exitCode{code: exitError, err: fmt.Errorf("--patch: %w", err)}
				}
				opts.PatchData, opts.PatchName = b, p
			}
			r, err := e.open(strata.OpenOptions{})
			if err != nil {
				return &exitCode{code: exitStrata, err: err}
			}
			defer r.Close()
			res, err := r.Run(context.WithoutCancel(c.Context), opts)
			var pe *strata.PatchError
			var pol *strata.PolicyError
			switch {
			case errors.As(err, &pe) || errors.Is(err, strata.ErrPatch):
				// The patch does not apply: exit 1 with the hunk that failed.
				return &exitCode{code: exitError, err: err}
			case errors.As(err, &pol):
				e.out(res, nil)
				return &exitCode{code: exitError, err: err}
			case errors.Is(err, strata.ErrConflict):
				if res != nil {
					e.out(res, nil)
				}
				return err
			case isUsage(err):
				return err
			case err != nil:
				return &exitCode{code: exitStrata, err: err}
			}
			if err := e.out(res, func(w io.Writer) {
				if e.quiet {
					return
				}
				what := "discarded"
				switch {
				case res.Workspace != "":
					what = "kept as workspace " + res.Workspace
				case !res.Commit.IsZero():
					what = "committed " + res.Commit.Short() + " to " + res.Branch
				}
				status := fmt.Sprintf("exit %d", res.ExitCode)
				if res.TimedOut {
					status = "timed out"
				}
				// The time is the run's whole, not the discard's.
				fmt.Fprintf(os.Stderr, "strata: run %s: %s; %s changed (+%d -%d); %s; %s in all\n", res.ID, status,
					count(res.Diff.Files, "file", "files"), res.Diff.Added, res.Diff.Deleted, what, time.Duration(res.Durations["total"]).Round(time.Millisecond))
			}); err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return &exitCode{code: res.ExitCode}
			}
			return nil
		},
	}
}

func batchCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "batch",
		Usage:     "many runs: one JSON line in, one JSON line out each; resumable",
		ArgsUsage: "FILE.jsonl",
		Flags: append(sandboxFlags(),
			&cli.IntFlag{Name: "parallel", Aliases: []string{"j"}, Value: 1, Usage: "jobs at once"},
			&cli.StringFlag{Name: "out", Usage: "append results to FILE.jsonl; jobs already in it are skipped (default: stdout)"},
			&cli.StringFlag{Name: "output", Usage: "keep each job's stdout and stderr under DIR/ID/"},
			&cli.StringFlag{Name: "shard", Usage: "run one shard: K/N runs the jobs whose 0-based index is K mod N; auto reads $JOB_COMPLETION_INDEX (with --shards N) or $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"},
			&cli.IntFlag{Name: "shards", Usage: "with --shard auto under a Kubernetes Indexed Job: the number of shards (the job's completions)"},
			subIDsFlag(),
			backendFlag(),
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("batch needs exactly one FILE.jsonl")
			}
			if err := enterSubIDs(c); err != nil {
				return err
			}
			var shard, shards int
			if c.IsSet("shard") || c.IsSet("shards") {
				var err error
				if shard, shards, err = strata.ParseShard(c.String("shard"), c.Int("shards"), os.Getenv); err != nil {
					return usagef("%v", err)
				}
			}
			sb, err := sandboxOptions(e, c)
			if err != nil {
				return err
			}
			r, err := e.open(strata.OpenOptions{})
			if err != nil {
				return err
			}
			defer r.Close()
			p := e.progress()
			sum, err := r.Batch(c.Context, c.Args().First(), e.stdout, strata.BatchOptions{
				Parallel: c.Int("parallel"), Out: c.String("out"), Output: c.String("output"), Sandbox: sb, SubIDs: c.Bool("subids"),
				Progress: func(done, total int) { p.update("batch", int64(done), int64(total), false) },
				Kind:     strata.Kind, Shard: shard, Shards: shards, Backend: c.String("backend"),
			})
			p.done()
			if err != nil {
				return err
			}
			if !e.quiet && c.String("out") != "" {
				if sum.Shard != "" {
					fmt.Fprintf(e.stderr, "shard %s: ", sum.Shard)
				}
				fmt.Fprintf(e.stderr, "batch: %s: %d run (%d passed, %d failed, %d timed out, %s), %d already done, in %s\n",
					count(sum.Jobs, "job", "jobs"), sum.Ran, sum.Passed, sum.Failed, sum.TimedOut, count(sum.Errors, "error", "errors"), sum.Skipped, time.Duration(sum.Duration).Round(time.Millisecond))
			}
			if sum.Failed+sum.Errors > 0 {
				// set -e scripts and CI notice; every job ran and has
				// its line (docs/cli.md).
				return &exitCode{code: exitJobsFailed}
			}
			return nil
		},
	}
}

// backendFlag is --backend of ws create, run and batch.
func backendFlag() cli.Flag {
	return &cli.StringFlag{Name: "backend", DefaultText: "the store's, else auto", Usage: "how the writable tree is made: overlay, reflink (a clone, on XFS or Btrfs), copy, or auto (overlay where user namespaces work, else reflink, else copy)"}
}

func subIDsFlag() cli.Flag {
	return &cli.BoolFlag{Name: "subids", Usage: "map your subordinate ids (/etc/subuid) too: commands may chown to them and become them"}
}

// enterSubIDs re-executes a --subids run or batch in the namespace of the
// subordinate ids (it returns only on failure, or when there is no need).
func enterSubIDs(c *cli.Context) error {
	if !c.Bool("subids") {
		return nil
	}
	return nsexec.EnterSubIDs()
}
