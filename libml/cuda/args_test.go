package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"sluice/libml/cuda/cudrv"
)

// gpuWanted: SLUICE_GPU=1 asks for the GPU tests (a missing GPU then
// fails them instead of skipping).
func gpuWanted() bool { return os.Getenv("SLUICE_GPU") == "1" }

// The sg_args layout: every field at its C offset, little endian.
func TestArgsEncode(t *testing.T) {
	var a Args
	a.Out = 0x1111
	for i := range a.In {
		a.In[i] = uint64(0x2000 + i)
	}
	a.Aux = 0x3333
	for i := range a.P {
		a.P[i] = int64(-1000 - i)
	}
	for i := range a.F {
		a.F[i] = float32(i) + 0.5
	}
	for i := range a.T {
		a.T[i] = int64(4000 + i)
	}
	b := make([]byte, ArgsSize)
	a.Encode(b)
	le := binary.LittleEndian
	if le.Uint64(b[0:]) != 0x1111 || le.Uint64(b[8+7*8:]) != 0x2007 || le.Uint64(b[72:]) != 0x3333 {
		t.Errorf("pointers misplaced")
	}
	if int64(le.Uint64(b[80+31*8:])) != -1031 || math.Float32frombits(le.Uint32(b[336+4*7:])) != 7.5 ||
		int64(le.Uint64(b[368+7*8:])) != 4007 || int64(le.Uint64(b[80:])) != -1000 {
		t.Errorf("p/f/t misplaced")
	}
	var c Args
	c.Decode(b)
	if c != a {
		t.Errorf("decode: %+v != %+v", c, a)
	}
}

// Pack puts the state at 0, the execution index at 8 and the arguments
// at 16; PackPad adds the control block at 448.
func TestPack(t *testing.T) {
	var a Args
	a.P[0] = 42
	b := Pack(0xabc, -7, &a)
	le := binary.LittleEndian
	if len(b) != 448 || le.Uint64(b) != 0xabc || int64(le.Uint64(b[8:])) != -7 || le.Uint64(b[16+80:]) != 42 {
		t.Errorf("Pack: %d bytes, %x", len(b), b[:24])
	}
	p := PackPad(0xabc, 3, &a, 0xdef)
	if len(p) != 456 || le.Uint64(p[448:]) != 0xdef || le.Uint64(p[16+80:]) != 42 {
		t.Errorf("PackPad: %d bytes", len(p))
	}
	offs, size := Layout([]Param{{4, 4}, {8, 8}, {2, 2}, {16, 16}})
	if offs[1] != 8 || offs[2] != 16 || offs[3] != 32 || size != 48 {
		t.Errorf("Layout: %v %d", offs, size)
	}
}

func TestState(t *testing.T) {
	b, err := EncodeState(0x1000, 64)
	if err != nil {
		t.Fatal(err)
	}
	s := DecodeState(b)
	if s.Flag != 0 || s.Exec != -1 || s.RingHead != 0 {
		t.Errorf("fresh state %+v", s)
	}
	le := binary.LittleEndian
	if le.Uint64(b[StateRing:]) != 0x1000 || le.Uint32(b[StateRingMask:]) != 63 {
		t.Errorf("ring fields %x", b[16:32])
	}
	if _, err := EncodeState(0x1000, 48); err == nil {
		t.Error("a 48-slot ring was accepted")
	}
}

func TestRingDecode(t *testing.T) {
	w := uint64(1)<<63 | 1<<62 | 131<<54 | 0xabc<<42 | 0x12345<<22 | 0x2abcd
	e, ok := DecodeRing(w)
	if !ok || !e.End || e.SM != 131 || e.Exec != 0xabc || e.Block != 0x12345 || e.Time != 0x2abcd {
		t.Errorf("%+v %v", e, ok)
	}
	if _, ok := DecodeRing(w &^ (1 << 63)); ok {
		t.Error("an empty slot decoded")
	}
}

func TestPadCtlEncode(t *testing.T) {
	c := PadCtl{RTOp: OpGemm, RTGrid: 10, RTSMs: 3, BE: []PadKernel{{Op: OpUnary, State: 0x55, Exec: 9, Grid: 7, SMLo: 3, SMHi: 8}}}
	c.BE[0].Args.P[0] = 1234
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if len(b) != PadCtlSize || le.Uint32(b[60:]) != 1 || le.Uint32(b[64:]) != 3 || le.Uint32(b[68:]) != 1 ||
		le.Uint32(b[72:]) != 10 || le.Uint64(b[80+80:]) != 1234 || le.Uint64(b[80+432:]) != 0x55 ||
		le.Uint32(b[80+448:]) != 8 || le.Uint32(b[80+452:]) != 7 || le.Uint32(b[80+460:]) != 8 ||
		le.Uint32(b[40:]) != math.MaxUint32 || le.Uint32(b[0:]) != 0 {
		t.Errorf("control block misplaced")
	}
	// RT: 10 claimed, 10 done. BE 0: 6 claimed, 5 done, block 3 cut.
	le.PutUint32(b[0:], 12)
	le.PutUint32(b[20:], 10)
	le.PutUint32(b[4:], 6)
	le.PutUint32(b[24:], 5)
	le.PutUint32(b[44:], 3)
	res := c.Result(b)
	if res.Done[0] != 10 || res.Resume[0] != 10 || res.Done[1] != 5 || res.Resume[1] != 3 {
		t.Errorf("Result %+v", res)
	}
	c.BE = make([]PadKernel, PadMaxBE+1)
	if _, err := c.Encode(); err == nil {
		t.Error("too many BE kernels accepted")
	}
}

func TestPlan(t *testing.T) {
	gemm := func(M, N, K, b0 int64) *Args {
		a := &Args{Out: 1, In: [MaxIn]uint64{1, 1}}
		a.P[0], a.P[1], a.P[2] = M, N, K
		a.P[8], a.P[9], a.P[10] = b0, 1, 1
		return a
	}
	conv := func() *Args {
		a := &Args{Out: 1, In: [MaxIn]uint64{1, 1}}
		copy(a.P[:], []int64{2, 8, 10, 10, 130, 2, 3, 3, 1, 1, 1, 1, 1, 1, 10, 10})
		return a
	}
	for _, c := range []struct {
		name string
		op   Op
		a    *Args
		grid int
		t0   int64
		t1   int64
	}{
		{"gemm", OpGemm, gemm(100, 130, 7, 3), 3 * 2 * 3, 2, 3},
		{"gemm-K0", OpGemm, gemm(1, 1, 0, 1), 1, 1, 1},
		{"conv", OpConv, conv(), 2 * 2 * 2 * 2, 2, 2},
		{"unary", OpUnary, func() *Args { a := &Args{Out: 1, In: [MaxIn]uint64{1}}; a.P[0] = 2049; return a }(), 3, 0, 0},
		{"gpool-warp", OpGPool, func() *Args { a := &Args{Out: 1, In: [MaxIn]uint64{1}}; a.P[0], a.P[1] = 17, 49; return a }(), 3, 1, 0},
		{"gpool-block", OpGPool, func() *Args { a := &Args{Out: 1, In: [MaxIn]uint64{1}}; a.P[0], a.P[1] = 17, 4096; return a }(), 17, 0, 0},
		{"softmax-row", OpSoftmax, func() *Args { a := &Args{Out: 1, In: [MaxIn]uint64{1}}; a.P[0], a.P[1], a.P[2] = 5, 1000, 1; return a }(), 5, 0, 0},
		{"softmax-col", OpSoftmax, func() *Args { a := &Args{Out: 1, In: [MaxIn]uint64{1}}; a.P[0], a.P[1], a.P[2] = 5, 1000, 64; return a }(), 2, 1, 0},
	} {
		l, err := Plan(c.op, c.a)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if l.Grid != c.grid || c.a.T[0] != c.t0 || c.a.T[1] != c.t1 || l.Kernel != c.op.KernelName() {
			t.Errorf("%s: %+v T %v, want grid %d T %d %d", c.name, l, c.a.T[:2], c.grid, c.t0, c.t1)
		}
	}
	// binary: contiguous operands take the fast path
	b := &Args{Out: 1, In: [MaxIn]uint64{1, 1}}
	copy(b.P[:], []int64{0, 2, 3, 4, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 4, 1})
	if _, err := Plan(OpBinary, b); err != nil || b.T[0] != 1 {
		t.Errorf("contiguous binary: %v T0 %d", err, b.T[0])
	}
	b.P[15] = 0 // B broadcast along the last axis
	if _, err := Plan(OpBinary, b); err != nil || b.T[0] != 0 {
		t.Errorf("broadcast binary: %v T0 %d", err, b.T[0])
	}
	for _, c := range []struct {
		name string
		op   Op
		a    *Args
		msg  string
	}{
		{"nop", OpNop, &Args{}, "no kernel"},
		{"negative", OpGemm, gemm(-1, 2, 3, 1), "p[0]"},
		{"huge", OpUnary, func() *Args { a := &Args{Out: 1, In: [MaxIn]uint64{1}}; a.P[0] = 1 << 31; return a }(), "2^31"},
		{"no-B", OpGemm, &Args{Out: 1, In: [MaxIn]uint64{1}, P: [NumP]int64{1, 1, 1, 8: 1, 9: 1, 10: 1}}, "B missing"},
		{"no-out", OpUnary, &Args{In: [MaxIn]uint64{1}, P: [NumP]int64{5}}, "missing"},
		{"groups", OpConv, func() *Args { a := conv(); a.P[5] = 3; return a }(), "divisible"},
		{"gemm-panels", OpGemm, func() *Args { a := gemm(2, 64, 8, 1); a.P[24] = 1; return a }(), "panels"},
		{"gemm-apanels", OpGemm, func() *Args { a := gemm(64, 2, 8, 1); a.P[25], a.P[26] = 1, 1; return a }(), "panels"},
		{"conv-panels", OpConv, func() *Args { a := conv(); a.P[17] = 1; return a }(), "panels"},
		{"act", OpUnary, &Args{Out: 1, In: [MaxIn]uint64{1}, P: [NumP]int64{5, PAct: actCount}}, "activation"},
	} {
		_, err := Plan(c.op, c.a)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.msg)
		}
	}
	var g Args
	g.Out, g.Aux = 1, 1
	if l, err := PlanBatchGather(&g, 10, 4); err != nil || l.Grid != 3 || g.P[0] != 10 || g.T[0] != 4 {
		t.Errorf("batch gather: %+v %v", l, err)
	}
}

// Without libcuda.so.1, cudrv.Open reports ErrNoDriver (no crash, no
// panic), and Available agrees with it.
func TestOpenNoDriver(t *testing.T) {
	_, err := cudrv.OpenLib("libcuda-sluice-test-missing.so.1")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("missing library: %v, want ErrNoDriver", err)
	}
	d, err := cudrv.Open()
	if err != nil {
		if gpuWanted() {
			t.Fatalf("SLUICE_GPU=1 but Open: %v", err)
		}
		t.Logf("Open: %v", err)
	} else {
		t.Logf("driver %d, %d devices, green contexts %v", d.Version, d.Devices, d.Green)
	}
	n := 0
	logf := func(string, ...any) { n++ }
	a1, a2 := Available(logf), Available(logf)
	if a1 != a2 || a1 != (err == nil) {
		t.Errorf("Available %v %v with Open error %v", a1, a2, err)
	}
	if (err != nil && n != 1) || (err == nil && n != 0) {
		t.Errorf("logged %d times", n)
	}
}
