package cuda

import "unsafe"

// The backend reaches the device through the small interfaces below, not
// through Device directly, so that everything above the driver (memory
// plans, the virtual host queue and its device window, preemption and
// restore, green-context binding, the batch gather) runs unchanged on two
// implementations: the CUDA driver (backend_driver.go) and, in the tests,
// the CPU emulator of the kernels (backend_emu_test.go), which executes
// the same PTX sources as C++.

// gpuCtx is one execution context: the device's own, or a green-context
// partition of its SMs. Partitions share the device's memory.
type gpuCtx interface {
	// SMs is the context's multiprocessor count (the partition's, for a
	// green context).
	SMs() int
	// Green reports whether the context can be partitioned.
	Green() bool
	// Alloc returns n bytes of device memory (contents undefined); Free
	// releases it.
	Alloc(n int) (uint64, error)
	Free(p uint64) error
	// Write and Read copy between host and device memory and return once
	// the copy is done.
	Write(dst uint64, b []byte) error
	Read(b []byte, src uint64) error
	// HostAlloc returns n zeroed bytes of pinned host memory the device
	// reads and writes over the bus.
	HostAlloc(n int) (pinned, error)
	// NewStream makes a stream (lower priority numbers are higher
	// priorities) whose kernels run on this context's SMs.
	NewStream(priority int) (gpuStream, error)
	// NewEvent makes an event for this context's streams.
	NewEvent() (gpuEvent, error)
	// Partition splits a green context of the SMs [first, first+sms)
	// off the device (first a multiple of SMGroups' gran, sms rounded up
	// to it; ranges that do not overlap share no SM). It shares this
	// context's memory.
	Partition(first, sms int) (gpuCtx, error)
	// SMGroups is how Partition cuts the device: n groups of gran SMs
	// (n x gran can be fewer than SMs); a partition starts on a group and
	// spans whole groups.
	SMGroups() (n, gran int, err error)
	// RegisterHost pins and maps n bytes of C memory at p and returns
	// their device address; UnregisterHost undoes it.
	RegisterHost(p unsafe.Pointer, n int) (uint64, error)
	UnregisterHost(p unsafe.Pointer) error
	// Close releases the context (a partition: only the partition).
	Close() error
}

// gpuStream is a stream: work queued on it runs in order.
type gpuStream interface {
	// Launch queues kernel over grid blocks with a packed parameter
	// buffer (Pack).
	Launch(kernel string, grid int, params []byte) error
	// WriteAsync queues a copy of src[off:off+n] to device address dst;
	// ReadAsync one of n bytes at device address src into dst[off:].
	WriteAsync(dst uint64, src pinned, off, n int) error
	ReadAsync(dst pinned, off int, src uint64, n int) error
	// Sync waits until everything queued has run.
	Sync() error
	Close() error
}

// gpuEvent marks a point in a stream.
type gpuEvent interface {
	// Record places the event after the work queued on s so far.
	Record(s gpuStream) error
	// Sync waits until the work before the last Record has run.
	Sync() error
	Close() error
}

// pinned is page-locked host memory mapped into the device's address
// space.
type pinned interface {
	// Dev is the buffer's device address.
	Dev() uint64
	// Put copies b into the buffer at off; Get copies out of it.
	Put(off int, b []byte)
	Get(off int, b []byte)
	Free() error
}

// f32view views a float32 slice as bytes (no copy).
func f32view(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// i64view views an int64 slice as bytes (no copy).
func i64view(v []int64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
}
