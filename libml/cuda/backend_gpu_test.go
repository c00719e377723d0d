//go:build linux && cgo

package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/zoo"
)

// The cuda backend on a real GPU: tests and benchmarks that skip unless
// SLUICE_GPU=1 (then a missing GPU fails them). Build here, run there
// (the GPU machine has no Go; see README.md):
//
//	go test -c -o bin/cuda.test ./libml/cuda/
//	SLUICE_GPU=1 ./cuda.test -test.run GPUBackend -test.v
//	SLUICE_GPU=1 ./cuda.test -test.run - -test.bench GPUBackend -test.benchtime 50x
//
// SLUICE_GPU=emu runs them on the emulator with small stand-in models,
// to check the tests' own logic here.

var gpuBE struct {
	once sync.Once
	b    *Backend
	err  error
	mu   sync.Mutex
	inst map[string]*Instance
}

// gpuSmoke (SLUICE_GPU=emu) runs the GPU tests and benchmarks on the
// emulator with small models: it checks their own logic, not the GPU.
func gpuSmoke() bool { return os.Getenv("SLUICE_GPU") == "emu" }

// gpuBackend is the cuda backend on GPU 0, shared by the GPU tests, or a
// skip.
func gpuBackend(t testing.TB) *Backend {
	t.Helper()
	if !gpuWanted() && !gpuSmoke() {
		t.Skip("GPU test: set SLUICE_GPU=1 on a machine with a GPU")
	}
	gpuBE.once.Do(func() {
		opts := Options{}
		if gpuSmoke() {
			d := newEmuDev(emuSMs, true)
			opts.open = func() (gpuCtx, error) { return d, nil }
		}
		b := NewBackend(opts)
		t0 := time.Now()
		if err := b.Init(context.Background(), libml.BackendConfig{}); err != nil {
			gpuBE.err = err
			return
		}
		t.Logf("cuda backend: %d SMs, green contexts %v, window %d; Init (primary context, PTX JIT) %v",
			b.SMs(), b.Green(), b.Window(), time.Since(t0).Round(time.Millisecond))
		gpuBE.b, gpuBE.inst = b, map[string]*Instance{}
	})
	if gpuBE.err != nil {
		t.Fatalf("SLUICE_GPU=1: %v", gpuBE.err)
	}
	return gpuBE.b
}

// gpuModel returns a shared instance of a zoo model configured for
// maxBatch (loaded once per process).
func gpuModel(t testing.TB, name string, opt zoo.Options, maxBatch int) *Instance {
	t.Helper()
	b := gpuBackend(t)
	name, opt = smokeModel(name, opt)
	key := fmt.Sprintf("%s %+v %d", name, opt, maxBatch)
	gpuBE.mu.Lock()
	defer gpuBE.mu.Unlock()
	if i, ok := gpuBE.inst[key]; ok {
		return i
	}
	g, err := zoo.Build(name, opt)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	inst := load(t, b, name, g, maxBatch).(*Instance)
	t.Logf("%s: loaded and configured for batch 1..%d in %v (%d MiB of weights)", name, maxBatch,
		time.Since(t0).Round(time.Millisecond), inst.WeightBytes()>>20)
	gpuBE.inst[key] = inst
	return inst
}

// smokeModel is the small stand-in of a model under SLUICE_GPU=emu.
func smokeModel(name string, opt zoo.Options) (string, zoo.Options) {
	if !gpuSmoke() {
		return name, opt
	}
	switch name {
	case "bert":
		return name, zoo.Options{Layers: 1, SeqLen: 8, Hidden: 32, Heads: 2, FF: 64}
	case "unet3d":
		return name, zoo.Options{Depth: 8, Height: 16, Width: 16}
	case "resnet50", "vgg16", "resnet18":
		name = "squeezenet11"
	}
	return name, zoo.Options{Height: 32, Width: 32, Classes: 10}
}

// gpuZooCases are the zoo models at their standard sizes.
var gpuZooCases = []struct {
	name string
	opt  zoo.Options
}{
	{"resnet18", zoo.Options{}},
	{"resnet50", zoo.Options{}},
	{"mobilenetv2", zoo.Options{}},
	{"squeezenet11", zoo.Options{}},
	{"vgg16", zoo.Options{}},
	{"bert", zoo.Options{}},
	{"unet3d", zoo.Options{}},
}

// Every zoo model through the cuda backend on the GPU agrees with the cpu
// backend within 1e-3 (relative to 1+|want|) at batch 1 and 8.
func TestGPUBackendZoo(t *testing.T) {
	b := gpuBackend(t)
	ref := cpuBackend(t)
	for _, c := range gpuZooCases {
		t.Run(c.name, func(t *testing.T) {
			inst := gpuModel(t, c.name, c.opt, 8)
			g, err := zoo.Build(smokeModel(c.name, c.opt))
			if err != nil {
				t.Fatal(err)
			}
			rinst := load(t, ref, c.name, g, 8)
			defer rinst.Close()
			for _, batch := range []int{1, 8} {
				in := zoo.Input(uint64(batch), batch*inst.InputSize())
				got := infer(t, b, inst, batch, in)
				t0 := time.Now()
				infer(t, b, inst, batch, in)
				el := time.Since(t0)
				agree(t, fmt.Sprintf("batch %d (GPU %v)", batch, el.Round(time.Microsecond)), got, infer(t, ref, rinst, batch, in), 1e-3)
			}
		})
	}
}

// Statically quantised zoo models at their standard sizes through the
// cuda backend on the GPU (sg_quant, sg_qgemm, the depthwise kernel's
// integer mode) agree with the cpu backend at batch 1 and 8, as
// TestBackendQuantizedEmu checks on the emulator at reduced sizes.
func TestGPUBackendQuantized(t *testing.T) {
	b := gpuBackend(t)
	ref := cpuBackend(t)
	for _, name := range []string{"resnet18", "mobilenetv2"} {
		t.Run(name+"-int8", func(t *testing.T) {
			name, opt := smokeModel(name, zoo.Options{Seed: 1})
			g := quantizedZoo(t, name, opt)
			inst := load(t, b, name+"-int8", g, 8)
			defer inst.Close()
			rinst := load(t, ref, name+"-int8", g, 8)
			defer rinst.Close()
			for _, batch := range []int{1, 8} {
				in := zoo.Input(uint64(batch)+20, batch*inst.InputSize())
				got := infer(t, b, inst, batch, in)
				t0 := time.Now()
				infer(t, b, inst, batch, in)
				el := time.Since(t0)
				agree(t, fmt.Sprintf("batch %d (GPU %v)", batch, el.Round(time.Microsecond)), got, infer(t, ref, rinst, batch, in), tol)
			}
		})
	}
}

// Preemption on the GPU: a batch preempted at a random moment (from
// another goroutine, as the scheduler does) restores to the same output
// bit for bit; a cancelled batch returns context.Canceled and the next
// one is right. A shadow instance in a green context (LinkModel +
// SetSMs) reads the weights the primary context holds and gives the same
// output.
func TestGPUBackendPreemptAndShadow(t *testing.T) {
	b := gpuBackend(t)
	inst := gpuModel(t, "resnet50", zoo.Options{}, 8)
	in := zoo.Input(3, 8*inst.InputSize())
	want := infer(t, b, inst, 8, in)
	t0 := time.Now()
	infer(t, b, inst, 8, in)
	full := time.Since(t0)
	r := rand.New(rand.NewPCG(81, 82))
	preempted := 0
	for trial := 0; trial < 20; trial++ {
		s0 := inst.Stats()
		done := make(chan []float32)
		go func() {
			out := make([]float32, len(want))
			if err := inst.InferBatch(context.Background(), 8, in, out); err != nil {
				t.Error(err)
			}
			done <- out
		}()
		time.Sleep(time.Duration(r.Int64N(int64(full))))
		if err := inst.Preempt(); err != nil {
			t.Fatal(err)
		}
		got := <-done
		s1 := inst.Stats()
		preempted += int(s1.Preemptions - s0.Preemptions)
		closeTo(t, fmt.Sprintf("trial %d (restored from %d)", trial, s1.LastResume), got, want, 0)
	}
	t.Logf("resnet50 batch 8 (%v): %d of 20 trials preempted and restored, outputs identical", full.Round(time.Microsecond), preempted)
	if preempted == 0 {
		t.Error("no trial was preempted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), full/3)
	defer cancel()
	out := make([]float32, len(want))
	if err := inst.InferBatch(ctx, 8, in, out); err == nil {
		t.Log("the batch finished before its deadline")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	closeTo(t, "after a cancelled batch", infer(t, b, inst, 8, in), want, 0)

	if !b.Green() {
		t.Skip("no green contexts: shadow part skipped")
	}
	shadow, err := b.LinkModel(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	defer shadow.Close()
	if err := b.ConfigureBatch(shadow, 8); err != nil {
		t.Fatal(err)
	}
	sh := shadow.(*Instance)
	t0 = time.Now()
	if err := sh.SetSMs(b.SMs() / 4); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(t0)
	closeTo(t, "shadow in a green context", infer(t, b, shadow, 8, in), want, 0)
	t0 = time.Now()
	infer(t, b, shadow, 8, in)
	t.Logf("shadow: green context of %d SMs (asked %d) ready in %v; %d KiB of its own device memory; batch 8 in %v",
		sh.SMs(), b.SMs()/4, ready.Round(time.Microsecond), sh.DeviceBytes()>>10, time.Since(t0).Round(time.Microsecond))
}

// BenchmarkGPUBackendLatency: ResNet-50 and BERT-base (12 layers,
// sequence 128) per batch through InferBatch, inputs and outputs copied
// included, at batch 1 and 8.
func BenchmarkGPUBackendLatency(b *testing.B) {
	be := gpuBackend(b)
	for _, m := range []string{"resnet50", "bert"} {
		for _, batch := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/batch%d", m, batch), func(b *testing.B) {
				inst := gpuModel(b, m, zoo.Options{}, 8)
				in := zoo.Input(1, batch*inst.InputSize())
				out := make([]float32, batch*inst.OutputSize())
				for k := 0; k < 3; k++ {
					if err := be.InferBatch(context.Background(), inst, batch, in, out); err != nil {
						b.Fatal(err)
					}
				}
				lat := make([]float64, 0, b.N)
				b.ResetTimer()
				for k := 0; k < b.N; k++ {
					t0 := time.Now()
					if err := be.InferBatch(context.Background(), inst, batch, in, out); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, float64(time.Since(t0).Microseconds())/1e3)
				}
				slices.Sort(lat)
				b.ReportMetric(lat[len(lat)/2], "ms-p50")
				b.ReportMetric(lat[len(lat)*99/100], "ms-p99")
				b.ReportMetric(float64(batch)*1e3/lat[len(lat)/2], "req/s")
			})
		}
	}
}

// probe is the real-time side of the preemption benchmark: sg_clock, one
// block, on a high-priority stream, writing %globaltimer into mapped
// pinned memory that the host polls.
type probe struct {
	s     gpuStream
	buf   pinned
	state uint64
	base  time.Time
	// offset maps host time (ns since base) to %globaltimer: g = h - offset
	offset int64
}

func newProbe(t testing.TB, be *Backend) *probe {
	p := &probe{base: time.Now()}
	var err error
	if p.s, err = be.dev.NewStream(-5); err != nil {
		t.Fatal(err)
	}
	if p.buf, err = be.dev.HostAlloc(16); err != nil {
		t.Fatal(err)
	}
	if p.state, err = be.dev.Alloc(StateSize); err != nil {
		t.Fatal(err)
	}
	st, _ := EncodeState(0, 0)
	if err := be.dev.Write(p.state, st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.s.Close(); p.buf.Free(); be.dev.Free(p.state) })
	// calibration on an idle GPU: the smallest host-minus-GPU time of a
	// block start seen through mapped memory
	p.offset = math.MaxInt64
	for k := 0; k < 50; k++ {
		g, h := p.fire(t)
		p.offset = min(p.offset, h-g)
	}
	return p
}

// fire launches the probe and waits until its block has started: the
// block's %globaltimer and the host time it was seen (ns since base).
func (p *probe) fire(t testing.TB) (g, h int64) {
	var z [8]byte
	p.buf.Put(0, z[:])
	if err := p.s.Launch(KernelClock, 1, Pack(p.state, 0, &Args{Out: p.buf.Dev()})); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var w [8]byte
	for {
		p.buf.Get(0, w[:])
		if v := binary.LittleEndian.Uint64(w[:]); v != 0 {
			h = time.Since(p.base).Nanoseconds()
			if err := p.s.Sync(); err != nil {
				t.Fatal(err)
			}
			return int64(v), h
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe never ran")
		}
	}
}

// BenchmarkGPUBackendPreempt: the latency of a real-time kernel under a
// best-effort load. A best-effort instance (ResNet-50, batch 8) runs
// batches back to back; at a random moment the host preempts it
// (Instance.Preempt: host queue reset, flag written to device memory by
// the copy engine) and launches the real-time probe. Reported: from the
// Preempt call to the probe's first block by %globaltimer (host time
// mapped onto the GPU clock by calibration), and the same without the
// preemption (the probe waits for SMs on a higher-priority stream).
func BenchmarkGPUBackendPreempt(b *testing.B) {
	be := gpuBackend(b)
	for _, preempt := range []bool{true, false} {
		name := "preempt"
		if !preempt {
			name = "no-preempt"
		}
		b.Run(name, func(b *testing.B) {
			bei := gpuModel(b, "resnet50", zoo.Options{}, 8)
			p := newProbe(b, be)
			in := zoo.Input(2, 8*bei.InputSize())
			out := make([]float32, 8*bei.OutputSize())
			var stop atomic.Bool
			done := make(chan error)
			go func() {
				for !stop.Load() {
					if err := bei.InferBatch(context.Background(), 8, in, out); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			r := rand.New(rand.NewPCG(91, 92))
			var lat []float64
			s0 := bei.Stats()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				time.Sleep(time.Duration(500+r.IntN(2000)) * time.Microsecond)
				h0 := time.Since(p.base).Nanoseconds()
				if preempt {
					if err := bei.Preempt(); err != nil {
						b.Fatal(err)
					}
				}
				g, _ := p.fire(b)
				lat = append(lat, float64(g-(h0-p.offset))/1e3)
			}
			b.StopTimer()
			stop.Store(true)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			slices.Sort(lat)
			b.ReportMetric(lat[len(lat)/2], "µs-p50")
			b.ReportMetric(lat[len(lat)*99/100], "µs-p99")
			b.ReportMetric(lat[len(lat)-1], "µs-max")
			b.ReportMetric(float64(bei.Stats().Preemptions-s0.Preemptions), "preemptions")
		})
	}
}

// ring is a trace ring (Paella-style block events) attached to an
// instance's stream state: the state's ring fields survive the per-run
// reset of its flag and execution index.
type ring struct {
	buf   pinned
	slots int
}

func attachRing(t testing.TB, i *Instance, slots int) *ring {
	buf, err := i.b.dev.HostAlloc(8 * slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Free() })
	st, err := EncodeState(buf.Dev(), slots)
	if err != nil {
		t.Fatal(err)
	}
	if err := i.b.dev.Write(i.state+StateRing, st[StateRing:]); err != nil {
		t.Fatal(err)
	}
	return &ring{buf: buf, slots: slots}
}

// clear empties the ring and rewinds the state's head.
func (r *ring) clear(t testing.TB, i *Instance) {
	r.buf.Put(0, make([]byte, 8*r.slots))
	if err := i.b.dev.Write(i.state+StateRingHead, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
}

// ref is the time of an event in the ring (false when it is empty): the
// reference spans unwrap the 22-bit times around.
func (r *ring) ref() (uint32, bool) {
	b := make([]byte, 8*r.slots)
	r.buf.Get(0, b)
	for k := 0; k < r.slots; k++ {
		if e, ok := DecodeRing(binary.LittleEndian.Uint64(b[8*k:])); ok {
			return e.Time, true
		}
	}
	return 0, false
}

// span returns the first block start and last block end (in 256 ns
// ticks, unwrapped around ref, within half a wrap of 1.07 s) of the
// events in the ring.
func (r *ring) span(ref uint32) (first, last int64, n int) {
	b := make([]byte, 8*r.slots)
	r.buf.Get(0, b)
	first, last = math.MaxInt64, math.MinInt64
	for k := 0; k < r.slots; k++ {
		e, ok := DecodeRing(binary.LittleEndian.Uint64(b[8*k:]))
		if !ok {
			continue
		}
		n++
		d := int64((e.Time-ref)&0x3fffff+0x200000)&0x3fffff - 0x200000
		if e.End {
			last = max(last, d)
		} else {
			first = min(first, d)
		}
	}
	return first, last, n
}

// BenchmarkGPUBackendSwap: the idle gap of a shadow swap between green
// contexts (GSLICE §3.2.4). The active instance runs in a partition of
// half the SMs, the shadow (LinkModel + SetSMs, the same weights) in a
// partition of three quarters; a swap is the active instance's batch
// followed by the shadow's. The gap is from the active batch's last block
// end to the shadow batch's first block start, from trace rings in both
// stream states (%globaltimer, 256 ns ticks): it includes the host's
// completion wait, the shadow's input copy and its first launch.
func BenchmarkGPUBackendSwap(b *testing.B) {
	be := gpuBackend(b)
	if !be.Green() {
		b.Skip("no green contexts")
	}
	for _, m := range []string{"resnet50", "bert"} {
		b.Run(m, func(b *testing.B) {
			g, err := zoo.Build(smokeModel(m, zoo.Options{}))
			if err != nil {
				b.Fatal(err)
			}
			act := loadGPU(b, be, m, g, 1)
			shadow, err := be.LinkModel(context.Background(), act)
			if err != nil {
				b.Fatal(err)
			}
			defer shadow.Close()
			sh := shadow.(*Instance)
			if err := be.ConfigureBatch(sh, 1); err != nil {
				b.Fatal(err)
			}
			if err := act.SetSMs(be.SMs() / 2); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if err := sh.SetSMs(be.SMs() * 3 / 4); err != nil {
				b.Fatal(err)
			}
			ready := time.Since(t0)
			in := zoo.Input(4, act.InputSize())
			want := infer(b, be, act, 1, in)
			closeTo(b, "shadow", infer(b, be, sh, 1, in), want, 0)
			ra, rs := attachRing(b, act, 1<<20), attachRing(b, sh, 1<<20)
			var gaps []float64
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				ra.clear(b, act)
				rs.clear(b, sh)
				infer(b, be, act, 1, in)
				infer(b, be, sh, 1, in)
				ref, ok := ra.ref()
				if !ok {
					b.Fatal("no trace events")
				}
				_, last, _ := ra.span(ref)
				end := uint32(int64(ref)+last) & 0x3fffff // the active batch's last block end
				first, _, ns := rs.span(end)
				if ns == 0 {
					b.Fatal("no trace events from the shadow")
				}
				last = 0
				gaps = append(gaps, float64(first-last)*0.256)
			}
			b.StopTimer()
			slices.Sort(gaps)
			b.ReportMetric(gaps[len(gaps)/2], "µs-gap-p50")
			b.ReportMetric(gaps[len(gaps)-1], "µs-gap-max")
			b.ReportMetric(float64(ready.Microseconds()), "µs-shadow-ready")
		})
	}
}

// loadGPU loads g as an instance of its own (closed with the benchmark).
func loadGPU(t testing.TB, be *Backend, name string, g *graph.Graph, maxBatch int) *Instance {
	inst := load(t, be, name, g, maxBatch).(*Instance)
	t.Cleanup(func() { inst.Close() })
	return inst
}

// BenchmarkGPUBackendGather: building a batch of 8 ResNet-50 inputs
// (3x224x224 floats, 588 KiB each) from 1400-byte fragments scattered
// over the dataplane's packet region. "kernel": the region registered
// with cuMemHostRegister and sg_batch_gather reading it (GatherBatch);
// "cpu+h2d": the CPU copies the fragments into pinned staging memory,
// then one host-to-device copy.
func BenchmarkGPUBackendGather(b *testing.B) {
	be := gpuBackend(b)
	inst := gpuModel(b, "resnet50", zoo.Options{}, 8)
	const batch, fragLen = 8, 1400
	total := 4 * batch * inst.InputSize()
	mem := packetRegion(b, 16<<20)
	reg, err := be.RegisterRegion(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		b.Fatal(err)
	}
	defer be.UnregisterRegion(reg)
	r := rand.New(rand.NewPCG(93, 94))
	data := make([]byte, total)
	for k := range data {
		data[k] = byte(r.Uint32())
	}
	frags := scatterFixed(b, r, reg, mem, data, fragLen)
	check := func(b *testing.B) {
		got := make([]byte, total)
		p, _ := inst.Program(batch)
		if err := be.dev.Read(got, inst.arena+4*uint64(p.Inputs[0].Off)); err != nil {
			b.Fatal(err)
		}
		if !slices.Equal(got, data) {
			b.Fatal("the gathered batch differs")
		}
	}
	b.Run("kernel", func(b *testing.B) {
		b.SetBytes(int64(total))
		for k := 0; k < b.N; k++ {
			if err := inst.Gather(batch, frags); err != nil {
				b.Fatal(err)
			}
			if err := inst.ln.s.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		check(b)
		inst.gathered = 0
		b.ReportMetric(float64(len(frags)), "fragments")
	})
	b.Run("cpu+h2d", func(b *testing.B) {
		p, _ := inst.Program(batch)
		dst := inst.arena + 4*uint64(p.Inputs[0].Off)
		b.SetBytes(int64(total))
		for k := 0; k < b.N; k++ {
			for _, f := range frags {
				src := f.Src - reg.Dev
				inst.stage.Put(inst.inOff+int(f.Dst), mem[src:src+f.Len])
			}
			if err := inst.ln.s.WriteAsync(dst, inst.stage, inst.inOff, total); err != nil {
				b.Fatal(err)
			}
			if err := inst.ln.s.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		check(b)
		b.ReportMetric(float64(len(frags)), "fragments")
	})
}

// scatterFixed is scatter with fixed-size fragments (the last shorter).
func scatterFixed(t testing.TB, r *rand.Rand, reg *Region, mem []byte, data []byte, fragLen int) []Frag {
	t.Helper()
	slot := fragLen + 64
	perm := r.Perm(len(mem) / slot)
	var frags []Frag
	for off, k := 0, 0; off < len(data); k++ {
		n := min(fragLen, len(data)-off)
		pos := perm[k]*slot + 2*r.IntN(32) // payloads at even offsets, as after headers
		copy(mem[pos:], data[off:off+n])
		f, err := reg.Frag(unsafe.Pointer(&mem[pos]), n, uint64(off))
		if err != nil {
			t.Fatal(err)
		}
		frags = append(frags, f)
		off += n
	}
	return frags
}
