package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"runtime"
)

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// sqliteConstraint is SQLITE_CONSTRAINT; a foreign key violation is one.
const sqliteConstraint = 19

// hasObject reports whether an object exists, outside any transaction.
func (s *Store) hasObject(ctx context.Context, id ID) (bool, error) {
	st, err := s.prepared(ctx, s.db, qObjectOID)
	if err != nil {
		return false, err
	}
	var oid int64
	err = st.QueryRowContext(ctx, id[:]).Scan(&oid)
	if isNoRows(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up object %s: %w", id.Short(), mapErr(err))
	}
	return true, nil
}

// getObject reads and verifies one object outside any transaction.
func (s *Store) getObject(ctx context.Context, id ID) (Kind, []byte, error) {
	return s.getRow(ctx, id, true)
}

// getRow reads one object; verify false does not re-hash it (the inner
// links of a delta chain, whose end is verified).
func (s *Store) getRow(ctx context.Context, id ID, verify bool) (Kind, []byte, error) {
	st, err := s.prepared(ctx, s.db, qGetObject)
	if err != nil {
		return 0, nil, err
	}
	var kind, codec, size int64
	var data []byte
	err = st.QueryRowContext(ctx, id[:]).Scan(&kind, &codec, &size, &data)
	if isNoRows(err) {
		if k, p, ok, err := s.scratches.get(id); ok {
			return k, p, err
		}
		return 0, nil, fmt.Errorf("object %s: %w", id.Short(), ErrNotFound)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read object %s: %w", id.Short(), mapErr(err))
	}
	p, err := decodeRow(id, Kind(kind), codec, size, data, func(b ID) ([]byte, error) {
		_, p, err := s.getRow(ctx, b, false)
		return p, err
	}, verify)
	if err != nil {
		return 0, nil, err
	}
	return Kind(kind), p, nil
}

// ObjectCount returns the number of objects of each kind.
func (s *Store) ObjectCount(ctx context.Context) (map[Kind]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT kind, count(*) FROM objects GROUP BY kind`)
	if err != nil {
		return nil, fmt.Errorf("count objects: %w", mapErr(err))
	}
	defer rows.Close()
	m := make(map[Kind]int64)
	for rows.Next() {
		var k, n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("count objects: %w", mapErr(err))
		}
		m[Kind(k)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count objects: %w", mapErr(err))
	}
	return m, nil
}

// OpenContent returns a reader of a file's content: the chunk itself, or
// the chunks under a FileNode tree in order, each verified by hash as it
// is read. ZeroID reads as empty. Damage surfaces from Read as ErrCorrupt
// or ErrNotFound.
func (s *Store) OpenContent(ctx context.Context, id ID) (io.ReadCloser, error) {
	c := s.newContentReader(ctx, id)
	if id.IsZero() {
		return c, nil
	}
	if err := c.push(id, -1); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (s *Store) newContentReader(ctx context.Context, id ID) *contentReader {
	c := &contentReader{s: s, ctx: ctx}
	if p := s.scratches.source(id); p != "" {
		c.src = &srcFile{path: p}
	}
	return c
}

// ReadContentTo writes a file's content to w and returns the number of
// bytes written.
func (s *Store) ReadContentTo(ctx context.Context, id ID, w io.Writer) (int64, error) {
	if id.IsZero() {
		return 0, nil
	}
	c := s.newContentReader(ctx, id)
	defer c.Close()
	if err := c.push(id, -1); err != nil {
		return 0, err
	}
	return c.WriteTo(w)
}

// contentReader walks a content tree depth-first, holding one decoded
// node per level and the unread rest of the current chunk.
type contentReader struct {
	s     *Store
	ctx   context.Context
	stack []nodeCursor
	cur   []byte
	// hole is the number of zero bytes of a hole still to be read.
	hole int64
	err  error
	// ahead holds reads of the next chunks of the current level-0 node,
	// running on other goroutines: reading, decompressing and hashing
	// them overlaps with the caller's use of the current one.
	ahead []*fetch
	// src is the file the content was read from, when a scratch Writer
	// holds it and may have dropped chunks (scratch.go); fetchOff is the
	// offset of the next chunk to fetch.
	src      *srcFile
	fetchOff int64
}

// readAhead is how many chunks a content reader reads in advance.
var readAhead = max(2, runtime.GOMAXPROCS(0))

type fetch struct {
	done chan struct{}
	kind Kind
	p    []byte
	err  error
}

func (c *contentReader) startFetch(ref ChunkRef) *fetch {
	f := &fetch{done: make(chan struct{})}
	off := c.fetchOff
	c.fetchOff += ref.Size
	if ref.ID.IsZero() { // a hole: nothing to read
		close(f.done)
		return f
	}
	go func() {
		f.kind, f.p, f.err = c.getObject(ref.ID, off)
		close(f.done)
	}()
	return f
}

// getObject reads a chunk at offset off of the content: from the store,
// or from the content's source file when a scratch Writer dropped it.
func (c *contentReader) getObject(id ID, off int64) (Kind, []byte, error) {
	k, p, err := c.s.getObject(c.ctx, id)
	var de *droppedError
	if c.src != nil && errors.As(err, &de) {
		p, err = c.src.chunk(id, off, de.size)
		return KindChunk, p, err
	}
	return k, p, err
}

type nodeCursor struct {
	id   ID
	node *FileNode
	i    int
}

// push reads the root object id and makes it current: a chunk becomes
// c.cur, a file node is pushed on the stack. size is what the root must
// cover, or -1 for any size.
func (c *contentReader) push(id ID, size int64) error {
	k, p, err := c.getObject(id, 0)
	if err != nil {
		return fmt.Errorf("content %s: %w", id.Short(), err)
	}
	switch k {
	case KindChunk:
		if size >= 0 && int64(len(p)) != size {
			return fmt.Errorf("chunk %s: %d bytes, its file node says %d: %w", id.Short(), len(p), size, ErrCorrupt)
		}
		c.cur = p
		return nil
	case KindFile:
		n, err := DecodeFileNode(p)
		if err != nil {
			return fmt.Errorf("file node %s: %v: %w", id.Short(), err, ErrCorrupt)
		}
		if size >= 0 && n.Size() != size {
			return fmt.Errorf("file node %s covers %d bytes, its parent says %d: %w", id.Short(), n.Size(), size, ErrCorrupt)
		}
		c.stack = append(c.stack, nodeCursor{id: id, node: n})
		return nil
	}
	return fmt.Errorf("content %s is a %v, not file content: %w", id.Short(), k, ErrNotFound)
}

// next makes the next chunk current, or returns io.EOF.
func (c *contentReader) next() error {
	for len(c.stack) > 0 {
		top := &c.stack[len(c.stack)-1]
		if top.i == len(top.node.Refs) {
			c.stack = c.stack[:len(c.stack)-1]
			continue
		}
		ref := top.node.Refs[top.i]
		if top.node.Level == 0 {
			for n := len(c.ahead); n < readAhead && top.i+n < len(top.node.Refs); n++ {
				c.ahead = append(c.ahead, c.startFetch(top.node.Refs[top.i+n]))
			}
			f := c.ahead[0]
			c.ahead = c.ahead[1:]
			top.i++
			<-f.done
			k, p, err := f.kind, f.p, f.err
			if ref.ID.IsZero() {
				c.hole = ref.Size
				return nil
			}
			if err != nil {
				return fmt.Errorf("content chunk %s: %w", ref.ID.Short(), err)
			}
			if k != KindChunk {
				return fmt.Errorf("level-0 ref %s of file node %s is a %v: %w", ref.ID.Short(), top.id.Short(), k, ErrCorrupt)
			}
			if int64(len(p)) != ref.Size {
				return fmt.Errorf("chunk %s: %d bytes, its file node says %d: %w", ref.ID.Short(), len(p), ref.Size, ErrCorrupt)
			}
			c.cur = p
			return nil
		}
		top.i++
		if err := c.pushNode(ref); err != nil {
			return err
		}
	}
	return io.EOF
}

// pushNode reads the child node ref of the node on top of the stack and
// pushes it, after checking that it is one level lower and covers the
// size its parent says.
func (c *contentReader) pushNode(ref ChunkRef) error {
	k, p, err := c.s.getObject(c.ctx, ref.ID)
	if err != nil {
		return fmt.Errorf("content node %s: %w", ref.ID.Short(), err)
	}
	if k != KindFile {
		return fmt.Errorf("ref %s of a level>0 file node is a %v: %w", ref.ID.Short(), k, ErrCorrupt)
	}
	n, err := DecodeFileNode(p)
	if err != nil {
		return fmt.Errorf("file node %s: %v: %w", ref.ID.Short(), err, ErrCorrupt)
	}
	parent := c.stack[len(c.stack)-1].node
	if n.Level+1 != parent.Level || n.Size() != ref.Size {
		return fmt.Errorf("file node %s (level %d, %d bytes) does not fit its parent (level %d, %d bytes): %w",
			ref.ID.Short(), n.Level, n.Size(), parent.Level, ref.Size, ErrCorrupt)
	}
	c.stack = append(c.stack, nodeCursor{id: ref.ID, node: n})
	return nil
}

func (c *contentReader) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for len(c.cur) == 0 && c.hole == 0 {
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
	}
	if c.hole > 0 {
		n := int(min(int64(len(b)), c.hole))
		clear(b[:n])
		c.hole -= int64(n)
		return n, nil
	}
	n := copy(b, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// WriteTo lets io.Copy stream chunks without an intermediate buffer.
func (c *contentReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if c.err != nil {
			if c.err == io.EOF {
				return total, nil
			}
			return total, c.err
		}
		if c.hole > 0 {
			n, err := writeHole(w, c.hole)
			total += n
			c.hole -= n
			if err != nil {
				return total, err
			}
			continue
		}
		if len(c.cur) == 0 {
			c.err = c.next()
			continue
		}
		n, err := w.Write(c.cur)
		total += int64(n)
		c.cur = c.cur[n:]
		if err != nil {
			return total, err
		}
	}
}

// HoleWriter is a writer that can skip n bytes, leaving a hole that reads
// as zeros (a sparse file). ReadContentTo calls WriteHole for the holes of
// sparse content when its writer is a HoleWriter, and writes zeros
// otherwise. The writer must make the skipped bytes exist even when the
// content ends with a hole (e.g. by ftruncate once done).
type HoleWriter interface {
	io.Writer
	WriteHole(n int64) error
}

var zeros = make([]byte, 64<<10)

// writeHole writes n zero bytes to w: as a hole if w can, else as zeros.
func writeHole(w io.Writer, n int64) (int64, error) {
	if hw, ok := w.(HoleWriter); ok {
		if err := hw.WriteHole(n); err != nil {
			return 0, err
		}
		return n, nil
	}
	var done int64
	for done < n {
		m, err := w.Write(zeros[:min(int64(len(zeros)), n-done)])
		done += int64(m)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (c *contentReader) Close() error {
	for _, f := range c.ahead { // a fetch may still read src
		<-f.done
	}
	c.ahead = nil
	c.src.close()
	c.src = nil
	c.stack, c.cur = nil, nil
	if c.err == nil {
		c.err = errors.New("content reader closed")
	}
	return nil
}
