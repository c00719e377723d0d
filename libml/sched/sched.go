package sched

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	ncpu "sluice/native/cpu"
)

// Policy names a scheduling policy.
type Policy string

// The policies (ARCHITECTURE.md §3).
const (
	// PolicyREEF: RT mode preempts best-effort work (reset-based
	// preemption), restores it afterwards, and pads RT kernels with
	// best-effort blocks.
	PolicyREEF Policy = "reef"
	// PolicySeq runs one job at a time, RT first, no preemption
	// (Clockwork-like).
	PolicySeq Policy = "seq"
	// PolicyConc runs every queue's jobs concurrently, no priority
	// (multi-stream, Triton-like).
	PolicyConc Policy = "conc"
	// PolicySRPT dispatches kernels of the job with the shortest remaining
	// time, with deficit-counter fairness (Paella §6).
	PolicySRPT Policy = "srpt"
	// PolicySplit runs models as evenly sized blocks of kernels and
	// reorders jobs by greedy response-ratio preemption at block
	// boundaries (SPLIT §3.4).
	PolicySplit Policy = "split"
)

// Policies lists the policies.
func Policies() []Policy {
	return []Policy{PolicyREEF, PolicySeq, PolicyConc, PolicySRPT, PolicySplit}
}

// ParsePolicy checks a policy name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("sched: unknown policy %q (have reef, seq, conc, srpt, split)", s)
}

// Class is a job's scheduling class.
type Class int

// Classes.
const (
	// RT jobs are latency-critical (real-time).
	RT Class = iota
	// BE jobs are best-effort.
	BE
)

func (c Class) String() string {
	if c == RT {
		return "RT"
	}
	return "BE"
}

// Config configures a Scheduler.
type Config struct {
	// Policy is the scheduling policy (default reef).
	Policy Policy
	// Device, when set, is the cpu device whose units the scheduler runs
	// on, shared with the device's other users (other schedulers, the cpu
	// backend): Units and PinUnits are then the device's, and Close
	// leaves it running. nil starts units of the scheduler's own.
	Device *cpu.Device
	// Segments, when set, is the device the scheduler runs on instead of
	// the cpu: an initialised backend whose instances run kernels in
	// segments on streams of their own (the cuda backend, on a GPU or on
	// the kernel emulator). Its unit count is Units; Device, PinUnits and
	// UnitNice do not apply. reef pads RT segments with the suspended BE
	// jobs where the instances can (libml.PaddingSegmentInstance), by the
	// device's own selector and profiles (PadMargin and PadBudgetMBs are
	// the cpu's).
	Segments libml.SegmentBackend
	// Units is the number of worker units (default: all CPUs); PinUnits
	// pins them to cores.
	Units    int
	PinUnits bool
	// ModelMemoryLimit caps the bytes each model takes on the cpu
	// (libml.BackendConfig.ModelMemoryLimit); 0: no limit. On Segments,
	// the segment backend applies its own.
	ModelMemoryLimit int64
	// UnitNice, when not 0, is added to the process's nice value for the
	// unit threads: the threads that steer them (arrivals, preemption,
	// completions) then preempt them at once, which matters on a machine
	// with as many units as cores.
	UnitNice int
	// Window is the device window: kernels outstanding per stream, the
	// rest wait in the stream's host queue (REEF §4.2; default 4).
	Window int
	// BEQueues is the number of best-effort queues, each bound to its own
	// stream (default 4).
	BEQueues int
	// NoPadding turns dynamic kernel padding off (reef).
	NoPadding bool
	// PadBackoffTol and PadBackoffJobs are padding's online back-off
	// (reef): when an RT model's jobs run slower with BE work offered
	// to padding than without (running means of their kernel time, 4
	// jobs each at least) by more than PadBackoffTol (default 0.05),
	// padding stays off for its next PadBackoffJobs RT jobs (default
	// 32; doubled for each back-off in a row, up to 32 times), then is
	// tried again. PadBackoffTol < 0: no back-off.
	PadBackoffTol  float64
	PadBackoffJobs int
	// PreemptBlockNs and PreemptSlack choose the versions reef's BE
	// streams run (a running block stops only at its next in-loop check:
	// shorter blocks mean faster preemption): per kernel, the fastest
	// version whose profiled blocks take at most PreemptBlockNs (default
	// 50 us); if none does, the one with the shortest blocks among those
	// within PreemptSlack of the fastest kernel time (default 0.25; < 0:
	// the fastest version everywhere).
	PreemptBlockNs float64
	PreemptSlack   float64
	// PreemptCheckNs is the longest run between two in-loop checks reef
	// asks of a BE block: a kernel whose chosen version's blocks take
	// longer runs, on BE streams, in a copy that checks about BlockNs /
	// PreemptCheckNs times per block (GEMM and CONV split the block's
	// sgemm). Default 10 us (TestPreemptProbe on a 2-core Xeon: preemption
	// p50 22 us against 30 at 20 us, with as many BE jobs done); < 0: no
	// added checks.
	PreemptCheckNs float64
	// PreemptCheckFlops and PreemptCheckBytes bound the work a BE block
	// does between two in-loop checks by construction, whatever the
	// profile measured: GEMM and CONV blocks of reef's BE streams split
	// their sgemm so that no call does more than PreemptCheckFlops flops
	// or reads more than PreemptCheckBytes of its operands (IM2COL
	// writes at most PreemptCheckBytes between checks). So a preempted
	// block stops within that much work on any machine. Defaults 4
	// MFLOP and 2 MiB (about 22-160 us of GEMM at 25-180 GFLOP/s, and
	// 100-200 us of operands streamed from memory at 10-20 GB/s on one
	// core, less where they are in cache): a bound for a profile that
	// is wrong on this machine, coarser than the profiled checks
	// (PreemptCheckNs), which a finer bound would only slow down (DISB
	// A and C on a 2-core Xeon: 1 MFLOP and 256 KiB cost reef 7-11% of
	// its throughput); < 0: no bound.
	PreemptCheckFlops, PreemptCheckBytes float64
	// PadMargin is padding's rule 1 with a margin: a BE block qualifies
	// when its profiled time is below PadMargin times the RT kernel's
	// remaining time (default 1, REEF's rule; profiled times are means,
	// and a block that overruns delays the next RT kernel).
	PadMargin float64
	// PadBudgetMBs is padding's rule-2 budget: an RT kernel's bandwidth
	// plus a padding block's must stay below it (MB/s). 0: 80% of the
	// bandwidth measured at New; < 0: no limit.
	PadBudgetMBs int64
	// FairThreshold is SRPT's deficit threshold (Paella §6; default 8
	// kernels): above it, the oldest job of the user with the largest
	// deficit runs instead of the shortest one.
	FairThreshold float64
	// QuantumNs is how much profiled work srpt dispatches per decision
	// (default 300 us; at least one kernel).
	QuantumNs float64
	// Alpha is SPLIT's latency target multiple: a job violates its target
	// when its latency exceeds Alpha times its standalone time (default
	// 4).
	Alpha float64
	// SplitBlocks is the number of blocks SPLIT cuts a model into when it
	// has no cuts; 0 picks 2..8 blocks by SPLIT eq. 1 (SplitBest).
	// SplitGA tunes the genetic algorithm.
	SplitBlocks int
	SplitGA     GAConfig
	// OnPreempt, when set, is told every preemption's latency (ns, as
	// Stats.PreemptNs records it) the moment it is known, with the
	// scheduler's lock held: it must be quick and must not call the
	// scheduler (a metrics histogram's Observe).
	OnPreempt func(ns int64)
}

func (c *Config) defaults() error {
	if c.Policy == "" {
		c.Policy = PolicyREEF
	}
	if _, err := ParsePolicy(string(c.Policy)); err != nil {
		return err
	}
	if c.Segments != nil {
		if c.Device != nil || c.UnitNice != 0 {
			return errors.New("sched: a segment device runs its own units: no cpu Device or UnitNice")
		}
		c.Units, c.PinUnits = c.Segments.Units(), false
	}
	if c.Device != nil {
		c.Units = c.Device.Units()
		if c.UnitNice != 0 {
			return errors.New("sched: UnitNice changes the units' threads: not on a shared device")
		}
	}
	if c.Units <= 0 {
		c.Units = runtime.NumCPU()
	}
	if c.Units > ncpu.MaxUnits {
		c.Units = ncpu.MaxUnits
	}
	if c.Window <= 0 {
		c.Window = 4
	}
	if c.Window >= streamCap {
		return fmt.Errorf("sched: window %d: want < %d", c.Window, streamCap)
	}
	if c.BEQueues <= 0 {
		c.BEQueues = 4
	}
	if c.BEQueues > 32 {
		return fmt.Errorf("sched: %d BE queues: want <= 32", c.BEQueues)
	}
	if c.PadMargin <= 0 {
		c.PadMargin = 1
	}
	if c.PadBackoffTol == 0 {
		c.PadBackoffTol = 0.05
	}
	if c.PadBackoffJobs <= 0 {
		c.PadBackoffJobs = 32
	}
	if c.PreemptSlack == 0 {
		c.PreemptSlack = 0.25
	}
	if c.PreemptBlockNs <= 0 {
		c.PreemptBlockNs = 50e3
	}
	if c.PreemptCheckNs == 0 {
		c.PreemptCheckNs = 10e3
	}
	if c.PreemptCheckFlops == 0 {
		c.PreemptCheckFlops = 4e6
	}
	if c.PreemptCheckBytes == 0 {
		c.PreemptCheckBytes = 2 << 20
	}
	if c.FairThreshold <= 0 {
		c.FairThreshold = 8
	}
	if c.QuantumNs <= 0 {
		c.QuantumNs = 300e3
	}
	if c.Alpha <= 0 {
		c.Alpha = 4
	}
	return nil
}

// streamCap is the ring capacity of the scheduler's streams.
const streamCap = 64

// ErrClosed is the error of jobs the scheduler dropped when it closed.
var ErrClosed = errors.New("sched: scheduler closed")

// Job is one inference of a model. Fill Model, Class, Queue and In, then
// Submit; Wait (or Done) reports completion.
type Job struct {
	Model *Model
	Class Class
	// Queue is the BE queue (0..BEQueues-1); RT jobs share the RT queue.
	Queue int
	// User identifies the submitter for SRPT's fairness (default: the
	// queue, RT jobs -1).
	User int
	// In is the input (Model.InputSize floats; it must not change until
	// the job finishes: a restart from the first kernel copies it in
	// again); Out, when not nil, receives the output (Model.OutputSize
	// floats).
	In, Out []float32
	// Input, with In nil, is the input as the requests' payload: on the
	// cpu the scheduler gathers and converts it (in C, one pass) into the
	// instance it binds the job to, a segment device gathers it itself
	// (libml.Segment.Input, in place where it can); either does again on
	// a restart from the first kernel, so it must stay valid until the
	// job has finished. Its Input.N() requests fill the first rows.
	Input *libml.Input
	// Arrival is when the request arrived (Now clock); 0 means at Submit.
	Arrival int64
	// Done, when set, is called once the job has finished (from a
	// scheduler goroutine; it must not block).
	Done func(*Job)

	// Results, valid after completion. Times are on the Now clock:
	// Submitted, Started (bound to a stream, input copied), KernelStart
	// (its first kernel's first block ran), KernelEnd (its last kernel's
	// last block ended) and Finished (completion handled, output copied).
	Submitted, Started, Finished int64
	KernelStart, KernelEnd       int64
	// Preemptions counts reset-based preemptions; ReexecNs is the
	// profiled time of the kernels restores ran a second time.
	Preemptions int
	ReexecNs    float64
	// PadBlocks counts blocks that ran as padding of RT kernels.
	PadBlocks int64
	// RestoreGapNs sums, over its preemptions, the time from the moment
	// no unit worked for the job any more to the first kernel after its
	// restore (under reef it includes the RT work it waited for).
	RestoreGapNs int64
	Err          error

	inst   *instance
	pos    int   // kernels [0, pos) are complete...
	posVer int   // ...and blocks [0, posBlk) of kernel pos in version posVer
	posBlk int64 //
	posEnd int64 // ...and, when > 0, its blocks from posEnd on
	idleAt int64 // when preempted: the moment its units went idle
	done   chan struct{}
}

// resumeAt sets where the job continues: kernel pos in version ver, from
// block blk, up to block end (0: to the kernel's last block; the blocks
// from end on ran to their end before).
func (j *Job) resumeAt(pos, ver int, blk, end int64) {
	j.pos, j.posVer, j.posBlk, j.posEnd = pos, ver, blk, end
}

// Wait blocks until the job has finished and returns its error.
func (j *Job) Wait() error {
	<-j.done
	return j.Err
}

// LatencyNs is Finished - Arrival.
func (j *Job) LatencyNs() int64 { return j.Finished - j.Arrival }

// Now is the scheduler's clock (CLOCK_MONOTONIC, ns).
func Now() int64 { return ncpu.NowNs() }

// Stats are the scheduler's counters.
type Stats struct {
	// Jobs counts finished jobs per class.
	Jobs [2]int64
	// Preemptions counts RT-mode entries that preempted running BE work;
	// PreemptNs holds each one's latency: from the first preempt call to
	// the moment no block of a preempted stream ran any more and the RT
	// job's first kernel had started (up to 1<<20 samples).
	Preemptions int64
	PreemptNs   []int64
	// Restores counts BE restores after preemption; BlockRestores those
	// that kept the blocks of the interrupted kernel that had run to their
	// end (or continued at a launch none of whose blocks had started);
	// ReexecNs sums the profiled time of the kernels restores re-ran.
	Restores, BlockRestores int64
	ReexecNs                float64
	// PadBlocks and PadNs count blocks run as padding and their time;
	// PadJobs BE jobs finished entirely by padding.
	PadBlocks, PadNs int64
	PadJobs          int64
	// PadBackoffs counts the times padding backed off because it made
	// an RT model's jobs slower (Config.PadBackoffTol).
	PadBackoffs int64
	// PadSelect are padding's selection statistics (calls, time, rule
	// rejections).
	PadSelect ncpu.PadStats
	// ModeSwitches counts normal -> RT mode switches.
	ModeSwitches int64
}

// Scheduler runs jobs on a pool of units under one policy. Its methods are
// safe for concurrent use.
type Scheduler struct {
	cfg    Config
	dev    *cpu.Device
	pool   *ncpu.Pool
	mu     sync.Mutex
	models []*Model
	lanes  []*lane
	pol    policy
	stats  Stats
	closed bool
	fire   []*Job
	// preScratch is preemptLanes' list of segment instances (reused)
	preScratch []libml.SegmentInstance
	wg         sync.WaitGroup
	bw         int64
	// logSegs records every segment launched (tests)
	logSegs bool
	segs    []segEv
}

// segEv is one launched segment: kernels [from, to) of job on lane.
type segEv struct {
	job      *Job
	lane     int
	from, to int
}

// policy is one scheduling policy; every method runs with s.mu held.
type policy interface {
	submit(j *Job)
	// segDone: lane l's segment completed or (preempted) was preempted and
	// has drained.
	segDone(l *lane, preempted bool)
	// drop removes every queued job (Close).
	drop() []*Job
	close()
}

// New starts a scheduler: a pool of units and the streams its policy
// needs.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg}
	if cfg.Segments == nil {
		dev := cfg.Device
		if dev == nil {
			var err error
			if dev, err = cpu.NewDevice(cfg.Units, cfg.PinUnits); err != nil {
				return nil, fmt.Errorf("sched: %w", err)
			}
		}
		if err := dev.Acquire(); err != nil {
			if cfg.Device == nil {
				dev.Close()
			}
			return nil, fmt.Errorf("sched: %w", err)
		}
		s.dev, s.pool = dev, dev.Pool()
	}
	pool := s.pool
	if cfg.UnitNice != 0 {
		cur, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
		if err == nil {
			// the raw syscall returns 20 - nice
			err = pool.SetNice(20 - cur + cfg.UnitNice)
		}
		if err != nil {
			s.leaveDevice()
			return nil, fmt.Errorf("sched: unit nice %+d: %w", cfg.UnitNice, err)
		}
	}
	if cfg.PadBudgetMBs == 0 && !cfg.NoPadding && cfg.Segments == nil {
		s.bw = MeasureBandwidth() * 8 / 10
	} else if cfg.PadBudgetMBs > 0 {
		s.bw = cfg.PadBudgetMBs
	}
	nl := 1
	switch cfg.Policy {
	case PolicyREEF, PolicyConc:
		nl = 1 + cfg.BEQueues
	}
	for i := 0; i < nl; i++ {
		l, err := s.newLane(i)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.lanes = append(s.lanes, l)
	}
	var err error
	switch cfg.Policy {
	case PolicyREEF:
		s.pol, err = newReef(s)
	case PolicySeq:
		s.pol = newSeq(s)
	case PolicyConc:
		s.pol = newConc(s)
	case PolicySRPT:
		s.pol = newSRPT(s)
	case PolicySplit:
		s.pol = newSplit(s)
	}
	if err != nil {
		s.pol = nil // not a policy holding a nil *reef
		s.Close()
		return nil, err
	}
	for _, l := range s.lanes {
		s.wg.Add(1)
		go s.wait(l)
	}
	return s, nil
}

// Config is the configuration in effect (defaults filled in).
func (s *Scheduler) Config() Config { return s.cfg }

// Units is the number of worker units.
func (s *Scheduler) Units() int { return s.cfg.Units }

// Device is the cpu device the scheduler runs on (nil on a segment
// device, Config.Segments).
func (s *Scheduler) Device() *cpu.Device { return s.dev }

// DeviceName names the device the scheduler runs on ("cpu", "cuda").
func (s *Scheduler) DeviceName() string {
	if s.cfg.Segments != nil {
		return s.cfg.Segments.Name()
	}
	return "cpu"
}

// Pool is the scheduler's worker pool (profilers and tests; nil on a
// segment device).
func (s *Scheduler) Pool() *ncpu.Pool { return s.pool }

// Load compiles a model for the scheduler, loads its weights and profiles
// its kernels (unless opt.Profile is given). Load models before submitting
// their jobs; it runs the profile on the scheduler's units.
func (s *Scheduler) Load(name string, g *graph.Graph, opt ModelOptions) (*Model, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var (
		m   *Model
		err error
	)
	if opt.MemoryLimit == 0 {
		opt.MemoryLimit = s.cfg.ModelMemoryLimit
	}
	if s.cfg.Segments != nil {
		m, err = loadSegModel(s.cfg.Segments, name, g, opt)
	} else {
		m, err = loadModel(name, g, s.cfg.Units, opt)
	}
	if err != nil {
		return nil, fmt.Errorf("sched: load %q: %w", name, err)
	}
	if err := s.install(m, opt); err != nil {
		return nil, fmt.Errorf("sched: load %q: %w", name, err)
	}
	return m, nil
}

// install profiles m (unless opt.Profile is given; on a segment device a
// given profile is installed on the device too, for padding), picks its
// preemptible versions and SPLIT cuts and adds it to the scheduler's
// models. On error m is released.
func (s *Scheduler) install(m *Model, opt ModelOptions) error {
	p := opt.Profile
	if p == nil {
		var err error
		if m.seg != nil {
			p, err = profileSegModel(m, opt.ProfileRuns)
		} else {
			p, err = profileModel(s.pool, m, opt.ProfileRuns)
		}
		if err != nil {
			m.release()
			return err
		}
	}
	if err := m.setProfile(p); err != nil {
		m.release()
		return err
	}
	if opt.Profile != nil && m.seg != nil {
		if err := installSegProfile(m, p); err != nil {
			m.release()
			return err
		}
	}
	m.choosePreempt(s.cfg.PreemptBlockNs, s.cfg.PreemptSlack, s.cfg.PreemptCheckNs)
	m.checkFlops, m.checkBytes = int64(max(s.cfg.PreemptCheckFlops, 0)), int64(max(s.cfg.PreemptCheckBytes, 0))
	if m.cuts == nil && s.cfg.Policy == PolicySplit {
		var res SplitResult
		if s.cfg.SplitBlocks > 0 {
			res = SplitModel(p, s.cfg.SplitBlocks, s.cfg.SplitGA)
		} else {
			res = SplitBest(p, 8, s.cfg.SplitGA)
		}
		m.cuts = res.Cuts
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		m.release()
		return ErrClosed
	}
	s.models = append(s.models, m)
	return nil
}

// Submit queues a job. It returns an error for a bad job; otherwise the
// job completes later (Wait, Done).
func (s *Scheduler) Submit(j *Job) error {
	if j.Model == nil {
		return errors.New("sched: job without a model")
	}
	switch {
	case j.Input != nil && j.In == nil:
		n := j.Input.N()
		if n < 1 || n > j.Model.batch || (n > 1 && !j.Model.batched()) {
			return fmt.Errorf("sched: a payload of %d requests for model %q at batch %d", n, j.Model.name, j.Model.batch)
		}
		if err := j.Input.Check(n, j.Model.InputSize()/j.Model.batch); err != nil {
			return fmt.Errorf("sched: model %q: %w", j.Model.name, err)
		}
	case len(j.In) != j.Model.InputSize():
		return fmt.Errorf("sched: job input has %d floats, model %q wants %d", len(j.In), j.Model.name, j.Model.InputSize())
	}
	if j.Out != nil && len(j.Out) != j.Model.OutputSize() {
		return fmt.Errorf("sched: job output has %d floats, model %q makes %d", len(j.Out), j.Model.name, j.Model.OutputSize())
	}
	if j.Class != RT && j.Class != BE {
		return fmt.Errorf("sched: job class %d", j.Class)
	}
	if j.Class == BE && (j.Queue < 0 || j.Queue >= s.cfg.BEQueues) {
		return fmt.Errorf("sched: BE queue %d outside 0..%d", j.Queue, s.cfg.BEQueues-1)
	}
	now := Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.enqueue(j, now)
	fire := s.takeFire()
	s.mu.Unlock()
	complete(fire)
	return nil
}

// enqueue hands a checked job submitted at now to the policy; s.mu is held.
func (s *Scheduler) enqueue(j *Job, now int64) {
	if j.User == 0 && j.Class == BE {
		j.User = j.Queue
	} else if j.User == 0 {
		j.User = -1
	}
	j.Submitted = now
	if j.Arrival == 0 {
		j.Arrival = now
	}
	j.Started, j.Finished, j.Preemptions, j.ReexecNs, j.PadBlocks, j.Err = 0, 0, 0, 0, 0, nil
	j.KernelStart, j.KernelEnd, j.RestoreGapNs, j.idleAt = 0, 0, 0, 0
	j.resumeAt(0, 0, 0, 0)
	j.inst = nil
	j.done = make(chan struct{})
	s.pol.submit(j)
}

// submitAll submits jobs in one critical section: nothing runs between
// their arrivals (scripted arrival sequences in tests).
func (s *Scheduler) submitAll(js ...*Job) {
	now := Now()
	s.mu.Lock()
	for _, j := range js {
		j.Arrival = now
		s.enqueue(j, now)
	}
	fire := s.takeFire()
	s.mu.Unlock()
	complete(fire)
}

// counters returns the counters without PreemptNs: no copy of up to
// 1<<20 samples while the scheduler's lock is held (the appliance's
// metrics scrapes read these; the latencies reach them by OnPreempt).
func (s *Scheduler) counters() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.PreemptNs = nil
	return st
}

// Stats returns a copy of the counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.PreemptNs = append([]int64(nil), s.stats.PreemptNs...)
	if r, ok := s.pol.(*reef); ok && r.pad != nil {
		st.PadSelect = r.pad.stats()
	}
	return st
}

// ResetStats zeroes the counters.
func (s *Scheduler) ResetStats() {
	s.mu.Lock()
	s.stats = Stats{}
	s.mu.Unlock()
}

// Close stops the scheduler: running jobs are preempted, every unfinished
// job ends with ErrClosed, and the models and the pool are freed.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var dropped []*Job
	if s.pol != nil {
		dropped = s.pol.drop()
	}
	for _, l := range s.lanes {
		if l.busy {
			l.ds.preempt() // its drain wakes the waiter
		} else {
			l.wake() // wake the idle waiter
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	if s.pol != nil {
		s.pol.close()
	}
	for _, l := range s.lanes {
		if l.job != nil {
			dropped = append(dropped, l.job)
			l.job = nil
		}
	}
	for _, j := range dropped {
		if j.inst != nil {
			j.Model.releaseInstance(j.inst)
			j.inst = nil
		}
		j.Err = ErrClosed
		j.Finished = Now()
	}
	fire := append(s.takeFire(), dropped...)
	for _, l := range s.lanes {
		l.ds.close()
		l.efd.Close()
	}
	for _, m := range s.models {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.release()
	}
	s.models = nil
	s.mu.Unlock()
	complete(fire)
	return s.leaveDevice()
}

// leaveDevice lets the device go: a shared one keeps running, the
// scheduler's own stops.
func (s *Scheduler) leaveDevice() error {
	if s.dev == nil {
		return nil // a segment device: its owner closes it
	}
	s.dev.Release(s)
	if s.cfg.Device == nil {
		return s.dev.Close()
	}
	return nil
}

func (s *Scheduler) takeFire() []*Job {
	f := s.fire
	s.fire = nil
	return f
}

func complete(js []*Job) {
	for _, j := range js {
		if j.Done != nil {
			j.Done(j)
		}
		close(j.done)
	}
}

// ---- lanes ---------------------------------------------------------------

// lane is a stream with a virtual host queue and device window, and the
// job bound to it.
type lane struct {
	id int
	// ds is the lane's stream as the scheduler's core drives it, on any
	// device; st is the same stream on the cpu device (nil on a segment
	// device), for what only the cpu runtime has (padding, priority).
	ds laneStream
	st *ncpu.Stream
	// efd is the stream's drain notification (an eventfd the draining
	// unit writes): waiters park in Go's poller, not in a blocking cgo
	// call that would hold a P (on a 2-core machine, for up to sysmon's
	// 10 ms).
	efd  *os.File
	job  *Job
	busy bool // a segment is in flight
	// the segment in flight: kernels [from, to), the first from block blk
	// (up to block end when > 0) of version ver
	from, ver int
	blk, end  int64
	to        int
	preempted bool
	rec       *preemptRec
	kind      launchKind
	// upload: the segment in flight only writes the job's input (reef,
	// on a segment device, for a BE job that arrived in RT mode)
	upload bool
}

// launchVer is the version kernel k was launched in by l's segment.
func (l *lane) launchVer(m *Model, k int) int {
	switch {
	case k == l.from:
		return l.ver
	case l.kind == lkPreempt && k < len(m.prVer):
		return m.prVer[k]
	}
	return 0
}

func (s *Scheduler) newLane(id int) (*lane, error) {
	if s.cfg.Segments != nil {
		return newSegLane(id)
	}
	st, err := s.pool.NewStream(streamCap)
	if err != nil {
		return nil, err
	}
	if err := st.EnableHQ(s.cfg.Window); err != nil {
		st.Close()
		return nil, err
	}
	efd, err := st.NotifyFile()
	if err != nil {
		st.Close()
		return nil, err
	}
	return &lane{id: id, ds: cpuStream{st}, st: st, efd: efd}, nil
}

// begin binds j to l (acquiring an instance and copying the input the
// first time j runs).
func (s *Scheduler) begin(l *lane, j *Job) error {
	l.job = j
	if j.inst != nil {
		return nil
	}
	in, err := j.Model.acquire()
	if err != nil {
		return err
	}
	j.inst = in
	if err := in.setInput(j); err != nil {
		return err
	}
	j.Started = Now()
	return nil
}

// bind is begin for the policies: a job that cannot be bound leaves l
// free and finishes with its error (false).
func (s *Scheduler) bind(l *lane, j *Job) bool {
	if err := s.begin(l, j); err != nil {
		l.job = nil
		j.Err = err
		s.finish(j)
		return false
	}
	return true
}

// launchKind selects an instance's launch array.
type launchKind int

const (
	// lkFast: version 0 (the fastest kernels), every unit.
	lkFast launchKind = iota
	// lkRT: version 0 with the estimates padding reads.
	lkRT
	// lkPreempt: each kernel in its most preemptible version (reef's BE
	// streams, Model.PreemptVersions).
	lkPreempt
)

// run launches kernels [j.pos, to) of l's job (the first from its saved
// block and version) on l with the launches of kind k and starts a waiter.
func (s *Scheduler) run(l *lane, to int, k launchKind) {
	if s.logSegs {
		s.segs = append(s.segs, segEv{l.job, l.id, l.job.pos, to})
	}
	s.push(l, to, k)
	l.busy = true
}

// push launches the segment without a waiter (run; tests). Until the
// job's first kernel has started, the stream records when it does.
func (s *Scheduler) push(l *lane, to int, kind launchKind) {
	j := l.job
	m := j.Model
	l.from, l.ver, l.blk, l.end, l.to, l.kind = j.pos, j.posVer, j.posBlk, j.posEnd, to, kind
	if j.posBlk == 0 && j.posEnd == 0 && j.posVer == 0 && kind == lkPreempt && j.pos < len(m.prVer) {
		l.ver = m.prVer[j.pos]
	}
	l.preempted = false
	l.ds.push(l, to, kind)
}

// wake writes l's drain notification, as a draining unit does.
func (l *lane) wake() {
	var one [8]byte
	one[0] = 1
	l.efd.Write(one[:])
}

// wait is lane l's waiter, one goroutine per lane for the scheduler's
// life: it parks in Go's poller on the lane's drain notification and,
// each time a segment has completed or drained after preemption, lets the
// policy act. Launching a segment starts no goroutine and wakes none (on
// a machine with as many units as cores, a woken thread takes its core
// from a unit, in the middle of a preemption).
func (s *Scheduler) wait(l *lane) {
	defer s.wg.Done()
	for s.waitSeg(l) {
	}
}

// waitSeg waits for l's next drain notification and hands the segment to
// the policy; false when the scheduler has closed.
func (s *Scheduler) waitSeg(l *lane) bool {
	var b [8]byte
	if _, err := l.efd.Read(b[:]); err != nil {
		panic(fmt.Sprintf("sched: lane %d notification: %v", l.id, err))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if !l.busy {
		// a notification without a segment (Close wakes idle waiters;
		// a segment that drained twice): nothing to hand over
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	preempted, segErr := l.ds.sync() // drained: returns at once
	s.mu.Lock()
	l.busy = false
	if s.closed {
		s.mu.Unlock()
		return false
	}
	j := l.job
	if segErr != nil {
		// the device failed the segment: the job ends with the error
		j.Err = segErr
		l.to, preempted = len(j.Model.prog.Kernels), false
	}
	if mk := l.ds.markNs(); mk != 0 {
		if j.KernelStart == 0 {
			j.KernelStart = mk
		}
		if j.idleAt != 0 {
			// the first kernel after a restore started: the gap since the
			// job's units went idle
			j.RestoreGapNs += mk - j.idleAt
			j.idleAt = 0
		}
	}
	if !preempted {
		j.resumeAt(l.to, 0, 0, 0)
		j.KernelEnd = l.ds.drainNs()
	}
	s.pol.segDone(l, preempted)
	fire := s.takeFire()
	s.mu.Unlock()
	complete(fire)
	return true
}

// preempt resets l's host queue and sets its flag; the waiter reports the
// drain. Returns the call's time.
func (s *Scheduler) preempt(l *lane) int64 {
	l.preempted = true
	return l.ds.preempt()
}

// preemptLanes preempts every lane of ls, as preempt does each; segment
// lanes whose instances can be preempted together (libml.PreemptBatcher:
// on a GPU, one wait for the device instead of one per lane) are. Returns
// the first call's time.
func (s *Scheduler) preemptLanes(ls []*lane) int64 {
	for _, l := range ls {
		l.preempted = true
	}
	t, ok, scratch := preemptSegments(ls, s.preScratch)
	s.preScratch = scratch
	if ok {
		return t
	}
	for i, l := range ls {
		if ti := l.ds.preempt(); i == 0 {
			t = ti
		}
	}
	return t
}

// restorePoint moves l's job to where it restarts after a preemption
// (REEF §4.4): the interrupted kernel if it is idempotent, else the first
// kernel of its minimal idempotent group.
func (s *Scheduler) restorePoint(l *lane) {
	j := l.job
	m := j.Model
	idx := int(l.ds.execIndex())
	j.idleAt = l.ds.idleNs()
	if j.idleAt == 0 {
		j.idleAt = l.ds.drainNs()
	}
	if debugRestore != nil {
		debugRestore(m, idx, l)
	}
	l.ds.restore()
	j.Preemptions++
	s.stats.Restores++
	// block-level restore: the launch the flag evicted, with the blocks of
	// it that ran to their end
	if ev, base, grid, f, e := l.ds.evicted(); ev >= int64(l.from) && ev < int64(len(m.prog.Kernels)) {
		k := int(ev)
		switch {
		case idx < k && (idx == k-1 || idx < l.from):
			// no block of it passed its prologue, every earlier launch of
			// the segment completed: continue with it, as launched
			j.resumeAt(k, l.launchVer(m, k), base, base+grid)
			s.stats.BlockRestores++
			return
		case idx == k && m.idem[k] == k:
			// an idempotent kernel in progress: from its first block that
			// did not run to its end (the blocks after it run again)
			if f >= grid {
				j.resumeAt(k+1, 0, 0, 0)
			} else {
				// blocks from e on ran to their end as well (claims
				// come from both ends)
				j.resumeAt(k, l.launchVer(m, k), base+f, base+e)
			}
			s.stats.BlockRestores++
			return
		}
	}
	if idx < l.from || idx >= len(m.prog.Kernels) {
		// nothing of the segment started: keep the position
		return
	}
	e := m.idem[idx]
	if e == idx && idx == l.from {
		// the first kernel again, from the block it started at
		j.resumeAt(l.from, l.ver, l.blk, l.end)
	} else {
		j.resumeAt(e, 0, 0, 0)
	}
	if j.pos == 0 && j.posBlk == 0 {
		// a restart from the top: the arena may have reused the input's
		// memory, so copy (or gather) the input in again
		if err := j.inst.setInput(j); err != nil && j.Err == nil {
			j.Err = err
		}
	}
	// the kernels completed before the interrupted one are run again
	var re float64
	for k := e; k < idx; k++ {
		re += m.kernNs(k)
	}
	j.ReexecNs += re
	s.stats.ReexecNs += re
}

// finish completes l's job: the output is copied out, the instance freed
// and the job's completion queued.
func (s *Scheduler) finish(j *Job) {
	j.Finished = Now()
	if j.inst != nil {
		if j.Out != nil && j.inst.outputOnHost() {
			copy(j.Out, j.inst.output())
		}
		j.Model.releaseInstance(j.inst)
		j.inst = nil
	}
	s.stats.Jobs[j.Class]++
	s.fire = append(s.fire, j)
}

// debugPreempt, when set, sees every preemption's first preempt call
// (Now clock) and its idle and RT-start times after it (probes).
var debugPreempt func(t0, idle, rtStart int64)

// debugRestore, when set, sees every restore (probes).
var debugRestore func(m *Model, idx int, l *lane)

// preemptRec measures one RT-mode entry's preemption latency.
type preemptRec struct {
	t0      int64 // first preempt call
	waiting int   // preempted lanes not drained yet
	drain   int64 // latest drain
	rtStart int64 // the RT job's first kernel start (0 = unknown yet)
	rtDone  bool
}

func (s *Scheduler) finalize(r *preemptRec) {
	if r.waiting > 0 || !r.rtDone {
		return
	}
	end := max(r.drain, r.rtStart)
	if end <= 0 || r.rtStart == 0 {
		return
	}
	s.stats.Preemptions++
	if debugPreempt != nil {
		debugPreempt(r.t0, r.drain-r.t0, r.rtStart-r.t0)
	}
	if len(s.stats.PreemptNs) < 1<<20 {
		s.stats.PreemptNs = append(s.stats.PreemptNs, end-r.t0)
	}
	if s.cfg.OnPreempt != nil {
		s.cfg.OnPreempt(end - r.t0)
	}
}

// fifo is a queue of jobs.
type fifo struct{ q []*Job }

func (f *fifo) push(j *Job) { f.q = append(f.q, j) }
func (f *fifo) len() int    { return len(f.q) }
func (f *fifo) pop() *Job {
	if len(f.q) == 0 {
		return nil
	}
	j := f.q[0]
	f.q[0] = nil
	f.q = f.q[1:]
	return j
}
func (f *fifo) drain() []*Job {
	q := f.q
	f.q = nil
	return q
}

// drainQueues empties an RT queue and BE queues, RT jobs first.
func drainQueues(rtQ *fifo, beQ []fifo) []*Job {
	out := rtQ.drain()
	for i := range beQ {
		out = append(out, beQ[i].drain()...)
	}
	return out
}

// removeJob removes j from q, keeping the order.
func removeJob(q []*Job, j *Job) []*Job {
	for i, o := range q {
		if o == j {
			copy(q[i:], q[i+1:])
			q[len(q)-1] = nil
			return q[:len(q)-1]
		}
	}
	return q
}

// notRunning is q without running (the jobs of a single-lane policy that
// Close drops).
func notRunning(q []*Job, running *Job) []*Job {
	var out []*Job
	for _, j := range q {
		if j != running {
			out = append(out, j)
		}
	}
	return out
}
