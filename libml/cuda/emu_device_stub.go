//go:build !linux || !cgo

package cuda

import "errors"

// openEmulator: the kernel emulator is C++ reached through cgo.
func openEmulator(int) (gpuCtx, error) {
	return nil, errors.New("cuda: the kernel emulator needs cgo on linux")
}

// HoldFrom scripts a preemption on the kernel emulator, which needs cgo.
func (b *Backend) HoldFrom(int64) error {
	return errors.New("cuda: the kernel emulator needs cgo on linux")
}

// ReleaseHolds fails: no emulator.
func (b *Backend) ReleaseHolds() error {
	return errors.New("cuda: the kernel emulator needs cgo on linux")
}

// Holds is 0: no emulator.
func (b *Backend) Holds() int64 { return 0 }
