package cuda

import "sluice/libml/cuda/cudrv"

// ErrNoDriver means the CUDA driver library (libcuda.so.1) is not
// installed: the machine has no NVIDIA driver, or the binary was built
// without cgo. It is the driver binding's error (cudrv.ErrNoDriver), so
// errors.Is matches either name.
var ErrNoDriver = cudrv.ErrNoDriver

// ErrNoGreen means the driver has no green contexts (driver API < 12.4).
// It is the driver binding's error (cudrv.ErrNoGreen).
var ErrNoGreen = cudrv.ErrNoGreen

// Available reports whether the CUDA driver can be used (cudrv.Available).
// When it cannot, the first call that passes a logf logs why, once per
// process.
func Available(logf func(format string, args ...any)) bool {
	return cudrv.Available(logf)
}
