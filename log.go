package strata

import (
	"context"

	"github.com/stratafs/strata/store"
)

// LogEntry is one commit of a history.
type LogEntry struct {
	ID      store.ID          `json:"id"`
	Parents []store.ID        `json:"parents"`
	Message string            `json:"message"`
	TimeNs  int64             `json:"time_ns"`
	Source  string            `json:"source,omitempty"`
	Tree    store.ID          `json:"tree"`
	Stats   store.CommitStats `json:"stats"`
}

// Log returns the first-parent history of ref, newest first, at most n
// entries (n <= 0: all).
func (r *Repo) Log(ctx context.Context, ref string, n int) ([]LogEntry, error) {
	if ref == "" {
		ref = DefaultBranch
	}
	var out []LogEntry
	err := r.view(ctx, func(tx *store.Tx) error {
		id, err := resolve(tx, ref)
		if err != nil {
			return err
		}
		for !id.IsZero() && (n <= 0 || len(out) < n) {
			c, err := tx.Commit(id)
			if err != nil {
				return err
			}
			out = append(out, logEntry(id, c))
			if len(c.Parents) == 0 {
				break
			}
			id = c.Parents[0]
		}
		return nil
	})
	return out, err
}

func logEntry(id store.ID, c *store.Commit) LogEntry {
	return LogEntry{ID: id, Parents: c.Parents, Message: c.Message, TimeNs: c.TimeNs, Source: c.Source, Tree: c.Tree, Stats: c.Stats}
}
