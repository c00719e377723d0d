//go:build !linux || !cgo

package cuda

import "errors"

// openEmulator: the kernel emulator is C++ reached through cgo.
func openEmulator(int) (gpuCtx, error) {
	return nil, errors.New("cuda: the kernel emulator needs cgo on linux")
}
