package store

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxBranchName is the longest branch name in bytes.
const MaxBranchName = 255

// ValidateBranchName checks name against rules modelled on
// git check-ref-format: slash-separated components ("ws/NAME"), none empty
// or starting with '.', none ending in ".lock"; no "..", "@{", control
// characters, space or any of ~^:?*[\ ; not starting with '-', not ending
// with '.' or '/'; valid UTF-8; at most 255 bytes. The error, wrapping
// ErrInvalidName, says which rule failed.
func ValidateBranchName(name string) error {
	why := branchNameProblem(name)
	if why == "" {
		return nil
	}
	return fmt.Errorf("branch name %q %s: %w", name, why, ErrInvalidName)
}

func branchNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxBranchName:
		return fmt.Sprintf("is longer than %d bytes", MaxBranchName)
	case !utf8.ValidString(name):
		return "is not valid UTF-8"
	case name == "@":
		return `is "@"`
	case name[0] == '-':
		return "starts with '-'"
	case name[0] == '/':
		return "starts with '/'"
	case strings.HasSuffix(name, "/"):
		return "ends with '/'"
	case strings.HasSuffix(name, "."):
		return "ends with '.'"
	case strings.Contains(name, "//"):
		return `contains "//"`
	case strings.Contains(name, ".."):
		return `contains ".."`
	case strings.Contains(name, "@{"):
		return `contains "@{"`
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return "contains a control character"
		}
		if strings.ContainsRune(" ~^:?*[\\", r) {
			return fmt.Sprintf("contains %q", r)
		}
	}
	for _, c := range strings.Split(name, "/") {
		if c[0] == '.' {
			return fmt.Sprintf("has component %q starting with '.'", c)
		}
		if strings.HasSuffix(c, ".lock") {
			return fmt.Sprintf("has component %q ending with \".lock\"", c)
		}
	}
	return ""
}

func scanID(b []byte) (ID, error) {
	var id ID
	switch len(b) {
	case 0:
		return ZeroID, nil
	case 32:
		copy(id[:], b)
		return id, nil
	}
	return ZeroID, fmt.Errorf("stored id of %d bytes: %w", len(b), ErrCorrupt)
}

// idArg is how an ID is stored in a nullable column: NULL for ZeroID.
func idArg(id ID) any {
	if id.IsZero() {
		return nil
	}
	return id[:]
}

// Ref returns the commit a branch points to, or ErrNotFound.
func (tx *Tx) Ref(name string) (ID, error) {
	id, ok, err := tx.ref(name)
	if err != nil {
		return ZeroID, err
	}
	if !ok {
		return ZeroID, fmt.Errorf("branch %q: %w", name, ErrNotFound)
	}
	return id, nil
}

func (tx *Tx) ref(name string) (ID, bool, error) {
	var b []byte
	err := tx.queryRow(`SELECT commit_id FROM refs WHERE name = ?`, name).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return ZeroID, false, nil
	}
	if err != nil {
		return ZeroID, false, fmt.Errorf("read branch %q: %w", name, mapErr(err))
	}
	id, err := scanID(b)
	if err != nil || id.IsZero() {
		return ZeroID, false, fmt.Errorf("branch %q: bad stored commit id: %w", name, ErrCorrupt)
	}
	return id, true, nil
}

// Refs returns the branches whose names start with prefix, sorted by name.
func (tx *Tx) Refs(prefix string) ([]Ref, error) {
	rows, err := tx.query(`SELECT name, commit_id FROM refs WHERE name >= ? ORDER BY name`, prefix)
	if err != nil {
		return nil, fmt.Errorf("list branches: %w", err)
	}
	defer rows.Close()
	var refs []Ref
	for rows.Next() {
		var r Ref
		var b []byte
		if err := rows.Scan(&r.Name, &b); err != nil {
			return nil, fmt.Errorf("list branches: %w", mapErr(err))
		}
		// Names are compared bytewise (BINARY collation), so those with
		// the prefix are contiguous from the first one >= prefix.
		if !strings.HasPrefix(r.Name, prefix) {
			break
		}
		if r.Commit, err = scanID(b); err != nil {
			return nil, fmt.Errorf("branch %q: %w", r.Name, err)
		}
		refs = append(refs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list branches: %w", mapErr(err))
	}
	return refs, nil
}

// SetRef moves a branch by compare-and-swap: it succeeds only if the
// branch currently points to old, where old == ZeroID means the branch
// must not exist. new == ZeroID deletes the branch; otherwise new must be
// an existing commit. A lost CAS returns an error wrapping ErrConflict
// (and ErrExists or ErrNotFound when the branch unexpectedly exists or
// does not). Update only.
func (tx *Tx) SetRef(name string, old, new ID) error {
	if err := ValidateBranchName(name); err != nil {
		return err
	}
	cur, ok, err := tx.ref(name)
	if err != nil {
		return err
	}
	switch {
	case old.IsZero() && ok:
		return fmt.Errorf("branch %q already exists at %s: %w (%w)", name, cur.Short(), ErrConflict, ErrExists)
	case !old.IsZero() && !ok:
		return fmt.Errorf("branch %q was expected at %s but does not exist: %w (%w)", name, old.Short(), ErrConflict, ErrNotFound)
	case ok && cur != old:
		return fmt.Errorf("branch %q moved: expected %s, found %s: %w", name, old.Short(), cur.Short(), ErrConflict)
	}
	if new.IsZero() {
		if !ok {
			return nil
		}
		if _, err := tx.exec(`DELETE FROM refs WHERE name = ?`, name); err != nil {
			return fmt.Errorf("delete branch %q: %w", name, err)
		}
		return nil
	}
	if err := tx.expectKind(new, KindCommit, fmt.Sprintf("branch %q target", name)); err != nil {
		return err
	}
	if _, err := tx.exec(`INSERT INTO refs (name, commit_id) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET commit_id = excluded.commit_id`, name, new[:]); err != nil {
		return fmt.Errorf("set branch %q: %w", name, err)
	}
	return nil
}

// --- operation log ---------------------------------------------------------

// AppendOp appends op to the operation log. Seq is assigned; a zero
// TimeNs is set to now. Append in the same transaction as the change the
// op records. Update only.
func (tx *Tx) AppendOp(op Op) error {
	if op.Kind == "" {
		return errors.New("append op: empty kind")
	}
	if op.TimeNs == 0 {
		op.TimeNs = time.Now().UnixNano()
	}
	if _, err := tx.exec(`INSERT INTO ops (time_ns, kind, ref, old, new, detail) VALUES (?, ?, ?, ?, ?, ?)`,
		op.TimeNs, op.Kind, op.Ref, idArg(op.Old), idArg(op.New), op.Detail); err != nil {
		return fmt.Errorf("append op %s: %w", op.Kind, err)
	}
	return nil
}

// Ops returns up to limit entries of the operation log, newest first,
// those about ref only unless ref is empty. limit <= 0 means all.
func (tx *Tx) Ops(ref string, limit int) ([]Op, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	const cols = `SELECT seq, time_ns, kind, ref, old, new, detail FROM ops`
	var rows *sql.Rows
	var err error
	if ref == "" {
		rows, err = tx.query(cols+` ORDER BY seq DESC LIMIT ?`, limit)
	} else {
		rows, err = tx.query(cols+` WHERE ref = ? ORDER BY seq DESC LIMIT ?`, ref, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("read operation log: %w", err)
	}
	defer rows.Close()
	var ops []Op
	for rows.Next() {
		var op Op
		var old, new []byte
		if err := rows.Scan(&op.Seq, &op.TimeNs, &op.Kind, &op.Ref, &old, &new, &op.Detail); err != nil {
			return nil, fmt.Errorf("read operation log: %w", mapErr(err))
		}
		if op.Old, err = scanID(old); err != nil {
			return nil, fmt.Errorf("op %d: %w", op.Seq, err)
		}
		if op.New, err = scanID(new); err != nil {
			return nil, fmt.Errorf("op %d: %w", op.Seq, err)
		}
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read operation log: %w", mapErr(err))
	}
	return ops, nil
}

// --- workspace registry ----------------------------------------------------

const qWorkspaceCols = `SELECT name, branch, base, dir, created_ns, extra FROM workspaces`

func scanWorkspace(sc interface{ Scan(...any) error }) (*Workspace, error) {
	var w Workspace
	var base []byte
	if err := sc.Scan(&w.Name, &w.Branch, &base, &w.Dir, &w.CreatedNs, &w.Extra); err != nil {
		return nil, err
	}
	var err error
	if w.Base, err = scanID(base); err != nil {
		return nil, fmt.Errorf("workspace %q: %w", w.Name, err)
	}
	return &w, nil
}

// Workspace returns a registered workspace, or ErrNotFound.
func (tx *Tx) Workspace(name string) (*Workspace, error) {
	w, err := scanWorkspace(tx.queryRow(qWorkspaceCols+` WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("workspace %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read workspace %q: %w", name, mapErr(err))
	}
	return w, nil
}

// Workspaces returns every registered workspace, sorted by name.
func (tx *Tx) Workspaces() ([]Workspace, error) {
	rows, err := tx.query(qWorkspaceCols + ` ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	defer rows.Close()
	var ws []Workspace
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, fmt.Errorf("list workspaces: %w", mapErr(err))
		}
		ws = append(ws, *w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workspaces: %w", mapErr(err))
	}
	return ws, nil
}

// PutWorkspace inserts or replaces a workspace. Its Base, when not ZeroID,
// must be an existing commit: a registered workspace keeps it from gc.
// Update only.
func (tx *Tx) PutWorkspace(w *Workspace) error {
	if w.Name == "" {
		return fmt.Errorf("workspace name is empty: %w", ErrInvalidName)
	}
	if w.Branch != "" {
		if err := ValidateBranchName(w.Branch); err != nil {
			return fmt.Errorf("workspace %q: %w", w.Name, err)
		}
	}
	if !w.Base.IsZero() {
		if err := tx.expectKind(w.Base, KindCommit, fmt.Sprintf("workspace %q base", w.Name)); err != nil {
			return err
		}
	}
	if _, err := tx.exec(`INSERT OR REPLACE INTO workspaces (name, branch, base, dir, created_ns, extra)
		VALUES (?, ?, ?, ?, ?, ?)`, w.Name, w.Branch, idArg(w.Base), w.Dir, w.CreatedNs, w.Extra); err != nil {
		return fmt.Errorf("put workspace %q: %w", w.Name, err)
	}
	return nil
}

// DeleteWorkspace removes a workspace from the registry, or returns
// ErrNotFound. Update only.
func (tx *Tx) DeleteWorkspace(name string) error {
	r, err := tx.exec(`DELETE FROM workspaces WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete workspace %q: %w", name, err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("workspace %q: %w", name, ErrNotFound)
	}
	return nil
}
