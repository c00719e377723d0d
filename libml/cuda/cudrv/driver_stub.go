//go:build !linux || !cgo

package cudrv

import (
	"fmt"
	"sync"
)

var logOnce sync.Once

// Open reports ErrNoDriver: this build has no cgo (or is not linux), so
// it cannot load libcuda.
func Open() (*Driver, error) {
	return nil, fmt.Errorf("%w: built without cgo", ErrNoDriver)
}

// OpenLib loads the named library instead of libcuda.so.1; tests use a
// fake driver. Without cgo it reports ErrNoDriver, as Open does.
func OpenLib(string) (*Driver, error) { return Open() }

// Available reports false; the first call with a logf logs why.
func Available(logf func(format string, args ...any)) bool {
	if logf != nil {
		logOnce.Do(func() { logf("cuda: GPU backend unavailable: built without cgo") })
	}
	return false
}
