//go:build linux && cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"sluice/libml/cuda/internal/emu"
)

// setFlag sets a stream's preemption flag, as the host does to preempt.
func setFlag(t testing.TB, ex executor, st uint64, v int32) {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, uint32(v))
	ex.Write(t, st+StateFlag, b)
}

// launchOn runs an already planned kernel on state st.
func launchOn(t testing.TB, ex executor, l Launch, st uint64, idx int64, a *Args) {
	t.Helper()
	if err := ex.Launch(l.Kernel, l.Grid, Pack(st, idx, a)); err != nil {
		t.Fatalf("%s: %v", l.Kernel, err)
	}
}

func allSentinel(v []float32) bool {
	for _, x := range v {
		if x != sentinel {
			return false
		}
	}
	return true
}

// A kernel launched on a preempted stream does nothing (lazy eviction):
// every block exits in its prologue, before any write, and the
// execution index is not recorded. Clearing the flag and relaunching
// (REEF's restore) then produces the full result.
func TestPreemptBeforeStart(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(31, 32))
		c := gemmCase{M: 100, N: 90, K: 70, bd: [3]int{1, 1, 1}, alpha: 1, biasMode: 2, act: actRelu}
		a, want := gemmArgs(t, ex, c, r)
		l, err := Plan(OpGemm, a)
		if err != nil {
			t.Fatal(err)
		}
		st := newState(t, ex)
		setFlag(t, ex, st, 1)
		launchOn(t, ex, l, st, 5, a)
		if got := download(t, ex, a.Out, len(want)); !allSentinel(got) {
			t.Errorf("a preempted kernel wrote its output")
		}
		if s := readState(t, ex, st); s.Exec != -1 {
			t.Errorf("execution index %d recorded by a preempted kernel", s.Exec)
		}
		setFlag(t, ex, st, 0)
		launchOn(t, ex, l, st, 5, a)
		closeTo(t, "restored gemm", download(t, ex, a.Out, len(want)), want, tol)
		if s := readState(t, ex, st); s.Exec != 5 {
			t.Errorf("execution index %d, want 5", s.Exec)
		}
	})
}

// Preemption in the middle of a kernel (emulator hooks): blocks that ran
// before the flag was set are complete, the block running when it was set
// stops at its next poll without writing, later blocks exit in their
// prologue. Each case then restores (clear, relaunch) to the full result.
func TestPreemptMidKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	ex := &emuExec{}
	// GEMM 128 x 128 x 256: 4 tiles, 16 slices of K each, one poll per
	// slice; tile b covers rows 64*(b/2).., columns 64*(b%2)... A block
	// passes 33 barriers: the prologue's, then two per slice (the second
	// is the poll).
	c := gemmCase{M: 128, N: 128, K: 256, bd: [3]int{1, 1, 1}, alpha: 1}
	a, want := gemmArgs(t, ex, c, r)
	l, err := Plan(OpGemm, a)
	if err != nil {
		t.Fatal(err)
	}
	tileDone := func(got []float32, b int) (done, untouched bool) {
		done, untouched = true, true
		for m := 64 * (b / 2); m < 64*(b/2+1); m++ {
			for n := 64 * (b % 2); n < 64*(b%2+1); n++ {
				i := m*128 + n
				if got[i] != sentinel {
					untouched = false
				}
				if d := got[i] - want[i]; d > 1e-3 || d < -1e-3 {
					done = false
				}
			}
		}
		return done, untouched
	}
	for _, pc := range []struct {
		block, syncs int64
		done         int // tiles complete
	}{
		{0, 0, 0},  // set before block 0: nothing runs
		{2, 0, 2},  // set before block 2: tiles 0, 1
		{2, 5, 2},  // set inside block 2's K loop: its poll stops it
		{3, 33, 3}, // set after block 3's last barrier (1 + 16*2): it finishes
	} {
		t.Run(fmt.Sprintf("block%d-sync%d", pc.block, pc.syncs), func(t *testing.T) {
			out := outBuf(t, ex, 128*128)
			a.Out = out
			st := newState(t, ex)
			pe := &emuExec{opt: emu.Options{Preempt: true, PreemptBlock: pc.block, PreemptAfterSyncs: pc.syncs}}
			launchOn(t, pe, l, st, 9, a)
			got := download(t, ex, out, 128*128)
			for b := 0; b < 4; b++ {
				done, untouched := tileDone(got, b)
				wantDone := b < pc.done || (pc.syncs >= 33 && b == int(pc.block))
				switch {
				case wantDone && !done:
					t.Errorf("tile %d incomplete", b)
				case !wantDone && !untouched:
					t.Errorf("tile %d written by a preempted block", b)
				}
			}
			s := readState(t, ex, st)
			if s.Flag != 1 {
				t.Errorf("flag %d", s.Flag)
			}
			if wantExec := int64(9); (pc.block > 0 || pc.syncs > 0) && s.Exec != wantExec {
				t.Errorf("execution index %d, want %d", s.Exec, wantExec)
			} else if pc.block == 0 && pc.syncs == 0 && s.Exec != -1 {
				t.Errorf("execution index %d recorded, no block ran", s.Exec)
			}
			// restore: the kernel is idempotent, rerun it whole
			setFlag(t, ex, st, 0)
			launchOn(t, ex, l, st, 9, a)
			closeTo(t, "restored", download(t, ex, out, 128*128), want, tol)
		})
	}
	// long row kernels stop inside their row loops too
	x := randVec(r, 2*70000, -1, 1)
	var g Args
	g.In[0] = upload(t, ex, x)
	g.Out = outBuf(t, ex, 2)
	g.P[0], g.P[1], g.P[2] = 2, 70000, 1
	lg, err := Plan(OpGPool, &g)
	if err != nil || g.T[0] != 0 {
		t.Fatalf("gpool plan %v T0 %d", err, g.T[0])
	}
	st := newState(t, ex)
	pe := &emuExec{opt: emu.Options{Preempt: true, PreemptBlock: 0, PreemptAfterSyncs: 2}}
	launchOn(t, pe, lg, st, 1, &g)
	if got := download(t, ex, g.Out, 2); !allSentinel(got) {
		t.Errorf("preempted gpool wrote %v", got)
	}
}

// A grid may run in pieces: T[TBase] shifts the blocks a launch runs.
// Two launches of half the grid each give the whole result.
func TestBlockBase(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(35, 36))
		c := gemmCase{M: 200, N: 150, K: 30, bd: [3]int{1, 1, 1}, alpha: 1, biasMode: 1}
		a, want := gemmArgs(t, ex, c, r)
		l, err := Plan(OpGemm, a)
		if err != nil {
			t.Fatal(err)
		}
		st := newState(t, ex)
		half := l.Grid / 2
		b := *a
		b.T[TBase] = int64(half)
		if err := ex.Launch(l.Kernel, l.Grid-half, Pack(st, 1, &b)); err != nil {
			t.Fatal(err)
		}
		got := download(t, ex, a.Out, len(want))
		if allSentinel(got) || !anySentinel(got) {
			t.Errorf("the second half alone should write part of the output")
		}
		if err := ex.Launch(l.Kernel, half, Pack(st, 1, a)); err != nil {
			t.Fatal(err)
		}
		closeTo(t, "gemm in two pieces", download(t, ex, a.Out, len(want)), want, tol)
	})
}

func anySentinel(v []float32) bool {
	for _, x := range v {
		if x == sentinel {
			return true
		}
	}
	return false
}

// Blocks do not depend on the order they run in (the emulator runs them
// last to first here).
func TestBlockOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	ex := &emuExec{opt: emu.Options{Reverse: true}}
	c := gemmCase{M: 150, N: 130, K: 40, bd: [3]int{2, 1, 1}, alpha: 1, biasMode: 2, res: true, act: actRelu}
	a, want := gemmArgs(t, ex, c, r)
	runOp(t, ex, OpGemm, a)
	closeTo(t, "gemm, blocks reversed", download(t, ex, a.Out, len(want)), want, tol)
}

// With a trace ring in the stream state, every block posts a start and an
// end event (one 64-bit word each) carrying its block index and the
// kernel's execution index.
func TestTraceRing(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		const slots = 64
		ring := ex.HostAlloc(t, 8*slots)
		sb, err := EncodeState(ring.Dev(), slots)
		if err != nil {
			t.Fatal(err)
		}
		st := ex.Alloc(t, StateSize)
		ex.Write(t, st, sb)
		n := 5*ElemsPerBlock - 3
		var a Args
		a.In[0] = upload(t, ex, randVec(rand.New(rand.NewPCG(1, 1)), n, -1, 1))
		a.Out = outBuf(t, ex, n)
		a.P[0], a.P[PAct] = int64(n), actRelu
		l, err := Plan(OpUnary, &a)
		if err != nil {
			t.Fatal(err)
		}
		launchOn(t, ex, l, st, 0x1234, &a)
		if s := readState(t, ex, st); s.RingHead != uint64(2*l.Grid*runsPerLaunch(ex)) {
			t.Errorf("ring head %d, want %d", s.RingHead, 2*l.Grid*runsPerLaunch(ex))
		}
		words := ring.Get()
		starts, ends := map[int]bool{}, map[int]bool{}
		for i := 0; i < slots; i++ {
			e, ok := DecodeRing(binary.LittleEndian.Uint64(words[8*i:]))
			if !ok {
				continue
			}
			if e.Exec != 0x234 || e.SM >= ex.SMs() {
				t.Errorf("event %+v", e)
			}
			if e.End {
				ends[e.Block] = true
			} else {
				starts[e.Block] = true
			}
		}
		for b := 0; b < l.Grid; b++ {
			if !starts[b] || !ends[b] {
				t.Errorf("block %d: start %v end %v", b, starts[b], ends[b])
			}
		}
	})
}

// The batch gather copies request fragments from host memory (the
// dataplane's registered packet region) into the batch tensor, for every
// alignment case of its copy loop.
func TestBatchGather(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(39, 40))
		region := make([]byte, 1<<16)
		for i := range region {
			region[i] = byte(r.Uint32())
		}
		pkt := ex.HostAlloc(t, len(region))
		pkt.Set(region)
		frags := []Frag{
			{0, 0, 256},        // 16-byte aligned
			{16, 256, 4096},    // 16-byte aligned, longer than a block's stride
			{3, 4352, 100},     // source misaligned: funnel shift
			{5, 4452, 37},      // odd length: bytes
			{1, 4489, 1},       // one byte, odd destination
			{8190, 4492, 1400}, // 4-byte aligned words
			{40001, 5892, 9000},
		}
		var total uint64
		for i := range frags {
			frags[i].Src += pkt.Dev()
			total = max(total, frags[i].Dst+frags[i].Len)
		}
		desc := ex.HostAlloc(t, len(frags)*FragSize)
		desc.Set(EncodeFrags(frags))
		batch := ex.Alloc(t, int(total)+64)
		fill := make([]byte, int(total)+64)
		for i := range fill {
			fill[i] = 0xee
		}
		ex.Write(t, batch, fill)
		for _, per := range []int{1, 3} {
			ex.Write(t, batch, fill)
			var a Args
			a.Out, a.Aux = batch, desc.Dev()
			l, err := PlanBatchGather(&a, len(frags), per)
			if err != nil {
				t.Fatal(err)
			}
			st := newState(t, ex)
			launchOn(t, ex, l, st, 0, &a)
			got := make([]byte, len(fill))
			ex.Read(t, got, batch)
			want := append([]byte(nil), fill...)
			for _, f := range frags {
				src := f.Src - pkt.Dev()
				copy(want[f.Dst:], region[src:src+f.Len])
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%d per block: byte %d = %#x, want %#x", per, i, got[i], want[i])
				}
			}
		}
	})
}

// sg_clock: every block records the timer and an SM id below the SM
// count.
func TestClock(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		grid := 3 * ex.SMs()
		out := ex.Alloc(t, 16*grid)
		a := Args{Out: out}
		st := newState(t, ex)
		if err := ex.Launch(KernelClock, grid, Pack(st, 0, &a)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 16*grid)
		ex.Read(t, b, out)
		sms := map[uint64]bool{}
		for i := 0; i < grid; i++ {
			ts, sm := binary.LittleEndian.Uint64(b[16*i:]), binary.LittleEndian.Uint64(b[16*i+8:])
			if ts == 0 || sm >= uint64(ex.SMs()) {
				t.Errorf("block %d: time %d SM %d", i, ts, sm)
			}
			sms[sm] = true
		}
		t.Logf("%d blocks ran on %d SMs", grid, len(sms))
	})
}
