package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/stratafs/strata"
	"github.com/stratafs/strata/image"
	"github.com/stratafs/strata/store"
)

func storeCommands(e *env) []*cli.Command {
	return []*cli.Command{
		{
			Name:      "init",
			Usage:     "create the store (idempotent)",
			ArgsUsage: " ",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "max-layers", DefaultText: "64", Usage: "the deepest layer stack a workspace mounts before a commit gets one flattened layer (1-500); a store setting"},
				&cli.StringSliceFlag{Name: "ro", Usage: "PATH every sandboxed command of the store sees read-only, e.g. a toolchain under your home (repeatable); a store setting"},
				&cli.StringSliceFlag{Name: "rw", Usage: "PATH every sandboxed command of the store sees read-write, e.g. a cache (repeatable); a store setting"},
				&cli.StringSliceFlag{Name: "forget", Usage: "remove PATH from the store's --ro/--rw defaults (repeatable)"},
				&cli.StringFlag{Name: "backend", DefaultText: "auto", Usage: "the backend of workspaces and runs that name none: overlay, reflink, copy or auto; a store setting"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return usagef("init takes no arguments")
				}
				if err := checkWritable(e.home); err != nil {
					return err
				}
				r, err := strata.Init(e.home)
				if err != nil {
					return err
				}
				defer r.Close()
				if c.IsSet("max-layers") {
					if err := r.SetMaxLayers(c.Context, c.Int("max-layers")); err != nil {
						return err
					}
				}
				if ro, rw, forget := c.StringSlice("ro"), c.StringSlice("rw"), c.StringSlice("forget"); len(ro)+len(rw)+len(forget) > 0 {
					if err := r.SetViewDefaults(ro, rw, forget); err != nil {
						return err
					}
				}
				if c.IsSet("backend") {
					if err := r.SetDefaultBackend(c.String("backend")); err != nil {
						return err
					}
				}
				n, err := r.MaxLayers()
				if err != nil {
					return err
				}
				s, err := r.Settings()
				if err != nil {
					return err
				}
				backend := s.Backend
				if backend == "" {
					backend = strata.BackendAuto
				}
				return e.out(map[string]any{"home": r.Home(), "max_layers": n, "view_ro": s.ViewRO, "view_rw": s.ViewRW, "backend": backend}, func(w io.Writer) {
					fmt.Fprintf(w, "store ready at %s (max layers %d)\n", r.Home(), n)
					if s.Backend != "" {
						fmt.Fprintf(w, "workspaces and runs use the %s backend unless they name one\n", s.Backend)
					}
					for _, p := range s.ViewRO {
						fmt.Fprintf(w, "sandboxed commands see %s (read-only)\n", p)
					}
					for _, p := range s.ViewRW {
						fmt.Fprintf(w, "sandboxed commands see %s (read-write)\n", p)
					}
				})
			},
		},
		{
			Name:      "import",
			Usage:     "snapshot everything under DIR, ignored files included, as a commit on BRANCH",
			ArgsUsage: "DIR",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "branch", Aliases: []string{"b"}, Value: strata.DefaultBranch, Usage: "branch to commit to (created if missing)"},
				&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "commit message (default \"import DIR\")"},
				&cli.StringSliceFlag{Name: "exclude", Usage: "skip paths matching GLOB (repeatable; see README)"},
				&cli.BoolFlag{Name: "skip-unreadable", Usage: "skip files and directories that cannot be read, with a warning, instead of failing"},
				&cli.BoolFlag{Name: "no-stat-cache", Usage: "read every file even if unchanged since the last import"},
				&cli.StringFlag{Name: "git", Usage: "import a git commit instead: REPO[@REV] (tracked files, a working .git, ignored dependency dirs)"},
				&cli.StringSliceFlag{Name: "with-ignored", Usage: "with --git: auto (node_modules, .venv, target, ...), none, or GLOB (repeatable)"},
				&cli.StringFlag{Name: "image", Usage: "import a container image instead: docker://HOST/REPO:TAG (or bare), oci:DIR[:TAG], docker-archive:FILE[:REF]"},
				&cli.StringFlag{Name: "platform", Usage: "with --image: OS/ARCH[/VARIANT] to pick from a multi-platform image (default this machine's)"},
				&cli.BoolFlag{Name: "tls-verify", Value: true, Usage: "with --image: require HTTPS and a verified certificate (--tls-verify=false for a plain-HTTP registry)"},
			},
			Action: func(c *cli.Context) error {
				if src := c.String("image"); src != "" {
					if c.NArg() != 0 || c.String("git") != "" {
						return usagef("import --image SRC takes no DIR and no --git")
					}
					if err := needImages(); err != nil {
						return err
					}
					return e.importImage(c, src)
				}
				if c.IsSet("platform") || c.IsSet("tls-verify") {
					return usagef("--platform and --tls-verify go with --image")
				}
				if repo := c.String("git"); repo != "" {
					if c.NArg() != 0 {
						return usagef("import --git REPO[@REV] takes no DIR")
					}
					if err := needGit(); err != nil {
						return err
					}
					return e.importGit(c, repo)
				}
				if c.NArg() != 1 {
					return usagef("import needs exactly one DIR (or --git REPO[@REV])")
				}
				r, err := e.open(strata.OpenOptions{Create: true})
				if err != nil {
					return err
				}
				defer r.Close()
				p := e.progress()
				res, err := r.Import(c.Context, c.Args().First(), strata.ImportOptions{
					Branch:         c.String("branch"),
					Message:        c.String("message"),
					Exclude:        c.StringSlice("exclude"),
					SkipUnreadable: c.Bool("skip-unreadable"),
					NoStatCache:    c.Bool("no-stat-cache"),
					Warn:           e.warn,
					Progress:       p.snapshot,
				})
				p.done()
				if err != nil {
					return err
				}
				return e.out(res, func(w io.Writer) {
					verb := "imported"
					if res.Unchanged {
						verb = "unchanged"
					}
					fmt.Fprintf(w, "%s %s -> %s %s (%s)\n",
						verb, res.Source, res.Branch, res.Commit.Short(), statsText(res.Stats))
					if !e.quiet {
						fmt.Fprintf(w, "  read %s, %d unchanged from the stat cache; stored %s (%s) in %s\n",
							count(res.FilesRead, "file", "files"), res.CacheHits, count(res.NewObjects, "new object", "new objects"), ibytes(res.NewBytes), time.Duration(res.DurationNs).Round(time.Millisecond))
					}
				})
			},
		},
		{
			Name:      "log",
			Usage:     "history of REF (default main)",
			ArgsUsage: "[REF]",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "n", DefaultText: "0: all", Usage: "at most N commits (-n1 and -n 1 both work)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 1 {
					return usagef("log takes at most one REF")
				}
				r, err := e.open(strata.OpenOptions{ReadOnly: readOnlyFS(e.home)})
				if err != nil {
					return err
				}
				defer r.Close()
				entries, err := r.Log(c.Context, c.Args().First(), c.Int("n"))
				if err != nil {
					return err
				}
				for _, le := range entries {
					le := le
					if err := e.out(le, func(w io.Writer) {
						fmt.Fprintf(w, "%s %s %s\n", le.ID.Short(), time.Unix(0, le.TimeNs).Format("2006-01-02 15:04:05"), firstLine(le.Message))
					}); err != nil {
						return err
					}
				}
				return nil
			},
		},
		branchCommand(e),
		{
			Name:      "show",
			Usage:     "a commit, a directory listing (REF:DIR), or a file's bytes (REF:FILE)",
			ArgsUsage: "REF[:PATH]",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usagef("show needs exactly one REF[:PATH]")
				}
				r, err := e.open(strata.OpenOptions{ReadOnly: readOnlyFS(e.home)})
				if err != nil {
					return err
				}
				defer r.Close()
				s, err := r.Show(c.Context, c.Args().First())
				if err != nil {
					return err
				}
				if s.IsPath && s.Listing == nil && !e.json {
					return r.WriteContent(c.Context, s, e.stdout)
				}
				if e.json && s.Listing != nil {
					for _, ent := range s.Listing {
						if err := e.out(ent, nil); err != nil {
							return err
						}
					}
					return nil
				}
				return e.out(s, func(w io.Writer) {
					if s.Listing != nil {
						printListing(w, s.Listing)
						return
					}
					printCommit(w, s.Commit)
					if s.Image != nil {
						printImage(w, s.Image)
					}
				})
			},
		},
		{
			Name:      "export",
			Usage:     "write the full tree of REF into a new directory",
			ArgsUsage: "REF DIR",
			Flags:     []cli.Flag{keepSpecialFlag()},
			Action: func(c *cli.Context) error {
				if c.NArg() != 2 {
					return usagef("export needs REF and DIR")
				}
				r, err := e.open(strata.OpenOptions{ReadOnly: readOnlyFS(e.home)})
				if err != nil {
					return err
				}
				defer r.Close()
				p := e.progress()
				start := time.Now()
				res, err := r.Export(c.Context, c.Args().Get(0), c.Args().Get(1), strata.ExportOptions{Warn: e.warn, Progress: p.snapshot, KeepSpecial: c.Bool("keep-special")})
				p.done()
				if err != nil {
					return err
				}
				e.reportStripped(res.Stripped)
				return e.out(res, func(w io.Writer) {
					fmt.Fprintf(w, "exported %s -> %s (%s) in %s\n", res.Commit.Short(), res.Dir,
						statsText(res.Stats), time.Since(start).Round(time.Millisecond))
				})
			},
		},
		{
			Name:  "gc",
			Usage: "drop what nothing references; evict unused caches",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "prune", Value: strata.DefaultPrune, Usage: "keep commits the operation log names within this window (0s: keep none)"},
				&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "report what would be removed, remove nothing"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return usagef("gc takes no arguments")
				}
				r, err := e.open(strata.OpenOptions{})
				if err != nil {
					return err
				}
				defer r.Close()
				p := e.progress()
				res, err := r.GC(c.Context, strata.GCOptions{
					Prune:  c.Duration("prune"),
					DryRun: c.Bool("dry-run"),
					Progress: func(phase string, done, total int64) {
						p.update(phase, done, total, false)
					},
				})
				p.done()
				if err != nil {
					return err
				}
				return e.out(res, func(w io.Writer) {
					verb := "removed"
					if res.Store.DryRun {
						verb = "would remove"
					}
					fmt.Fprintf(w, "gc: %s %d objects (%s); %d reachable\n", verb, res.Store.Removed, ibytes(res.Store.RemovedBytes), res.Store.Marked)
					if res.Store.StaleLeases > 0 {
						fmt.Fprintf(w, "gc: dropped %d leases of dead processes\n", res.Store.StaleLeases)
					}
					if res.LayersFreed > 0 {
						fmt.Fprintf(w, "gc: evicted %d cached layers (%s)\n", res.LayersFreed, ibytes(res.LayerBytes))
					}
					for _, p := range res.StaleRemoved {
						fmt.Fprintf(w, "gc: removed leftover %s\n", p)
					}
				})
			},
		},
		{
			Name:  "fsck",
			Usage: "verify every object, ref and cache; non-zero exit if damaged",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "repair", Usage: "rewrite damaged objects whose content is in `DIR` (read as an import would; no commit is made)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return usagef("fsck takes no arguments (a directory to repair from goes with --repair)")
				}
				repair := c.String("repair")
				r, err := e.open(strata.OpenOptions{ReadOnly: repair == "" && readOnlyFS(e.home)})
				if err != nil {
					return err
				}
				defer r.Close()
				var rep *store.FsckReport
				var rr *strata.RepairResult
				if repair != "" {
					if rr, err = r.Repair(c.Context, repair, e.warn); err != nil {
						return err
					}
					rep = rr.After
					rep.Info = append([]string{fmt.Sprintf("repair from %s: %d of %d damaged objects rewritten", repair, len(rr.Repaired), rr.Damaged)}, rep.Info...)
				} else {
					p := e.progress()
					rep, err = r.Fsck(c.Context, func(done, total int64) { p.update("verify", done, total, false) })
					p.done()
					if err != nil {
						return err
					}
				}
				if err := e.out(rep, func(w io.Writer) {
					for _, pr := range rep.Problems {
						obj := ""
						if !pr.Object.IsZero() {
							obj = " " + pr.Object.String()
						}
						fmt.Fprintf(w, "%s%s: %s\n", pr.Kind, obj, pr.Detail)
						if len(pr.Affected) > 0 {
							fmt.Fprintf(w, "  affects: %s\n", strings.Join(pr.Affected, ", "))
						}
					}
					if !e.quiet {
						for _, in := range rep.Info {
							fmt.Fprintf(w, "note: %s\n", in)
						}
					}
					if rep.OK() {
						fmt.Fprintf(w, "fsck: %s, %s: ok\n", count(rep.Objects, "object", "objects"), count(rep.Refs, "ref", "refs"))
					} else {
						fmt.Fprintf(w, "fsck: %s, %s: %s\n", count(rep.Objects, "object", "objects"), count(rep.Refs, "ref", "refs"), count(len(rep.Problems), "problem", "problems"))
					}
				}); err != nil {
					return err
				}
				if !rep.OK() {
					return &exitCode{code: exitError, err: fmt.Errorf("fsck: the store is damaged (%s)", count(len(rep.Problems), "problem", "problems"))}
				}
				return nil
			},
		},
	}
}

func branchCommand(e *env) *cli.Command {
	list := func(c *cli.Context) error {
		r, err := e.open(strata.OpenOptions{ReadOnly: readOnlyFS(e.home)})
		if err != nil {
			return err
		}
		defer r.Close()
		bs, err := r.Branches(c.Context)
		if err != nil {
			return err
		}
		if e.json {
			for _, b := range bs {
				if err := e.out(b, nil); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		for _, b := range bs {
			ws := ""
			if b.Workspace != "" {
				ws = "[ws " + b.Workspace + "]"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Name, b.Commit.Short(), ws, b.Message)
		}
		return tw.Flush()
	}
	return &cli.Command{
		Name:   "branch",
		Usage:  "list, create or delete branches",
		Action: list,
		Subcommands: []*cli.Command{
			{Name: "list", Aliases: []string{"ls"}, Usage: "list branches", Action: list},
			{
				Name:      "create",
				Usage:     "create a branch at REF",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "from", Value: strata.DefaultBranch, Usage: "REF to start from"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usagef("branch create needs exactly one NAME")
					}
					r, err := e.open(strata.OpenOptions{})
					if err != nil {
						return err
					}
					defer r.Close()
					name := c.Args().First()
					id, err := r.CreateBranch(c.Context, name, c.String("from"))
					if err != nil {
						return err
					}
					return e.out(store.Ref{Name: name, Commit: id}, func(w io.Writer) {
						fmt.Fprintf(w, "branch %s created at %s\n", name, id.Short())
					})
				},
			},
			{
				Name:      "delete",
				Usage:     "delete a branch (its commits stay recoverable until gc's prune window passes); refused while workspaces are bound to it or forked from it",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "force", Usage: "delete it even though workspaces were forked from it (never one a workspace is bound to)"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usagef("branch delete needs exactly one NAME")
					}
					r, err := e.open(strata.OpenOptions{})
					if err != nil {
						return err
					}
					defer r.Close()
					name := c.Args().First()
					id, err := r.DeleteBranch(c.Context, name, c.Bool("force"))
					if err != nil {
						return err
					}
					return e.out(store.Ref{Name: name, Commit: id}, func(w io.Writer) {
						fmt.Fprintf(w, "branch %s deleted (was %s)\n", name, id.Short())
					})
				},
			},
		},
	}
}

func printCommit(w io.Writer, le strata.LogEntry) {
	fmt.Fprintf(w, "commit %s\n", le.ID)
	for _, p := range le.Parents {
		fmt.Fprintf(w, "parent %s\n", p)
	}
	fmt.Fprintf(w, "tree   %s\n", le.Tree)
	if le.Source != "" {
		fmt.Fprintf(w, "source %s\n", le.Source)
	}
	fmt.Fprintf(w, "date   %s\n", time.Unix(0, le.TimeNs).Format(time.RFC3339Nano))
	fmt.Fprintf(w, "stats  %s\n\n", statsText(le.Stats))
	for _, line := range strings.Split(le.Message, "\n") {
		if strings.HasPrefix(line, image.ConfigTrailer) {
			continue // printed as an image block by show
		}
		fmt.Fprintf(w, "    %s\n", line)
	}
}

func printListing(w io.Writer, es []strata.Entry) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.AlignRight)
	for _, en := range es {
		name := quotePath(en.Name)
		if en.Target != "" {
			name += " -> " + quotePath(en.Target)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t %s\t %s\n", modeString(en), en.UID, en.GID, en.Size,
			time.Unix(0, en.MtimeNs).Format("2006-01-02 15:04"), name)
	}
	_ = tw.Flush()
}

func modeString(en strata.Entry) string {
	m := fs.FileMode(en.Mode & 0o777)
	if en.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if en.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if en.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch en.Type {
	case "dir":
		m |= fs.ModeDir
	case "symlink":
		m |= fs.ModeSymlink
	case "fifo":
		m |= fs.ModeNamedPipe
	case "chardev":
		m |= fs.ModeDevice | fs.ModeCharDevice
	case "blockdev":
		m |= fs.ModeDevice
	case "socket":
		m |= fs.ModeSocket
	}
	return m.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func ibytes(n int64) string {
	if n < 0 {
		n = 0
	}
	return humanize.IBytes(uint64(n))
}

// readOnlyFS reports whether home cannot be written by this process (a
// read-only filesystem or permissions), so that read-only commands still
// work there.
// statsText is "1 file, 2 dirs, 0 other, 4.0 KiB".
func statsText(s store.CommitStats) string {
	return fmt.Sprintf("%s, %s, %d other, %s", count(s.Files, "file", "files"), count(s.Dirs, "dir", "dirs"), s.Other, ibytes(s.Bytes))
}

func readOnlyFS(home string) bool {
	err := unix.Access(home, unix.W_OK)
	return errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES)
}

func (e *env) importImage(c *cli.Context, src string) error {
	if c.IsSet("message") || c.IsSet("exclude") || c.IsSet("with-ignored") {
		return usagef("import --image takes no --message, --exclude or --with-ignored")
	}
	r, err := e.open(strata.OpenOptions{Create: true})
	if err != nil {
		return err
	}
	defer r.Close()
	p := e.progress()
	res, err := r.ImportImage(c.Context, src, strata.ImageImportOptions{
		Branch: c.String("branch"), Platform: c.String("platform"), InsecureTLS: !c.Bool("tls-verify"),
		Warn:     e.warn,
		Progress: p.layer,
	})
	p.done()
	if err != nil {
		return err
	}
	return e.out(res, func(w io.Writer) {
		verb := "imported"
		if res.Unchanged {
			verb = "unchanged"
		}
		fmt.Fprintf(w, "%s image %s -> %s %s (%d layers, %d files, %d dirs, %d other, %s)\n",
			verb, res.Config.Source, res.Branch, res.Commit.Short(), len(res.Layers), res.Stats.Files, res.Stats.Dirs, res.Stats.Other, ibytes(res.Stats.Bytes))
		if e.quiet {
			return
		}
		for i, l := range res.Layers {
			how := fmt.Sprintf("read %s, stored %d new objects (%s)", ibytes(l.ReadBytes), l.NewObjects, ibytes(l.NewBytes))
			if l.Reused {
				how = "already in the store"
			}
			fmt.Fprintf(w, "  layer %d %.19s -> %s: %s\n", i+1, l.DiffID, l.Commit.Short(), how)
		}
		fmt.Fprintf(w, "  %s in %s\n", res.Config.Digest, time.Duration(res.DurationNs).Round(time.Millisecond))
	})
}

// printImage prints the image config an image commit keeps.
func printImage(w io.Writer, c *image.Config) {
	fmt.Fprintf(w, "\nimage  %s\n", c.Source)
	fmt.Fprintf(w, "digest %s\n", c.Digest)
	if c.OS != "" {
		fmt.Fprintf(w, "platform %s/%s%s\n", c.OS, c.Architecture, map[bool]string{true: "/" + c.Variant}[c.Variant != ""])
	}
	if c.User != "" {
		fmt.Fprintf(w, "user   %s\n", c.User)
	}
	if c.WorkingDir != "" {
		fmt.Fprintf(w, "workdir %s\n", c.WorkingDir)
	}
	for _, v := range c.Env {
		fmt.Fprintf(w, "env    %s\n", v)
	}
	if len(c.Entrypoint) > 0 {
		fmt.Fprintf(w, "entrypoint %q\n", c.Entrypoint)
	}
	if len(c.Cmd) > 0 {
		fmt.Fprintf(w, "cmd    %q\n", c.Cmd)
	}
	keys := make([]string, 0, len(c.Labels))
	for k := range c.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "label  %s=%s\n", k, c.Labels[k])
	}
	fmt.Fprintf(w, "layers %d\n", len(c.DiffIDs))
}

func (e *env) importGit(c *cli.Context, repo string) error {
	r, err := e.open(strata.OpenOptions{Create: true})
	if err != nil {
		return err
	}
	defer r.Close()
	p := e.progress()
	res, err := r.ImportGit(c.Context, repo, strata.GitImportOptions{
		Branch: c.String("branch"), Message: c.String("message"), WithIgnored: c.StringSlice("with-ignored"),
		Warn: e.warn, Progress: p.snapshot,
	})
	p.done()
	if err != nil {
		return err
	}
	return e.out(res, func(w io.Writer) {
		fmt.Fprintf(w, "imported git %s -> %s %s (%s)\n",
			res.Source, res.Branch, res.Commit.Short(), statsText(res.Stats))
		if !e.quiet {
			fmt.Fprintf(w, "  read %s, %d from the blob cache; stored %s (%s) in %s\n",
				count(res.FilesRead, "blob", "blobs"), res.CacheHits, count(res.NewObjects, "new object", "new objects"), ibytes(res.NewBytes), time.Duration(res.DurationNs).Round(time.Millisecond))
		}
	})
}
