package workspace

import "github.com/stratafs/strata/internal/workspace/hotpath"

// The view: what a sandboxed command sees (nsexec.Command.View, built by
// the keeper; docs/sandbox.md, "The view"). Which host paths it holds
// besides the system, the workspace and its private directories — the
// store's defaults, the toolchains PATH reaches under the home directory,
// the command's --ro and --rw — is decided in internal/workspace/hotpath,
// which the front (cmd/strata) plans its commands with too.

// viewBinds plans the binds of a view for a command with environment env
// and the sandbox options o (nil: only the defaults, for a keeper).
func (m *Manager) viewBinds(env []string, o *SandboxOptions) (*hotpath.ViewPlan, error) {
	return m.planner().ViewBinds(env, o)
}

// CheckBind refuses a bind path that is not absolute, does not exist, or
// holds the store or lies in it (invariant 7: nothing of the store is in
// a sandboxed command's mount namespace).
func (m *Manager) CheckBind(flag, path string) error { return m.planner().CheckBind(flag, path) }

// ViewEntry is one line of what a sandboxed command sees (doctor).
type ViewEntry = hotpath.ViewEntry

// DescribeView says what a sandboxed command of the store at home sees,
// for a command with environment env (its PATH's toolchains) and the
// store's default binds ro and rw: the view (docs/sandbox.md, "The view").
func DescribeView(home string, env []string, ro, rw []string) []ViewEntry {
	return hotpath.DescribeView(home, env, ro, rw)
}
