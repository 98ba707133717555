package textdiff

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
)

// Git modes as a tree records them (git's canon_mode); 0 means the side is
// absent.
const (
	ModeFile    uint32 = 0o100644
	ModeExec    uint32 = 0o100755
	ModeSymlink uint32 = 0o120000

	modeType    uint32 = 0o170000
	modeRegular uint32 = 0o100000
)

// defaultAbbrev is git's abbreviation of object ids in the index line
// (DEFAULT_ABBREV; core.abbrev=auto gives 7 in all but large repositories).
const defaultAbbrev = 7

// ErrInvalidPath means a path git cannot put in a patch, or that git apply
// refuses: empty, absolute, containing NUL, or with an empty, ".", ".." or
// ".git" (in any case; read-cache.c verify_dotfile) component.
var ErrInvalidPath = errors.New("path git cannot represent")

// FilePatch is one path's change, old to new, as WritePatch writes it.
type FilePatch struct {
	// OldPath and NewPath are slash-separated and relative to the top of
	// the tree. A different NewPath makes the patch a rename. The path of
	// an absent side is ignored.
	OldPath, NewPath string
	// OldMode and NewMode are git modes: ModeFile, ModeExec, ModeSymlink,
	// or 0 when the side is absent (a new or deleted file). Other regular
	// permissions are canonicalized as git does: any owner-execute bit
	// means 0100755. Directories and gitlinks are not supported.
	OldMode, NewMode uint32
	// Old and New are the contents; for a symlink, its target.
	Old, New []byte
	// OldHash and NewHash are hex object ids for the index line. Empty
	// means compute git's SHA-1 blob id (BlobID) and abbreviate it to 7
	// digits, or to the length of the other side's given id. A binary
	// patch needs full ids, which git apply checks against the preimage
	// and the result: a full id (40 hex digits, or 64 for a SHA-256
	// repository) is used as given, anything shorter is replaced by the
	// computed SHA-1 id.
	OldHash, NewHash string
	// Summary leaves the contents out, as git does for a file above
	// core.bigFileThreshold: the section ends with "Binary files a/X and
	// b/X differ" after the index line, Old and New are not read, and
	// OldHash and NewHash (required for each present side; see
	// NewBlobHash) are abbreviated to 7 digits. git apply refuses such a
	// section (it cannot rebuild the content); it says that the file
	// changed.
	Summary bool
}

// side is one present side of a file patch.
type side struct {
	path string
	mode uint32
	data []byte
	hash string
}

// WritePatch writes p as git diff --binary does, with DefaultContext lines
// of context. Nothing is written when p changes nothing.
func WritePatch(w io.Writer, p FilePatch) error {
	return WritePatchContext(w, p, DefaultContext)
}

// WritePatchContext is WritePatch with context lines of context, as git diff
// -U<context>.
func WritePatchContext(w io.Writer, p FilePatch, context int) error {
	var oldSide, newSide *side
	if p.OldMode != 0 {
		m, err := canonMode(p.OldMode)
		if err != nil {
			return fmt.Errorf("textdiff: %s: %w", QuotePath(p.OldPath), err)
		}
		if err := checkPath(p.OldPath); err != nil {
			return err
		}
		if p.Summary && p.OldHash == "" {
			return fmt.Errorf("textdiff: %s: a summary needs OldHash", QuotePath(p.OldPath))
		}
		oldSide = &side{path: p.OldPath, mode: m, data: p.Old, hash: p.OldHash}
	}
	if p.NewMode != 0 {
		m, err := canonMode(p.NewMode)
		if err != nil {
			return fmt.Errorf("textdiff: %s: %w", QuotePath(p.NewPath), err)
		}
		if err := checkPath(p.NewPath); err != nil {
			return err
		}
		if p.Summary && p.NewHash == "" {
			return fmt.Errorf("textdiff: %s: a summary needs NewHash", QuotePath(p.NewPath))
		}
		newSide = &side{path: p.NewPath, mode: m, data: p.New, hash: p.NewHash}
	}
	bw := bufio.NewWriter(w)
	switch {
	case oldSide == nil && newSide == nil:
		return fmt.Errorf("textdiff: %s: both sides absent (OldMode and NewMode are 0)", QuotePath(p.NewPath))
	case oldSide != nil && newSide != nil && oldSide.mode&modeType != newSide.mode&modeType:
		// A file that becomes a symlink or back is a deletion and a
		// creation (diff.c run_diff: "a filepair that changes between
		// file and symlink needs to be split into deletion and
		// creation").
		writeSection(bw, oldSide, nil, context, p.Summary)
		writeSection(bw, nil, newSide, context, p.Summary)
	default:
		writeSection(bw, oldSide, newSide, context, p.Summary)
	}
	return bw.Flush()
}

// writeSection writes one "diff --git" section; old or new is nil for a
// creation or deletion. The order of header lines is diff.c builtin_diff's
// and fill_metainfo's. A summary section compares the sides' hashes, not
// their data, and writes no body.
func writeSection(w *bufio.Writer, oldSide, newSide *side, context int, summary bool) {
	if summary {
		for _, s := range []*side{oldSide, newSide} {
			if s != nil {
				s.data = nil
			}
		}
	}
	var oldData, newData []byte
	oldName, newName := "", ""
	if oldSide != nil {
		oldData, oldName = oldSide.data, oldSide.path
	}
	if newSide != nil {
		newData, newName = newSide.data, newSide.path
	}
	if oldSide == nil {
		oldName = newName
	}
	if newSide == nil {
		newName = oldName
	}
	sameData := oldSide != nil && newSide != nil && bytes.Equal(oldData, newData)
	if summary {
		sameData = oldSide != nil && newSide != nil && strings.EqualFold(oldSide.hash, newSide.hash)
	}
	if sameData && oldName == newName && oldSide.mode == newSide.mode {
		return
	}
	binary := IsBinary(oldData) || IsBinary(newData)

	w.WriteString("diff --git ")
	w.WriteString(QuotePath("a/" + oldName))
	w.WriteByte(' ')
	w.WriteString(QuotePath("b/" + newName))
	w.WriteByte('\n')
	switch {
	case oldSide == nil:
		fmt.Fprintf(w, "new file mode %06o\n", newSide.mode)
	case newSide == nil:
		fmt.Fprintf(w, "deleted file mode %06o\n", oldSide.mode)
	default:
		if oldSide.mode != newSide.mode {
			fmt.Fprintf(w, "old mode %06o\nnew mode %06o\n", oldSide.mode, newSide.mode)
		}
		if oldName != newName {
			fmt.Fprintf(w, "similarity index %d%%\n", similarity(oldData, newData))
			fmt.Fprintf(w, "rename from %s\nrename to %s\n", QuotePath(oldName), QuotePath(newName))
		}
	}
	if sameData {
		return // a mode change or a pure rename: no index line, no body
	}

	var oldID, newID string
	if summary {
		oldID, newID = summaryIDs(oldSide, newSide)
	} else {
		oldID, newID = objectIDs(oldSide, newSide, binary)
	}
	fmt.Fprintf(w, "index %s..%s", oldID, newID)
	if oldSide != nil && newSide != nil && oldSide.mode == newSide.mode {
		fmt.Fprintf(w, " %06o", oldSide.mode)
	}
	w.WriteByte('\n')

	if summary {
		// diff.c builtin_diff without --binary: "Binary files %s and %s
		// differ", an absent side named /dev/null.
		a, b := "/dev/null", "/dev/null"
		if oldSide != nil {
			a = QuotePath("a/" + oldName)
		}
		if newSide != nil {
			b = QuotePath("b/" + newName)
		}
		fmt.Fprintf(w, "Binary files %s and %s differ\n", a, b)
		return
	}
	if binary {
		// diff.c emit_binary_diff: the forward block, then the reverse
		// one, so that the patch also applies with -R.
		w.WriteString("GIT binary patch\n")
		writeLiteral(w, newData)
		writeLiteral(w, oldData)
		return
	}
	if bytes.Equal(oldData, newData) {
		return // an empty file created or deleted: git prints no hunks, no ---/+++
	}
	writeLabel(w, "--- ", "a/", oldName, oldSide == nil)
	writeLabel(w, "+++ ", "b/", newName, newSide == nil)
	al, bl := SplitLines(oldData), SplitLines(newData)
	for _, h := range hunks(al, bl, diffLines(al, bl, true), context) {
		w.WriteString(h.Header())
		w.Write(h.Body)
	}
}

// writeLabel writes a "---" or "+++" line. diff.c emit_diff_symbol ends the
// label with a tab when it contains a space, so that GNU patch does not take
// the rest for a timestamp.
func writeLabel(w *bufio.Writer, lead, prefix, name string, absent bool) {
	label := "/dev/null"
	if !absent {
		label = QuotePath(prefix + name)
	}
	w.WriteString(lead)
	w.WriteString(label)
	if strings.IndexByte(label, ' ') >= 0 {
		w.WriteByte('\t')
	}
	w.WriteByte('\n')
}

// objectIDs returns the index line's ids for old and new (nil when absent).
func objectIDs(oldSide, newSide *side, binary bool) (string, string) {
	id := func(s, other *side) string {
		if !binary && s.hash != "" {
			return s.hash
		}
		if binary && isFullID(s.hash) {
			return s.hash
		}
		full := BlobID(s.data)
		switch {
		case binary:
			return full
		case other != nil && other.hash != "" && len(other.hash) <= len(full):
			return full[:len(other.hash)]
		default:
			return full[:defaultAbbrev]
		}
	}
	var oldID, newID string
	if oldSide != nil {
		oldID = id(oldSide, newSide)
	}
	if newSide != nil {
		newID = id(newSide, oldSide)
	}
	if oldSide == nil {
		oldID = strings.Repeat("0", len(newID))
	}
	if newSide == nil {
		newID = strings.Repeat("0", len(oldID))
	}
	return oldID, newID
}

// isFullID reports whether s is a full SHA-1 or SHA-256 hex object id.
func isFullID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// summaryIDs are the index line's ids of a summary section: the given
// hashes abbreviated as git diff abbreviates them, zeros for an absent side.
func summaryIDs(oldSide, newSide *side) (string, string) {
	abbrev := func(s *side) string {
		if s == nil {
			return strings.Repeat("0", defaultAbbrev)
		}
		return strings.ToLower(s.hash[:min(len(s.hash), defaultAbbrev)])
	}
	return abbrev(oldSide), abbrev(newSide)
}

// NewBlobHash returns a hash that, fed exactly size bytes of content,
// sums to git's SHA-1 blob id of it (hex-encode the Sum): BlobID for
// content streamed rather than held in memory.
func NewBlobHash(size int64) hash.Hash {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	return h
}

// BlobID returns git's SHA-1 object id of a blob with content data: the hash
// of "blob <size>\x00" and the data.
func BlobID(data []byte) string {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.Itoa(len(data)) + "\x00"))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// similarity is the "similarity index" of a rename: the share of the larger
// side that is in lines common to both, rounded down; 100 only when equal.
// git's own score (diffcore-delta.c) hashes chunks and can differ by a few
// percent; git apply reads the number and ignores it.
func similarity(a, b []byte) int {
	if bytes.Equal(a, b) {
		return 100
	}
	al, bl := SplitLines(a), SplitLines(b)
	common := 0
	for _, op := range diffLines(al, bl, true) {
		if op.Kind == Equal {
			for _, l := range al[op.A : op.A+op.N] {
				common += len(l)
			}
		}
	}
	return common * 100 / max(len(a), len(b))
}

// canonMode is git's canon_mode for the modes a patch can carry.
func canonMode(m uint32) (uint32, error) {
	switch m & modeType {
	case ModeSymlink:
		return ModeSymlink, nil
	case modeRegular, 0:
		if m&0o100 != 0 {
			return ModeExec, nil
		}
		return ModeFile, nil
	}
	return 0, fmt.Errorf("git mode %06o: %w", m, errors.ErrUnsupported)
}

// checkPath rejects paths git cannot put in a patch.
func checkPath(p string) error {
	bad := p == "" || p[0] == '/' || strings.IndexByte(p, 0) >= 0
	for c := range strings.SplitSeq(p, "/") {
		if c == "" || c == "." || c == ".." || strings.EqualFold(c, ".git") {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("textdiff: %s: %w", QuotePath(p), ErrInvalidPath)
	}
	return nil
}

// QuotePath returns p as git writes a path in a patch header with the
// default core.quotePath=true (quote.c quote_c_style): unchanged unless it
// contains '"', '\\', a control character or a byte >= 0x80, and otherwise
// in double quotes with C escapes: \a \b \t \n \v \f \r \" \\, and \ooo in
// octal for every other byte below 0x20 and every byte >= 0x7f. The result
// is a valid Go string literal when quoted (strconv.Unquote reverses it).
func QuotePath(p string) string {
	i := 0
	for i < len(p) && !mustQuote(p[i]) {
		i++
	}
	if i == len(p) {
		return p
	}
	b := make([]byte, 0, len(p)+8)
	b = append(b, '"')
	b = append(b, p[:i]...)
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= '\a' && c <= '\r':
			b = append(b, '\\', "abtnvfr"[c-'\a'])
		case mustQuote(c):
			b = append(b, '\\', '0'+c>>6, '0'+c>>3&7, '0'+c&7)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// mustQuote is quote.c cq_must_quote with quote_path_fully set.
func mustQuote(c byte) bool {
	return c < 0x20 || c == '"' || c == '\\' || c >= 0x7f
}
