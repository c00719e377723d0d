//go:build !linux || !cgo

package cuda

// openDriver reports ErrNoDriver: without cgo there is no libcuda.
func openDriver(string, int) (gpuCtx, error) {
	_, err := Open()
	return nil, err
}
