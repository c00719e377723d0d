//go:build linux && cgo

package dpdk

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wextra -DALLOW_EXPERIMENTAL_API
#include <stdlib.h>
#include "sl_dpdk.h"
*/
import "C"

import (
	"unsafe"
)

// errBufLen is the size of the buffers C functions write error messages to.
const errBufLen = 512

// cErr is a C-side error message buffer (Go memory, passed to C).
type cErr [errBufLen]C.char

func (e *cErr) ptr() *C.char { return &e[0] }

func (e *cErr) String() string { return C.GoString(&e[0]) }

// cstr returns a C copy of s; free it with C.free.
func cstr(s string) *C.char { return C.CString(s) }

func cfree(p *C.char) { C.free(unsafe.Pointer(p)) }
