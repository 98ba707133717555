package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/internal/workspace/layout"
)

// RemoveStale removes what interrupted strata processes left, given every
// registered workspace: workspace directories being created (.tmp-*) or
// no longer registered, tmpfs uppers without a workspace, and uppers a
// reset replaced (or made, then was killed before its transaction) that
// no record names. Only entries older than StaleAfter go. It returns
// what it removed.
func (m *Manager) RemoveStale(recs []Record) []string {
	return m.removeStale(recs, time.Now())
}

func (m *Manager) removeStale(recs []Record, now time.Time) []string {
	known := map[string]bool{}
	for _, r := range recs {
		known[r.Name] = true
	}
	var removed []string
	old := func(p string) bool {
		var st unix.Stat_t
		return unix.Lstat(p, &st) == nil && now.Sub(time.Unix(st.Ctim.Unix())) > StaleAfter
	}
	for i := range recs {
		rec := &recs[i]
		dir := filepath.Dir(rec.Upper)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if !layout.IsUpperOrWork(e.Name()) || p == rec.Upper || p == rec.Work || rec.Root.OnEnv() && (p == rec.Root.Upper || p == rec.Root.Work) || !old(p) {
				continue
			}
			if RemoveAll(p) == nil {
				removed = append(removed, p)
			}
		}
	}
	for _, root := range []string{m.Layout.Workspaces(), m.Layout.Tmpfs()} {
		ents, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			p := filepath.Join(root, name)
			if known[name] || name == layout.RunsName || (name == layout.TmpfsOwner && e.Type().IsRegular()) || !old(p) {
				continue
			}
			if !strings.HasPrefix(name, layout.TempPrefix) {
				// An unregistered workspace directory: its keeper, if
				// any, goes first.
				_ = Stop(context.Background(), p)
			}
			if RemoveAll(p) == nil {
				removed = append(removed, p)
			}
		}
	}
	return removed
}
