package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"sluice/libml/cuda/cudrv"
	"sluice/native/padsel"
)

// Op is a kernel operation. The numbering is the CPU engine's (enum sk_op
// in native/cpu/sluice_cpu.h, engine.Op); the tests check that they agree.
type Op int32

// Kernel operations.
const (
	OpNop        Op = 0
	OpGemm       Op = 1
	OpConv       Op = 2
	OpIm2col     Op = 3
	OpDWConv     Op = 4
	OpCol2im     Op = 5
	OpPool       Op = 6
	OpGPool      Op = 7
	OpUnary      Op = 8
	OpBinary     Op = 9
	OpChAffine   Op = 10
	OpSoftmax    Op = 11
	OpLayerNorm  Op = 12
	OpReduce     Op = 13
	OpCopy       Op = 14
	OpResize     Op = 15
	OpGather     Op = 16
	OpQuant      Op = 17
	OpQGemm      Op = 18
	OpGridSample Op = 19
	OpTopK       Op = 20
	OpRoiAlign   Op = 21
	OpDet        Op = 22
	OpCount      Op = 23
)

// opKernels names each operation's kernel entry.
var opKernels = [OpCount]string{
	OpGemm: "sg_gemm", OpConv: "sg_conv", OpIm2col: "sg_im2col",
	OpDWConv: "sg_dwconv", OpCol2im: "sg_col2im", OpPool: "sg_pool",
	OpGPool: "sg_gpool", OpUnary: "sg_unary", OpBinary: "sg_binary",
	OpChAffine: "sg_chaffine", OpSoftmax: "sg_softmax",
	OpLayerNorm: "sg_layernorm", OpReduce: "sg_reduce", OpCopy: "sg_copy",
	OpResize: "sg_resize", OpGather: "sg_gather",
	OpQuant: "sg_quant", OpQGemm: "sg_qgemm", OpGridSample: "sg_gridsample", OpTopK: "sg_topk", OpRoiAlign: "sg_roialign",
	OpDet: "sg_det",
}

// KernelName is the name of op's kernel entry ("" for OpNop and unknown
// operations).
func (o Op) KernelName() string {
	if o > OpNop && o < OpCount {
		return opKernels[o]
	}
	return ""
}

// String is the operation's short name.
func (o Op) String() string {
	if n := o.KernelName(); n != "" {
		return n[3:]
	}
	if o == OpNop {
		return "nop"
	}
	return fmt.Sprintf("op%d", int32(o))
}

// The special kernels, beside the operators.
const (
	// KernelBatchGather copies request fragments into a batch tensor.
	KernelBatchGather = "sg_batch_gather"
	// KernelClock records %globaltimer and %smid per block.
	KernelClock = "sg_clock"
	// KernelSpin spins until preempted: the preemption-latency probe.
	KernelSpin = "sg_spin"
	// KernelPad is the dynamic-padding kernel (REEF §5).
	KernelPad = "sg_pad"
)

// KernelNames lists every kernel entry the Go side expects in the
// embedded PTX.
func KernelNames() []string {
	var out []string
	for o := OpNop + 1; o < OpCount; o++ {
		out = append(out, opKernels[o])
	}
	return append(out, KernelBatchGather, KernelClock, KernelSpin, KernelPad)
}

// Sizes of the argument record (native/cuda/sg.h, sluice_cpu.h).
const (
	MaxIn = 8
	NumP  = 32
	NumF  = 8
	NumT  = 8
	// ArgsSize is the size of sg_args.
	ArgsSize = 432
	// Threads is the block size of every kernel (the driver binding's
	// launch block size).
	Threads = cudrv.Threads
	// ElemsPerBlock is the output elements per block of the elementwise
	// kernels.
	ElemsPerBlock = 1024
	// Tile is the GEMM and convolution output tile (Tile x Tile) of
	// their default version (0); SmallTile is that of version 1.
	Tile      = 64
	SmallTile = 32
)

// Shared slots of Args.P, Args.F and Args.T.
const (
	// PAct is the P slot of a fused activation, FActA and FActB its float
	// parameters (as in the CPU engine).
	PAct  = 31
	FActA = 6
	FActB = 7
	// TBase is the T slot of the first block: a launch of g blocks runs
	// blocks T[TBase] .. T[TBase]+g-1 of the kernel's grid.
	TBase = 7
	// TVersion is the T slot of a multi-version kernel's version
	// (PlanVersion): GEMM and CONV read their output tile from it.
	TVersion = 2
)

// Args is sg_args: an operator kernel's arguments. Out, In and Aux are
// device addresses (0 for absent optional inputs); P and F are the CPU
// engine's parameters (engine.Kernel.P, .F); T is the GPU tiling, filled
// by Plan.
type Args struct {
	Out uint64
	In  [MaxIn]uint64
	Aux uint64
	P   [NumP]int64
	F   [NumF]float32
	T   [NumT]int64
}

// Byte offsets of sg_args fields.
const (
	offArgsOut = 0
	offArgsIn  = 8
	offArgsAux = 72
	offArgsP   = 80
	offArgsF   = 336
	offArgsT   = 368
)

// Encode writes a in sg_args layout (little endian) to b[:ArgsSize].
func (a *Args) Encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[offArgsOut:], a.Out)
	for i, v := range a.In {
		le.PutUint64(b[offArgsIn+8*i:], v)
	}
	le.PutUint64(b[offArgsAux:], a.Aux)
	for i, v := range a.P {
		le.PutUint64(b[offArgsP+8*i:], uint64(v))
	}
	for i, v := range a.F {
		le.PutUint32(b[offArgsF+4*i:], math.Float32bits(v))
	}
	for i, v := range a.T {
		le.PutUint64(b[offArgsT+8*i:], uint64(v))
	}
}

// Decode reads an sg_args record from b[:ArgsSize].
func (a *Args) Decode(b []byte) {
	le := binary.LittleEndian
	a.Out = le.Uint64(b[offArgsOut:])
	for i := range a.In {
		a.In[i] = le.Uint64(b[offArgsIn+8*i:])
	}
	a.Aux = le.Uint64(b[offArgsAux:])
	for i := range a.P {
		a.P[i] = int64(le.Uint64(b[offArgsP+8*i:]))
	}
	for i := range a.F {
		a.F[i] = math.Float32frombits(le.Uint32(b[offArgsF+4*i:]))
	}
	for i := range a.T {
		a.T[i] = int64(le.Uint64(b[offArgsT+8*i:]))
	}
}

// State layout (sg_state): one per stream, in device memory.
const (
	// StateSize is the size of sg_state.
	StateSize = 64
	// StateFlag is the offset of the int32 preemption flag.
	StateFlag = 0
	// StateExec is the offset of the int64 execution index of the last
	// kernel a block started.
	StateExec = 8
	// StateRing, StateRingMask and StateRingHead locate the trace ring:
	// its device address (0 = tracing off), slots-1, and the count of
	// slots claimed.
	StateRing     = 16
	StateRingMask = 24
	StateRingHead = 32
)

// EncodeState returns a fresh sg_state: flag clear, execution index -1,
// tracing into the ring at device address ring (slots a power of two),
// or off when ring is 0.
func EncodeState(ring uint64, slots int) ([]byte, error) {
	b := make([]byte, StateSize)
	le := binary.LittleEndian
	le.PutUint64(b[StateExec:], math.MaxUint64) // -1
	if ring != 0 {
		if slots < 1 || slots&(slots-1) != 0 || slots > 1<<31 {
			return nil, fmt.Errorf("cuda: trace ring of %d slots: need a power of two", slots)
		}
		le.PutUint64(b[StateRing:], ring)
		le.PutUint32(b[StateRingMask:], uint32(slots-1))
	}
	return b, nil
}

// StateInfo is a decoded sg_state.
type StateInfo struct {
	Flag     int32
	Exec     int64
	RingHead uint64
}

// DecodeState reads an sg_state copied back from the device.
func DecodeState(b []byte) StateInfo {
	le := binary.LittleEndian
	return StateInfo{
		Flag:     int32(le.Uint32(b[StateFlag:])),
		Exec:     int64(le.Uint64(b[StateExec:])),
		RingHead: le.Uint64(b[StateRingHead:]),
	}
}

// Frag is one request fragment for the batch gather (sg_frag): Len bytes
// from device address Src (host-registered packet memory) to byte offset
// Dst of the batch tensor.
type Frag struct {
	Src, Dst, Len uint64
}

// FragSize is the size of sg_frag.
const FragSize = 24

// EncodeFrags lays fragments out as the gather kernel's descriptor array.
func EncodeFrags(fs []Frag) []byte {
	return appendFrags(make([]byte, 0, len(fs)*FragSize), fs)
}

// appendFrags appends EncodeFrags(fs) to b.
func appendFrags(b []byte, fs []Frag) []byte {
	le := binary.LittleEndian
	for _, f := range fs {
		b = le.AppendUint64(b, f.Src)
		b = le.AppendUint64(b, f.Dst)
		b = le.AppendUint64(b, f.Len)
	}
	return b
}

// RingEvent is one trace-ring word (Paella-style block notification).
type RingEvent struct {
	// End is true for a block end, false for a block start.
	End bool
	// SM is the SM id, Exec the low 12 bits of the execution index, Block
	// the low 20 bits of the block index.
	SM, Exec, Block int
	// Time is %globaltimer >> 8 (256 ns units), low 22 bits.
	Time uint32
}

// DecodeRing decodes a trace-ring word; ok is false for an empty slot.
func DecodeRing(w uint64) (e RingEvent, ok bool) {
	if w>>63 == 0 {
		return e, false
	}
	return RingEvent{
		End:   w>>62&1 == 1,
		SM:    int(w >> 54 & 0xff),
		Exec:  int(w >> 42 & 0xfff),
		Block: int(w >> 22 & 0xfffff),
		Time:  uint32(w & 0x3fffff),
	}, true
}

// PadMaxBE is the most best-effort kernels one padded launch carries
// (the selector's, and sg_pad's SG_PAD_MAX_BE).
const PadMaxBE = padsel.MaxBE

// Sizes and offsets of the padding kernel's control block (sg_pad_ctl).
const (
	padKernSize = 464
	// PadCtlSize is the size of sg_pad_ctl.
	PadCtlSize = 80 + padKernSize*PadMaxBE
	offPadNext = 0
	offPadDone = 20
	offPadLost = 40
	offPadNBE  = 60
	offPadSMs  = 64
	offPadOp   = 68
	offPadGrid = 72
	offPadBE   = 80
)

// PadKernel is a best-effort kernel of a padded launch: Grid blocks
// (Args.T[TBase] ..) of Op, run by blocks on SMs [SMLo, SMHi), checking
// the flag of the stream whose State is at device address State.
type PadKernel struct {
	Op         Op
	Args       Args
	State      uint64
	Exec       int64
	Grid       uint32
	SMLo, SMHi uint32
}

// PadCtl describes a padded launch (REEF §5): the real-time kernel's
// operation and block count, the SMs [0, RTSMs) that run its blocks, and
// the best-effort kernels. The RT kernel's Args, State and execution
// index are the launch's own first three parameters.
type PadCtl struct {
	RTOp   Op
	RTGrid uint32
	RTSMs  uint32
	BE     []PadKernel
}

// Encode returns the control block, ready for a launch: claim and done
// counters zeroed, no block lost.
func (c *PadCtl) Encode() ([]byte, error) {
	b := make([]byte, PadCtlSize)
	if err := c.encode(b); err != nil {
		return nil, err
	}
	return b, nil
}

// encode is Encode into b (PadCtlSize bytes, overwritten whole).
func (c *PadCtl) encode(b []byte) error {
	if len(c.BE) > PadMaxBE {
		return fmt.Errorf("cuda: padded launch with %d best-effort kernels (max %d)", len(c.BE), PadMaxBE)
	}
	b = b[:PadCtlSize]
	clear(b)
	le := binary.LittleEndian
	for k := 0; k <= PadMaxBE; k++ {
		le.PutUint32(b[offPadLost+4*k:], math.MaxUint32)
	}
	le.PutUint32(b[offPadNBE:], uint32(len(c.BE)))
	le.PutUint32(b[offPadSMs:], c.RTSMs)
	le.PutUint32(b[offPadOp:], uint32(c.RTOp))
	le.PutUint32(b[offPadGrid:], c.RTGrid)
	for i := range c.BE {
		k := &c.BE[i]
		o := offPadBE + i*padKernSize
		k.Args.Encode(b[o:])
		le.PutUint64(b[o+432:], k.State)
		le.PutUint64(b[o+440:], uint64(k.Exec))
		le.PutUint32(b[o+448:], uint32(k.Op))
		le.PutUint32(b[o+452:], k.Grid)
		le.PutUint32(b[o+456:], k.SMLo)
		le.PutUint32(b[o+460:], k.SMHi)
	}
	return nil
}

// PadResult is what a padded launch got done. Index 0 is the RT kernel,
// 1+i the BE kernel i.
type PadResult struct {
	// Done counts the blocks that finished.
	Done [1 + PadMaxBE]uint32
	// Resume is the first block (relative to the kernel's T[TBase]) that
	// may not have run: every block before it did. The host relaunches
	// blocks Resume .. Grid-1 (blocks after Resume that did run run again:
	// they are idempotent). Resume equals Grid when the kernel finished.
	Resume [1 + PadMaxBE]uint32
}

// Result reads a padded launch's outcome from its control block copied
// back from the device (c is the launch's description).
func (c *PadCtl) Result(ctl []byte) PadResult {
	le := binary.LittleEndian
	var r PadResult
	for k := 0; k <= PadMaxBE; k++ {
		r.Done[k] = le.Uint32(ctl[offPadDone+4*k:])
		grid := c.RTGrid
		if k > 0 {
			if k > len(c.BE) {
				continue
			}
			grid = c.BE[k-1].Grid
		}
		r.Resume[k] = min(le.Uint32(ctl[offPadLost+4*k:]), le.Uint32(ctl[offPadNext+4*k:]), grid)
	}
	return r
}
