package cuda

import (
	"errors"
	"fmt"
	"math"

	"sluice/libml"
	"sluice/libml/engine"
)

// Launch is the shape of one kernel launch.
type Launch struct {
	// Kernel is the entry name.
	Kernel string
	// Grid is the number of blocks (Threads threads each).
	Grid int
	// Version is the kernel version planned (PlanVersion; 0 by Plan).
	Version int
}

// Multi-version kernels (REEF §5.3). GEMM and CONV come in two versions,
// which differ in their output tile (Args.T[TVersion]; native/cuda/sg_mm.h):
//
//	0  Tile x Tile (64 x 64): the default, what Plan chooses
//	1  SmallTile x SmallTile (32 x 32): about four times the blocks,
//	   each about a quarter as long
//
// Every version computes the same result, bit for bit (each output
// element sums its products in the same order). Dynamic kernel padding
// may run a best-effort kernel in version 1 when a 64 x 64 block would
// outlive the real-time kernel it pads (Rule 1). Every other kernel has
// one version.

// versionTiles is the output tile of each GEMM / CONV version.
var versionTiles = [...]int64{Tile, SmallTile}

// Versions is the number of versions of op's kernel (PlanVersion's v is
// below it): 2 for GEMM and CONV, 1 for every other operation.
func Versions(op Op) int {
	switch op {
	case OpGemm, OpConv:
		return len(versionTiles)
	}
	return 1
}

// errTooBig: kernels index elements with 32-bit integers.
var errTooBig = errors.New("tensor of 2^31 elements or more")

func cdiv(a, b int64) int64 { return (a + b - 1) / b }

func elemGrid(n int64) int64 { return cdiv(n, ElemsPerBlock) }

// Plan chooses the grid and tiling of op's kernel for arguments a, whose
// P and F are in the CPU engine's layout (native/cpu/sluice_cpu.h). It
// sets a.T (tiling; a.T[TBase] = 0) and returns the launch. It checks the
// parameters the kernels trust: sizes positive, every tensor below 2^31
// elements, required pointers set.
func Plan(op Op, a *Args) (Launch, error) {
	return PlanVersion(op, a, 0)
}

// PlanVersion is Plan of version v (0 <= v < Versions(op)) of op's kernel:
// the same checks, the version's tiling (a.T[TVersion] = v) and grid.
func PlanVersion(op Op, a *Args, v int) (Launch, error) {
	name := op.KernelName()
	if name == "" {
		return Launch{}, fmt.Errorf("cuda: plan: no kernel for operation %v", op)
	}
	if v < 0 || v >= Versions(op) {
		return Launch{}, fmt.Errorf("cuda: plan %v: version %d outside 0..%d", op, v, Versions(op)-1)
	}
	a.T = [NumT]int64{}
	g, err := plan(op, a, v)
	if err != nil {
		return Launch{}, fmt.Errorf("cuda: plan %v: %w", op, err)
	}
	if g > math.MaxInt32 {
		return Launch{}, fmt.Errorf("cuda: plan %v: grid of %d blocks", op, g)
	}
	if a.Out == 0 || a.In[0] == 0 {
		return Launch{}, fmt.Errorf("cuda: plan %v: output or first input missing", op)
	}
	return Launch{Kernel: name, Grid: int(g), Version: v}, nil
}

// atLeast1 checks that every listed parameter is at least 1.
func atLeast1(p []int64, idx ...int) error {
	for _, i := range idx {
		if p[i] < 1 {
			return fmt.Errorf("p[%d] = %d, want >= 1", i, p[i])
		}
	}
	return nil
}

// positive checks that every listed parameter is at least 1 and that
// their product (an element count) fits in 31 bits.
func positive(p []int64, idx ...int) (int64, error) {
	n := int64(1)
	for _, i := range idx {
		if p[i] < 1 {
			return 0, fmt.Errorf("p[%d] = %d, want >= 1", i, p[i])
		}
		if n > math.MaxInt32/p[i] {
			return 0, errTooBig
		}
		n *= p[i]
	}
	return n, nil
}

func plan(op Op, a *Args, v int) (int64, error) {
	p := a.P[:]
	if p[engine.PStore] != 0 {
		// the cpu engine's integers stored as bytes: the backend loads
		// its models with engine.Options.NoByteIntegers
		return 0, errors.New("integers stored as bytes: the CUDA kernels read float32 values")
	}
	switch op {
	case OpGemm:
		if _, err := positive(p, 0, 1); err != nil {
			return 0, err
		}
		// weights in panels (the cpu engine's layouts): the backend
		// loads its models with engine.Options.NoPanels
		if p[engine.PGemmPanels] != 0 || p[engine.PGemmAPanels] != 0 || p[engine.PGemmTProd] != 0 {
			return 0, errors.New("weights in panels: the CUDA kernels read row-major weights")
		}
		if p[2] < 0 {
			return 0, fmt.Errorf("K = %d", p[2])
		}
		nb, err := positive(p, 8, 9, 10)
		if err != nil {
			return 0, err
		}
		if a.In[1] == 0 {
			return 0, errors.New("B missing")
		}
		tile := versionTiles[v]
		mt, nt := cdiv(p[0], tile), cdiv(p[1], tile)
		a.T[0], a.T[1], a.T[TVersion] = mt, nt, int64(v)
		return nb * mt * nt, nil
	case OpConv, OpIm2col, OpDWConv, OpCol2im:
		return planConv(op, a, v)
	case OpPool:
		for i := 0; i <= 16; i++ {
			if p[i] < 0 {
				return 0, fmt.Errorf("p[%d] = %d", i, p[i])
			}
		}
		if _, err := positive(p, 0, 1, 2); err != nil {
			return 0, err
		}
		if err := atLeast1(p, 5, 6, 7, 8, 11, 12); err != nil {
			return 0, err
		}
		n, err := positive(p, 0, 3, 4)
		if err != nil {
			return 0, err
		}
		if p[13] != 0 && p[13] != 1 {
			return 0, fmt.Errorf("pool mode %d", p[13])
		}
		return elemGrid(n), nil
	case OpGPool:
		if _, err := positive(p, 0, 1); err != nil {
			return 0, err
		}
		if p[1] < ElemsPerBlock {
			a.T[0] = 1 // a plane per warp
			return cdiv(p[0], Threads/32), nil
		}
		return p[0], nil
	case OpUnary:
		n, err := positive(p, 0)
		if err != nil {
			return 0, err
		}
		if p[PAct] < 0 || p[PAct] >= actCount {
			return 0, fmt.Errorf("activation %d", p[PAct])
		}
		return elemGrid(n), nil
	case OpBinary:
		r := p[1]
		if p[0] < 0 || p[0] >= binCount {
			return 0, fmt.Errorf("binary op %d", p[0])
		}
		if r < 1 || r > 6 {
			return 0, fmt.Errorf("rank %d", r)
		}
		idx := make([]int, r)
		for i := range idx {
			idx[i] = 2 + i
		}
		n, err := positive(p, idx...)
		if err != nil {
			return 0, err
		}
		if a.In[1] == 0 {
			return 0, errors.New("B missing")
		}
		// both operands in the output's own contiguous layout: no index
		// arithmetic
		contig, s := true, int64(1)
		for i := int(r) - 1; i >= 0; i-- {
			if p[8+i] != s || p[14+i] != s {
				contig = false
			}
			s *= p[2+i]
		}
		if contig {
			a.T[0] = 1
		}
		return elemGrid(n), nil
	case OpChAffine:
		n, err := positive(p, 0, 1, 2)
		if err != nil {
			return 0, err
		}
		if a.In[1] == 0 || a.In[2] == 0 {
			return 0, errors.New("scale or shift missing")
		}
		return elemGrid(n), nil
	case OpSoftmax, OpReduce:
		if _, err := positive(p, 0, 1, 2); err != nil {
			return 0, err
		}
		if op == OpReduce && (p[3] < 0 || p[3] > 6) {
			return 0, fmt.Errorf("reduce mode %d", p[3])
		}
		rows := p[0] * p[2]
		if p[2] >= 32 || p[1] < 64 {
			a.T[0] = 1 // a row per thread
			return cdiv(rows, Threads), nil
		}
		return rows, nil
	case OpLayerNorm:
		if _, err := positive(p, 0, 1); err != nil {
			return 0, err
		}
		return p[0], nil
	case OpCopy:
		r := p[0]
		if r < 1 || r > 6 {
			return 0, fmt.Errorf("rank %d", r)
		}
		if p[19] != 0 && (a.In[1] == 0 || a.In[2] == 0) {
			return 0, errors.New("select: second source or condition missing")
		}
		idx := make([]int, r)
		for i := range idx {
			idx[i] = 1 + i
		}
		n, err := positive(p, idx...)
		if err != nil {
			return 0, err
		}
		return elemGrid(n), nil
	case OpResize:
		if _, err := positive(p, 0, 1, 2); err != nil {
			return 0, err
		}
		n, err := positive(p, 0, 3, 4)
		if err != nil {
			return 0, err
		}
		if p[5] < 0 || p[5] > 1 || p[6] < 0 || p[6] > 6 || p[7] < 0 || p[7] > 3 {
			return 0, fmt.Errorf("mode %d coord %d nearest %d", p[5], p[6], p[7])
		}
		if !(a.F[0] > 0) || !(a.F[1] > 0) {
			return 0, fmt.Errorf("scales %g, %g", a.F[0], a.F[1])
		}
		return elemGrid(n), nil
	case OpGather:
		if err := atLeast1(p, 0, 1, 2, 3); err != nil {
			return 0, err
		}
		n, err := positive(p, 0, 2, 3)
		if err != nil {
			return 0, err
		}
		if a.Aux == 0 {
			return 0, errors.New("indices missing")
		}
		return elemGrid(n), nil
	case OpQuant:
		n, err := positive(p, 0)
		if err != nil {
			return 0, err
		}
		if err := atLeast1(p, 1, 2); err != nil {
			return 0, err
		}
		if p[3] < 0 || p[3] > 5 || p[4] > p[5] {
			return 0, fmt.Errorf("mode %d range %d..%d", p[3], p[4], p[5])
		}
		if p[3] == 5 && (p[1] != 1 || a.In[3] == 0 || a.In[4] == 0 || a.In[6] == 0) {
			return 0, errors.New("QLinearAdd: one scale, and the second input and both input scales")
		}
		if a.In[0] == 0 || (p[3] != 2 && p[3] != 3 && a.In[1] == 0) {
			return 0, errors.New("input or scale missing")
		}
		if p[3] == 2 || p[3] == 3 {
			return 1, nil
		}
		return elemGrid(n), nil
	case OpQGemm:
		return planQGemm(a)
	case OpGridSample:
		n, err := positive(p, 0, 1, 4, 5)
		if err != nil {
			return 0, err
		}
		if err := atLeast1(p, 2, 3); err != nil {
			return 0, err
		}
		if p[6] < 0 || p[6] > 2 || p[7] < 0 || p[7] > 2 || p[8] < 0 || p[8] > 1 {
			return 0, fmt.Errorf("mode %d padding %d align_corners %d", p[6], p[7], p[8])
		}
		if a.In[0] == 0 || a.In[1] == 0 {
			return 0, errors.New("input or grid missing")
		}
		return elemGrid(n), nil
	case OpTopK:
		n, err := positive(p, 0, 1, 2)
		if err != nil {
			return 0, err
		}
		if p[3] < 1 || p[3] > p[1] || p[4] < 0 || p[4] > 1 || p[5] < 0 || p[5] > 1 {
			return 0, fmt.Errorf("k %d of %d, largest %d, indices %d", p[3], p[1], p[4], p[5])
		}
		if a.In[0] == 0 {
			return 0, errors.New("input missing")
		}
		return elemGrid(n), nil
	case OpRoiAlign:
		n, err := positive(p, 4, 1, 5, 6)
		if err != nil {
			return 0, err
		}
		if err := atLeast1(p, 0, 2, 3); err != nil {
			return 0, err
		}
		if p[7] < 0 || p[8] < 0 || p[8] > 1 || p[9] < 0 || p[9] > 1 {
			return 0, fmt.Errorf("sampling_ratio %d mode %d half_pixel %d", p[7], p[8], p[9])
		}
		if a.In[0] == 0 || a.In[1] == 0 || a.In[2] == 0 {
			return 0, errors.New("input, rois or batch indices missing")
		}
		return elemGrid(n), nil
	case OpDet:
		// a block per matrix, held in shared memory (det.cu)
		if p[0] < 1 || p[1] < 1 || p[1] > detMax {
			return 0, fmt.Errorf("%d matrices of %dx%d: the kernel holds a matrix of at most %dx%d in shared memory", p[0], p[1], p[1], detMax, detMax)
		}
		if a.In[0] == 0 {
			return 0, errors.New("input missing")
		}
		return p[0], nil
	}
	return 0, fmt.Errorf("unknown operation %d", op)
}

// detMax is the largest matrix the DET kernel holds (SG_DET_MAX).
const detMax = 32

// planQGemm checks an integer GEMM's parameters (sluice_cpu.h QGEMM):
// one thread per output element.
func planQGemm(a *Args) (int64, error) {
	p := a.P[:]
	if err := atLeast1(p, 0, 1, 2, 6, 7); err != nil {
		return 0, err
	}
	for i, hi := range map[int]int64{18: 1, 19: 1, 20: 3, 21: 2, 22: 1, 25: 1, 26: 1, 27: 1} {
		if p[i] < 0 || p[i] > hi {
			return 0, fmt.Errorf("p[%d] = %d", i, p[i])
		}
	}
	if p[23] > p[24] {
		return 0, fmt.Errorf("range %d..%d", p[23], p[24])
	}
	if p[28] < p[2] || p[28]%4 != 0 {
		return 0, fmt.Errorf("padded K %d for K %d", p[28], p[2])
	}
	switch {
	case a.In[0] == 0 || a.In[1] == 0:
		return 0, errors.New("operand missing")
	case p[27] == 1 && a.Aux == 0:
		return 0, errors.New("convolution geometry missing")
	case p[22] == 1 && a.In[4] == 0:
		return 0, errors.New("multiplier missing")
	case p[21] != 0 && a.In[5] == 0:
		return 0, errors.New("bias missing")
	}
	if _, err := positive(p, 0, 1, 6, 7); err != nil {
		return 0, err
	}
	if _, err := positive(p, 0, 2); err != nil { // A
		return 0, err
	}
	if _, err := positive(p, 2, 1); err != nil { // B
		return 0, err
	}
	// one block per Tile x Tile tile of each batch item's Y (sg_mm.h)
	mt, nt := cdiv(p[0], Tile), cdiv(p[1], Tile)
	a.T[0], a.T[1] = mt, nt
	return p[6] * p[7] * mt * nt, nil
}

func planConv(op Op, a *Args, v int) (int64, error) {
	p := a.P[:]
	if op == OpConv && p[engine.PConvWPanels] != 0 {
		return 0, errors.New("convolution weights in panels: the CUDA kernels read row-major weights")
	}
	for i := 0; i < 16; i++ {
		if p[i] < 0 && !(op == OpCol2im && (i == 10 || i == 11)) {
			return 0, fmt.Errorf("p[%d] = %d", i, p[i])
		}
	}
	if err := atLeast1(p, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15); err != nil {
		return 0, err
	}
	N, C, Cout, G := p[0], p[1], p[4], p[5]
	if C%G != 0 || Cout%G != 0 {
		return 0, fmt.Errorf("channels %d -> %d not divisible by %d groups", C, Cout, G)
	}
	if _, err := positive(p, 0, 1, 2, 3); err != nil { // input
		return 0, err
	}
	out, err := positive(p, 0, 4, 14, 15)
	if err != nil {
		return 0, err
	}
	ohw := p[14] * p[15]
	switch op {
	case OpConv:
		if a.In[1] == 0 {
			return 0, errors.New("weights missing")
		}
		tile := versionTiles[v]
		mt, pt := cdiv(Cout/G, tile), cdiv(ohw, tile)
		a.T[0], a.T[1], a.T[TVersion] = mt, pt, int64(v)
		return N * G * mt * pt, nil
	case OpIm2col:
		kd := C / G * p[6] * p[7]
		n := N * G
		if n > math.MaxInt32/kd || n*kd > math.MaxInt32/ohw {
			return 0, errTooBig
		}
		return elemGrid(n * kd * ohw), nil
	case OpDWConv:
		if p[engine.PDWPointwise] != 0 {
			// the cpu engine's fused pointwise producer; the cuda
			// backend loads with engine.Options.NoPointwiseDW
			return 0, errors.New("depthwise convolution with a fused pointwise producer")
		}
		if G != C || Cout%C != 0 {
			return 0, fmt.Errorf("depthwise with %d groups over %d -> %d channels", G, C, Cout)
		}
		if a.In[1] == 0 {
			return 0, errors.New("weights missing")
		}
		if p[16] == 1 && p[17] == 1 && (a.In[4] == 0 || p[18] > p[19]) {
			return 0, errors.New("requantised depthwise without its multipliers or with an empty range")
		}
		return elemGrid(out), nil
	default: // OpCol2im
		return elemGrid(out), nil
	}
}

// actCount is the number of activation codes the kernels know
// (SG_ACT_COUNT, native/cpu's SK_ACT_COUNT).
const actCount = 37

// binCount is the number of binary codes the kernels know (native/cpu's
// SK_BIN_COUNT; sg_binop in native/cuda/eltwise.cu).
const binCount = 14

// PlanBatchGather is the launch of the batch gather over n fragments,
// perBlock to a block (at least 1), copying bytes; it sets a.P[0] and a.T.
func PlanBatchGather(a *Args, n, perBlock int) (Launch, error) {
	return PlanBatchGatherConv(a, n, perBlock, nil)
}

// MaxGatherChannels is the most image channels the batch gather converts
// on the device (their scales and biases fill sg_args.f).
const MaxGatherChannels = NumF / 2

// PlanBatchGatherConv is PlanBatchGather with the conversion enc says
// fused into the copy: nil or an f32 encoding copies bytes (a fragment's
// Dst is a byte offset into the tensor); a libml.InputImageU8 encoding of
// at most MaxGatherChannels channels converts each payload byte to its
// normalised float in CHW order (a fragment's Dst is then its offset in
// the batch's payload: request r's image starts at byte r*enc.Bytes). It
// sets a.P, a.F and a.T.
func PlanBatchGatherConv(a *Args, n, perBlock int, enc *libml.Encoding) (Launch, error) {
	if n < 0 || perBlock < 1 {
		return Launch{}, fmt.Errorf("cuda: batch gather of %d fragments, %d per block", n, perBlock)
	}
	if a.Out == 0 || (n > 0 && a.Aux == 0) {
		return Launch{}, errors.New("cuda: batch gather: batch tensor or descriptors missing")
	}
	a.T = [NumT]int64{}
	a.P[0] = int64(n)
	a.T[0] = int64(perBlock)
	if enc != nil && enc.Format == libml.InputImageU8 {
		if enc.Channels < 1 || enc.Channels > MaxGatherChannels || len(enc.Scale) != enc.Channels || len(enc.Bias) != enc.Channels {
			return Launch{}, fmt.Errorf("cuda: batch gather: %d image channels, the device converts 1..%d", enc.Channels, MaxGatherChannels)
		}
		a.T[1] = 1
		a.P[1], a.P[2], a.P[3] = int64(enc.Channels), int64(enc.Pixels), int64(enc.Bytes)
		a.F = [NumF]float32{}
		copy(a.F[:MaxGatherChannels], enc.Scale)
		copy(a.F[MaxGatherChannels:], enc.Bias)
	}
	return Launch{Kernel: KernelBatchGather, Grid: int(cdiv(int64(n), int64(perBlock)))}, nil
}
