package strata

import "github.com/stratafs/strata/internal/workspace"

// The view: what a sandboxed command sees (docs/sandbox.md, "The view").
// Which host paths it holds besides the system, the workspace and its
// private directories — the store's defaults (Settings.ViewRO, ViewRW:
// `strata init --ro`), the toolchains the command's PATH reaches under the
// home directory, the command's --ro and --rw — is decided by the
// lifecycle (internal/workspace, view.go).

// ViewEntry is one line of what a sandboxed command sees (doctor).
type ViewEntry = workspace.ViewEntry

// DescribeView says what a sandboxed command of the store at home sees,
// for a command with environment env (its PATH's toolchains): the view
// (docs/sandbox.md, "The view").
func DescribeView(home string, env []string) []ViewEntry {
	s, _ := newRepo(home, true).Settings()
	return workspace.DescribeView(home, env, s.ViewRO, s.ViewRW)
}
