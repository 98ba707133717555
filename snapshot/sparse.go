package snapshot

import (
	"bufio"
	"errors"
	"io"

	"golang.org/x/sys/unix"

	"github.com/stratafs/strata/store"
)

// Sparse files. Import finds a file's holes with SEEK_DATA/SEEK_HOLE and
// stores only its data extents (store.Writer.WriteSparse); materialize and
// export write the holes back by seeking past them (sparseWriter), so a
// file with gigabytes of holes costs kilobytes everywhere. A file is
// searched for holes only when its allocated blocks cover less than its
// size, which a dense file's never do: dense files pay nothing.

// dataExtents returns the data extents of the open regular file fd of
// size bytes, and whether it has any hole. A filesystem without
// SEEK_DATA reports the whole file as data (no hole).
func dataExtents(fd int, st *unix.Stat_t) ([]store.Extent, bool) {
	size := st.Size
	if size == 0 || st.Blocks*512 >= size {
		return nil, false
	}
	var ext []store.Extent
	var off int64
	for off < size {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole from off to the end
		}
		if err != nil {
			return nil, false
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return nil, false
		}
		h = min(h, size)
		if h > d {
			ext = append(ext, store.Extent{Off: d, Len: h - d})
		}
		off = h
	}
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return nil, false
	}
	if len(ext) == 1 && ext[0].Off == 0 && ext[0].Len == size {
		return nil, false
	}
	return ext, true
}

// fdReaderAt reads a file with pread.
type fdReaderAt struct {
	fd   int
	prog *progress
}

func (r fdReaderAt) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Pread(r.fd, p[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, &readError{err}
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
		if r.prog != nil {
			r.prog.addBytes(int64(n))
		}
	}
	return done, nil
}

// sparseWriter writes content through bw into the file fd, turning the
// holes store.ReadContentTo reports into holes of the file: it flushes bw
// and seeks past them. finish sets the file's size, which a trailing hole
// would otherwise leave short.
type sparseWriter struct {
	fd    int
	bw    *bufio.Writer
	holes bool
}

func (s *sparseWriter) Write(p []byte) (int, error) { return s.bw.Write(p) }

func (s *sparseWriter) WriteHole(n int64) error {
	if err := s.bw.Flush(); err != nil {
		return err
	}
	if _, err := unix.Seek(s.fd, n, io.SeekCurrent); err != nil {
		return &writeError{err}
	}
	s.holes = true
	return nil
}

// finish flushes and, if a hole was written, truncates the file to size.
func (s *sparseWriter) finish(size int64) error {
	if err := s.bw.Flush(); err != nil {
		return err
	}
	if s.holes {
		if err := unix.Ftruncate(s.fd, size); err != nil {
			return &writeError{err}
		}
	}
	return nil
}

// writeSparse stores the file fd, whose data extents are ext, as sparse
// content. If the file shrank since ext was taken, it stores what a dense
// read gives instead (the caller's stat comparison sees the change).
func writeSparse(w objectWriter, fd int, size int64, ext []store.Extent, r *fdReader) (store.ID, int64, error) {
	id, n, err := w.WriteSparse(fdReaderAt{fd: fd, prog: r.prog}, size, ext)
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		return id, n, err
	}
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return store.ZeroID, 0, &readError{err}
	}
	return w.WriteContent(r)
}
