package cudrv

import (
	"errors"
	"fmt"
)

// ErrNoDriver means the CUDA driver library (libcuda.so.1) is not
// installed: the machine has no NVIDIA driver, or the binary was built
// without cgo.
var ErrNoDriver = errors.New("cuda: no CUDA driver (libcuda.so.1 not found)")

// ErrNoGreen means the driver has no green contexts (driver API < 12.4).
var ErrNoGreen = errors.New("cuda: driver has no green contexts")

// Error is a failed driver call.
type Error struct {
	// Op is the driver call, Code its CUresult, Name and Msg the
	// driver's name and description of it.
	Op   string
	Code int
	Name string
	Msg  string
}

// Error formats the call, the driver's name of the result and its
// description.
func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = fmt.Sprintf("CUresult %d", e.Code)
	}
	if e.Msg != "" {
		return fmt.Sprintf("cuda: %s: %s (%s)", e.Op, name, e.Msg)
	}
	return fmt.Sprintf("cuda: %s: %s", e.Op, name)
}
