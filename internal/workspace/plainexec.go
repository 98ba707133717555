package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/sandbox"
	"github.com/stratafs/strata/internal/workspace/hotpath"
	"github.com/stratafs/strata/nsexec"
)

// Commands in a plain (reflink or copy) workspace: in its keeper's
// namespaces where user namespaces work, else with none at all
// (nsexec.RunNoNS) — fenced by Landlock and seccomp, failing closed
// (docs/sandbox.md, "When user namespaces are not available").

// startPlain starts the keeper of plain workspace rec, or reports that
// user namespaces are denied here (noNS), in which case its commands run
// without any.
func (m *Manager) startPlain(ctx context.Context, rec *Record) (k *Keeper, noNS bool, err error) {
	k, err = m.plainBackend(rec.Backend).Start(ctx, rec)
	if err == nil {
		return k, false, nil
	}
	if m.namespacesDenied(ctx, err) {
		return nil, true, nil
	}
	return nil, false, err
}

// namespacesDenied reports whether err, a failure to start a workspace's
// namespaces (a keeper, a one-shot init), means that this process may
// not have them at all: a user namespace refused (nsexec.ErrNoUserNS); a
// namespace that can be made but not used (AppArmor's restriction:
// mounting in it fails), which the user-namespace probe tells; or, as
// real root, EPERM — a container's seccomp profile refusing root's mount
// namespace or mounts.
func (m *Manager) namespacesDenied(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, nsexec.ErrNoUserNS):
		return true
	case ctx.Err() != nil:
		return false
	case RealRoot():
		return errors.Is(err, unix.EPERM)
	}
	return m.userNS(ctx).Cause != nsexec.UserNSWorks
}

// Ready makes workspace name ready for commands: its keeper runs, or it
// is a plain workspace whose commands run without namespaces (noNS),
// its tree made. The caller has checked the name.
func (m *Manager) Ready(ctx context.Context, name string) (noNS bool, err error) {
	if _, err := nsexec.FindKeeper(m.Layout.Workspace(name)); err == nil {
		return false, nil
	}
	rec, err := m.Load(ctx, name)
	if err != nil {
		return false, err
	}
	if !IsPlain(rec.Backend) {
		b, err := m.Backend(rec)
		if err != nil {
			return false, err
		}
		_, err = b.Start(ctx, rec)
		return false, err
	}
	_, noNS, err = m.startPlain(ctx, rec)
	if err == nil && noNS {
		err = m.EnsureTree(ctx, rec)
	}
	return noNS, err
}

// Path is a host path of workspace name's tree: a plain workspace's
// directory itself (made if a reset left it to be made), an overlay
// workspace's merged view through its keeper (started if needed).
func (m *Manager) Path(ctx context.Context, name string) (string, error) {
	rec, err := m.Load(ctx, name)
	if err != nil {
		return "", err
	}
	if IsPlain(rec.Backend) {
		if err := m.EnsureTree(ctx, rec); err != nil {
			return "", err
		}
		return rec.Upper, nil
	}
	if k, err := nsexec.FindKeeper(rec.Dir); err == nil {
		return k.Path(), nil
	}
	b, err := m.Backend(rec)
	if err != nil {
		return "", err
	}
	k, err := b.Start(ctx, rec)
	if err != nil {
		return "", err
	}
	return k.Path(), nil
}

// execPlain serves Exec for a plain workspace without a live keeper: it
// starts one where user namespaces work (handled false: Exec goes on
// through k), or runs the command without namespaces. A live keeper of
// any workspace is returned as it is found.
func (m *Manager) execPlain(ctx context.Context, name string, opts CommandOptions, io Stdio) (k *Keeper, st ExitStatus, handled bool, err error) {
	dir := m.Layout.Workspace(name)
	if k, err := nsexec.FindKeeper(dir); err == nil {
		nsexec.ThawStale(dir)
		return k, st, false, nil
	}
	rec, err := m.Load(ctx, name)
	if err != nil {
		return nil, st, true, err
	}
	if !IsPlain(rec.Backend) {
		b, err := m.Backend(rec)
		if err != nil {
			return nil, st, true, err
		}
		k, err := b.Start(ctx, rec)
		return k, st, err != nil, err
	}
	k, noNS, err := m.startPlain(ctx, rec)
	if err != nil || !noNS {
		return k, st, err != nil, err
	}
	st, err = m.ExecNoNS(ctx, rec, opts, io)
	return nil, st, true, err
}

// ExecNoNS runs a command in plain workspace rec without any namespace
// (nsexec.RunNoNS): the tree as its working directory, TMPDIR (and HOME,
// sandboxed) its private work/tmp, fenced by Landlock — the tree, tmp,
// the system read-only, --ro/--rw and the store's defaults, nothing else
// — and seccomp (the mode's preset, strict's under --net none, and no
// unix sockets). A sandboxed command on a kernel without Landlock is
// refused (nsexec.ErrNoSandbox, exit 125); --sandbox none runs it
// unfenced.
func (m *Manager) ExecNoNS(ctx context.Context, rec *Record, opts CommandOptions, io Stdio) (ExitStatus, error) {
	if err := m.EnsureTree(ctx, rec); err != nil {
		return ExitStatus{}, err
	}
	spec, cmd, warnings, err := m.noNSCommand(rec, opts)
	if err != nil {
		return ExitStatus{}, err
	}
	if opts.Sandbox.Warn != nil {
		for _, w := range warnings {
			opts.Sandbox.Warn(w)
		}
	}
	return nsexec.RunNoNS(ctx, spec, cmd, io.Stdin, io.Stdout, io.Stderr)
}

// noNSCommand plans a namespace-free command in plain workspace rec, and
// what to tell the user when it runs (what the kernel cannot enforce).
func (m *Manager) noNSCommand(rec *Record, opts CommandOptions) (nsexec.NoNSSpec, nsexec.Command, []string, error) {
	if len(opts.Argv) == 0 {
		return nsexec.NoNSSpec{}, nsexec.Command{}, nil, Invalidf("no command given")
	}
	o := opts.Sandbox
	mode := o.Mode
	if mode == "" {
		mode = SandboxAgent
	}
	switch o.Net {
	case "", NetHost, NetNone:
	default:
		return nsexec.NoNSSpec{}, nsexec.Command{}, nil, Invalidf("--net %q: want host or none", o.Net)
	}
	if mode == SandboxStrict && o.Net == NetHost {
		return nsexec.NoNSSpec{}, nsexec.Command{}, nil, Invalidf("--sandbox strict implies --net none; --net host contradicts it")
	}
	tree, tmp := rec.Upper, PlainTmp(rec)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nsexec.NoNSSpec{}, nsexec.Command{}, nil, err
	}
	cwd := tree
	if opts.Cwd != "" {
		cwd = opts.Cwd
		if !filepath.IsAbs(cwd) {
			cwd = filepath.Join(tree, cwd)
		}
	}
	spec := nsexec.NoNSSpec{Name: rec.Name, Workspace: tree, Tmp: tmp}
	env := os.Environ()
	tmpEnv := []string{"TMPDIR=" + tmp, "TMP=" + tmp, "TEMP=" + tmp}
	switch mode {
	case SandboxNone:
		if len(o.RO)+len(o.RW)+len(o.AllowConnect)+len(o.AllowBind) > 0 || o.RequireABI > 0 {
			return nsexec.NoNSSpec{}, nsexec.Command{}, nil, Invalidf("--rw, --ro, --allow-connect, --allow-bind and --sandbox-require-abi need a sandbox; --sandbox none has none")
		}
		if o.Net == NetNone {
			return nsexec.NoNSSpec{}, nsexec.Command{}, nil, Invalidf("--net none needs a sandbox without user namespaces (seccomp denies IP sockets); --sandbox none has none")
		}
		spec.Unsandboxed = true
		cmd := nsexec.Command{Argv: opts.Argv, Env: mergeEnv(mergeEnv(env, opts.Env), tmpEnv), Dir: filepath.Clean(cwd), TTY: opts.TTY}
		return spec, cmd, nil, nil
	case SandboxAgent, SandboxStrict:
	default:
		return nsexec.NoNSSpec{}, nsexec.Command{}, nil, Invalidf("--sandbox %q: want agent, strict or none", mode)
	}
	// The view's binds are Landlock's extra paths here: the store's
	// defaults, the toolchains PATH reaches, --ro and --rw (no mount
	// namespace shows or hides them; they are reachable at their host
	// paths and Landlock lets them through).
	env = hotpath.SandboxEnv(env)
	vp, err := m.viewBinds(env, &o)
	if err != nil {
		return nsexec.NoNSSpec{}, nsexec.Command{}, nil, err
	}
	env = append(env, vp.Env...)
	// HOME and TMPDIR name the private tmp: /tmp is the host's here,
	// outside the fence.
	env = mergeEnv(mergeEnv(env, append([]string{"HOME=" + tmp}, tmpEnv...)), opts.Env)
	netNone := mode == SandboxStrict || o.Net == NetNone
	plan, err := sandbox.BuildNoNS(sandbox.Request{
		Strict: mode == SandboxStrict, Target: tree, Tmp: tmp, RO: vp.RO, RW: vp.RW,
		ConnectTCP: o.AllowConnect, BindTCP: o.AllowBind, RequireABI: o.RequireABI,
	}, netNone)
	if err != nil {
		return nsexec.NoNSSpec{}, nsexec.Command{}, nil, err
	}
	var warnings []string
	for _, w := range plan.Warnings {
		warnings = append(warnings, "sandbox: "+w)
	}
	warnings = append(warnings, noNSNotice)
	cmd := nsexec.Command{
		Argv: opts.Argv, Env: env, Dir: filepath.Clean(cwd), TTY: opts.TTY,
		Landlock: plan.Landlock, Seccomp: plan.Seccomp, NetNone: netNone,
	}
	return spec, cmd, warnings, nil
}

// noNSNotice tells a sandboxed command's user what it runs without.
const noNSNotice = "sandbox: no user namespaces here: the command runs without them, fenced by Landlock and seccomp; no private /tmp (TMPDIR is the workspace's), no /dev/shm, no PID namespace (`strata doctor` lists what holds)"
