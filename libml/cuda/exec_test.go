//go:build linux && cgo

package cuda

import (
	"encoding/binary"
	"math"
	"sync"
	"testing"

	"sluice/libml/cuda/cudrv"
	"sluice/libml/cuda/internal/emu"
)

// Kernel tests run on an executor: always the CPU emulator
// (internal/emu), and the GPU when SLUICE_GPU=1 (then a missing GPU is a
// failure). The GPU tests need nothing but the test binary: the PTX is
// embedded. On a GPU machine:
//
//	go test -c -o cuda.test ./libml/cuda/   # here
//	SLUICE_GPU=1 ./cuda.test -test.v         # there
type executor interface {
	Name() string
	// SMs is the number of SMs %smid ranges over.
	SMs() int
	// Alloc returns n zeroed bytes of device memory.
	Alloc(t testing.TB, n int) uint64
	Write(t testing.TB, dst uint64, b []byte)
	Read(t testing.TB, b []byte, src uint64)
	// HostAlloc returns n zeroed bytes the device reads over the bus
	// (pinned, mapped host memory on a GPU).
	HostAlloc(t testing.TB, n int) hostBuf
	// Launch runs kernel over grid blocks and waits for it.
	Launch(kernel string, grid int, params []byte) error
}

type hostBuf interface {
	Dev() uint64
	Set(b []byte)
	Get() []byte
}

// ---- the emulator ------------------------------------------------------

// emuExec runs kernels on the emulator. With twice set, every launch
// runs two times (a re-executed kernel must give the same result: blocks
// are idempotent, REEF §4.4).
type emuExec struct {
	opt   emu.Options
	twice bool
}

func (e *emuExec) Name() string {
	n := "emu"
	if e.opt.Reverse {
		n += "-reverse"
	}
	if e.twice {
		n += "-twice"
	}
	return n
}
func (e *emuExec) SMs() int {
	if e.opt.SMs > 0 {
		return e.opt.SMs
	}
	return 8
}
func (e *emuExec) Alloc(t testing.TB, n int) uint64 {
	p := emu.Alloc(n)
	t.Cleanup(func() { emu.Free(p) })
	return p
}
func (e *emuExec) Write(_ testing.TB, dst uint64, b []byte) { emu.Write(dst, b) }
func (e *emuExec) Read(_ testing.TB, b []byte, src uint64)  { emu.Read(b, src) }
func (e *emuExec) HostAlloc(t testing.TB, n int) hostBuf {
	return &emuHost{p: e.Alloc(t, n), n: n}
}
func (e *emuExec) Launch(kernel string, grid int, params []byte) error {
	if grid == 0 {
		return nil
	}
	if err := emu.Launch(kernel, grid, Threads, params, e.opt); err != nil || !e.twice {
		return err
	}
	return emu.Launch(kernel, grid, Threads, params, e.opt)
}

// runsPerLaunch is how many times ex runs each launched kernel.
func runsPerLaunch(ex executor) int {
	if e, ok := ex.(*emuExec); ok && e.twice {
		return 2
	}
	return 1
}

type emuHost struct {
	p uint64
	n int
}

func (h *emuHost) Dev() uint64  { return h.p }
func (h *emuHost) Set(b []byte) { emu.Write(h.p, b) }
func (h *emuHost) Get() []byte {
	b := make([]byte, h.n)
	emu.Read(b, h.p)
	return b
}

// ---- the GPU -------------------------------------------------------------

type gpuExec struct {
	dev *cudrv.Device
	ks  *cudrv.Kernels
}

var gpu struct {
	once sync.Once
	ex   *gpuExec
	err  error
}

func openGPU() (*gpuExec, error) {
	gpu.once.Do(func() {
		d, err := cudrv.Open()
		if err != nil {
			gpu.err = err
			return
		}
		dev, err := d.Device(0)
		if err != nil {
			gpu.err = err
			return
		}
		ks, err := loadKernels(dev)
		if err != nil {
			gpu.err = err
			return
		}
		gpu.ex = &gpuExec{dev: dev, ks: ks}
	})
	return gpu.ex, gpu.err
}

func (g *gpuExec) Name() string { return "gpu" }
func (g *gpuExec) SMs() int     { return g.dev.SMs }
func (g *gpuExec) Alloc(t testing.TB, n int) uint64 {
	n = max(4, (n+3)&^3) // whole words for the memset
	p, err := g.dev.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.dev.Memset32(p, 0, n/4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.dev.Free(p) })
	return p
}
func (g *gpuExec) Write(t testing.TB, dst uint64, b []byte) {
	if err := g.dev.Write(dst, b); err != nil {
		t.Fatal(err)
	}
}
func (g *gpuExec) Read(t testing.TB, b []byte, src uint64) {
	if err := g.dev.Read(b, src); err != nil {
		t.Fatal(err)
	}
}
func (g *gpuExec) HostAlloc(t testing.TB, n int) hostBuf {
	h, err := g.dev.HostAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Free() })
	return gpuHost{h}
}
func (g *gpuExec) Launch(kernel string, grid int, params []byte) error {
	if grid == 0 {
		return nil
	}
	f := g.ks.Func(kernel)
	if f == nil {
		return &cudrv.Error{Op: "launch " + kernel, Name: "no such kernel"}
	}
	if err := f.Launch(grid, nil, params); err != nil {
		return err
	}
	return g.dev.Sync()
}

type gpuHost struct{ h *cudrv.HostBuffer }

func (h gpuHost) Dev() uint64  { return h.h.Dev }
func (h gpuHost) Set(b []byte) { copy(h.h.Bytes(), b) }
func (h gpuHost) Get() []byte  { return append([]byte(nil), h.h.Bytes()...) }

// forEach runs fn on every executor: the emulator in block order, the
// emulator last block first with every kernel run twice, and the GPU.
func forEach(t *testing.T, fn func(t *testing.T, ex executor)) {
	t.Helper()
	exs := []executor{&emuExec{}, &emuExec{opt: emu.Options{Reverse: true}, twice: true}}
	if gpuWanted() {
		g, err := openGPU()
		if err != nil {
			t.Fatalf("SLUICE_GPU=1: %v", err)
		}
		exs = append(exs, g)
	}
	for _, ex := range exs {
		t.Run(ex.Name(), func(t *testing.T) { fn(t, ex) })
	}
}

// gpuOnly returns the GPU executor, or skips.
func gpuOnly(t *testing.T) *gpuExec {
	t.Helper()
	if !gpuWanted() {
		t.Skip("GPU test: set SLUICE_GPU=1 on a machine with a GPU")
	}
	g, err := openGPU()
	if err != nil {
		t.Fatalf("SLUICE_GPU=1: %v", err)
	}
	return g
}

// ---- data helpers --------------------------------------------------------

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesf32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func upload(t testing.TB, ex executor, v []float32) uint64 {
	p := ex.Alloc(t, 4*len(v))
	ex.Write(t, p, f32bytes(v))
	return p
}

func download(t testing.TB, ex executor, p uint64, n int) []float32 {
	b := make([]byte, 4*n)
	ex.Read(t, b, p)
	return bytesf32(b)
}

// newState allocates a fresh stream state (flag clear, index -1).
func newState(t testing.TB, ex executor) uint64 {
	b, err := EncodeState(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := ex.Alloc(t, StateSize)
	ex.Write(t, p, b)
	return p
}

func readState(t testing.TB, ex executor, p uint64) StateInfo {
	b := make([]byte, StateSize)
	ex.Read(t, b, p)
	return DecodeState(b)
}

// runOp plans and runs op with arguments a (execution index idx) on a
// fresh stream state, and returns the state's address.
func runOp(t testing.TB, ex executor, op Op, a *Args) uint64 {
	t.Helper()
	l, err := Plan(op, a)
	if err != nil {
		t.Fatal(err)
	}
	st := newState(t, ex)
	if err := ex.Launch(l.Kernel, l.Grid, Pack(st, 7, a)); err != nil {
		t.Fatalf("%s: %v", l.Kernel, err)
	}
	return st
}

// sentinel fills n floats of output with a value no kernel writes.
const sentinel = -12345.5

func outBuf(t testing.TB, ex executor, n int) uint64 {
	v := make([]float32, n)
	for i := range v {
		v[i] = sentinel
	}
	return upload(t, ex, v)
}

// closeTo compares got to want with tolerance tol*(1+|want|).
func closeTo(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) && math.IsNaN(g) {
			continue
		}
		if math.Abs(g-w) > tol*(1+math.Abs(w)) || math.IsNaN(g) != math.IsNaN(w) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g", what, i, g, w)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values wrong", what, bad, len(got))
	}
}

const tol = 1e-3
