package hotpath

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// LayerLock takes the store's layer lock (layout.LayersLock): shared
// while a workspace's stack is computed (or read from its spec file) and
// mounted, exclusive while gc evicts layers. The returned function
// releases it.
func LayerLock(file string, exclusive bool) (func(), error) {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("layer lock: %w", err)
	}
	return func() { f.Close() }, nil
}
