// Package emu runs sluice's CUDA kernels (native/cuda) on the CPU, for
// libml/cuda's tests on machines without a GPU.
//
// The kernels compile as C++ with -DSG_EMU (the .cc files here are links
// to native/cuda/*.cu); native/cuda/emu/sg_emu.cc runs each block's
// threads as coroutines that meet at barriers and warp shuffles, so a
// kernel's indexing, bounds, barriers and results are checked exactly as
// written for the GPU. Kernels take the same packed parameter buffer as
// cuLaunchKernel. "Device memory" is host memory: Alloc returns a host
// address as a uint64.
package emu

/*
#cgo CXXFLAGS: -std=c++17 -O2 -DSG_EMU -fno-exceptions -fno-rtti -Wall -Wextra -Wno-unknown-pragmas -I${SRCDIR}/../../../../native/cuda
#cgo LDFLAGS: -static-libstdc++
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "sg_emu_api.h"

static void emu_write(uint64_t dst, const void *src, size_t n) { memcpy((void *)(uintptr_t)dst, src, n); }
static void emu_read(void *dst, uint64_t src, size_t n) { memcpy(dst, (const void *)(uintptr_t)src, n); }
static uint64_t emu_alloc(size_t n) { return (uint64_t)(uintptr_t)calloc(1, n ? n : 1); }
static void emu_free(uint64_t p) { free((void *)(uintptr_t)p); }
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// Threads is the block size every kernel takes.
const Threads = 256

// The emulator has one set of coroutine stacks: launches are serialized.
var mu sync.Mutex

// Options are the emulator's test hooks.
type Options struct {
	// SMs is the SM count behind %smid: block b runs on SM b % SMs
	// (default 8).
	SMs int
	// Reverse runs the blocks last to first (blocks must not depend on
	// their order).
	Reverse bool
	// Preempt sets the launch's stream flag (parameter 0) before block
	// PreemptBlock starts or, when PreemptAfterSyncs > 0, once that block
	// has completed that many barriers: the host's preemption, mid-kernel.
	Preempt           bool
	PreemptBlock      int64
	PreemptAfterSyncs int64
	// PreemptAddr is the address of the flag to set (0: the launch's
	// own stream flag, at its parameter 0).
	PreemptAddr uint64
}

// Kernels lists the kernels the emulator knows.
func Kernels() []string {
	buf := make([]byte, 1<<14)
	n := C.sg_emu_kernels((*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	if n < 0 {
		return nil
	}
	return strings.Fields(string(buf[:n]))
}

// Launch runs kernel name over grid blocks of block threads with the
// packed parameter buffer params.
func Launch(name string, grid, block int, params []byte, opt Options) error {
	if grid < 0 || block < 1 {
		return fmt.Errorf("emu: launch %s: grid %d, block %d", name, grid, block)
	}
	if len(params) < 16 {
		return errors.New("emu: launch " + name + ": parameter buffer too short")
	}
	if opt.SMs <= 0 {
		opt.SMs = 8
	}
	pre := int64(-1)
	if opt.Preempt {
		pre = opt.PreemptBlock
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	// a C copy: the emulator keeps the pointer for the whole launch
	cp := C.malloc(C.size_t(len(params)))
	defer C.free(cp)
	C.memcpy(cp, unsafe.Pointer(&params[0]), C.size_t(len(params)))
	var errbuf [512]C.char
	mu.Lock()
	rev := C.int(0)
	if opt.Reverse {
		rev = 1
	}
	rc := C.sg_emu_launch(cname, C.uint(grid), C.uint(block), cp, C.int(opt.SMs), rev,
		C.longlong(pre), C.longlong(opt.PreemptAfterSyncs), C.ulonglong(opt.PreemptAddr),
		&errbuf[0], C.int(len(errbuf)))
	mu.Unlock()
	if rc != 0 {
		return errors.New("emu: " + C.GoString(&errbuf[0]))
	}
	return nil
}

// Alloc returns n zeroed bytes of emulated device memory.
func Alloc(n int) uint64 { return uint64(C.emu_alloc(C.size_t(n))) }

// Free releases memory from Alloc.
func Free(p uint64) { C.emu_free(C.uint64_t(p)) }

// Write copies src to emulated device memory at dst.
func Write(dst uint64, src []byte) {
	if len(src) > 0 {
		C.emu_write(C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	}
}

// Read copies emulated device memory at src into dst.
func Read(dst []byte, src uint64) {
	if len(dst) > 0 {
		C.emu_read(unsafe.Pointer(&dst[0]), C.uint64_t(src), C.size_t(len(dst)))
	}
}
