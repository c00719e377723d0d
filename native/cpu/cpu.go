// Package cpu is the Go face of sluice's C CPU engine (sluice_cpu.h): the
// pool of pinned worker threads ("units"), streams with their preemption
// flag and execution index, kernels (grids of idempotent blocks) and the C
// memory they use. The engine compiler (libml/engine) decides what the
// kernels are; the cpu backend (libml/cpu) fills and launches them.
//
// Every pointer stored in a kernel must point into C memory (Alloc), never
// into Go memory: kernels outlive the cgo call that fills them.
package cpu

/*
#cgo CFLAGS: -O3 -std=gnu11
#cgo LDFLAGS: -lm -lpthread
#include <stdlib.h>
#include "sluice_cpu.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Kernel operations, as in sluice_cpu.h's enum sk_op.
const (
	OpNop        = int32(C.SK_OP_NOP)
	OpGemm       = int32(C.SK_OP_GEMM)
	OpConv       = int32(C.SK_OP_CONV)
	OpIm2col     = int32(C.SK_OP_IM2COL)
	OpDWConv     = int32(C.SK_OP_DWCONV)
	OpCol2im     = int32(C.SK_OP_COL2IM)
	OpPool       = int32(C.SK_OP_POOL)
	OpGPool      = int32(C.SK_OP_GPOOL)
	OpUnary      = int32(C.SK_OP_UNARY)
	OpBinary     = int32(C.SK_OP_BINARY)
	OpChAffine   = int32(C.SK_OP_CHAFFINE)
	OpSoftmax    = int32(C.SK_OP_SOFTMAX)
	OpLayerNorm  = int32(C.SK_OP_LAYERNORM)
	OpReduce     = int32(C.SK_OP_REDUCE)
	OpCopy       = int32(C.SK_OP_COPY)
	OpResize     = int32(C.SK_OP_RESIZE)
	OpGather     = int32(C.SK_OP_GATHER)
	OpQuant      = int32(C.SK_OP_QUANT)
	OpQGemm      = int32(C.SK_OP_QGEMM)
	OpGridSample = int32(C.SK_OP_GRIDSAMPLE)
	OpTopK       = int32(C.SK_OP_TOPK)
	OpRoiAlign   = int32(C.SK_OP_ROIALIGN)
	OpDet        = int32(C.SK_OP_DET)
	OpCount      = int32(C.SK_OP_COUNT)
)

// Table sizes, as in sluice_cpu.h.
const (
	MaxIn    = int(C.SK_MAX_IN)
	NumP     = int(C.SK_NP)
	NumF     = int(C.SK_NF)
	MaxUnits = int(C.SK_MAX_UNITS)
	MaxRank  = int(C.SK_MAX_RANK)
	ActCount = int(C.SK_ACT_COUNT)
	BinCount = int(C.SK_BIN_COUNT)
	RedCount = int(C.SK_RED_COUNT)
	// PAct, FActA and FActB are the epilogue's activation slots.
	PAct  = int(C.SKP_ACT)
	FActA = int(C.SKF_ACT_A)
	FActB = int(C.SKF_ACT_B)
	// PStore is the slot that says which operands are stored as bytes
	// (2 bits each: the output, then in[0], in[1], ...; 1 uint8, 2 int8).
	PStore = int(C.SKP_STORE)
	// FlagInPlace marks a kernel that reads and writes the same memory.
	FlagInPlace = int32(C.SK_KF_INPLACE)
	// GemmPanel is the column count of a panel of B stored in panels, and
	// PGemmPanels the GEMM slot that says B is (sk_gemm_panels).
	GemmPanel    = int(C.SK_PANEL)
	PGemmPanels  = int(C.SKP_GEMM_PANELS)
	PGemmAPanels = int(C.SKP_GEMM_APANELS)
	PGemmTProd   = int(C.SKP_GEMM_TPROD)
	PConvWPanels = int(C.SKP_CONV_WPANELS)
	// PDWPointwise and the slots after it describe a DWCONV's fused
	// pointwise producer (sluice_cpu.h).
	PDWPointwise       = int(C.SKP_DWP)
	PDWPointwiseC      = int(C.SKP_DWP_C0)
	PDWPointwisePanels = int(C.SKP_DWP_PANELS)
	PDWPointwiseLda    = int(C.SKP_DWP_LDA)
	PDWPointwiseAct    = int(C.SKP_DWP_ACT)
	FDWPointwiseA      = int(C.SKF_DWP_A)
	FDWPointwiseB      = int(C.SKF_DWP_B)
	InDWPointwiseW     = int(C.SKI_DWP_W)
	InDWPointwiseB     = int(C.SKI_DWP_B)
)

// ChecksCompiled reports whether the preemption prologue and in-block checks
// are compiled in (false only in builds tagged sluice_nopreempt).
func ChecksCompiled() bool { return C.sk_checks() != 0 }

// Alloc returns n bytes of zeroed, 64-byte aligned C memory. Large
// allocations are fresh pages: they cost resident memory only once touched.
func Alloc(n int) (unsafe.Pointer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: alloc %d bytes", n)
	}
	p := C.sk_alloc(C.size_t(n))
	if p == nil {
		return nil, fmt.Errorf("cpu: alloc %d bytes: out of memory", n)
	}
	return p, nil
}

// Free releases memory from Alloc; n must be the size passed to Alloc.
func Free(p unsafe.Pointer, n int) {
	if p != nil {
		C.sk_free(p, C.size_t(n))
	}
}

// Pool is a set of worker threads, the compute units.
type Pool struct {
	p     *C.sk_pool
	units int
}

// NewPool starts units worker threads, pinned to the process's CPUs
// round-robin when pin is set.
func NewPool(units int, pin bool) (*Pool, error) {
	if units < 1 || units > MaxUnits {
		return nil, fmt.Errorf("cpu: %d units: want 1..%d", units, MaxUnits)
	}
	pi := C.int(0)
	if pin {
		pi = 1
	}
	p := C.sk_pool_create(C.int(units), pi)
	if p == nil {
		return nil, errors.New("cpu: cannot start the worker pool")
	}
	return &Pool{p: p, units: units}, nil
}

// Units is the number of worker threads.
func (p *Pool) Units() int { return p.units }

// Close stops the workers. Every stream must be closed first.
func (p *Pool) Close() {
	if p.p != nil {
		C.sk_pool_destroy(p.p)
		p.p = nil
	}
}

// Stream is an in-order queue of launched kernels with a preemption flag and
// an execution index (REEF §4). One goroutine at a time may launch on it.
type Stream struct {
	s    *C.sk_stream
	flag *int32
}

// NewStream makes a stream whose queue holds up to capacity kernels.
func (p *Pool) NewStream(capacity int) (*Stream, error) {
	s := C.sk_stream_create(p.p, C.int(capacity))
	if s == nil {
		return nil, errors.New("cpu: cannot create a stream (too many streams?)")
	}
	return &Stream{s: s, flag: (*int32)(unsafe.Pointer(C.sk_stream_flag(s)))}, nil
}

// Close evicts whatever is queued and returns the stream to its pool.
func (s *Stream) Close() {
	if s.s != nil {
		C.sk_stream_destroy(s.s)
		s.s = nil
	}
}

// Status is the outcome of running kernels on a stream.
type Status int

// Run outcomes.
const (
	Done      Status = 0
	Preempted Status = 1
)

// Run launches kernels ks[start:] on the stream (execution indices start..)
// on the units in mask (0 = all) and waits for them: one cgo call.
func (s *Stream) Run(ks *Kernels, start int, mask uint64) (Status, error) {
	if start < 0 || start > ks.n {
		return Done, fmt.Errorf("cpu: run from kernel %d of %d", start, ks.n)
	}
	r := C.sk_run(s.s, ks.base, C.int(ks.n), C.int(start), C.uint64_t(mask))
	switch r {
	case C.SK_OK:
		return Done, nil
	case C.SK_PREEMPTED:
		return Preempted, nil
	}
	return Done, errors.New("cpu: run failed: a kernel was not prepared")
}

// RunInline runs kernels [start, n) of ks on the calling thread, block by
// block, with the stream's flag and execution index as the units would
// (sk_run_inline): one cgo call, no unit woken. The blocks and their
// order within each kernel are those of Run, so the results are the
// same bit for bit; only where they run differs.
func (s *Stream) RunInline(ks *Kernels, start int) (Status, error) {
	if start < 0 || start > ks.n {
		return Done, fmt.Errorf("cpu: run from kernel %d of %d", start, ks.n)
	}
	switch C.sk_run_inline(s.s, ks.base, C.int(ks.n), C.int(start)) {
	case C.SK_OK:
		return Done, nil
	case C.SK_PREEMPTED:
		return Preempted, nil
	}
	return Done, errors.New("cpu: run failed: a kernel was not prepared")
}

// Launch appends kernel i of ks with execution index idx, runnable on the
// units in mask (0 = all). It fails when the queue is full.
func (s *Stream) Launch(ks *Kernels, i int, idx int64, mask uint64) error {
	if i < 0 || i >= ks.n {
		return fmt.Errorf("cpu: launch kernel %d of %d", i, ks.n)
	}
	if C.sk_launch(s.s, ks.at(i), C.int64_t(idx), C.uint64_t(mask)) != C.SK_OK {
		return errors.New("cpu: launch: stream queue full or kernel not prepared")
	}
	return nil
}

// Sync waits until every launched kernel completed or was evicted.
func (s *Stream) Sync() Status {
	if C.sk_stream_sync(s.s) == C.SK_PREEMPTED {
		return Preempted
	}
	return Done
}

// Preempt sets the stream's preemption flag (a plain atomic store into C
// memory, no cgo call): queued kernels are evicted, running blocks exit at
// their next check.
func (s *Stream) Preempt() { atomic.StoreInt32(s.flag, 1) }

// Preempting reports whether the flag is set.
func (s *Stream) Preempting() bool { return atomic.LoadInt32(s.flag) != 0 }

// Restore clears the flag so the stream runs again; call it after Sync.
func (s *Stream) Restore() { atomic.StoreInt32(s.flag, 0) }

// ExecIndex is the execution index last recorded by a block prologue, -1
// when none ran since ResetIndex.
func (s *Stream) ExecIndex() int64 { return int64(C.sk_stream_exec_index(s.s)) }

// ResetIndex sets the execution index to -1.
func (s *Stream) ResetIndex() { C.sk_stream_reset_index(s.s) }

// SetProfile turns per-block timing (kernel statistics) on or off.
func (s *Stream) SetProfile(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.sk_stream_profile(s.s, v)
}

// PreemptAt arms a test hook: the stream preempts itself once blk blocks of
// the kernel with execution index idx have been claimed (claims may come
// from both ends of a kernel: blk counts them; 0 stops the kernel before any
// block runs). idx < 0 disarms it.
func (s *Stream) PreemptAt(idx, blk int64) {
	C.sk_stream_preempt_at(s.s, C.int64_t(idx), C.int64_t(blk))
}

// Kernels is an array of kernels in C memory.
type Kernels struct {
	base *C.sk_kernel
	n    int
}

// NewKernels allocates n zeroed kernels.
func NewKernels(n int) (*Kernels, error) {
	if n < 1 {
		n = 1
	}
	p, err := Alloc(n * int(C.sizeof_sk_kernel))
	if err != nil {
		return nil, err
	}
	return &Kernels{base: (*C.sk_kernel)(p), n: n}, nil
}

// KernelBytes is the size of one kernel descriptor.
const KernelBytes = int(C.sizeof_sk_kernel)

// Len is the number of kernels.
func (ks *Kernels) Len() int { return ks.n }

// Free releases the array.
func (ks *Kernels) Free() {
	if ks.base != nil {
		Free(unsafe.Pointer(ks.base), ks.n*int(C.sizeof_sk_kernel))
		ks.base = nil
	}
}

func (ks *Kernels) at(i int) *C.sk_kernel {
	return (*C.sk_kernel)(unsafe.Add(unsafe.Pointer(ks.base), i*int(C.sizeof_sk_kernel)))
}

// Desc is everything the Go side sets in a kernel.
type Desc struct {
	Op    int32
	Flags int32
	Out   unsafe.Pointer
	In    [MaxIn]unsafe.Pointer
	Aux   unsafe.Pointer // int64 array (GATHER indices)
	P     [NumP]int64
	F     [NumF]float32
}

// Set fills kernel i from d and prepares it (grid, tiling, scratch) for a
// pool of units.
func (ks *Kernels) Set(i int, d *Desc, units int) error {
	if i < 0 || i >= ks.n {
		return fmt.Errorf("cpu: kernel %d of %d", i, ks.n)
	}
	k := ks.at(i)
	*k = C.sk_kernel{}
	k.op = C.int32_t(d.Op)
	k.flags = C.int32_t(d.Flags)
	k.out = (*C.float)(d.Out)
	for j := 0; j < MaxIn; j++ {
		k.in[j] = (*C.float)(d.In[j])
	}
	k.aux = (*C.int64_t)(d.Aux)
	for j := 0; j < NumP; j++ {
		k.p[j] = C.int64_t(d.P[j])
	}
	for j := 0; j < NumF; j++ {
		k.f[j] = C.float(d.F[j])
	}
	if C.sk_kernel_prepare(k, C.int(units)) != C.SK_OK {
		return fmt.Errorf("cpu: kernel %d (op %d): bad parameters %v", i, d.Op, d.P)
	}
	return nil
}

// Info is a kernel's metadata and measured statistics.
type Info struct {
	Op    int32
	Flags int32
	// Grid is the number of blocks; Scratch the per-unit scratch floats a
	// block needs.
	Grid, Scratch int64
	// Blocks and BlockNs accumulate executed blocks and their time (only
	// while the stream profiles); Runs and WallNs whole-kernel executions.
	Blocks, BlockNs, Runs, WallNs int64
}

// Info returns kernel i's metadata and statistics.
func (ks *Kernels) Info(i int) Info {
	k := ks.at(i)
	return Info{
		Op: int32(k.op), Flags: int32(k.flags),
		Grid: int64(k.grid), Scratch: int64(k.scratch),
		Blocks:  atomic.LoadInt64((*int64)(unsafe.Pointer(&k.stat_blocks))),
		BlockNs: atomic.LoadInt64((*int64)(unsafe.Pointer(&k.stat_block_ns))),
		Runs:    atomic.LoadInt64((*int64)(unsafe.Pointer(&k.stat_runs))),
		WallNs:  atomic.LoadInt64((*int64)(unsafe.Pointer(&k.stat_wall_ns))),
	}
}

// Tiling returns kernel i's tiling words as its prepare step set them
// (their meaning is the operator's: for GEMM the tile's rows and columns,
// the row and column tile counts, the rows per sgemm call).
func (ks *Kernels) Tiling(i int) []int64 {
	k := ks.at(i)
	t := make([]int64, len(k.t))
	for j := range t {
		t[j] = int64(k.t[j])
	}
	return t
}

// ResetStats zeroes every kernel's statistics.
func (ks *Kernels) ResetStats() {
	for i := 0; i < ks.n; i++ {
		k := ks.at(i)
		k.stat_blocks, k.stat_block_ns, k.stat_runs, k.stat_wall_ns, k.stat_t0 = 0, 0, 0, 0, 0
	}
}

// RunBlock runs block blk of kernel i on the calling thread, without the
// prologue (tests and the idempotence tracer use it).
func (ks *Kernels) RunBlock(i int, blk int64) {
	ctx := (*C.sk_ctx)(C.calloc(1, C.sizeof_sk_ctx))
	defer C.free(unsafe.Pointer(ctx))
	ctx.flag = (*C.int32_t)(C.calloc(1, 4))
	C.sk_kernel_run_block(ks.at(i), C.int64_t(blk), ctx)
	C.free(unsafe.Pointer(ctx.scratch))
	C.free(unsafe.Pointer(ctx.flag))
}

// QGEMM micro-kernels (SetQGemmKernel).
const (
	QGemmBest     = int(C.SK_QGEMM_BEST)     // the best the CPU has (AMX, VNNI, AVX2, C)
	QGemmPortable = int(C.SK_QGEMM_PORTABLE) // portable C
	QGemmNoVNNI   = int(C.SK_QGEMM_NO_VNNI)  // the best without VNNI or AMX
	QGemmNoAMX    = int(C.SK_QGEMM_NO_AMX)   // the best without AMX
)

// SetQGemmKernel picks the integer GEMM's micro-kernel (QGemmBest,
// QGemmPortable, QGemmNoVNNI, QGemmNoAMX), for tests and benchmarks: the sums are
// exact, so every choice gives the same bits.
func SetQGemmKernel(which int) { C.sk_qgemm_set_kernel(C.int(which)) }

// QGemmAMX reports whether the CPU runs the integer GEMM on AMX tiles:
// they take an integer convolution's product in the column form
// (engine.Options.NoConvRows).
func QGemmAMX() bool { return C.sk_qgemm_amx() != 0 }
