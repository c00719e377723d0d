//go:build !linux || !cgo

package cuda

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

func openLib(string) (*Driver, error) { return Open() }

// Available reports false; the first call with a logf logs why.
func Available(logf func(format string, args ...any)) bool {
	if logf != nil {
		logOnce.Do(func() { logf("cuda: GPU backend unavailable: built without cgo") })
	}
	return false
}
