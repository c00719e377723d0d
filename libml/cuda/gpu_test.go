//go:build linux && cgo

package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"sluice/libml/cuda/cudrv"
	"sluice/libml/zoo"
)

// GPU-only tests: they skip unless SLUICE_GPU=1 (then a missing GPU
// fails them). The kernel tests (TestKernel*, TestPad, TestTraceRing,
// TestBatchGather, TestClock, TestBlockBase, TestPreemptBeforeStart) run
// on the GPU too under SLUICE_GPU=1.

// Every kernel loads; the driver's view of it (registers after JIT for
// this GPU, local memory, occupancy) is logged.
func TestGPUKernelInfo(t *testing.T) {
	g := gpuOnly(t)
	d, _ := cudrv.Open()
	t.Logf("%s: sm_%d%d, %d SMs, %d MiB, driver %d, green contexts %v",
		g.dev.Name, g.dev.CC[0], g.dev.CC[1], g.dev.SMs, g.dev.Memory>>20, d.Version, d.Green)
	for _, n := range KernelNames() {
		f := g.ks.Func(n)
		if f == nil {
			t.Errorf("%s not loaded", n)
			continue
		}
		occ, err := f.Occupancy()
		if err != nil {
			t.Error(err)
		}
		if f.MaxThread < Threads || occ < 1 {
			t.Errorf("%s: at most %d threads per block, %d blocks per SM", n, f.MaxThread, occ)
		}
		t.Logf("%-16s regs %3d  shared %5d  local %4d  blocks/SM %d", n, f.Regs, f.Shared, f.Local, occ)
	}
}

func u64s(b []byte) []uint64 {
	v := make([]uint64, len(b)/8)
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return v
}

// Preemption latency (REEF §4.2-4.3 in software): blocks of sg_spin work
// in rounds and poll the flag once per round; the host sets the flag with
// an async copy on another stream, bracketed by two sg_clock kernels on
// that stream. Every block records %globaltimer when it sees the flag.
func TestGPUPreemptLatency(t *testing.T) {
	g := gpuOnly(t)
	dev := g.dev
	run, err := dev.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	ctl, err := dev.NewStream(-10) // clamped to the highest priority
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	flag, err := dev.HostAlloc(4)
	if err != nil {
		t.Fatal(err)
	}
	defer flag.Free()
	binary.LittleEndian.PutUint32(flag.Bytes(), 1)
	for _, work := range []int{16, 256, 4096} {
		st, ctlSt := newState(t, g), newState(t, g)
		grid := 2 * dev.SMs // resident at once, with room for the clocks
		out := g.Alloc(t, 24*grid)
		c0, c1 := g.Alloc(t, 16), g.Alloc(t, 16)
		a := Args{Out: out}
		a.P[0], a.P[1] = int64(2*time.Second), int64(work)
		spin, clock := g.ks.Func(KernelSpin), g.ks.Func(KernelClock)
		if err := spin.Launch(grid, run, Pack(st, 1, &a)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		t0 := time.Now()
		if err := clock.Launch(1, ctl, Pack(ctlSt, 0, &Args{Out: c0})); err != nil {
			t.Fatal(err)
		}
		if err := ctl.WriteAsync(st+StateFlag, flag, 0, 4); err != nil {
			t.Fatal(err)
		}
		if err := clock.Launch(1, ctl, Pack(ctlSt, 0, &Args{Out: c1})); err != nil {
			t.Fatal(err)
		}
		if err := run.Sync(); err != nil {
			t.Fatal(err)
		}
		host := time.Since(t0)
		if err := ctl.Sync(); err != nil {
			t.Fatal(err)
		}
		res := make([]byte, 24*grid)
		g.Read(t, res, out)
		cb := make([]byte, 16)
		g.Read(t, cb, c0)
		tc0 := binary.LittleEndian.Uint64(cb)
		g.Read(t, cb, c1)
		tc1 := binary.LittleEndian.Uint64(cb)
		v := u64s(res)
		var lat []float64
		var perRound float64
		for b := 0; b < grid; b++ {
			start, seen, rounds := v[3*b], v[3*b+1], v[3*b+2]
			if seen == 0 {
				t.Fatalf("work %d: block %d never saw the flag (%d rounds)", work, b, rounds)
			}
			lat = append(lat, (float64(seen)-float64(tc0))/1e3)
			if rounds > 0 {
				perRound += float64(seen-start) / float64(rounds) / 1e3 / float64(grid)
			}
		}
		slices.Sort(lat)
		t.Logf("work %5d FMAs/round (%.2f µs/round): flag set within [c0, c0+%.1f µs]; blocks saw it %.1f µs (p50) / %.1f µs (max) after c0; host: preempt -> stream idle %v",
			work, perRound, float64(tc1-tc0)/1e3, lat[len(lat)/2], lat[len(lat)-1], host)
		if lat[len(lat)-1] > 1e5 {
			t.Errorf("work %d: a block took %.0f µs to see the flag", work, lat[len(lat)-1])
		}
	}
}

func randDev(t testing.TB, g *gpuExec, r *rand.Rand, n int) ([]float32, uint64) {
	v := randVec(r, n, -1, 1)
	return v, upload(t, g, v)
}

// A real kernel preempted mid-run: a 2048^3 GEMM on one stream, the flag
// set from another at half its run time. The kernel stops (blocks exit at
// their next K-slice poll or in their prologue), the execution index is
// recorded, and a relaunch after clearing the flag (REEF's restore of an
// idempotent kernel) gives the right result.
func TestGPUGemmPreempt(t *testing.T) {
	g := gpuOnly(t)
	dev := g.dev
	r := rand.New(rand.NewPCG(51, 52))
	const n = 2048
	A, pa := randDev(t, g, r, n*n)
	B, pb := randDev(t, g, r, n*n)
	out := g.Alloc(t, 4*n*n)
	a := Args{Out: out, In: [MaxIn]uint64{pa, pb}}
	copy(a.P[:], []int64{n, n, n, 0, 0, n, n, n, 1, 1, 1})
	a.F[0] = 1
	l, err := Plan(OpGemm, &a)
	if err != nil {
		t.Fatal(err)
	}
	f := g.ks.Func(l.Kernel)
	run, _ := dev.NewStream(0)
	defer run.Close()
	ctl, _ := dev.NewStream(-10)
	defer ctl.Close()
	e0, _ := dev.NewEvent()
	e1, _ := dev.NewEvent()
	defer e0.Close()
	defer e1.Close()
	st := newState(t, g)
	var full float32
	for i := 0; i < 3; i++ { // warm up, then time
		e0.Record(run)
		if err := f.Launch(l.Grid, run, Pack(st, 1, &a)); err != nil {
			t.Fatal(err)
		}
		e1.Record(run)
		if err := e1.Sync(); err != nil {
			t.Fatal(err)
		}
		full, _ = e1.Since(e0)
	}
	t.Logf("sg_gemm %dx%dx%d: %.3f ms, %.0f GFLOP/s (%d blocks)", n, n, n, full, 2*n*n*n/float64(full)/1e6, l.Grid)

	flag, _ := dev.HostAlloc(4)
	defer flag.Free()
	binary.LittleEndian.PutUint32(flag.Bytes(), 1)
	if err := dev.Memset32(out, math.Float32bits(sentinel), n*n); err != nil {
		t.Fatal(err)
	}
	st = newState(t, g)
	if err := f.Launch(l.Grid, run, Pack(st, 2, &a)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(full/2*1e6) * time.Nanosecond)
	t0 := time.Now()
	if err := ctl.WriteAsync(st+StateFlag, flag, 0, 4); err != nil {
		t.Fatal(err)
	}
	if err := run.Sync(); err != nil {
		t.Fatal(err)
	}
	lat := time.Since(t0)
	got := download(t, g, out, n*n)
	written := 0
	for _, v := range got {
		if v != sentinel {
			written++
		}
	}
	s := readState(t, g, st)
	t.Logf("preempted at ~%.2f ms: stream idle %v after the flag write; %.1f%% of the output written; execution index %d",
		full/2, lat, 100*float64(written)/float64(n*n), s.Exec)
	if s.Exec != 2 {
		t.Errorf("execution index %d, want 2", s.Exec)
	}
	if lat > time.Duration(full*1e6)*time.Nanosecond && full > 5 {
		t.Errorf("preemption took %v, longer than the whole kernel (%.2f ms)", lat, full)
	}
	// restore
	setFlag(t, g, st, 0)
	if err := f.Launch(l.Grid, run, Pack(st, 2, &a)); err != nil {
		t.Fatal(err)
	}
	if err := run.Sync(); err != nil {
		t.Fatal(err)
	}
	got = download(t, g, out, n*n)
	for i := 0; i < 64; i++ {
		m, c := r.IntN(n), r.IntN(n)
		want := 0.0
		for k := 0; k < n; k++ {
			want += float64(A[m*n+k]) * float64(B[k*n+c])
		}
		if d := math.Abs(float64(got[m*n+c]) - want); d > tol*(1+math.Abs(want)) {
			t.Errorf("C[%d][%d] = %g, want %g", m, c, got[m*n+c], want)
		}
	}
}

// The zero-copy input path: a host region (anonymous mmap, like the
// dataplane's packet region) registered with the driver, read by the
// batch gather kernel straight from host memory.
func TestGPURegisteredGather(t *testing.T) {
	g := gpuOnly(t)
	dev := g.dev
	const size = 1 << 20
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	r := rand.New(rand.NewPCG(53, 54))
	for i := range mem {
		mem[i] = byte(r.Uint32())
	}
	base, err := dev.RegisterHost(unsafe.Pointer(&mem[0]), size)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.UnregisterHost(unsafe.Pointer(&mem[0]))
	// 64 requests of 150528 bytes (3x224x224 floats) in 1400-byte
	// fragments would not fit 1 MiB: 64 requests of 12 fragments here
	var frags []Frag
	var dst uint64
	for q := 0; q < 64; q++ {
		for k := 0; k < 12; k++ {
			src := uint64(r.IntN(size - 1500))
			ln := uint64(1400)
			if k == 11 {
				ln = 604
			}
			frags = append(frags, Frag{Src: base + src, Dst: dst, Len: ln})
			dst += ln
		}
	}
	desc, err := dev.HostAlloc(len(frags) * FragSize)
	if err != nil {
		t.Fatal(err)
	}
	defer desc.Free()
	copy(desc.Bytes(), EncodeFrags(frags))
	batch := g.Alloc(t, int(dst))
	a := Args{Out: batch, Aux: desc.Dev}
	l, err := PlanBatchGather(&a, len(frags), 1)
	if err != nil {
		t.Fatal(err)
	}
	st := newState(t, g)
	e0, _ := dev.NewEvent()
	e1, _ := dev.NewEvent()
	defer e0.Close()
	defer e1.Close()
	f := g.ks.Func(l.Kernel)
	var ms float32
	for i := 0; i < 3; i++ {
		e0.Record(nil)
		if err := f.Launch(l.Grid, nil, Pack(st, 0, &a)); err != nil {
			t.Fatal(err)
		}
		e1.Record(nil)
		e1.Sync()
		ms, _ = e1.Since(e0)
	}
	got := make([]byte, dst)
	g.Read(t, got, batch)
	for _, fr := range frags {
		s := fr.Src - base
		if !slices.Equal(got[fr.Dst:fr.Dst+fr.Len], mem[s:s+fr.Len]) {
			t.Fatalf("fragment %+v differs", fr)
		}
	}
	t.Logf("gathered %d fragments (%d KiB) from registered host memory in %.1f µs (%.2f GB/s)",
		len(frags), dst>>10, ms*1e3, float64(dst)/float64(ms)/1e6)
}

// Green contexts (driver API 12.4+): a partition of the SMs as a device
// of its own; its kernels run only there.
func TestGPUGreen(t *testing.T) {
	g := gpuOnly(t)
	part, err := g.dev.Green(g.dev.SMs / 2)
	if errors.Is(err, ErrNoGreen) {
		t.Skip("driver has no green contexts")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer part.Close()
	sms := smsRunOn(t, part, 8*g.dev.SMs)
	t.Logf("green context of %d SMs (asked %d): blocks ran on %d distinct SMs", part.SMs, g.dev.SMs/2, len(sms))
	if len(sms) > part.SMs {
		t.Errorf("blocks ran on %d SMs, the partition has %d", len(sms), part.SMs)
	}
}

// Green contexts of SM ranges that do not overlap (GreenRange, what the
// backend's partition placement relies on) run on SMs that do not
// overlap, and together on more SMs than one of them.
func TestGPUGreenDisjoint(t *testing.T) {
	g := gpuOnly(t)
	n, gran, err := g.dev.SMGroups()
	if errors.Is(err, ErrNoGreen) {
		t.Skip("driver has no green contexts")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d SMs split into %d groups of %d", g.dev.SMs, n, gran)
	half := n / 2 * gran
	var sets []map[uint64]bool
	for _, first := range []int{0, half} {
		part, err := g.dev.GreenRange(first, half)
		if err != nil {
			t.Fatalf("GreenRange(%d, %d): %v", first, half, err)
		}
		sms := smsRunOn(t, part, 8*g.dev.SMs)
		part.Close()
		t.Logf("SMs %d..%d: %d SMs, blocks ran on %d distinct SMs", first, first+half-1, part.SMs, len(sms))
		sets = append(sets, sms)
	}
	both := 0
	for id := range sets[0] {
		if sets[1][id] {
			both++
		}
	}
	if both > 0 {
		t.Errorf("%d SMs ran blocks of both partitions (%d and %d SMs)", both, len(sets[0]), len(sets[1]))
	}
	// the backend places two half shares side by side (SetShare rounds a
	// share down to whole groups)
	b := gpuBackend(t)
	mg, err := zoo.Build("mlp", zoo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var placed [][2]int
	for k := 0; k < 2; k++ {
		inst := load(t, b, "mlp", mg, 1).(*Instance)
		defer inst.Close()
		if err := inst.SetShare(0.5); err != nil {
			t.Fatal(err)
		}
		c, ok := inst.ln.ctx.(*slotCtx)
		if !ok {
			t.Fatalf("a half share's context is a %T", inst.ln.ctx)
		}
		t.Logf("half share %d: %d SMs, groups %d..%d", k, inst.SMs(), c.first, c.first+c.n-1)
		placed = append(placed, [2]int{c.first, c.first + c.n})
	}
	if placed[0][1] > placed[1][0] && placed[1][1] > placed[0][0] {
		t.Errorf("two half shares on overlapping groups %v of %d", placed, len(b.slots.use))
	}
}

// smsRunOn runs the clock kernel over grid blocks in part and returns the
// SM ids its blocks ran on.
func smsRunOn(t *testing.T, part *cudrv.Device, grid int) map[uint64]bool {
	t.Helper()
	ks, err := loadKernels(part)
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	s, err := part.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := part.Alloc(16 * grid)
	if err != nil {
		t.Fatal(err)
	}
	defer part.Free(out)
	stb, _ := EncodeState(0, 0)
	st, err := part.Alloc(StateSize)
	if err != nil {
		t.Fatal(err)
	}
	defer part.Free(st)
	part.Write(st, stb)
	if err := ks.Func(KernelClock).Launch(grid, s, Pack(st, 0, &Args{Out: out})); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16*grid)
	part.Read(b, out)
	v := u64s(b)
	sms := map[uint64]bool{}
	for i := 0; i < grid; i++ {
		sms[v[2*i+1]] = true
	}
	return sms
}
