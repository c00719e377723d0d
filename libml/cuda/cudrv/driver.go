//go:build linux && cgo

package cudrv

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "cudrv.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// The driver is loaded once per process.
var loader struct {
	once    sync.Once
	drv     *Driver
	err     error
	logOnce sync.Once
}

// Open loads the CUDA driver (libcuda.so.1) and initializes it. It returns
// an error wrapping ErrNoDriver when the library is not installed, and
// the driver's error when cuInit fails (no device, driver too old). The
// result is computed once; every call returns the same Driver.
func Open() (*Driver, error) {
	loader.once.Do(func() { loader.drv, loader.err = OpenLib("") })
	return loader.drv, loader.err
}

// OpenLib loads the named library instead of libcuda.so.1 ("" is
// libcuda.so.1) and initializes it; tests use a fake driver (or name a
// missing library). Unlike Open it loads on every call, but the entry
// points stay those of the first library that loaded, for the life of
// the process.
func OpenLib(libname string) (*Driver, error) {
	var cname *C.char
	if libname != "" {
		cname = C.CString(libname)
		defer C.free(unsafe.Pointer(cname))
	}
	var errbuf [256]C.char
	switch C.sl_cu_open(cname, &errbuf[0], C.int(len(errbuf))) {
	case 0:
	case 1:
		return nil, fmt.Errorf("%w: %s", ErrNoDriver, C.GoString(&errbuf[0]))
	default:
		return nil, fmt.Errorf("cuda: driver too old: %s", C.GoString(&errbuf[0]))
	}
	if err := check("cuInit", C.sl_cu_init()); err != nil {
		return nil, err
	}
	d := &Driver{}
	var v C.int
	if err := check("cuDriverGetVersion", C.sl_cu_driver_version(&v)); err != nil {
		return nil, err
	}
	d.Version = int(v)
	var n C.int
	if err := check("cuDeviceGetCount", C.sl_cu_device_count(&n)); err != nil {
		return nil, err
	}
	d.Devices = int(n)
	d.Green = C.sl_cu_has_green() != 0
	return d, nil
}

// Available reports whether the CUDA driver can be used. When it cannot,
// the first call that passes a logf logs why, once per process.
func Available(logf func(format string, args ...any)) bool {
	_, err := Open()
	if err != nil && logf != nil {
		loader.logOnce.Do(func() { logf("cuda: GPU backend unavailable: %v", err) })
	}
	return err == nil
}

// check turns a CUresult into an error.
func check(op string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	var name, msg *C.char
	C.sl_cu_error(r, &name, &msg)
	e := &Error{Op: op, Code: int(r)}
	if name != nil {
		e.Name = C.GoString(name)
	}
	if msg != nil {
		e.Msg = C.GoString(msg)
	}
	return e
}

// Device is one GPU with a context of its own (or a green context: a
// partition of its SMs). Its methods may be called from any goroutine:
// each makes the context current for the call.
type Device struct {
	dev   C.CUdevice
	ctx   C.CUcontext
	green C.CUgreenCtx
	owner bool
	// primary: ctx is the device's retained primary context
	primary bool
	// Name is the device's name, SMs its multiprocessor count (of the
	// partition, for a green context), CC its compute capability.
	Name string
	SMs  int
	CC   [2]int
	// Memory is the device memory in bytes.
	Memory int64
}

// Device attribute numbers (CUdevice_attribute).
const (
	attrSMs     = 16
	attrCCMajor = 75
	attrCCMinor = 76
)

// Device opens device ordinal with a new context.
func (d *Driver) Device(ordinal int) (*Device, error) {
	dv, err := d.describe(ordinal)
	if err != nil {
		return nil, err
	}
	dv.owner = true
	if err := check("cuCtxCreate", C.sl_cu_ctx_create(&dv.ctx, 0, dv.dev)); err != nil {
		return nil, err
	}
	return dv, nil
}

// Primary opens device ordinal through its primary context, retained
// until Close. Green contexts share the primary context's memory (and
// retain it themselves), so a process that partitions the device
// allocates through the primary context: buffers allocated there are
// visible to kernels in every partition. A driver without the
// primary-context entry points gives an *Error (CUDA_ERROR_NOT_SUPPORTED).
func (d *Driver) Primary(ordinal int) (*Device, error) {
	dv, err := d.describe(ordinal)
	if err != nil {
		return nil, err
	}
	if err := check("cuDevicePrimaryCtxRetain", C.sl_cu_primary_retain(&dv.ctx, dv.dev)); err != nil {
		return nil, err
	}
	dv.primary = true
	return dv, nil
}

// describe looks device ordinal up: name, SMs, compute capability,
// memory; no context yet.
func (d *Driver) describe(ordinal int) (*Device, error) {
	if ordinal < 0 || ordinal >= d.Devices {
		return nil, fmt.Errorf("cuda: device %d of %d", ordinal, d.Devices)
	}
	dv := &Device{}
	if err := check("cuDeviceGet", C.sl_cu_device_get(&dv.dev, C.int(ordinal))); err != nil {
		return nil, err
	}
	var name [256]C.char
	if err := check("cuDeviceGetName", C.sl_cu_device_name(&name[0], C.int(len(name)), dv.dev)); err != nil {
		return nil, err
	}
	dv.Name = C.GoString(&name[0])
	var v C.int
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrSMs, &dv.SMs}, {attrCCMajor, &dv.CC[0]}, {attrCCMinor, &dv.CC[1]}} {
		if err := check("cuDeviceGetAttribute", C.sl_cu_device_attr(&v, C.int(a.attr), dv.dev)); err != nil {
			return nil, err
		}
		*a.dst = int(v)
	}
	var mem C.size_t
	if err := check("cuDeviceTotalMem", C.sl_cu_device_mem(&mem, dv.dev)); err != nil {
		return nil, err
	}
	dv.Memory = int64(mem)
	return dv, nil
}

// Green splits a partition of at least sms SMs off the device into a
// green context (driver API 12.4+; the driver rounds sms up to its
// granularity): GreenRange(0, sms).
func (dv *Device) Green(sms int) (*Device, error) { return dv.GreenRange(0, sms) }

// SMGroups is how GreenRange cuts the device: n groups of gran SMs each
// (n x gran can be fewer than the device's SMs: the split keeps clusters
// and GPCs whole). A range starts on a group and spans whole groups.
// ErrNoGreen when the driver lacks green contexts.
func (dv *Device) SMGroups() (n, gran int, err error) {
	if C.sl_cu_has_green() == 0 {
		return 0, 0, ErrNoGreen
	}
	var cn, cg C.uint
	if err := check("SM split", C.sl_cu_sm_groups(dv.dev, &cn, &cg)); err != nil {
		return 0, 0, err
	}
	return int(cn), int(cg), nil
}

// GreenRange splits the SMs [first, first+sms) off the device into a
// green context, in the order the driver's split takes the device's SMs:
// first must be a multiple of the split granularity (a Green(1)'s SMs),
// and sms is rounded up to it. Ranges that do not overlap are partitions
// that share no SM. The partition is a Device of its own; its streams
// run only on its SMs. ErrNoGreen when the driver lacks green contexts.
func (dv *Device) GreenRange(first, sms int) (*Device, error) {
	if C.sl_cu_has_green() == 0 {
		return nil, ErrNoGreen
	}
	if sms < 1 || first < 0 || first+sms > dv.SMs {
		return nil, fmt.Errorf("cuda: green context of SMs %d..%d of %d", first, first+sms-1, dv.SMs)
	}
	g := &Device{dev: dv.dev, Name: dv.Name, CC: dv.CC, Memory: dv.Memory}
	var got C.uint
	if err := check("green context", C.sl_cu_green_range(dv.dev, C.uint(first), C.uint(sms), &g.green, &g.ctx, &got)); err != nil {
		return nil, err
	}
	g.SMs = int(got)
	return g, nil
}

// Close destroys the device's context (or green context) and everything
// allocated in it.
func (dv *Device) Close() error {
	if dv.green != nil {
		err := check("cuGreenCtxDestroy", C.sl_cu_green_destroy(dv.green))
		dv.green, dv.ctx = nil, nil
		return err
	}
	if dv.primary && dv.ctx != nil {
		dv.ctx = nil
		return check("cuDevicePrimaryCtxRelease", C.sl_cu_primary_release(dv.dev))
	}
	if dv.ctx == nil || !dv.owner {
		return nil
	}
	err := check("cuCtxDestroy", C.sl_cu_ctx_destroy(dv.ctx))
	dv.ctx = nil
	return err
}

// Sync waits for all work in the context.
func (dv *Device) Sync() error { return check("cuCtxSynchronize", C.sl_cu_ctx_sync(dv.ctx)) }

// Function is a loaded kernel.
type Function struct {
	dev *Device
	fn  C.CUfunction
	// Name is the entry name; Regs, Shared (static bytes), Local (bytes
	// per thread) and MaxThreads come from the driver.
	Name                           string
	Regs, Shared, Local, MaxThread int
}

// Function attribute numbers (CUfunction_attribute).
const (
	funcMaxThreads = 0
	funcShared     = 1
	funcLocal      = 3
	funcRegs       = 4
)

// Kernels is a set of loaded modules and their functions by name.
type Kernels struct {
	dev  *Device
	mods []C.CUmodule
	fns  map[string]*Function
}

// LoadKernels loads the PTX modules mods into the device's context (the
// driver JIT-compiles PTX for the device; sm_80 PTX runs on sm_80 and
// later) and looks up every entry of each (EntryNames). On an error it
// unloads what it loaded.
func (dv *Device) LoadKernels(mods []Module) (*Kernels, error) {
	ks := &Kernels{dev: dv, fns: map[string]*Function{}}
	for _, m := range mods {
		if err := ks.load(m); err != nil {
			ks.Close()
			return nil, err
		}
	}
	return ks, nil
}

// load loads module m and looks up its entries.
func (ks *Kernels) load(m Module) error {
	dv := ks.dev
	img := C.CBytes(append(append([]byte(nil), m.PTX...), 0))
	defer C.free(img)
	var log [4096]C.char
	var mod C.CUmodule
	if err := check("cuModuleLoadData", C.sl_cu_module_load(dv.ctx, &mod, img, &log[0], C.uint(len(log)))); err != nil {
		return fmt.Errorf("cuda: module %s: %w: %s", m.Name, err, C.GoString(&log[0]))
	}
	ks.mods = append(ks.mods, mod)
	for _, name := range EntryNames(m.PTX) {
		cname := C.CString(name)
		var fn C.CUfunction
		err := check("cuModuleGetFunction", C.sl_cu_module_function(dv.ctx, &fn, mod, cname))
		C.free(unsafe.Pointer(cname))
		if err != nil {
			return fmt.Errorf("cuda: module %s: %s: %w", m.Name, name, err)
		}
		f := &Function{dev: dv, fn: fn, Name: name}
		var v C.int
		for _, a := range []struct {
			attr int
			dst  *int
		}{{funcRegs, &f.Regs}, {funcShared, &f.Shared}, {funcLocal, &f.Local}, {funcMaxThreads, &f.MaxThread}} {
			if err := check("cuFuncGetAttribute", C.sl_cu_func_attr(dv.ctx, &v, C.int(a.attr), fn)); err != nil {
				return fmt.Errorf("cuda: %s: %w", name, err)
			}
			*a.dst = int(v)
		}
		ks.fns[name] = f
	}
	return nil
}

// Func returns the kernel named name, or nil.
func (ks *Kernels) Func(name string) *Function { return ks.fns[name] }

// Close unloads the modules.
func (ks *Kernels) Close() error {
	var errs []error
	for _, m := range ks.mods {
		errs = append(errs, check("cuModuleUnload", C.sl_cu_module_unload(ks.dev.ctx, m)))
	}
	ks.mods = nil
	ks.fns = nil
	return errors.Join(errs...)
}

// Occupancy is how many blocks of Threads threads of f fit on one SM.
func (f *Function) Occupancy() (int, error) {
	var n C.int
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
		C.sl_cu_occupancy(f.dev.ctx, &n, f.fn, Threads, 0))
	return int(n), err
}

// Launch runs f over grid blocks of Threads threads on stream s (nil: the
// context's default stream) with the packed parameter buffer params
// (the kernel's PTX parameter layout, as libml/cuda's Pack builds it). It
// returns once the launch is queued.
func (f *Function) Launch(grid int, s *Stream, params []byte) error {
	if grid < 1 || grid > 1<<31-1 {
		return fmt.Errorf("cuda: launch %s: grid %d", f.Name, grid)
	}
	if len(params) == 0 {
		return fmt.Errorf("cuda: launch %s: no parameters", f.Name)
	}
	var st C.CUstream
	if s != nil {
		st = s.s
	}
	// cuLaunchKernel copies the parameter buffer before it returns, so
	// params is passed as it is (it holds no Go pointers): no C copy, and
	// no malloc and free crossings, per launch.
	if err := check("cuLaunchKernel", C.sl_cu_launch(f.dev.ctx, f.fn, C.uint(grid), 1, 1,
		Threads, 1, 1, 0, st, unsafe.Pointer(&params[0]), C.size_t(len(params)))); err != nil {
		return fmt.Errorf("cuda: launch %s: %w", f.Name, err)
	}
	return nil
}

// Alloc allocates n bytes of device memory.
func (dv *Device) Alloc(n int) (uint64, error) {
	var p C.CUdeviceptr
	if err := check("cuMemAlloc", C.sl_cu_mem_alloc(dv.ctx, &p, C.size_t(n))); err != nil {
		return 0, fmt.Errorf("cuda: alloc %d bytes: %w", n, err)
	}
	return uint64(p), nil
}

// Free releases device memory.
func (dv *Device) Free(p uint64) error {
	return check("cuMemFree", C.sl_cu_mem_free(dv.ctx, C.CUdeviceptr(p)))
}

// Write copies src to device memory at dst (synchronously).
func (dv *Device) Write(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD", C.sl_cu_memcpy_htod(dv.ctx, C.CUdeviceptr(dst),
		unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// Read copies device memory at src into dst (synchronously).
func (dv *Device) Read(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH", C.sl_cu_memcpy_dtoh(dv.ctx, unsafe.Pointer(&dst[0]),
		C.CUdeviceptr(src), C.size_t(len(dst))))
}

// Memset32 sets n 32-bit words at p to v (synchronously).
func (dv *Device) Memset32(p uint64, v uint32, n int) error {
	return check("cuMemsetD32", C.sl_cu_memset32(dv.ctx, C.CUdeviceptr(p), C.uint(v), C.size_t(n)))
}

// HostBuffer is pinned host memory, mapped into the device's address
// space.
type HostBuffer struct {
	dev *Device
	ptr unsafe.Pointer
	n   int
	// Dev is the buffer's device address.
	Dev uint64
}

// Host memory flags (CU_MEMHOSTALLOC_*, CU_MEMHOSTREGISTER_*).
const (
	hostPortable  = 1
	hostDeviceMap = 2
)

// HostAlloc allocates n bytes of pinned, mapped host memory (zeroed).
func (dv *Device) HostAlloc(n int) (*HostBuffer, error) {
	h := &HostBuffer{dev: dv, n: n}
	if err := check("cuMemHostAlloc", C.sl_cu_host_alloc(dv.ctx, &h.ptr, C.size_t(n), hostPortable|hostDeviceMap)); err != nil {
		return nil, fmt.Errorf("cuda: pinned alloc %d bytes: %w", n, err)
	}
	var d C.CUdeviceptr
	if err := check("cuMemHostGetDevicePointer", C.sl_cu_host_devptr(dv.ctx, &d, h.ptr)); err != nil {
		C.sl_cu_host_free(dv.ctx, h.ptr)
		return nil, err
	}
	h.Dev = uint64(d)
	clear(h.Bytes())
	return h, nil
}

// Bytes is the buffer's host view.
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.ptr), h.n) }

// Free releases the buffer.
func (h *HostBuffer) Free() error {
	if h.ptr == nil {
		return nil
	}
	err := check("cuMemFreeHost", C.sl_cu_host_free(h.dev.ctx, h.ptr))
	h.ptr = nil
	return err
}

// RegisterHost pins and maps n bytes of C (not Go) memory at p, such as
// the dataplane's packet region, and returns its device address: kernels
// then read it over the bus (the gather kernel's zero-copy input).
func (dv *Device) RegisterHost(p unsafe.Pointer, n int) (uint64, error) {
	if err := check("cuMemHostRegister", C.sl_cu_host_register(dv.ctx, p, C.size_t(n), hostPortable|hostDeviceMap)); err != nil {
		return 0, fmt.Errorf("cuda: register %d host bytes: %w", n, err)
	}
	var d C.CUdeviceptr
	if err := check("cuMemHostGetDevicePointer", C.sl_cu_host_devptr(dv.ctx, &d, p)); err != nil {
		C.sl_cu_host_unregister(dv.ctx, p)
		return 0, err
	}
	return uint64(d), nil
}

// UnregisterHost undoes RegisterHost.
func (dv *Device) UnregisterHost(p unsafe.Pointer) error {
	return check("cuMemHostUnregister", C.sl_cu_host_unregister(dv.ctx, p))
}

// Stream is a CUDA stream.
type Stream struct {
	dev *Device
	s   C.CUstream
}

// NewStream creates a stream that does not synchronize with the default
// stream; lower priority numbers are higher priorities (0 is the
// default, the range is device-specific, e.g. -5..0).
func (dv *Device) NewStream(priority int) (*Stream, error) {
	s := &Stream{dev: dv}
	var err error
	if dv.green != nil {
		err = check("cuGreenCtxStreamCreate", C.sl_cu_green_stream(dv.green, dv.ctx, &s.s, C.int(priority)))
	} else {
		// CU_STREAM_NON_BLOCKING
		err = check("cuStreamCreateWithPriority", C.sl_cu_stream_create(dv.ctx, &s.s, 1, C.int(priority)))
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Sync waits until the stream's work is done.
func (s *Stream) Sync() error {
	return check("cuStreamSynchronize", C.sl_cu_stream_sync(s.dev.ctx, s.s))
}

// Idle reports whether the stream's work is done, without waiting.
func (s *Stream) Idle() (bool, error) {
	r := C.sl_cu_stream_query(s.dev.ctx, s.s)
	if r == 600 { // CUDA_ERROR_NOT_READY
		return false, nil
	}
	return r == 0, check("cuStreamQuery", r)
}

// Close destroys the stream.
func (s *Stream) Close() error {
	return check("cuStreamDestroy", C.sl_cu_stream_destroy(s.dev.ctx, s.s))
}

// WriteAsync queues a copy of src (pinned host memory) to device memory
// at dst on the stream.
func (s *Stream) WriteAsync(dst uint64, src *HostBuffer, off, n int) error {
	if off < 0 || n < 0 || off+n > src.n {
		return fmt.Errorf("cuda: async write of [%d, %d) from a %d-byte buffer", off, off+n, src.n)
	}
	return check("cuMemcpyHtoDAsync", C.sl_cu_memcpy_htod_async(s.dev.ctx, C.CUdeviceptr(dst),
		unsafe.Add(src.ptr, off), C.size_t(n), s.s))
}

// ReadAsync queues a copy of device memory at src into pinned host
// memory on the stream.
func (s *Stream) ReadAsync(dst *HostBuffer, off int, src uint64, n int) error {
	if off < 0 || n < 0 || off+n > dst.n {
		return fmt.Errorf("cuda: async read into [%d, %d) of a %d-byte buffer", off, off+n, dst.n)
	}
	return check("cuMemcpyDtoHAsync", C.sl_cu_memcpy_dtoh_async(s.dev.ctx, unsafe.Add(dst.ptr, off),
		C.CUdeviceptr(src), C.size_t(n), s.s))
}

// Memset32Async queues setting n 32-bit words at p to v on the stream.
func (s *Stream) Memset32Async(p uint64, v uint32, n int) error {
	return check("cuMemsetD32Async", C.sl_cu_memset32_async(s.dev.ctx, C.CUdeviceptr(p), C.uint(v), C.size_t(n), s.s))
}

// Event is a CUDA event with timing.
type Event struct {
	dev *Device
	e   C.CUevent
}

// NewEvent creates an event that records time.
func (dv *Device) NewEvent() (*Event, error) {
	e := &Event{dev: dv}
	if err := check("cuEventCreate", C.sl_cu_event_create(dv.ctx, &e.e, 0)); err != nil {
		return nil, err
	}
	return e, nil
}

// Record queues the event on stream s (nil: the default stream).
func (e *Event) Record(s *Stream) error {
	var st C.CUstream
	if s != nil {
		st = s.s
	}
	return check("cuEventRecord", C.sl_cu_event_record(e.dev.ctx, e.e, st))
}

// Sync waits for the event.
func (e *Event) Sync() error { return check("cuEventSynchronize", C.sl_cu_event_sync(e.dev.ctx, e.e)) }

// Since returns the milliseconds from event start to e (both recorded
// and completed).
func (e *Event) Since(start *Event) (float32, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.sl_cu_event_elapsed(e.dev.ctx, &ms, start.e, e.e))
	return float32(ms), err
}

// Close destroys the event.
func (e *Event) Close() error { return check("cuEventDestroy", C.sl_cu_event_destroy(e.dev.ctx, e.e)) }
