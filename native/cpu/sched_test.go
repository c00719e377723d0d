package cpu

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// Activation codes used below (sluice_cpu.h enum sk_act).
const (
	actAffine = 20 // f[A]*x + f[B]
	actSin    = 25
)

// cfloats is a float32 array in C memory.
type cfloats struct {
	p unsafe.Pointer
	n int
}

func newFloats(t testing.TB, n int, v float32) *cfloats {
	t.Helper()
	p, err := Alloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	f := &cfloats{p, n}
	s := f.s()
	for i := range s {
		s[i] = v
	}
	t.Cleanup(func() { Free(p, n*4) })
	return f
}

func (f *cfloats) s() []float32 { return unsafe.Slice((*float32)(f.p), f.n) }

// fillLCG fills f with values in [-0.5, 0.5) from the linear congruential
// sequence at *rnd (advanced), the same for the same start.
func fillLCG(f *cfloats, rnd *uint32) {
	for i := range f.s() {
		*rnd = *rnd*1664525 + 1013904223
		f.s()[i] = float32(*rnd>>8)/float32(1<<24) - 0.5
	}
}

// unary fills kernel i of ks as y = act(x) over n floats.
func unary(t testing.TB, ks *Kernels, i int, x, y *cfloats, act int64, a, b float32, units int) {
	t.Helper()
	d := Desc{Op: OpUnary, Out: y.p}
	d.In[0] = x.p
	d.P[0] = int64(x.n)
	d.P[PAct] = act
	d.F[FActA], d.F[FActB] = a, b
	if x.p == y.p {
		d.Flags = FlagInPlace
	}
	if err := ks.Set(i, &d, units); err != nil {
		t.Fatal(err)
	}
}

func newPool(t testing.TB, units int) *Pool {
	t.Helper()
	p, err := NewPool(units, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func newKernels(t testing.TB, n int) *Kernels {
	t.Helper()
	ks, err := NewKernels(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ks.Free)
	return ks
}

// runBlocks runs every block of kernel i of ks in turn on this thread.
func runBlocks(ks *Kernels, i int) {
	for blk := int64(0); blk < ks.Info(i).Grid; blk++ {
		ks.RunBlock(i, blk)
	}
}

func newLaunches(t testing.TB, n int) *Launches {
	t.Helper()
	l, err := NewLaunches(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Free)
	return l
}

// newStream is a stream of the given capacity, closed when the test ends.
func newStream(t testing.TB, pool *Pool, capacity int) *Stream {
	t.Helper()
	st, err := pool.NewStream(capacity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// newHQStream is a stream of the given capacity with a host queue of the
// given window; the caller closes it.
func newHQStream(t testing.TB, pool *Pool, capacity, window int) *Stream {
	t.Helper()
	st, err := pool.NewStream(capacity)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnableHQ(window); err != nil {
		st.Close()
		t.Fatal(err)
	}
	return st
}

// incChain is a chain x = x+1 repeated: nk in-place kernels over n floats
// (tiled for units), launched with execution indices 0..nk-1, so x counts
// the kernels that ran.
func incChain(t testing.TB, nk, n, units int) (*cfloats, *Launches) {
	t.Helper()
	x, _, l := incChainKernels(t, nk, n, units)
	return x, l
}

// incChainKernels is incChain with its kernels.
func incChainKernels(t testing.TB, nk, n, units int) (*cfloats, *Kernels, *Launches) {
	t.Helper()
	x := newFloats(t, n, 0)
	ks := newKernels(t, nk)
	l := newLaunches(t, nk)
	for i := 0; i < nk; i++ {
		unary(t, ks, i, x, x, actAffine, 1, 1, units)
		l.Set(i, Launch{Kernels: ks, K: i, Idx: int64(i)})
	}
	return x, ks, l
}

// waitFor waits until cond holds. It decides nothing by time: the
// deadline only turns a hang (a broken hook, a lost wake-up) into a
// failure with a message.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting, after 2 minutes, for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestLaunchRange runs only the blocks of a range.
func TestLaunchRange(t *testing.T) {
	pool := newPool(t, 2)
	st := newStream(t, pool, 16)
	const n = 1 << 20
	x, y := newFloats(t, n, 1), newFloats(t, n, 0)
	ks := newKernels(t, 1)
	unary(t, ks, 0, x, y, actAffine, 2, 1, 2)
	grid := ks.Info(0).Grid
	if grid < 4 {
		t.Fatalf("grid %d: want >= 4", grid)
	}
	if err := st.LaunchRange(ks, 0, 0, 0, 1, 3); err != nil {
		t.Fatal(err)
	}
	if s := st.Sync(); s != Done {
		t.Fatalf("sync: %v", s)
	}
	chunk := (n + int(grid) - 1) / int(grid)
	ys := y.s()
	for i := 0; i < n; i += 997 {
		want := float32(0)
		if b := i / chunk; b >= 1 && b < 3 {
			want = 3
		}
		if ys[i] != want {
			t.Fatalf("y[%d] (block %d) = %v, want %v", i, i/chunk, ys[i], want)
		}
	}
	if err := st.LaunchRange(ks, 0, 0, 0, 2, 2); err == nil {
		t.Fatal("empty range accepted")
	}
	if err := st.LaunchRange(ks, 0, 0, 0, 0, grid+1); err == nil {
		t.Fatal("range past the grid accepted")
	}
}

// TestHostQueueWindow: at most window kernels are ever outstanding, the
// rest wait in the host queue, and everything pushed runs in order.
func TestHostQueueWindow(t *testing.T) {
	pool := newPool(t, 2)
	st := newStream(t, pool, 64)
	if err := st.EnableHQ(64); err == nil {
		t.Fatal("window = capacity accepted")
	}
	const window = 3
	if err := st.EnableHQ(window); err != nil {
		t.Fatal(err)
	}
	// a chain y = x+1 repeated: kernel i adds 1 in place, so the result
	// counts the kernels that ran
	const nk, n = 200, 1 << 16
	x, l := incChain(t, nk, n, 2)
	seq, err := st.Push(l, 0, nk, false)
	if err != nil {
		t.Fatal(err)
	}
	// A window that stays empty while the host queue holds launches would
	// stall the loop below (go test's timeout reports it); a single look
	// at both counters cannot tell, since a unit completes a kernel before
	// it moves the next one in.
	maxOut := 0
	for st.Outstanding() > 0 || st.HQLen() > 0 {
		maxOut = max(maxOut, st.Outstanding())
		runtime.Gosched()
	}
	if s := st.Sync(); s != Done {
		t.Fatalf("sync: %v", s)
	}
	if maxOut > window {
		t.Fatalf("%d kernels outstanding, window %d", maxOut, window)
	}
	if got := x.s()[n-1]; got != nk {
		t.Fatalf("x = %v after %d in-place +1 kernels", got, nk)
	}
	if e := st.ExecIndex(); e != nk-1 {
		t.Fatalf("exec index %d, want %d", e, nk-1)
	}
	// the next push continues the sequence numbers
	seq2, err := st.Push(l, 0, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if seq2 != seq+nk {
		t.Fatalf("second push at seq %d, want %d", seq2, seq+nk)
	}
	st.Sync()
	if err := st.SetWindow(1); err != nil {
		t.Fatal(err)
	}
}

// TestHostQueueResetLeavesNothing: preempting a stream with a long host
// queue drops every launch (none runs afterwards), the collector frees
// them, and the stream is reusable after Restore.
func TestHostQueueResetLeavesNothing(t *testing.T) {
	pool := newPool(t, 2)
	st := newHQStream(t, pool, 64, 4)
	defer st.Close()
	// the preemption comes while kernel 5's first block is held (a test
	// hook): kernels 0-4 completed, 5-8 fill the window, the rest wait in
	// the host queue, however slow the machine
	const nk, n, at = 400, 1 << 20, 5
	x, l := incChain(t, nk, n, 2)
	freed0 := pool.GCFreed()
	st.HoldAt(at, 0, false)
	defer st.ReleaseHold()
	if _, err := st.Push(l, 0, nk, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "kernel 5's first block to be held", func() bool { return st.Holds() == 1 })
	t0 := st.HQPreempt()
	st.ReleaseHold()
	if q := st.HQLen(); q != 0 {
		t.Fatalf("host queue holds %d launches after the reset", q)
	}
	if s := st.Sync(); s != Preempted {
		t.Fatalf("sync after preempt: %v", s)
	}
	if o := st.Outstanding(); o != 0 {
		t.Fatalf("%d kernels outstanding after the reset", o)
	}
	if d := st.DrainNs(); d < t0 {
		t.Fatalf("drained at %d, before the preempt call at %d", d, t0)
	}
	last := st.ExecIndex()
	if last != at {
		t.Fatalf("exec index %d after a preemption while kernel %d ran", last, at)
	}
	// x[0] is in kernel 5's held block, which stopped at its first check
	// (without checks compiled in, it ran to its end)
	v := x.s()[0]
	want := float32(at)
	if !ChecksCompiled() {
		want++
	}
	if v != want {
		t.Fatalf("x[0] = %v after a preemption inside kernel %d's block 0, want %v", v, at, want)
	}
	// nothing runs afterwards, not even once the flag is cleared
	time.Sleep(5 * time.Millisecond)
	st.Restore()
	time.Sleep(5 * time.Millisecond)
	if w := x.s()[0]; w != v {
		t.Fatalf("x changed from %v to %v after the reset", v, w)
	}
	// the collector frees the detached launches (everything not moved to
	// the window), off the critical path
	wantFreed := int64(nk - last - 1 - 4)
	waitFor(t, fmt.Sprintf("the collector to free %d launches", wantFreed), func() bool { return pool.GCFreed()-freed0 >= wantFreed })
	// the stream runs again
	st.ResetIndex()
	if _, err := st.Push(l, 0, 2, false); err != nil {
		t.Fatal(err)
	}
	if s := st.Sync(); s != Done {
		t.Fatalf("sync after restore: %v", s)
	}
	if w := x.s()[0]; w != v+2 {
		t.Fatalf("x = %v after two more kernels, want %v", w, v+2)
	}
}

// TestFlagStopsQueuedAndRunningBlocks: with one unit, a kernel of long
// blocks is preempted while its first block runs (held past its prologue
// by the test hook, so the preemption cannot come too late): that block
// stops at its next in-loop check (what it wrote is a prefix of its tile),
// the queued blocks exit at their prologue (their tiles are untouched),
// and the queued kernel behind it never starts.
func TestFlagStopsQueuedAndRunningBlocks(t *testing.T) {
	if !ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	pool := newPool(t, 1)
	st := newHQStream(t, pool, 16, 4)
	defer st.Close()
	const n = 1 << 24
	x := newFloats(t, n, 1)
	y := newFloats(t, n, 0)
	z := newFloats(t, 1<<16, 0)
	ks := newKernels(t, 2)
	unary(t, ks, 0, x, y, actSin, 0, 0, 1)
	unary(t, ks, 1, z, z, actAffine, 1, 1, 1)
	grid := int(ks.Info(0).Grid)
	if grid < 2 {
		t.Fatalf("grid %d", grid)
	}
	chunk := (n + grid - 1) / grid
	l := newLaunches(t, 2)
	l.Set(0, Launch{Kernels: ks, K: 0, Idx: 0})
	l.Set(1, Launch{Kernels: ks, K: 1, Idx: 1})
	st.HoldAt(0, 0, false)
	defer st.ReleaseHold()
	if _, err := st.Push(l, 0, 2, true); err != nil {
		t.Fatal(err)
	}
	ys := y.s()
	waitFor(t, "block 0 to be held", func() bool { return st.Holding() == 1 })
	if e := st.ExecIndex(); e != 0 {
		t.Fatalf("exec index %d with block 0 past its prologue", e)
	}
	t0 := st.HQPreempt()
	st.ReleaseHold()
	if s := st.Sync(); s != Preempted {
		t.Fatalf("sync: %v", s)
	}
	if m := st.MarkNs(); m == 0 || m > t0 {
		t.Fatalf("kernel start %d, preempt %d", m, t0)
	}
	if idle := st.IdleNs(); idle < t0 || idle > st.DrainNs() {
		t.Fatalf("idle at %d: want between the preempt call %d and the drain %d", idle, t0, st.DrainNs())
	}
	want := float32(math.Sin(1))
	// block 0: a processed prefix, then untouched floats
	done := 0
	for done < chunk && ys[done] == want {
		done++
	}
	if done == chunk {
		t.Fatalf("block 0 ran to its end (%d floats): the flag did not stop it", chunk)
	}
	for i := done; i < chunk; i++ {
		if ys[i] != 0 {
			t.Fatalf("block 0: y[%d] = %v after the stop at %d", i, ys[i], done)
		}
	}
	// later blocks never started
	for i := chunk; i < n; i += 101 {
		if ys[i] != 0 {
			t.Fatalf("queued block %d ran (y[%d] = %v)", i/chunk, i, ys[i])
		}
	}
	if z.s()[0] != 0 {
		t.Fatal("the queued kernel ran")
	}
	if e := st.ExecIndex(); e != 0 {
		t.Fatalf("exec index %d, want 0", e)
	}
	t.Logf("block 0 stopped after %d of %d floats; drained %.1f us after the preempt call",
		done, chunk, float64(st.DrainNs()-t0)/1e3)
}

// padFixture builds a padding context with synthetic tables: candidate c
// has nk kernels in nver versions; blk[c][k][v] etc.
type padFixture struct {
	pad    *Pad
	tables []*PadTable
	ks     *Kernels
}

func newPadFixture(t *testing.T, blk, kern, bw [][][]int64) *padFixture {
	t.Helper()
	f := &padFixture{}
	var err error
	if f.pad, err = NewPad(nil, len(blk), 1000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pad.Free)
	// real kernels give the grids: version v of every kernel has grid 2+v
	x := newFloats(t, 1<<20, 0)
	f.ks = newKernels(t, 4)
	for v := 0; v < 4; v++ {
		d := Desc{Op: OpUnary, Out: x.p}
		d.In[0] = x.p
		d.P[0] = int64(x.n)
		if err := f.ks.Set(v, &d, 1); err != nil {
			t.Fatal(err)
		}
	}
	for c := range blk {
		nk, nver := len(blk[c]), len(blk[c][0])
		tb, err := NewPadTable(nk, nver)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tb.Free)
		for k := 0; k < nk; k++ {
			for v := 0; v < nver; v++ {
				tb.Set(k, v, f.ks.KernelPtr(v%4), blk[c][k][v], kern[c][k][v], bw[c][k][v])
			}
		}
		f.tables = append(f.tables, tb)
		if err := f.pad.SetCand(c, tb, Cursor{V: -1}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestPadSelectRules: selection never returns a block that breaks rule 1
// (block time below the RT kernel's remaining time) or rule 2 (bandwidth
// within budget), prefers the fitting version with the shortest kernel
// time, keeps a kernel's version until it completes, and waits for a
// kernel's last blocks before the next kernel.
func TestPadSelectRules(t *testing.T) {
	// candidate 0: 2 kernels x 2 versions; candidate 1: 1 kernel x 1 version
	blk := [][][]int64{{{500, 100}, {50, 0}}, {{10}}}
	kern := [][][]int64{{{1000, 1500}, {200, 0}}, {{40}}}
	bw := [][][]int64{{{100, 100}, {900, 0}}, {{10}}}
	f := newPadFixture(t, blk, kern, bw)
	gridOf := func(v int) int64 { return f.ks.Info(v).Grid }

	// rem 80: no version of c0.k0 fits rule 1 (500, 100) -> c1
	c, k, v, b := f.pad.Select(80, 0)
	if c != 1 || k != 0 || v != 0 || b != 0 {
		t.Fatalf("rem 80: got cand %d k %d v %d blk %d, want c1 k0 v0 b0", c, k, v, b)
	}
	f.pad.Complete(c, 1)
	// rem 600: both versions fit, version 0 has the shorter kernel time
	c, k, v, b = f.pad.Select(600, 0)
	if c != 0 || k != 0 || v != 0 || b != 0 {
		t.Fatalf("rem 600: got c%d k%d v%d b%d", c, k, v, b)
	}
	// rem 200: c0 is committed to version 0 (block 500): rule 1 rejects it
	// and c1 has nothing left after its grid... take its remaining blocks
	for {
		c, k, v, b = f.pad.Select(200, 0)
		if c < 0 {
			break
		}
		if c == 0 {
			t.Fatalf("rem 200: picked c0 k%d v%d (block time %d)", k, v, blk[0][k][v])
		}
		f.pad.Complete(c, 1)
	}
	// c0 continues version 0 only with enough time; claim all its blocks
	g := gridOf(0)
	var claimed []int64
	for i := int64(1); i < g; i++ {
		c, k, v, b = f.pad.Select(600, 0)
		if c != 0 || k != 0 || v != 0 {
			t.Fatalf("block %d: got c%d k%d v%d", i, c, k, v)
		}
		claimed = append(claimed, b)
	}
	// all claimed, one still running: kernel 1 must wait
	if c, k, _, _ = f.pad.Select(1e9, 0); c == 0 {
		t.Fatalf("picked kernel %d of c0 before kernel 0 completed", k)
	}
	for range g {
		f.pad.Complete(0, 1)
	}
	// kernel 1: version 0 only (version 1 has no profile); rule 2: RT 200 +
	// 900 > budget 1000
	if c, k, v, _ = f.pad.Select(1e9, 200); c == 0 {
		t.Fatalf("rule 2 broken: picked c0 k%d v%d at 200+%d MB/s, budget 1000", k, v, bw[0][k][v])
	}
	c, k, v, b = f.pad.Select(1e9, 100)
	if c != 0 || k != 1 || v != 0 || b != 0 {
		t.Fatalf("rt bw 100: got c%d k%d v%d b%d, want c0 k1 v0 b0", c, k, v, b)
	}
	st := f.pad.Stats()
	if st.Rule1 == 0 || st.Rule2 == 0 {
		t.Fatalf("rejections not counted: %+v", st)
	}
	cur := f.pad.Cursor(0)
	if cur.K != 1 || cur.V != 0 || cur.Next != 1 {
		t.Fatalf("cursor %+v", cur)
	}
}

// TestPaddingRunsOnIdleUnits: an RT kernel restricted to unit 0 with an
// estimated time leaves unit 1 idle; a best-effort chain offered for
// padding runs there, its result is exact, and no padding block starts
// once the RT kernel is over. The RT kernels are held (the test hook)
// until padding has done its part and their estimates are far beyond any
// stall, so rule 1 admits the blocks on any machine.
func TestPaddingRunsOnIdleUnits(t *testing.T) {
	pool := newPool(t, 2)
	rt := newHQStream(t, pool, 16, 4)
	defer rt.Close()
	// RT: one long kernel on unit 0 (sin over 8M floats, ~tens of ms)
	rx, ry := newFloats(t, 1<<23, 1), newFloats(t, 1<<23, 0)
	rks := newKernels(t, 1)
	unary(t, rks, 0, rx, ry, actSin, 0, 0, 2)
	// BE: 8 in-place +1 kernels over 256K floats, two versions (tilings)
	const nk = 8
	bx := newFloats(t, 1<<18, 0)
	v0, v1 := newKernels(t, nk), newKernels(t, nk)
	for i := 0; i < nk; i++ {
		unary(t, v0, i, bx, bx, actAffine, 1, 1, 2)
		unary(t, v1, i, bx, bx, actAffine, 1, 1, 16)
	}
	tb, err := NewPadTable(nk, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Free()
	for i := 0; i < nk; i++ {
		tb.Set(i, 0, v0.KernelPtr(i), 100_000, 200_000, 10)
		tb.Set(i, 1, v1.KernelPtr(i), 20_000, 250_000, 10)
	}
	pad, err := NewPad(rt, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pad.Free()
	if err := pad.SetCand(0, tb, Cursor{V: -1}); err != nil {
		t.Fatal(err)
	}
	pad.Start(pool)
	l := newLaunches(t, 1)
	l.Set(0, Launch{Kernels: rks, K: 0, EstNs: int64(time.Hour), BW: 1, Mask: 1})
	t0 := NowNs()
	rt.HoldAt(0, 0, false)
	defer rt.ReleaseHold()
	if _, err := rt.Push(l, 0, 1, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "padding to finish the chain beside the held RT kernel", func() bool { return pad.Cursor(0).K == nk })
	rt.ReleaseHold()
	if s := rt.Sync(); s != Done {
		t.Fatalf("rt: %v", s)
	}
	rtEnd := NowNs()
	pad.Stop(pool)
	cur := pad.Cursor(0)
	if cur.K != nk {
		t.Fatalf("padding did not finish the chain: cursor %+v (RT ran %.1f ms)", cur, float64(rtEnd-t0)/1e6)
	}
	for i, v := range bx.s() {
		if v != nk {
			t.Fatalf("bx[%d] = %v, want %d", i, v, nk)
		}
	}
	st := pad.Stats()
	t.Logf("%d padding blocks, %d selections, mean %.0f ns, max %d ns", cur.Blocks, st.Calls, float64(st.Ns)/float64(max(st.Calls, 1)), st.MaxNs)

	// a grid-1 RT kernel allowed on every unit: the unit that finds its
	// only block claimed pads
	for i := range bx.s() {
		bx.s()[i] = 0
	}
	grid1 := newKernels(t, 1)
	gx, gy := newFloats(t, 1<<14, 1), newFloats(t, 1<<14, 0)
	unary(t, grid1, 0, gx, gy, actSin, 0, 0, 2)
	if g := grid1.Info(0).Grid; g != 1 {
		t.Fatalf("grid %d, want 1", g)
	}
	// the first launch's block is held until a padding block has run
	if err := pad.SetCand(0, tb, Cursor{V: -1}); err != nil {
		t.Fatal(err)
	}
	pad.Start(pool)
	l2 := newLaunches(t, 4)
	for i := 0; i < 4; i++ {
		l2.Set(i, Launch{Kernels: grid1, K: 0, Idx: int64(i), EstNs: int64(time.Hour)})
	}
	rt.HoldAt(0, 0, false)
	if _, err := rt.Push(l2, 0, 4, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a padding block beside the held grid-1 RT kernel", func() bool { return pad.Cursor(0).Blocks > 0 })
	rt.ReleaseHold()
	rt.Sync()
	pad.Stop(pool)
	if cur := pad.Cursor(0); cur.Blocks == 0 {
		t.Fatalf("no padding beside grid-1 RT kernels that may run anywhere: %+v", cur)
	}

	// rule 1 at run time: an RT kernel with a tiny estimate leaves no room
	for i := 0; i < nk; i++ {
		tb.Set(i, 0, v0.KernelPtr(i), 100_000, 200_000, 10)
		tb.Set(i, 1, v1.KernelPtr(i), 100_000, 250_000, 10)
	}
	if err := pad.SetCand(0, tb, Cursor{V: -1}); err != nil {
		t.Fatal(err)
	}
	pad.Start(pool)
	l.Set(0, Launch{Kernels: rks, K: 0, EstNs: 50_000, Mask: 1})
	if _, err := rt.Push(l, 0, 1, false); err != nil {
		t.Fatal(err)
	}
	rt.Sync()
	pad.Stop(pool)
	if cur := pad.Cursor(0); cur.Blocks != 0 || cur.Next != 0 {
		t.Fatalf("padded blocks of 100 us into an RT kernel estimated at 50 us: %+v", cur)
	}
}

// TestFlagResetsHostQueue: a flag set without HQPreempt (the PreemptAt
// hook, Stream.Preempt) also drops the host queue, so Sync returns.
func TestFlagResetsHostQueue(t *testing.T) {
	if !ChecksCompiled() {
		t.Skip("preemption checks compiled out: the hooked block runs")
	}
	pool := newPool(t, 2)
	st := newHQStream(t, pool, 64, 2)
	defer st.Close()
	const nk, n = 50, 1 << 16
	x, l := incChain(t, nk, n, 2)
	st.PreemptAt(10, 0)
	if _, err := st.Push(l, 0, nk, false); err != nil {
		t.Fatal(err)
	}
	done := make(chan Status)
	go func() { done <- st.Sync() }()
	select {
	case s := <-done:
		if s != Preempted {
			t.Fatalf("sync: %v", s)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("sync hangs after a hook preemption")
	}
	if q := st.HQLen(); q != 0 {
		t.Fatalf("host queue holds %d launches", q)
	}
	if e := st.ExecIndex(); e != 9 {
		t.Fatalf("exec index %d, want 9", e)
	}
	if v := x.s()[0]; v != 10 {
		t.Fatalf("x = %v, want 10", v)
	}
}

// TestDrainNotify: the unit that drains a stream writes its eventfd once
// per drain (completion or preemption).
func TestDrainNotify(t *testing.T) {
	pool := newPool(t, 2)
	st := newHQStream(t, pool, 64, 4)
	defer st.Close()
	f, err := st.NotifyFile()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer st.SetNotify(-1)
	const nk, n = 20, 1 << 16
	x, l := incChain(t, nk, n, 2)
	read := func() uint64 {
		var b [8]byte
		f.SetReadDeadline(time.Now().Add(2 * time.Minute)) // a hang guard
		if _, err := f.Read(b[:]); err != nil {
			t.Fatalf("read notification: %v", err)
		}
		return *(*uint64)(unsafe.Pointer(&b[0]))
	}
	for r := 0; r < 3; r++ {
		if _, err := st.Push(l, 0, nk, false); err != nil {
			t.Fatal(err)
		}
		if c := read(); c != 1 {
			t.Fatalf("round %d: %d notifications for one drain", r, c)
		}
		if s := st.Sync(); s != Done {
			t.Fatalf("sync: %v", s)
		}
	}
	if v := x.s()[0]; v != 3*nk {
		t.Fatalf("x = %v", v)
	}
}

// BenchmarkPadSelect measures padding's kernel selection (REEF §5.2: it
// must take at most 2 us): five candidate jobs of 70 kernels in 4
// versions, RT kernels' remaining times spread over 0-200 us, every
// picked block completed at once.
func BenchmarkPadSelect(b *testing.B) {
	const nc, nk, nv = 5, 70, 4
	x := newFloats(b, 1<<16, 0)
	ks := newKernels(b, nv)
	for v := 0; v < nv; v++ {
		d := Desc{Op: OpUnary, Out: x.p}
		d.In[0] = x.p
		d.P[0] = int64(x.n)
		if err := ks.Set(v, &d, 1<<v); err != nil {
			b.Fatal(err)
		}
	}
	pad, err := NewPad(nil, nc, 20000)
	if err != nil {
		b.Fatal(err)
	}
	defer pad.Free()
	var tables []*PadTable
	for c := 0; c < nc; c++ {
		tb, err := NewPadTable(nk, nv)
		if err != nil {
			b.Fatal(err)
		}
		defer tb.Free()
		for k := 0; k < nk; k++ {
			for v := 0; v < nv; v++ {
				tb.Set(k, v, ks.KernelPtr(v), int64(5000+(k*37+v*911)%90000), int64(40000+(k*53+v*97)%200000), int64(500+(k+v)%3000))
			}
		}
		tables = append(tables, tb)
	}
	reset := func() {
		for c := 0; c < nc; c++ {
			pad.SetCand(c, tables[c], Cursor{V: -1})
		}
	}
	reset()
	b.ResetTimer()
	picked := 0
	for i := 0; i < b.N; i++ {
		c, _, _, _ := pad.Select(int64(i*7919%200000), int64(i%8000))
		if c >= 0 {
			pad.Complete(c, 1)
			picked++
		} else if i%1024 == 0 {
			b.StopTimer()
			reset()
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(picked)/float64(b.N), "picked/op")
}

// TestPriorityStream: a unit serves a priority stream's blocks before any
// other stream's: with one unit, a priority kernel pushed while a normal
// stream's block runs (held there by the test hook) runs as soon as that
// block ends, before the normal stream's next block (held too: the
// priority kernel must be done by the time the unit reaches it).
func TestPriorityStream(t *testing.T) {
	pool := newPool(t, 1)
	a := newHQStream(t, pool, 64, 4)
	defer a.Close()
	b := newHQStream(t, pool, 64, 4)
	defer b.Close()
	if err := b.SetPriority(true); err != nil {
		t.Fatal(err)
	}
	const nk, n, at = 60, 1 << 20, 2
	x, ka, la := incChainKernels(t, nk, n, 1)
	y, kb, lb := newFloats(t, 1<<10, 0), newKernels(t, 1), newLaunches(t, 1)
	unary(t, kb, 0, y, y, actAffine, 1, 1, 1)
	lb.Set(0, Launch{Kernels: kb, K: 0})
	// the normal stream's block after (at, 0)
	nextK, nextB := int64(at), int64(1)
	if ka.Info(at).Grid < 2 {
		nextK, nextB = at+1, 0
	}
	defer a.ReleaseHold()
	a.HoldAt(at, 0, false)
	if _, err := a.Push(la, 0, nk, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the normal stream's block to be held", func() bool { return a.Holds() == 1 })
	if _, err := b.Push(lb, 0, 1, true); err != nil {
		t.Fatal(err)
	}
	a.HoldAt(nextK, nextB, false)
	a.ReleaseHold()
	waitFor(t, "the normal stream's next block to be held", func() bool { return a.Holds() == 2 })
	if o := b.Outstanding(); o != 0 || y.s()[0] != 1 {
		t.Fatalf("the unit reached the normal stream's next block (kernel %d block %d) before the priority kernel ran (%d outstanding, y %v)", nextK, nextB, o, y.s()[0])
	}
	if a.ExecIndex() != nextK {
		t.Fatalf("normal stream at kernel %d, want %d", a.ExecIndex(), nextK)
	}
	a.ReleaseHold()
	if s := b.Sync(); s != Done {
		t.Fatalf("priority stream: %v", s)
	}
	if s := a.Sync(); s != Done {
		t.Fatalf("normal stream: %v", s)
	}
	if y.s()[0] != 1 || x.s()[0] != nk {
		t.Fatalf("x %v y %v", x.s()[0], y.s()[0])
	}
}

// TestHoldBlock: the test hook holds exactly the block it names until
// released or, when asked, until the stream's flag is set; the pool's
// hold skips priority streams and takes the first block at or past its
// index.
func TestHoldBlock(t *testing.T) {
	pool := newPool(t, 1) // one unit: blocks run one after the other
	st := newHQStream(t, pool, 64, 4)
	defer st.Close()
	const nk, n = 6, 1 << 16
	x, ks, l := incChainKernels(t, nk, n, 4)
	grid := ks.Info(3).Grid
	defer st.ReleaseHold()
	st.HoldAt(3, grid-1, false)
	if _, err := st.Push(l, 0, nk, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hold", func() bool { return st.Holding() == 1 })
	// every block of kernels 0-2 and the others of kernel 3 ran; the held
	// one did not, nor anything after it
	xs := x.s()
	x0 := float32(4)
	if grid == 1 {
		x0 = 3 // block 0 is the held one
	}
	if xs[0] != x0 || xs[n-1] != 3 || st.ExecIndex() != 3 || st.Outstanding() == 0 {
		t.Fatalf("held at kernel 3 block %d of %d: x[0] %v x[last] %v, exec index %d", grid-1, grid, xs[0], xs[n-1], st.ExecIndex())
	}
	st.ReleaseHold()
	if s := st.Sync(); s != Done || xs[n-1] != nk || xs[0] != nk || st.Holds() != 1 {
		t.Fatalf("after the release: %v, x %v %v, %d holds", s, xs[0], xs[n-1], st.Holds())
	}
	// until the flag: Preempt lets the held unit go
	st.HoldAt(1, 0, true)
	if _, err := st.Push(l, 0, nk, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second hold", func() bool { return st.Holding() == 1 })
	st.HQPreempt()
	if s := st.Sync(); s != Preempted || st.ExecIndex() != 1 {
		t.Fatalf("preempted while held at kernel 1: %v, exec index %d", s, st.ExecIndex())
	}
	st.Restore()
	st.ResetIndex()
	// the pool's hold: a priority stream's blocks pass, a normal stream's
	// first block at index >= 2 is held
	pr := newHQStream(t, pool, 64, 4)
	defer pr.Close()
	if err := pr.SetPriority(true); err != nil {
		t.Fatal(err)
	}
	defer pool.ReleaseHold()
	pool.HoldFrom(2, false)
	y, ly := incChain(t, nk, n, 4)
	if _, err := pr.Push(ly, 0, nk, false); err != nil {
		t.Fatal(err)
	}
	if s := pr.Sync(); s != Done || y.s()[0] != nk || pool.Holds() != 0 {
		t.Fatalf("priority stream under a pool hold: %v, y %v, %d holds", s, y.s()[0], pool.Holds())
	}
	for i := range xs {
		xs[i] = 0
	}
	if _, err := st.Push(l, 0, nk, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool's hold", func() bool { return pool.Holding() == 1 })
	if st.ExecIndex() != 2 {
		t.Fatalf("pool hold at exec index %d, want 2", st.ExecIndex())
	}
	pool.ReleaseHold()
	if s := st.Sync(); s != Done || xs[0] != nk {
		t.Fatalf("after the pool's release: %v, x %v", s, xs[0])
	}
}

// TestChecksKeepResults: GEMM, CONV, IM2COL and fused pointwise DWCONV
// copies with added in-block checks (SetChecks: the sgemm of a block
// split over rows, columns and the reduction; im2col over channels; the
// pointwise producer's bands narrowed to the work bound) compute what the
// kernels compute without them, bit for bit (ARCHITECTURE.md §3,
// determinism: reef's BE streams run these copies); CopyKernel keeps the
// grid.
func TestChecksKeepResults(t *testing.T) {
	rnd := uint32(7)
	fill := func(f *cfloats) { fillLCG(f, &rnd) }
	type tc struct {
		name string
		d    func(out *cfloats) Desc
		nout int
	}
	// GEMM 40x70x300 with bias per row; CONV 64->48 channels, 3x3, pad 1,
	// 6x6 (Kd 576: the reduction splits)
	const M, N, K = 40, 70, 300
	a, b, bias := newFloats(t, M*K, 0), newFloats(t, K*N, 0), newFloats(t, M, 0)
	x, w, cb := newFloats(t, 64*36, 0), newFloats(t, 48*64*9, 0), newFloats(t, 48, 0)
	// DWCONV 48 channels 3x3 pad 1 over 6x6, its input the pointwise
	// convolution of x (64 -> 48 channels) computed in the kernel
	pw, pwb, dw, dwb := newFloats(t, 48*64, 0), newFloats(t, 48, 0), newFloats(t, 48*9, 0), newFloats(t, 48, 0)
	dwx, dw40 := newFloats(t, 40*196, 0), newFloats(t, 40*9, 0)
	for _, f := range []*cfloats{a, b, bias, x, w, cb, pw, pwb, dw, dwb, dwx, dw40} {
		fill(f)
	}
	cases := []tc{
		{"gemm", func(out *cfloats) Desc {
			d := Desc{Op: OpGemm, Out: out.p}
			d.In[0], d.In[1], d.In[2] = a.p, b.p, bias.p
			d.P[0], d.P[1], d.P[2], d.P[5], d.P[6], d.P[7] = M, N, K, K, N, N
			d.P[8], d.P[9], d.P[10], d.P[23] = 1, 1, 1, 1
			d.F[0] = 1
			return d
		}, M * N},
		{"conv", func(out *cfloats) Desc {
			d := Desc{Op: OpConv, Out: out.p}
			d.In[0], d.In[1], d.In[2] = x.p, w.p, cb.p
			copy(d.P[:16], []int64{1, 64, 6, 6, 48, 1, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6})
			return d
		}, 48 * 36},
		{"dwconv-pointwise", func(out *cfloats) Desc {
			d := Desc{Op: OpDWConv, Out: out.p}
			d.In[0], d.In[1], d.In[2] = x.p, dw.p, dwb.p
			d.In[InDWPointwiseW], d.In[InDWPointwiseB] = pw.p, pwb.p
			copy(d.P[:16], []int64{1, 48, 6, 6, 48, 48, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6})
			d.P[PDWPointwise], d.P[PDWPointwiseC] = 1, 64
			return d
		}, 48 * 36},
		{"dwconv-channel-vectors", func(out *cfloats) Desc {
			// 40 channels of 14x14 (16 channels a vector on AVX-512;
			// the work bound leaves 5 a check)
			d := Desc{Op: OpDWConv, Out: out.p}
			d.In[0], d.In[1], d.In[2] = dwx.p, dw40.p, cb.p
			copy(d.P[:16], []int64{1, 40, 14, 14, 40, 40, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14})
			return d
		}, 40 * 196},
		{"im2col", func(out *cfloats) Desc {
			d := Desc{Op: OpIm2col, Out: out.p}
			d.In[0] = x.p
			copy(d.P[:16], []int64{1, 64, 6, 6, 48, 1, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6})
			return d
		}, 64 * 9 * 36},
	}
	for _, c := range cases {
		for _, units := range []int{1, 8} {
			ref, got := newFloats(t, c.nout, 0), newFloats(t, c.nout, 0)
			ks := newKernels(t, 1)
			pre := newKernels(t, 1)
			d := c.d(ref)
			if err := ks.Set(0, &d, units); err != nil {
				t.Fatal(err)
			}
			if err := pre.CopyKernel(0, ks, 0); err != nil {
				t.Fatal(err)
			}
			pre.SetChecks(0, 7)
			if pre.Checks(0) != 7 || pre.Info(0).Grid != ks.Info(0).Grid {
				t.Fatalf("%s: copy has %d checks, grid %d (want 7, %d)", c.name, pre.Checks(0), pre.Info(0).Grid, ks.Info(0).Grid)
			}
			// the copy writes got: same kernel, another output; with a
			// count of checks, then with a work bound that splits
			// finer (at most 20,000 flops or 4 KiB of operands a call)
			runBlocks(ks, 0)
			for _, work := range []bool{false, true} {
				d2 := c.d(got)
				ks2 := newKernels(t, 1)
				if err := ks2.Set(0, &d2, units); err != nil {
					t.Fatal(err)
				}
				ks2.SetChecks(0, 7)
				if work {
					ks2.SetCheckWork(0, 20000, 4096)
				}
				for i := range got.s() {
					got.s()[i] = float32(math.NaN())
				}
				runBlocks(ks2, 0)
				for i, v := range ref.s() {
					if g := got.s()[i]; math.Float32bits(g) != math.Float32bits(v) {
						t.Fatalf("%s units %d (work bound %v): out[%d] = %g with checks, %g without (differs by %.3g)", c.name, units, work, i, g, v, math.Abs(float64(g-v)))
					}
				}
			}
		}
	}
	if err := newKernels(t, 1).CopyKernel(1, newKernels(t, 1), 0); err == nil {
		t.Fatal("CopyKernel out of range: no error")
	}
}

// TestCheckWork: the work bound sets a block's checks by its work, not
// by a profiled time: a 40x70x300 product (1.68 Mflop, 132,000 bytes of
// operands) asks for 2 checks under 1 Mflop a call, 33 under 4 KiB a
// call, the larger of the two when both apply, never fewer than
// SetChecks' count, and at most 4096.
func TestCheckWork(t *testing.T) {
	ks := newKernels(t, 1)
	for _, c := range []struct {
		checks       int
		flops, bytes int64
		m, n, k      int64
		want         int
	}{
		{0, 0, 0, 40, 70, 300, 0},
		{7, 0, 0, 40, 70, 300, 7},
		{0, 1e6, 0, 40, 70, 300, 2},
		{0, 0, 4096, 40, 70, 300, 33},
		{0, 1e6, 4096, 40, 70, 300, 33},
		{50, 1e6, 4096, 40, 70, 300, 50},
		{0, 1, 0, 40, 70, 300, 4096},
		// a fully connected layer at batch 1, 25088 x 4096: bytes bound
		{0, 1e6, 256 << 10, 1, 4096, 25088, 1569},
	} {
		ks.SetChecks(0, c.checks)
		ks.SetCheckWork(0, c.flops, c.bytes)
		if got := ks.WorkChecks(0, c.m, c.n, c.k); got != c.want {
			t.Errorf("checks %d, bound %d flops %d bytes, %dx%dx%d: %d checks, want %d", c.checks, c.flops, c.bytes, c.m, c.n, c.k, got, c.want)
		}
	}
}

// TestRunInline: RunInline runs a program's kernels on the calling
// thread, block by block, with the stream's flag and execution index as
// the units would: to the end (every kernel ran once), or, preempted at
// a block (the test hook), stopped there with the execution index at
// that kernel, the kernels after it untouched, and the rest run by a
// second call from the next kernel.
func TestRunInline(t *testing.T) {
	const nk, n, units = 6, 1 << 20, 4
	pool := newPool(t, 2)
	st := newStream(t, pool, 16)
	x, ks, _ := incChainKernels(t, nk, n, units)
	if ks.Info(0).Grid < 2 {
		t.Fatalf("grid %d: the test needs several blocks a kernel", ks.Info(0).Grid)
	}
	st.ResetIndex()
	if s, err := st.RunInline(ks, 0); err != nil || s != Done || st.ExecIndex() != nk-1 {
		t.Fatalf("inline run: %v %v, exec index %d (want done, %d)", s, err, st.ExecIndex(), nk-1)
	}
	for i, v := range x.s() {
		if v != nk {
			t.Fatalf("x[%d] = %v after %d kernels", i, v, nk)
		}
	}
	for i := range x.s() {
		x.s()[i] = 0
	}
	st.ResetIndex()
	st.PreemptAt(3, 1)
	s, err := st.RunInline(ks, 0)
	if err != nil || s != Preempted || st.ExecIndex() != 3 {
		t.Fatalf("preempted at kernel 3 block 1: %v %v, exec index %d", s, err, st.ExecIndex())
	}
	four, three := 0, 0
	for _, v := range x.s() {
		switch v {
		case 4:
			four++
		case 3:
			three++
		default:
			t.Fatalf("x = %v: kernels after the preempted one ran, or one before it did not", v)
		}
	}
	if four == 0 || three == 0 {
		t.Fatalf("%d values past kernel 3's first block, %d not: want both", four, three)
	}
	// kernel 3 is in place (not idempotent): finish its last blocks by
	// hand as a restore from its group entry would redo them, then the rest
	st.Restore()
	for blk := int64(1); blk < ks.Info(3).Grid; blk++ {
		ks.RunBlock(3, blk)
	}
	if s, err := st.RunInline(ks, 4); err != nil || s != Done || st.ExecIndex() != nk-1 {
		t.Fatalf("from kernel 4: %v %v, exec index %d", s, err, st.ExecIndex())
	}
	for i, v := range x.s() {
		if v != nk {
			t.Fatalf("x[%d] = %v after the restore", i, v)
		}
	}
	if _, err := st.RunInline(ks, nk+1); err == nil {
		t.Fatal("a start past the program: no error")
	}
}

// TestStaleTicketFiresNoHook: a unit held off its core between reading the
// stream's ticket and reading the queue slot it names finds that slot
// reused by a kernel launched ahead (the queue holds 4 launches). That
// kernel's index and block must not fire the PreemptAt hook: the stream
// has not reached it. The preemption comes when the kernel is claimed,
// after kernels 0-3 ran.
func TestStaleTicketFiresNoHook(t *testing.T) {
	pool := newPool(t, 2)
	st := newStream(t, pool, 4)
	const nk = 5
	x, ks, _ := incChainKernels(t, nk, 64, 1)
	if g := ks.Info(0).Grid; g != 1 {
		t.Fatalf("grid %d: the test needs one block a kernel", g)
	}
	st.ResetIndex()
	// one unit reads the ticket of kernel 0 and is held; the other runs
	// kernel 0 and is held in kernel 1's block
	st.StallClaim()
	defer st.StallRelease()
	st.HoldAt(1, 0, false)
	defer st.ReleaseHold()
	for i := 0; i < 2; i++ {
		if err := st.Launch(ks, i, int64(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "one unit stalled on a ticket, the other held in kernel 1",
		func() bool { return st.Stalled() == 1 && st.Holding() == 1 })
	// kernel 4 takes the queue slot kernel 0 had: the stalled unit's
	// ticket names that slot
	for i := 2; i < nk; i++ {
		if err := st.Launch(ks, i, int64(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	st.PreemptAt(nk-1, 0)
	defer st.PreemptAt(-1, 0)
	st.StallRelease()
	waitFor(t, "the stalled unit's claim to end", func() bool { return st.StallsDone() == 1 })
	if st.Preempting() {
		t.Fatalf("a stale ticket fired the hook for kernel %d while kernel 1 ran", nk-1)
	}
	st.ReleaseHold()
	if s := st.Sync(); s != Preempted {
		t.Fatalf("sync: %v, want preempted at kernel %d", s, nk-1)
	}
	if i := st.ExecIndex(); i != nk-2 {
		t.Fatalf("exec index %d, want %d (preempted as kernel %d was claimed)", i, nk-2, nk-1)
	}
	for i, v := range x.s() {
		if v != nk-1 {
			t.Fatalf("x[%d] = %v: want %d kernels run", i, v, nk-1)
		}
	}
	st.Restore()
}

// TestLateCountCompletesNothing: a unit held off its core right after it
// counted a finished block finds, when it runs again, that the kernel was
// completed by the other unit and its queue slot reused by a later launch
// with fewer blocks (the queue holds 4 launches). It must not complete a
// kernel a second time: that moved the stream back to an old sequence
// number and ran kernels 1-4 again, out of order (a wrong result one job in
// tens of thousands under CPU contention).
func TestLateCountCompletesNothing(t *testing.T) {
	pool := newPool(t, 2)
	st := newStream(t, pool, 4)
	y := newFloats(t, 1<<20, 1)
	ka := newKernels(t, 1)
	unary(t, ka, 0, y, y, actAffine, 1, 1, 2)
	if g := ka.Info(0).Grid; g < 2 {
		t.Fatalf("grid %d: the test needs a kernel of several blocks", g)
	}
	const nb = 4
	x, kb, _ := incChainKernels(t, nb, 64, 1)
	if g := kb.Info(0).Grid; g != 1 {
		t.Fatalf("grid %d: the test needs one block a kernel", g)
	}
	// the first unit to count a block of kernel 0 is held; the other
	// runs the rest of it
	st.StallCount(0)
	defer st.StallCountRelease()
	if err := st.Launch(ka, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "one unit held after its count, kernel 0 completed by the other",
		func() bool { return st.CountStalled() == 1 && st.Outstanding() == 0 })
	// kernels 1-4 on the other unit: kernel 4 takes kernel 0's slot
	for i := 0; i < nb; i++ {
		if err := st.Launch(kb, i, int64(1+i), 0); err != nil {
			t.Fatal(err)
		}
	}
	st.Sync()
	st.StallCountRelease()
	waitFor(t, "the held unit's count to end", func() bool { return st.CountStallsDone() == 1 })
	st.Sync()
	for i, v := range x.s() {
		if v != nb {
			t.Fatalf("x[%d] = %v: kernels 1-%d ran %v times each, want once", i, v, nb, v/nb)
		}
	}
	for i, v := range y.s() {
		if v != 2 {
			t.Fatalf("y[%d] = %v, want 2: kernel 0 ran once", i, v)
		}
	}
}

// TestTwoEndedClaims: a kernel's blocks are claimed from both ends, the
// first unit of the pool from the front and the second from the back, and
// a kernel of more than 65535 blocks from the front only; every block runs
// once either way. A hold on block 0 makes it deterministic: whichever
// unit claims block 0 waits there, and the other claims every other block,
// from its own end.
func TestTwoEndedClaims(t *testing.T) {
	pool := newPool(t, 2)
	st := newStream(t, pool, 16)
	const n = 1 << 20
	x, y := newFloats(t, n, 1), newFloats(t, n, 0)
	ks := newKernels(t, 2)
	unary(t, ks, 0, x, y, actAffine, 2, 1, 2)
	// a batch of 70000 products of one element each: one block apiece
	const nb = 70000
	a, b, c := newFloats(t, nb, 3), newFloats(t, nb, 0), newFloats(t, nb, -1)
	for i := range b.s() {
		b.s()[i] = float32(i % 1000)
	}
	d := Desc{Op: OpGemm, Out: c.p}
	d.In[0], d.In[1] = a.p, b.p
	d.P[0], d.P[1], d.P[2], d.P[5], d.P[6], d.P[7] = 1, 1, 1, 1, 1, 1
	d.P[8], d.P[9], d.P[10] = nb, 1, 1
	d.P[11], d.P[14], d.P[17] = 1, 1, 1
	d.F[0] = 1
	if err := ks.Set(1, &d, 2); err != nil {
		t.Fatal(err)
	}
	for k, twoEnded := range []bool{true, false} {
		grid := ks.Info(k).Grid
		if twoEnded && (grid < 4 || grid > 65535) || !twoEnded && grid <= 65535 {
			t.Fatalf("kernel %d: grid %d", k, grid)
		}
		st.HoldAt(int64(k), 0, false)
		if err := st.Launch(ks, k, int64(k), 3); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the hold and every claim", func() bool {
			f, bk := st.Claims()
			return st.Holding() == 1 && f+bk == grid
		})
		f, bk := st.Claims()
		if twoEnded && bk < grid-1 || !twoEnded && (f != grid || bk != 0) {
			t.Errorf("kernel %d (%d blocks): %d claims from the front, %d from the back", k, grid, f, bk)
		}
		st.ReleaseHold()
		if s := st.Sync(); s != Done {
			t.Fatalf("kernel %d: %v", k, s)
		}
	}
	for i, v := range y.s() {
		if v != 3 {
			t.Fatalf("y[%d] = %v, want 3", i, v)
		}
	}
	for i, v := range c.s() {
		if want := 3 * float32(i%1000); v != want {
			t.Fatalf("c[%d] = %v, want %v", i, v, want)
		}
	}
}

// TestEvictedEnd: after a preemption, Evicted tells the first block of the
// evicted launch that did not run to its end and one past the last such
// block; the blocks around them finished, whichever end they were claimed
// from. Block 3 of 8 is held until the flag, the other unit runs every
// other block, then the stream is preempted: only block 3 is left.
func TestEvictedEnd(t *testing.T) {
	if !ChecksCompiled() {
		t.Skip("preemption checks compiled out: the held block runs to its end")
	}
	pool := newPool(t, 2)
	st := newHQStream(t, pool, 16, 2)
	defer st.Close()
	const n = 1 << 20
	x, y := newFloats(t, n, 1), newFloats(t, n, 0)
	ks := newKernels(t, 1)
	unary(t, ks, 0, x, y, actAffine, 2, 1, 2)
	grid := ks.Info(0).Grid
	if grid != 8 {
		t.Fatalf("grid %d, want 8", grid)
	}
	chunk := n / 8
	l := newLaunches(t, 1)
	l.Set(0, Launch{Kernels: ks, K: 0, Idx: 0})
	st.HoldAt(0, 3, true)
	if _, err := st.Push(l, 0, 1, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hold and the other seven blocks", func() bool {
		f, b := st.Claims()
		return st.Holding() == 1 && f+b == grid && st.Running() == 1
	})
	ys := y.s()
	for b := 0; b < 8; b++ {
		if got, want := ys[b*chunk+chunk-1], float32(3); b != 3 && got != want {
			t.Fatalf("block %d: y = %v, want %v", b, got, want)
		}
	}
	st.HQPreempt()
	if s := st.Sync(); s != Preempted {
		t.Fatalf("sync: %v", s)
	}
	idx, base, g, first, end := st.Evicted()
	if idx != 0 || base != 0 || g != 8 || first != 3 || end != 4 {
		t.Fatalf("evicted launch %d, blocks %d+%d, first unfinished %d, end %d: want 0, 0+8, 3, 4", idx, base, g, first, end)
	}
}
