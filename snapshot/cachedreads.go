package snapshot

import (
	"context"
	"sync"
)

// retainers is how many goroutines call Writer.Retain at once. Each call
// must reach the database before it returns (gc must see the claim), and
// the Writer serves concurrent calls in one transaction: many callers make
// few, large transactions.
const retainers = 256

// cachedReads obtains the content of files for Import and ApplyUpper.
// The stat cache's hits are confirmed first, on up to retainers goroutines
// so that the Writer batches their Retains: confirm reports whether the
// cached content could be used; a hit it refuses (gone from the store) is
// read after all. Misses and refused hits are read on workers goroutines,
// each with its own buffer. It stops at the first error, or when ctx ends.
func cachedReads[T any](ctx context.Context, workers int, hits, misses []T,
	confirm func(T) (bool, error), read func(T, *[]byte) error) error {
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }

	reads := make(chan T, 256)
	var readers sync.WaitGroup
	for i := 0; i < workers; i++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 0, 64<<10)
			for f := range reads {
				if ctx.Err() != nil {
					continue
				}
				if err := read(f, &buf); err != nil {
					fail(err)
				}
			}
		}()
	}

	hitCh := make(chan T)
	var confirmers sync.WaitGroup
	for i := 0; i < min(retainers, len(hits)); i++ {
		confirmers.Add(1)
		go func() {
			defer confirmers.Done()
			for f := range hitCh {
				if ctx.Err() != nil {
					continue
				}
				ok, err := confirm(f)
				switch {
				case err != nil:
					fail(err)
				case !ok:
					select {
					case reads <- f:
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	go func() {
		defer close(hitCh)
		for _, f := range hits {
			select {
			case hitCh <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	for _, f := range misses {
		if ctx.Err() != nil {
			break
		}
		reads <- f
	}
	confirmers.Wait()
	close(reads)
	readers.Wait()
	if firstErr == nil {
		firstErr = outer.Err()
	}
	return firstErr
}
