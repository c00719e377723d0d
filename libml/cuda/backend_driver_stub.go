//go:build !linux || !cgo

package cuda

import "sluice/libml/cuda/cudrv"

// openDriver reports ErrNoDriver: without cgo there is no libcuda.
func openDriver(string, int) (gpuCtx, error) {
	_, err := cudrv.Open()
	return nil, err
}
