//go:build linux && cgo

package cuda

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/libml"
)

// Scripted DISB runs: the policies' schedulers (runConc, runReef) on the
// emulator, with the interleaving that a property needs held in place by
// the emulator's launch hook instead of hoped for from a measurement
// window. A hook holds one instance's kernel in its stream until another
// instance's event has happened (a BE run preempted, a BE job suspended,
// a BE kernel started), so each property below holds whatever the
// machine's speed or load. RunDISB's window runs (TestDISBEmu,
// TestDISBPadEmu) keep only the checks that hold whatever got done in
// their window; how much got done (jobs, preemptions, padded blocks,
// gain) is a benchmark figure: tools/gpubench disb, tools/disb, make
// bench-sched.
//
// The only thing a script cannot hold is an RT arrival: the schedulers
// take arrival times on the wall clock. A property that needs an arrival
// to find a BE job inside a run (reef's preemption) therefore holds the
// BE job in its run until it is preempted and gets arrivals with
// doubling gaps (backoff): some gap is longer than whatever an RT job and
// a goroutine wake-up take on the machine, so an arrival finds the BE job
// in its run for certain; a slow machine only takes more of the gaps. The
// first gap is twice an RT job's time measured just before, so that RT
// jobs do not pile up on a fast machine (that measurement changes how
// soon the event happens, not whether). The run stops as soon as the
// property's event has happened.

// disbScript is one scripted (workload, policy) run on the emulator.
type disbScript struct {
	t       *testing.T
	d       *emuDev
	pol     string
	w       DISBWorkload
	cfg     DISBConfig
	clients []*dclient
	byRole  map[string]*dclient // the client of each role (one each)
	stream  map[*emuStream]*dclient
	r       *disbRun
}

// newDISBScript loads the DISB stand-ins of w's roles on b (under their
// role names, as RunDISB does), installs the kernel profiles prof gives
// (reef-pad) and makes w's clients as runDISB does under pol. Every
// role has one client.
func newDISBScript(t *testing.T, b *Backend, d *emuDev, w DISBWorkload, pol string, prof map[string]func(testing.TB, *Instance) *ModelProfile) *disbScript {
	t.Helper()
	ctx := context.Background()
	s := &disbScript{t: t, d: d, pol: pol, w: w, byRole: map[string]*dclient{}, stream: map[*emuStream]*dclient{},
		cfg: DISBConfig{Duration: time.Second, Seed: 7, trace: true}}
	models := map[string]*disbModel{}
	for _, spec := range disbEmuModels(t) {
		if !slices.ContainsFunc(w.Clients, func(c DISBClient) bool { return c.Role == spec.Role }) {
			continue
		}
		inst, err := b.LoadModel(ctx, spec.Role, spec.Graph)
		if err != nil {
			t.Fatal(err)
		}
		m := &disbModel{spec: spec, base: inst.(*Instance), wants: map[uint64][]float32{}, maxThr: 1, aloneNs: 1e9}
		t.Cleanup(func() { m.base.Close() })
		if err := b.ConfigureBatch(inst, 1); err != nil {
			t.Fatal(err)
		}
		ls, err := m.base.Launches(1)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Grid > 0 {
				m.planned++
			}
		}
		if f := prof[spec.Role]; f != nil {
			f(t, m.base)
		}
		models[spec.Role] = m
	}
	for ci, c := range w.Clients {
		m := models[c.Role]
		in, want, err := m.want(ctx, s.cfg.Seed+uint64(ci)*7919)
		if err != nil {
			t.Fatal(err)
		}
		li, err := b.LinkModel(ctx, m.base)
		if err != nil {
			t.Fatal(err)
		}
		dc := &dclient{c: c, m: m, inst: li.(*Instance), in: in, want: want, out: make([]float32, len(want))}
		t.Cleanup(func() { dc.inst.Close() })
		if err := b.ConfigureBatch(li, 1); err != nil {
			t.Fatal(err)
		}
		if c.RT && (pol == PolicyReef || pol == PolicyReefPad) {
			if err := dc.inst.SetPriority(RTPriority); err != nil {
				t.Fatal(err)
			}
		}
		s.clients = append(s.clients, dc)
		s.byRole[c.Role] = dc
		s.stream[dc.inst.ln.s.(*emuStream)] = dc
	}
	return s
}

// backoff returns arrival times for c: 0, then gaps that double from
// twice the time of one of c's jobs (at least 1 ms), up to 30 s: a run
// that no arrival of these preempts fails (run's stuck).
func (s *disbScript) backoff(c *dclient) []int64 {
	out := make([]float32, len(c.want))
	t0 := time.Now()
	if err := c.m.base.InferBatch(context.Background(), 1, c.in, out); err != nil {
		s.t.Fatal(err)
	}
	gap := max(2*time.Since(t0).Nanoseconds(), int64(time.Millisecond))
	arr := []int64{0}
	for t := gap; t <= int64(30*time.Second); t, gap = t+gap, 2*gap {
		arr = append(arr, t)
	}
	s.t.Logf("RT arrivals at 0 and every %v doubling: %d in all", time.Duration(arr[1]), len(arr))
	return arr
}

// run runs the policy with the RT client's arrivals arr, hook called in
// each client's stream before each of its kernels (c is nil for a
// stream no client owns), until done reports the scripted event, or
// stuck (when set) that it can no longer happen (the clients' counters
// are locked for both). There is no time limit: a run that neither
// finishes nor gets stuck is a hang for go test's -timeout to report.
// It stops the run and returns its row.
func (s *disbScript) run(arr []int64, hook func(c *dclient, kernel string, exec int64), done, stuck func() bool) *DISBRow {
	t := s.t
	t.Helper()
	s.r = &disbRun{base: time.Now(), winLo: 0, winHi: math.MaxInt64 / 4, trace: true, alpha: DefaultDISBAlpha}
	s.d.h.mu.Lock()
	s.d.h.onLaunch = func(st *emuStream, kernel string, exec int64) {
		hook(s.stream[st], kernel, exec)
	}
	s.d.h.mu.Unlock()
	defer func() {
		s.d.h.mu.Lock()
		s.d.h.onLaunch = nil
		s.d.h.mu.Unlock()
	}()
	am := map[*dclient][]int64{}
	for _, c := range s.clients {
		if c.c.RT {
			am[c] = arr
		}
	}
	var wg sync.WaitGroup
	switch s.pol {
	case PolicyConc:
		runConc(s.r, s.clients, am, &wg)
	case PolicyReef, PolicyReefPad:
		runReef(s.r, s.clients, am, &wg, s.pol == PolicyReefPad)
	default:
		t.Fatalf("no script for %s", s.pol)
	}
	for !s.r.stop.Load() && !s.locked(done) {
		if stuck != nil && s.locked(stuck) {
			t.Errorf("%s: the scripted event can no longer happen", s.pol)
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.r.stop.Store(true)
	wg.Wait()
	if s.r.err != nil {
		t.Fatal(s.r.err)
	}
	row := s.r.row(s.w, s.pol, s.clients, &s.cfg)
	for _, c := range row.Clients {
		t.Logf("%s %s: %d done, %d preemptions, %.1f launches per job (plan %d), %d wrong", s.pol, c.Name, c.Done, c.Preemptions, c.LaunchesPerJob, c.PlannedPerJob, c.WrongJobs)
	}
	if row.Wrong != 0 {
		t.Errorf("%s: %d jobs with a wrong output", s.pol, row.Wrong)
	}
	for _, r := range row.spans {
		if r.rt && r.preempted {
			t.Errorf("%s: an RT run was preempted", s.pol)
		}
	}
	return row
}

// locked calls f with every client's counters locked.
func (s *disbScript) locked(f func() bool) bool {
	for _, c := range s.clients {
		c.mu.Lock()
	}
	defer func() {
		for _, c := range s.clients {
			c.mu.Unlock()
		}
	}()
	return f()
}

// drains is the number of preemption drains the run has recorded.
func (s *disbScript) drains() int {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return len(s.r.drains)
}

// waitFor polls cond (an event of another goroutine) until it holds or
// the run stops.
func (s *disbScript) waitFor(cond func() bool) {
	for !cond() && !s.r.stop.Load() {
		time.Sleep(50 * time.Microsecond)
	}
}

// preempted reports, once any Preempt of c's current run has written
// the flag, whether one was requested.
func preempted(c *dclient) bool {
	if !c.inst.req.Load() {
		return false
	}
	// Preempt holds pmu until the flag is in device memory
	c.inst.pmu.Lock()
	c.inst.pmu.Unlock()
	return true
}

// A one-RT, one-BE workload: RT VGG stand-in, BE RNET stand-in (A).
func disbScriptWorkload() DISBWorkload {
	return DISBWorkload{Name: "A", Desc: "scripted", Clients: []DISBClient{
		{Name: "rt0", Role: "VGG", RT: true, Rate: 0.5}, {Name: "be0", Role: "RNET"}}}
}

// conc runs RT and BE runs side by side and never preempts: the RT job's
// first kernel is held until a BE kernel has started after it, so the
// RT run and that BE run overlap.
func TestDISBScriptConc(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	s := newDISBScript(t, b, d, disbScriptWorkload(), PolicyConc, nil)
	rt, be := s.byRole["VGG"], s.byRole["RNET"]
	var mu sync.Mutex
	beKernels, overlapped, held := 0, false, false
	row := s.run([]int64{0}, func(c *dclient, kernel string, exec int64) {
		switch c {
		case be:
			mu.Lock()
			beKernels++
			mu.Unlock()
		case rt:
			mu.Lock()
			first, n0 := !held, beKernels
			held = true
			mu.Unlock()
			if first {
				s.waitFor(func() bool { mu.Lock(); defer mu.Unlock(); return beKernels > n0 })
				mu.Lock()
				overlapped = beKernels > n0
				mu.Unlock()
			}
		}
	}, func() bool { return rt.done >= 1 }, nil)
	if !overlapped {
		t.Fatal("the RT kernel was released before a BE kernel started")
	}
	if row.Preemptions != 0 || row.PreemptN != 0 {
		t.Errorf("conc preempted: %d BE runs, %d arrivals", row.Preemptions, row.PreemptN)
	}
	var rts, bes []disbSpan
	for _, sp := range row.spans {
		if sp.rt {
			rts = append(rts, sp)
		} else {
			bes = append(bes, sp)
		}
	}
	if overlaps(rts, bes) == 0 {
		t.Errorf("conc: no RT run ran alongside a BE run (%d RT, %d BE runs)", len(rts), len(bes))
	}
}

// reefScript runs the one-RT, one-BE workload under reef or reef-pad
// with the BE job's first run held at its kernel 3 until it is
// preempted; with holdRT, an RT job that starts while a preempted BE run
// is still draining has its first kernel held until the drain is over
// and the BE job suspended (so that padding can take it). It stops once
// the BE job finished after its preemption.
func reefScript(t *testing.T, s *disbScript, holdRT bool) *DISBRow {
	rt, be := s.byRole["VGG"], s.byRole["RNET"]
	var mu sync.Mutex
	beHeld, beReleased := false, false
	arr := s.backoff(rt)
	row := s.run(arr, func(c *dclient, kernel string, exec int64) {
		switch {
		case c == be && exec == 3:
			// only the BE client's first job is held: once it has
			// finished (it passed kernel 3 without a hold when a
			// preemption before it restored it past it), the run may
			// stop at any moment, and a held later job would wait for a
			// preemption that no longer comes
			be.mu.Lock()
			firstJob := be.done == 0
			be.mu.Unlock()
			mu.Lock()
			first := !beHeld && firstJob
			beHeld = beHeld || firstJob
			mu.Unlock()
			if first {
				s.waitFor(func() bool { return preempted(be) })
				mu.Lock()
				beReleased = preempted(be)
				mu.Unlock()
			}
		case c == rt && holdRT && kernel != KernelClock && exec == 0:
			if be.inst.req.Load() && s.drains() == 0 {
				s.waitFor(func() bool { return s.drains() > 0 })
			}
		}
	}, func() bool { return be.done >= 1 && rt.done >= 1 },
		// every arrival served, and none preempted the BE job (a
		// preemption sets req until the BE job's next run, which
		// starts after the preempted run has counted itself)
		func() bool { return rt.done == len(arr) && !be.inst.req.Load() && be.inst.Stats().Preemptions == 0 })
	mu.Lock()
	defer mu.Unlock()
	// An RT arrival may preempt the BE job's first run before its kernel
	// 3 (then no hold happens, and the restored run may start past it);
	// either way the BE job was preempted, which the check below asserts.
	if beHeld && !beReleased {
		t.Fatalf("%s: the BE run held at kernel 3 was never preempted", s.pol)
	}
	// the BE job's first run was preempted, and the job finished: its
	// output was checked (row.Wrong)
	if row.Preemptions == 0 || row.PreemptN == 0 || row.PreemptP50Us < 0 {
		t.Errorf("%s: %d preempted BE runs, %d preempting arrivals (drain p50 %.1f µs)", s.pol, row.Preemptions, row.PreemptN, row.PreemptP50Us)
	}
	var rts, bes []disbSpan
	for _, sp := range row.spans {
		if sp.rt {
			rts = append(rts, sp)
		} else {
			bes = append(bes, sp)
		}
	}
	if !slices.ContainsFunc(bes, func(sp disbSpan) bool { return sp.preempted }) {
		t.Errorf("%s: no BE run came back preempted", s.pol)
	}
	for _, r := range rts {
		for _, sp := range bes {
			if sp.start > r.start && sp.start < r.end {
				t.Errorf("%s: BE run started at %d inside the RT run [%d, %d]", s.pol, sp.start, r.start, r.end)
			}
		}
	}
	return row
}

// reef preempts the BE run an RT arrival finds, starts no BE run inside
// an RT run, and the preempted BE job restores to the exact output; the
// restore relaunched kernels (the preempted run's kernel 3 at least
// exited in its prologue and runs again).
func TestDISBScriptReef(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	s := newDISBScript(t, b, d, disbScriptWorkload(), PolicyReef, nil)
	row := reefScript(t, s, false)
	if row.ReexecShare <= 0 || row.RelaunchPerPreempt <= 0 {
		t.Errorf("reef: %d preempted BE runs, but no kernel was relaunched (re-exec %v)", row.Preemptions, row.ReexecShare)
	}
}

// reefPadScript is the scripted reef-pad run of the one-RT, one-BE
// workload on an emulated device of sms SMs, with sg_pad's blocks run
// last to first (as BE SMs start beside the RT SMs on a GPU) and
// synthetic profiles (beProf for the BE model): the BE job is preempted
// (reefScript), the RT job that preempted it runs padded with it once it
// is suspended, and the BE job then resumes from where padding left it
// to the exact output. It returns the row.
func reefPadScript(t *testing.T, sms int, beProf func(testing.TB, *Instance) *ModelProfile) *DISBRow {
	d := newEmuDev(sms, false)
	b, err := newEmuDevBackend(d, libml.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Deinit(); err != nil {
			t.Errorf("Deinit: %v", err)
		}
	})
	d.h.padReverse = true
	s := newDISBScript(t, b, d, disbScriptWorkload(), PolicyReefPad,
		map[string]func(testing.TB, *Instance) *ModelProfile{"VGG": synthProfile, "RNET": beProf})
	row := reefScript(t, s, true)
	be := s.byRole["RNET"]
	t.Logf("RT kernels %d, padded %d, BE kernels %d (not version 0: %d), BE blocks %d; BE job %+v",
		row.PadRTKernels, row.PadLaunches, row.PadBEKernels, row.PadBEVersioned, row.PadBEBlocks, *be.pj)
	if row.PadLaunches > 0 && be.pj.Blocks == 0 {
		t.Errorf("padded launches, but none ran a block of the BE job: %+v", *be.pj)
	}
	return row
}
