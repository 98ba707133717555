package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/stratafs/strata"
)

// shareCommands are push and pull: snapshots through an OCI registry.
func shareCommands(e *env) []*cli.Command {
	tls := func() cli.Flag {
		return &cli.BoolFlag{Name: "tls-verify", Value: true, Usage: "require HTTPS and a verified certificate (--tls-verify=false for a plain-HTTP registry)"}
	}
	return []*cli.Command{
		{
			Name:      "batch-merge",
			Usage:     "merge the result files of a batch's shards (stdout, in job order); fail unless every job ran exactly once",
			ArgsUsage: "OUT.jsonl...",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "jobs", Usage: "the batch FILE.jsonl: every job of it must have exactly one result (default: results' line numbers 1..max)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() == 0 {
					return usagef("batch-merge needs the shards' result files")
				}
				rep, err := strata.BatchMerge(c.Args().Slice(), c.String("jobs"), e.stdout)
				if err != nil {
					return err
				}
				if e.json {
					b, _ := json.Marshal(rep)
					fmt.Fprintf(e.stderr, "%s\n", b)
				} else if !e.quiet || !rep.OK() {
					fmt.Fprintf(e.stderr, "batch-merge: %d results from %d files", rep.Results, len(rep.Files))
					if rep.Jobs > 0 {
						fmt.Fprintf(e.stderr, " for %d jobs", rep.Jobs)
					}
					fmt.Fprintf(e.stderr, "; missing %d, duplicate %d, unknown %d\n", len(rep.Missing), len(rep.Duplicate), len(rep.Unknown))
					for _, l := range []struct {
						what string
						ids  []string
					}{{"missing", rep.Missing}, {"duplicate", rep.Duplicate}, {"unknown", rep.Unknown}} {
						if len(l.ids) > 0 {
							fmt.Fprintf(e.stderr, "  %s: %s\n", l.what, strings.Join(l.ids, " "))
						}
					}
				}
				if !rep.OK() {
					return &exitCode{code: exitError}
				}
				return nil
			},
		},
		{
			Name:      "push",
			Usage:     "push a commit as an OCI image (one layer per commit; blobs the registry has are not sent)",
			ArgsUsage: "REF DEST",
			Description: "DEST is docker://HOST/REPO:TAG (or bare HOST/REPO:TAG) or oci:DIR[:TAG].\n" +
				"Layers are reproducible: the same commit pushed from two stores has the same digests.",
			Flags: []cli.Flag{tls()},
			Action: func(c *cli.Context) error {
				if c.NArg() != 2 {
					return usagef("push takes REF DEST")
				}
				if err := needImages(); err != nil {
					return err
				}
				r, err := e.open(strata.OpenOptions{})
				if err != nil {
					return err
				}
				defer r.Close()
				p := e.progress()
				res, err := r.Push(c.Context, c.Args().Get(0), c.Args().Get(1), strata.PushOptions{
					InsecureTLS: !c.Bool("tls-verify"),
					Progress:    p.blob,
				})
				p.done()
				if err != nil {
					return err
				}
				return e.out(res, func(w io.Writer) {
					fmt.Fprintf(w, "pushed %s -> %s@%s (%d layers, %s uploaded, %s)\n", res.Commit.Short(), res.Dest, res.Digest,
						len(res.Layers), ibytes(res.Uploaded), time.Duration(res.DurationNs).Round(time.Millisecond))
					if e.quiet {
						return
					}
					for i, l := range res.Layers {
						fmt.Fprintf(w, "  layer %d %s: commit %s, %s tar, %s gzip\n", i+1, l.Digest, l.Commit.Short(), ibytes(l.Tar), ibytes(l.Size))
					}
				})
			},
		},
		{
			Name:      "pull",
			Usage:     "pull an image pushed by strata push (or any image) as a branch; layers in the store are not downloaded",
			ArgsUsage: "SRC",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "branch", Aliases: []string{"b"}, Value: strata.DefaultBranch, Usage: "branch to set"},
				tls(),
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usagef("pull takes SRC")
				}
				if err := needImages(); err != nil {
					return err
				}
				r, err := e.open(strata.OpenOptions{Create: true})
				if err != nil {
					return err
				}
				defer r.Close()
				p := e.progress()
				res, err := r.Pull(c.Context, c.Args().Get(0), strata.PullOptions{
					Branch: c.String("branch"), InsecureTLS: !c.Bool("tls-verify"), Warn: e.warn,
					Progress: p.layer,
				})
				p.done()
				if err != nil {
					return err
				}
				return e.out(res, func(w io.Writer) {
					reused := 0
					var read int64
					for _, l := range res.Layers {
						if l.Reused {
							reused++
						}
						read += l.ReadBytes
					}
					fmt.Fprintf(w, "pulled %s -> %s %s (tree %s; %d layers, %d in the store, %s read)\n",
						res.Config.Source, res.Branch, res.Commit.Short(), res.Tree.Short(), len(res.Layers), reused, ibytes(read))
				})
			},
		},
	}
}
