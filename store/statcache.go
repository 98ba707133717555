package store

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
)

// LoadStatCache returns the stat cache of an import root (an absolute
// directory), keyed by slash-separated path relative to it. An empty map
// if the root was never saved.
//
// Entries are filtered by the racy-git rule: an entry whose mtime or ctime
// is at or after the recordedNs given to SaveStatCache is left out, since
// its file may have changed again within the same timestamp granule after
// it was read. The caller picks recordedNs (typically the time the import
// started, minus the filesystem's timestamp granularity).
func (s *Store) LoadStatCache(ctx context.Context, root string) (map[string]StatEntry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT c.path, c.dev, c.ino, c.mode, c.size, c.mtime_ns, c.ctime_ns, c.content, r.recorded_ns
		FROM stat_roots r JOIN stat_cache c ON c.root_id = r.id WHERE r.root = ?`, root)
	if err != nil {
		return nil, fmt.Errorf("load stat cache of %s: %w", root, mapErr(err))
	}
	defer rows.Close()
	m := make(map[string]StatEntry)
	for rows.Next() {
		var p string
		var e StatEntry
		var dev, ino, recorded int64
		var content []byte
		if err := rows.Scan(&p, &dev, &ino, &e.Mode, &e.Size, &e.MtimeNs, &e.CtimeNs, &content, &recorded); err != nil {
			return nil, fmt.Errorf("load stat cache of %s: %w", root, mapErr(err))
		}
		if e.MtimeNs >= recorded || e.CtimeNs >= recorded {
			continue
		}
		e.Dev, e.Ino = uint64(dev), uint64(ino)
		if e.Content, err = scanID(content); err != nil {
			return nil, fmt.Errorf("load stat cache of %s: %s: %w", root, p, err)
		}
		m[p] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load stat cache of %s: %w", root, mapErr(err))
	}
	return m, nil
}

// SaveStatCache replaces the stat cache of root with entries, recorded at
// recordedNs (see LoadStatCache). It is a cache: it is written without
// waiting for the disk, and a crash may lose it.
func (s *Store) SaveStatCache(ctx context.Context, root string, entries map[string]StatEntry, recordedNs int64) error {
	if s.ro {
		return fmt.Errorf("save stat cache: %w", ErrReadOnly)
	}
	if !filepath.IsAbs(root) {
		return fmt.Errorf("save stat cache: root %q is not absolute", root)
	}
	fast, err := s.fastDB()
	if err != nil {
		return fmt.Errorf("save stat cache: %w", mapErr(err))
	}
	return s.update(ctx, fast, func(tx *Tx) error { return tx.SaveStatCache(root, entries, recordedNs) })
}

// SaveStatCache is Store.SaveStatCache inside a write transaction, for a
// caller that records the cache together with what it describes.
func (tx *Tx) SaveStatCache(root string, entries map[string]StatEntry, recordedNs int64) error {
	if !filepath.IsAbs(root) {
		return fmt.Errorf("save stat cache: root %q is not absolute", root)
	}
	err := func() error {
		var rid int64
		err := tx.queryRow(`INSERT INTO stat_roots (root, recorded_ns) VALUES (?, ?)
			ON CONFLICT (root) DO UPDATE SET recorded_ns = excluded.recorded_ns
			RETURNING id`, root, recordedNs).Scan(&rid)
		if err != nil {
			return mapErr(err)
		}
		if _, err := tx.exec(`DELETE FROM stat_cache WHERE root_id = ?`, rid); err != nil {
			return err
		}
		// In key order: the table is a b-tree on (root_id, path).
		for _, p := range slices.Sorted(maps.Keys(entries)) {
			e := entries[p]
			if _, err := tx.exec(`INSERT INTO stat_cache (root_id, path, dev, ino, mode, size, mtime_ns, ctime_ns, content)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, rid, p, int64(e.Dev), int64(e.Ino), e.Mode, e.Size, e.MtimeNs, e.CtimeNs, idArg(e.Content)); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return fmt.Errorf("save stat cache of %s: %w", root, err)
	}
	return nil
}
