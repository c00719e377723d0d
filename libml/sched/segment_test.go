package sched

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"sluice/libml"
	"sluice/libml/cuda"
	"sluice/libml/graph"
	"sluice/libml/kprof"
	"sluice/libml/zoo"
)

// The scheduler on a segment device: the cuda backend on the kernel
// emulator (the real .cu kernels, run on the CPU), under every policy.

// emuCUDA is an initialised cuda backend on the kernel emulator, closed
// (and checked for instances left open) when the test ends.
func emuCUDA(t testing.TB) *cuda.Backend {
	t.Helper()
	be := cuda.NewBackend(cuda.Options{Emulate: true, EmuSMs: 4})
	if err := be.Init(context.Background(), libml.BackendConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Deinit(); err != nil {
			t.Errorf("cuda backend: %v", err)
		}
	})
	return be
}

// cudaReference is a model's output for in on the cuda backend's own
// InferBatch (no scheduler), at batch 1.
func cudaReference(t testing.TB, be *cuda.Backend, key string, in []float32) []float32 {
	t.Helper()
	tm := testModels[key]
	g, err := zoo.Build(tm.name, tm.opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := be.LoadModel(ctx, key, g)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := be.ConfigureBatch(inst, 1); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, inst.OutputSize())
	if err := be.InferBatch(ctx, inst, 1, in, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// segSched is a scheduler of policy p on the emulated cuda device be.
func segSched(t testing.TB, be *cuda.Backend, p Policy) *Scheduler {
	t.Helper()
	// scripted padding: no unpadded probes of the back-off (see newSched)
	s, err := New(Config{Policy: p, Segments: be, BEQueues: 2, PadBackoffTol: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// segProfs are the test models' profiles on the emulated device, by
// key: measured by the first load, given as data to the others.
var segProfs sync.Map

// segLoad loads test model key on a segment-device scheduler.
func segLoad(t testing.TB, s *Scheduler, key string) *Model {
	t.Helper()
	tm := testModels[key]
	g, err := zoo.Build(tm.name, tm.opt)
	if err != nil {
		t.Fatal(err)
	}
	opt := ModelOptions{ProfileRuns: 1}
	if p, ok := segProfs.Load(key); ok {
		opt.Profile = p.(*kprof.Model)
	}
	m, err := s.Load(key, g, opt)
	if err != nil {
		t.Fatal(err)
	}
	segProfs.LoadOrStore(key, m.Profile())
	return m
}

// TestSegmentDevicePolicies: on the emulated cuda device, every policy
// runs RT and BE jobs of two models submitted together to the outputs
// the cuda backend gives alone, bit for bit, and reports the device.
func TestSegmentDevicePolicies(t *testing.T) {
	be := emuCUDA(t)
	seeds := []uint64{1, 2, 3}
	// the answers alone, by model and seed (filled on first use)
	want := map[string]map[uint64][]float32{"squeeze": {}, "bert": {}}
	for _, p := range Policies() {
		t.Run(string(p), func(t *testing.T) {
			s := segSched(t, be, p)
			if s.DeviceName() != "cuda" || s.Pool() != nil || s.Device() != nil {
				t.Fatalf("device %q, pool %v: want the cuda device and no cpu units", s.DeviceName(), s.Pool())
			}
			big, small := segLoad(t, s, "squeeze"), segLoad(t, s, "bert")
			if len(big.Profile().Kernels) != big.Kernels() || big.StandaloneNs() <= 0 {
				t.Fatalf("squeezenet profile: %d kernels of %d, standalone %v ns", len(big.Profile().Kernels), big.Kernels(), big.StandaloneNs())
			}
			var js []*Job
			seedOf := map[*Job]uint64{}
			for _, sd := range seeds {
				b, r := job(big, BE, int(sd)%2, sd), job(small, RT, 0, sd)
				js = append(js, b, r)
				seedOf[b], seedOf[r] = sd, sd
			}
			s.submitAll(js...)
			for _, j := range js {
				if err := j.Wait(); err != nil {
					t.Fatal(err)
				}
				key, sd := j.Model.Name(), seedOf[j]
				if want[key][sd] == nil {
					want[key][sd] = cudaReference(t, be, key, j.In)
				}
				if d := sameBits(j.Out, want[key][sd]); d != "" {
					t.Errorf("%s %s seed %d (%d preemptions): %s", j.Class, key, sd, j.Preemptions, d)
				}
			}
			st := s.Stats()
			if st.Jobs[RT] != int64(len(seeds)) || st.Jobs[BE] != int64(len(seeds)) {
				t.Fatalf("jobs %v, want %d of each class", st.Jobs, len(seeds))
			}
		})
	}
}

// submitHeld submits j with the emulated device be holding the next
// launch of kernel at or later (HoldFrom) and waits until it is held.
func submitHeld(t *testing.T, be *cuda.Backend, s *Scheduler, j *Job, at int, what string) {
	t.Helper()
	if err := be.HoldFrom(int64(at)); err != nil {
		t.Fatal(err)
	}
	h := be.Holds()
	if err := s.Submit(j); err != nil {
		t.Fatal(err)
	}
	waitFor(t, what, func() bool { return be.Holds() > h })
}

// rtPreemptsBE scripts a preemption on the emulated device be: BE job b
// is submitted with its launch of kernel at (or the next one) held until
// its stream's flag is set, then RT job r; r must finish first.
func rtPreemptsBE(t *testing.T, be *cuda.Backend, s *Scheduler, b, r *Job, at int) {
	t.Helper()
	var o order
	o.hook(b)
	o.hook(r)
	submitHeld(t, be, s, b, at, "the BE job's launch to be held")
	if err := s.Submit(r); err != nil {
		t.Fatal(err)
	}
	got := o.wait(t, b, r)
	sameOrder(t, got, []*Job{r, b}, map[*Job]string{b: "BE", r: "RT"})
}

// rtPreemptsBEPadded submits BE job b, its launch of kernel at held until
// its stream's flag is set, then RT job r, its launch of its second live
// kernel held until the preempted BE job is offered to padding, so that
// however slow the machine the RT kernels after it have the BE job to
// pad; it returns the jobs in the order they finished.
func rtPreemptsBEPadded(t *testing.T, be *cuda.Backend, s *Scheduler, b, r *Job, at int) []*Job {
	t.Helper()
	var o order
	o.hook(b)
	o.hook(r)
	submitHeld(t, be, s, b, at, "the BE job's launch to be held")
	submitHeld(t, be, s, r, liveKernels(r.Model)[1], "the RT job's launch to be held")
	rf := s.pol.(*reef)
	waitFor(t, "the preempted BE job to be offered to padding", func() bool {
		return s.locked(func() bool { return rf.rtMode && rf.offer[0] })
	})
	if err := be.ReleaseHolds(); err != nil {
		t.Fatal(err)
	}
	return o.wait(t, b, r)
}

// TestSegmentDeviceReefPreempts: on the emulated cuda device under reef,
// an RT job that arrives while a BE job runs (the BE job's launch of a
// kernel in the middle of the model held until its stream's flag is
// set: the arrival cannot come too late) preempts it, finishes first, and
// the BE job restores from the interrupted kernel's idempotent group to
// the output the cuda backend gives alone, bit for bit.
func TestSegmentDeviceReefPreempts(t *testing.T) {
	be := emuCUDA(t)
	s := segSched(t, be, PolicyREEF)
	big, small := segLoad(t, s, "squeeze"), segLoad(t, s, "bert")
	live := liveKernels(big)
	for round, at := range []int{live[len(live)/3], live[2*len(live)/3]} {
		b, r := job(big, BE, 0, uint64(5+round)), job(small, RT, 0, 6)
		rtPreemptsBE(t, be, s, b, r, at)
		if b.Preemptions != 1 || r.Preemptions != 0 {
			t.Fatalf("held at kernel %d: BE preempted %d times, RT %d; want 1 and 0", at, b.Preemptions, r.Preemptions)
		}
		if d := sameBits(b.Out, cudaReference(t, be, "squeeze", b.In)); d != "" {
			t.Errorf("BE job preempted at kernel %d and restored: %s", at, d)
		}
		if d := sameBits(r.Out, cudaReference(t, be, "bert", r.In)); d != "" {
			t.Errorf("RT job: %s", d)
		}
	}
	st := s.Stats()
	if st.Preemptions != 2 || st.Restores != 2 || len(st.PreemptNs) != 2 || st.ModeSwitches != 2 {
		t.Fatalf("stats %+v: want 2 preemptions, restores and mode switches", st)
	}
	if st.ReexecNs < 0 {
		t.Fatalf("re-executed %v ns", st.ReexecNs)
	}
	t.Logf("preemption latencies on the emulator %v ns, re-executed %.0f ns of profiled kernel time", st.PreemptNs, st.ReexecNs)
}

// TestSegmentDeviceReefPreemptsTogether: an RT job that arrives while two
// BE jobs run on the emulated cuda device (one on each BE lane, each
// held at a launch until its stream's flag is set) preempts both with
// one wait for the device's control stream (libml.PreemptBatcher: the
// RT job's launch waits for one round trip, not one per BE stream),
// finishes first, and every output is the backend's alone, bit for bit.
func TestSegmentDeviceReefPreemptsTogether(t *testing.T) {
	be := emuCUDA(t)
	s := segSched(t, be, PolicyREEF)
	big, small := segLoad(t, s, "squeeze"), segLoad(t, s, "bert")
	live := liveKernels(big)
	b1, b2, r := job(big, BE, 0, 5), job(big, BE, 1, 6), job(small, RT, 0, 7)
	var o order
	for _, j := range []*Job{b1, b2, r} {
		o.hook(j)
	}
	for _, j := range []*Job{b1, b2} {
		submitHeld(t, be, s, j, live[len(live)/2], "a BE job's launch to be held")
	}
	w0 := be.FlagWaits()
	if err := s.Submit(r); err != nil {
		t.Fatal(err)
	}
	got := o.wait(t, b1, b2, r)
	if got[0] != r {
		t.Errorf("the RT job finished after a BE job")
	}
	if w := be.FlagWaits() - w0; w != 1 {
		t.Errorf("%d waits for the control stream to preempt two BE streams, want 1", w)
	}
	if b1.Preemptions != 1 || b2.Preemptions != 1 || r.Preemptions != 0 {
		t.Errorf("preemptions: BE %d and %d, RT %d; want 1, 1, 0", b1.Preemptions, b2.Preemptions, r.Preemptions)
	}
	for _, c := range []struct {
		j   *Job
		key string
	}{{b1, "squeeze"}, {b2, "squeeze"}, {r, "bert"}} {
		if d := sameBits(c.j.Out, cudaReference(t, be, c.key, c.j.In)); d != "" {
			t.Errorf("%s job: %s", c.key, d)
		}
	}
}

// reefBackendSqueeze is a reef scheduler backend on the emulated device be
// with the squeeze test model loaded and configured for batches up to
// maxBatch; the caller closes the instance and deinits the backend.
func reefBackendSqueeze(t *testing.T, be *cuda.Backend, maxBatch int) (*Backend, libml.Instance, *graph.Graph) {
	t.Helper()
	ctx := context.Background()
	sb := NewBackend(BackendOptions{Config: Config{Policy: PolicyREEF, Segments: be}})
	if err := sb.Init(ctx, libml.BackendConfig{}); err != nil {
		t.Fatal(err)
	}
	tm := testModels["squeeze"]
	g, err := zoo.Build(tm.name, tm.opt)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sb.LoadModel(ctx, "squeeze", g)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.ConfigureBatch(inst, maxBatch); err != nil {
		t.Fatal(err)
	}
	return sb, inst, g
}

// TestSegmentDeviceBackend: the scheduler backend on the emulated cuda
// device serves batches of a batched model through its buckets (every
// answer equal to the cuda backend's at that batch size), reports the
// cuda device in its counters, and frees every instance when the model
// is unloaded.
func TestSegmentDeviceBackend(t *testing.T) {
	be := emuCUDA(t)
	ctx := context.Background()
	sb, inst, g := reefBackendSqueeze(t, be, 3)
	ref, err := be.LoadModel(ctx, "squeeze-ref", g)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.ConfigureBatch(ref, 4); err != nil {
		t.Fatal(err)
	}
	is, os := inst.InputSize(), inst.OutputSize()
	for _, n := range []int{1, 2, 3} {
		in := fillInput(n*is, uint64(n))
		got := make([]float32, n*os)
		if err := sb.InferBatch(ctx, inst, n, in, got); err != nil {
			t.Fatal(err)
		}
		// batch 3 runs in the batch-4 bucket, its fourth row unused: the
		// bucket's answer for the three rows
		bucket := map[int]int{1: 1, 2: 2, 3: 4}[n]
		bin := make([]float32, bucket*is)
		copy(bin, in)
		want := make([]float32, bucket*os)
		if err := be.InferBatch(ctx, ref, bucket, bin, want); err != nil {
			t.Fatal(err)
		}
		if d := sameBits(got, want[:n*os]); d != "" {
			t.Errorf("batch %d: %s", n, d)
		}
	}
	st, ok := sb.SchedStats()
	if !ok || st.Device != "cuda" || st.Policy != "reef" || st.BEJobs != 3 {
		t.Fatalf("counters %+v (ok %v): want 3 BE jobs of reef on cuda", st, ok)
	}
	if err := ref.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Deinit(); err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(sb.Loaded()); s != "0" {
		t.Fatalf("%s models still loaded", s)
	}
}

// synthPadProfile installs a kernel profile for m's instances on the
// emulated device (the device's own, measured at load, with its times
// replaced): the emulator's host-clock times say nothing of a GPU, and a
// test of padding must not depend on them. rt makes every kernel long
// (rule 1 then admits any BE block beside it); otherwise every block is
// short.
func synthPadProfile(t testing.TB, m *Model, rt bool) {
	t.Helper()
	in, err := m.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer m.releaseInstance(in)
	ci := in.run.(*cuda.Instance)
	mp, err := ci.ProfileKernels(m.batch, 1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range mp.Kernels {
		for v := range mp.Kernels[k].Versions {
			vp := &mp.Kernels[k].Versions[v]
			if rt {
				vp.KernNs, vp.BlockNs = 1e9, 1e9
			} else {
				vp.KernNs, vp.BlockNs = float64(vp.Grid)*1e3, 1e3
			}
		}
	}
	if err := ci.SetKernelProfile(mp); err != nil {
		t.Fatal(err)
	}
}

// TestSegmentDeviceReefPads: on the emulated cuda device under reef with
// padding, a BE job preempted by an RT arrival (scripted, as in
// TestSegmentDeviceReefPreempts) is offered to the RT job's padded
// segments: sg_pad runs BE blocks beside the RT kernels (profiles given
// as data, so the selector certainly picks), and the BE job restores
// from where padding left it, or, when padding ran all its kernels, only
// has its output read. Both outputs are the cuda backend's alone, bit for
// bit.
func TestSegmentDeviceReefPads(t *testing.T) {
	be := emuCUDA(t)
	for _, c := range []struct {
		name    string
		be, rt  string
		holdAt  func(live []int) int
		padDone bool // padding runs the BE job to its end
	}{
		{"restore after padding", "squeeze", "resnet", func(live []int) int { return live[len(live)/4] }, false},
		{"finished by padding", "bert", "squeeze", func(live []int) int { return live[len(live)-3] }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := segSched(t, be, PolicyREEF)
			big, small := segLoad(t, s, c.be), segLoad(t, s, c.rt)
			synthPadProfile(t, big, false)
			synthPadProfile(t, small, true)
			at := c.holdAt(liveKernels(big))
			b, r := job(big, BE, 0, 7), job(small, RT, 0, 8)
			done := rtPreemptsBEPadded(t, be, s, b, r, at)
			if !c.padDone {
				// restored when RT mode ends: after the RT job
				sameOrder(t, done, []*Job{r, b}, map[*Job]string{b: "BE", r: "RT"})
			} else if len(done) != 2 {
				// padding that ran the BE job to its end may have its
				// output read while the RT job still runs, or after
				t.Fatalf("%d jobs finished, want 2", len(done))
			}
			if d := sameBits(b.Out, cudaReference(t, be, c.be, b.In)); d != "" {
				t.Errorf("BE job preempted at kernel %d, padded (%d blocks) and restored: %s", at, b.PadBlocks, d)
			}
			if d := sameBits(r.Out, cudaReference(t, be, c.rt, r.In)); d != "" {
				t.Errorf("RT job, padded: %s", d)
			}
			st := s.Stats()
			if b.Preemptions != 1 || st.PadBlocks <= 0 || b.PadBlocks != st.PadBlocks {
				t.Fatalf("BE preempted %d times, %d padded blocks (the job counts %d): want 1 preemption and padding", b.Preemptions, st.PadBlocks, b.PadBlocks)
			}
			if done := st.PadJobs == 1; done != c.padDone {
				t.Fatalf("%d BE jobs finished by padding, want the BE job finished by padding: %v", st.PadJobs, c.padDone)
			}
			t.Logf("held at kernel %d: padding ran %d BE blocks beside the RT job (%d BE jobs finished by padding)", at, st.PadBlocks, st.PadJobs)
		})
	}
}

// TestSegmentDeviceReefPadsLateBE: on the emulated cuda device under
// reef, a BE job that arrives in RT mode (the RT job's launch of its
// second live kernel held until the test releases it, so RT mode lasts)
// gets an empty segment of its own that writes its input, is then offered
// to padding, and the RT job's padded kernels run its blocks before RT
// mode ends. Both outputs are the cuda backend's alone, bit for bit.
func TestSegmentDeviceReefPadsLateBE(t *testing.T) {
	be := emuCUDA(t)
	s := segSched(t, be, PolicyREEF)
	rtM, beM := segLoad(t, s, "bert"), segLoad(t, s, "squeeze")
	synthPadProfile(t, beM, false)
	synthPadProfile(t, rtM, true)
	at := liveKernels(rtM)[1]
	b, r := job(beM, BE, 0, 9), job(rtM, RT, 0, 10)
	var o order
	o.hook(b)
	o.hook(r)
	submitHeld(t, be, s, r, at, "the RT job's launch to be held")
	if err := s.Submit(b); err != nil {
		t.Fatal(err)
	}
	rf := s.pol.(*reef)
	waitFor(t, "the BE job, arrived in RT mode, to be offered to padding", func() bool {
		return s.locked(func() bool { return rf.rtMode && rf.offer[0] })
	})
	if err := be.ReleaseHolds(); err != nil {
		t.Fatal(err)
	}
	o.wait(t, b, r)
	if d := sameBits(r.Out, cudaReference(t, be, "bert", r.In)); d != "" {
		t.Errorf("RT job, padded: %s", d)
	}
	if d := sameBits(b.Out, cudaReference(t, be, "squeeze", b.In)); d != "" {
		t.Errorf("BE job, arrived in RT mode and padded (%d blocks): %s", b.PadBlocks, d)
	}
	if b.PadBlocks <= 0 || b.Preemptions != 0 {
		t.Fatalf("BE job: %d blocks run by padding, %d preemptions; want padding and none", b.PadBlocks, b.Preemptions)
	}
	t.Logf("padding ran %d blocks of the BE job that arrived in RT mode (%d BE jobs finished by padding)", b.PadBlocks, s.Stats().PadJobs)
}

// TestSegmentDevicePayload: on the emulated cuda device, the scheduler
// backend's InferInput hands the requests' payload to the device
// (Job.Input). Fragments inside a region mapped into the device are
// gathered there in place (no host copy); fragments outside every region
// are gathered on the host (two copies). Either way every answer is the
// cuda backend's own for the same input, bit for bit, and the packets go
// back exactly once, after the job.
func TestSegmentDevicePayload(t *testing.T) {
	be := emuCUDA(t)
	ctx := context.Background()
	sb, inst, _ := reefBackendSqueeze(t, be, 2)
	defer sb.Deinit()
	defer inst.Close()
	region, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(region)
	unmap, err := be.MapRegion(unsafe.Pointer(&region[0]), len(region))
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	enc, err := libml.NewEncoding(libml.InputF32, nil, nil, inst.InputShape())
	if err != nil {
		t.Fatal(err)
	}
	is, os := inst.InputSize(), inst.OutputSize()
	for _, c := range []struct {
		n        int
		inRegion bool
		copies   int
	}{{1, true, 0}, {2, true, 0}, {2, false, 2}} {
		x := fillInput(c.n*is, uint64(10+c.n))
		want := make([]float32, c.n*os)
		if err := sb.InferBatch(ctx, inst, c.n, x, want); err != nil {
			t.Fatal(err)
		}
		// each request's payload in fragments of 1000 bytes, at odd
		// offsets of the region or in Go memory
		raw := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
		mem := make([]byte, len(raw)+64)
		if c.inRegion {
			mem = region[3 : 3+len(raw)]
		}
		copy(mem, raw)
		gathered := 0
		in := &libml.Input{Enc: enc, Gathered: func() { gathered++ }}
		for r := 0; r < c.n; r++ {
			row := mem[4*r*is : 4*(r+1)*is]
			for off := 0; off < len(row); off += 1000 {
				in.Payload = append(in.Payload, row[off:min(off+1000, len(row))])
			}
			in.EndRequest()
		}
		got := make([]float32, c.n*os)
		if err := sb.InferInput(ctx, inst, in, got); err != nil {
			t.Fatal(err)
		}
		if d := sameBits(got, want); d != "" {
			t.Errorf("batch %d (in the region: %v): %s", c.n, c.inRegion, d)
		}
		if in.Copies != c.copies || gathered != 1 {
			t.Errorf("batch %d (in the region: %v): %d copies, packets given back %d times; want %d and 1", c.n, c.inRegion, in.Copies, gathered, c.copies)
		}
	}
	// a payload the job cannot hold is refused at Submit, on any device
	s := sb.Scheduler()
	m := inst.(*Instance).g.buckets[0] // batch 1
	three := &libml.Input{Enc: enc}
	for r := 0; r < 3; r++ {
		three.Add(region[:4*is])
	}
	for _, bad := range []*libml.Input{three, {Enc: enc}} {
		if err := s.Submit(&Job{Model: m, Class: BE, Input: bad}); err == nil {
			t.Fatalf("a payload of %d requests for batch %d was accepted", bad.N(), m.Batch())
		}
	}
}

// On a segment device the RT lane's padded segments read the padder's
// slots before every kernel: an RT mode that does not pad (the back-off
// measuring the RT model unpadded) must offer nothing, not even a slot an
// earlier mode left (it would run a BE job's kernels from a stale resume
// point: a wrong output, which DISB on the emulator caught under load).
func TestUnpaddedModeOffersNothing(t *testing.T) {
	be := emuCUDA(t)
	s, err := New(Config{Policy: PolicyREEF, Segments: be, BEQueues: 2, PadBackoffTol: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m := segLoad(t, s, "squeeze")
	r := s.pol.(*reef)
	sp := r.pad.(*segPadder)
	s.locked(func() bool {
		sp.slots[0], sp.on[0] = libml.PadJob{Batch: 1}, true // an earlier mode's offer
		r.guard.track(m).off = 1
		r.startPad(m)
		if n := len(sp.candidates()); n != 0 || r.padWanted || r.padUsed {
			t.Errorf("unpadded RT mode: %d candidates, padding wanted %v, used %v", n, r.padWanted, r.padUsed)
		}
		r.padWanted = false
		return true
	})
}

// TestSegmentDeviceGivenProfilePads: a model loaded with its profile
// given as data (ModelOptions.Profile, as DISB and the appliance give
// each scheduler the profile measured once) pads on the device as one
// that measured its own: the scheduler installs the profile on the
// device. Before, the device had no profile of such a model and padded
// nothing (DISB on an H200: 0 padded blocks under reef). The profiles are
// the ones a first load measured, with synthetic times (as in
// synthPadProfile) so that the selector certainly picks; they keep every
// kernel version the device profiled.
func TestSegmentDeviceGivenProfilePads(t *testing.T) {
	be := emuCUDA(t)
	given := map[string]*kprof.Model{}
	{
		s := segSched(t, be, PolicyREEF)
		for key, rt := range map[string]bool{"squeeze": false, "bert": true} {
			tm := testModels[key]
			g, err := zoo.Build(tm.name, tm.opt)
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.Load(key, g, ModelOptions{ProfileRuns: 1})
			if err != nil {
				t.Fatal(err)
			}
			p := *m.Profile()
			p.Kernels = append([]kprof.Kernel(nil), p.Kernels...)
			versions := 0
			for k := range p.Kernels {
				vs := append([]kprof.Version(nil), p.Kernels[k].Versions...)
				versions += len(vs)
				for v := range vs {
					if rt {
						vs[v].KernNs, vs[v].BlockNs = 1e9, 1e9
					} else {
						vs[v].KernNs, vs[v].BlockNs = float64(vs[v].Grid)*1e3, 1e3
					}
				}
				p.Kernels[k].Versions = vs
			}
			if versions <= len(p.Kernels) {
				t.Fatalf("%s: %d versions of %d kernels: the scheduler's profile dropped the device's other versions", key, versions, len(p.Kernels))
			}
			given[key] = &p
		}
		s.Close()
	}
	s := segSched(t, be, PolicyREEF)
	load := func(key string) *Model {
		tm := testModels[key]
		g, err := zoo.Build(tm.name, tm.opt)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Load(key, g, ModelOptions{Profile: given[key]})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	big, small := load("squeeze"), load("bert")
	at := liveKernels(big)[len(liveKernels(big))/4]
	b, r := job(big, BE, 0, 11), job(small, RT, 0, 12)
	// held as in TestSegmentDeviceReefPads: the RT job could otherwise
	// finish before the preempted BE job was offered to padding (a
	// fresh-clone make test on a loaded machine saw 0 padded blocks)
	sameOrder(t, rtPreemptsBEPadded(t, be, s, b, r, at), []*Job{r, b}, map[*Job]string{b: "BE", r: "RT"})
	if d := sameBits(b.Out, cudaReference(t, be, "squeeze", b.In)); d != "" {
		t.Errorf("BE job preempted at kernel %d, padded (%d blocks) and restored: %s", at, b.PadBlocks, d)
	}
	if d := sameBits(r.Out, cudaReference(t, be, "bert", r.In)); d != "" {
		t.Errorf("RT job, padded: %s", d)
	}
	if st := s.Stats(); b.Preemptions != 1 || st.PadBlocks <= 0 {
		t.Fatalf("BE preempted %d times, %d padded blocks: want 1 preemption and padding with the given profiles", b.Preemptions, st.PadBlocks)
	}
	t.Logf("padding ran %d BE blocks with the profiles given as data", s.Stats().PadBlocks)

	// a profile that does not fit the device is refused at load
	bad := *given["squeeze"]
	bad.Units++
	bad.Model = "squeeze-bad"
	tm := testModels["squeeze"]
	g, err := zoo.Build(tm.name, tm.opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load("squeeze-bad", g, ModelOptions{Profile: &bad}); err == nil || !strings.Contains(err.Error(), "padding profile") {
		t.Fatalf("a profile of another unit count: %v; want the device's refusal", err)
	}
}
