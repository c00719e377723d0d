package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sluice/libml/graph"
)

// GPU DISB: REEF's DNN inference serving benchmark (REEF §6.2, Table 2)
// on cuda backend instances, without libml/sched: every client gets an
// instance of its model of its own (LinkModel: shared weights, its own
// arena, stream state and stream), and a policy decides when each
// instance's kernels run:
//
//   - rt-only: the RT clients alone, as under reef (the baseline RT
//     latencies are normalized to);
//   - seq: one job on the GPU at a time, RT jobs first, never preempted
//     (Clockwork-like);
//   - conc: every client's instance runs whenever it has a job, one
//     stream each, no priority (the multi-stream / Triton-like baseline);
//   - reef: RT jobs run one at a time, in arrival order, on
//     high-priority streams (RTPriority); an RT arrival preempts every
//     BE instance inside a run (Instance.Preempt: host queue reset, flag
//     in device memory, the window drains) and no BE run starts until
//     the RT queue is empty; then every preempted BE job restores from
//     the idempotent group of its last started kernel (Instance.Run's
//     resume). BE jobs run concurrently while no RT job is pending.
//   - reef-pad: reef with dynamic kernel padding (REEF §5): the RT jobs
//     run with Instance.RunPadded, whose kernels carry blocks of the
//     suspended BE jobs' next kernels on the SMs the RT kernel leaves
//     idle (PadSelect over the models' kernel profiles, DISBConfig.
//     Profiles or measured by RunDISB); the BE jobs then restore from
//     where padding left them (Instance.RunFrom).
//
// A job is SetInput + Run (until it is not preempted) + Output, and its
// output is compared with the model's unpreempted output for the same
// input, bit for bit: DISBRow.Wrong counts the jobs that differ.

// DISB policies.
const (
	PolicyRTOnly  = "rt-only"
	PolicyReef    = "reef"
	PolicyReefPad = "reef-pad"
	PolicySeq     = "seq"
	PolicyConc    = "conc"
)

// DISBPolicies lists the GPU DISB's policies in report order.
func DISBPolicies() []string {
	return []string{PolicyRTOnly, PolicyReef, PolicyReefPad, PolicySeq, PolicyConc}
}

// DISBRoles are REEF's five DISB models, by the names REEF gives them.
func DISBRoles() []string { return []string{"RNET", "VGG", "YOLO", "BERT", "GPT2"} }

// DISBModel is one DISB role played by a graph.
type DISBModel struct {
	// Role is REEF's name (DISBRoles); Name the model's own (a zoo name)
	// and Size a description of its size for the report.
	Role, Name, Size string
	Graph            *graph.Graph
}

// DISBClient is one client of a DISB workload.
type DISBClient struct {
	Name string
	// Role is the model it sends to (a DISBModel's Role).
	Role string
	// RT clients send open loop at Rate times the model's measured
	// maximum throughput, with uniform gaps (a random phase) or Poisson
	// ones; BE clients are closed loop (the next job when the last is
	// done).
	RT      bool
	Rate    float64
	Poisson bool
}

// DISBWorkload is one DISB workload.
type DISBWorkload struct {
	Name, Desc string
	Clients    []DISBClient
}

// DISBWorkloads returns REEF's Table 2 workloads A-E, in order.
func DISBWorkloads() []DISBWorkload {
	roles := DISBRoles()
	be1 := []DISBClient{{Name: "be0", Role: "RNET"}}
	var be5, rt5u, rt5p []DISBClient
	for i, r := range roles {
		be5 = append(be5, DISBClient{Name: fmt.Sprint("be", i), Role: r})
		rt5u = append(rt5u, DISBClient{Name: fmt.Sprint("rt", i), Role: r, RT: true, Rate: 0.1})
		rt5p = append(rt5p, DISBClient{Name: fmt.Sprint("rt", i), Role: r, RT: true, Rate: 0.1, Poisson: true})
	}
	rtVGG := func(rate float64) []DISBClient {
		return []DISBClient{{Name: "rt0", Role: "VGG", RT: true, Rate: rate}}
	}
	return []DISBWorkload{
		{"A", "1 RT VGG at 50% (uniform), 1 BE RNET", append(rtVGG(0.5), be1...)},
		{"B", "1 RT VGG at 100% (uniform), 1 BE RNET", append(rtVGG(1.0), be1...)},
		{"C", "1 RT VGG at 50% (uniform), 5 BE (all models)", append(rtVGG(0.5), be5...)},
		{"D", "5 RT (all models) at 10% each (uniform), 5 BE (all models)", append(rt5u, be5...)},
		{"E", "5 RT (all models) at 10% each (Poisson), 5 BE (all models)", append(rt5p, be5...)},
	}
}

// DefaultDISBAlpha is the default DISBConfig.Alpha, the CPU DISB's.
const DefaultDISBAlpha = 4

// DISBConfig configures RunDISB.
type DISBConfig struct {
	// Workloads and Policies to run (every workload under every policy).
	Workloads []DISBWorkload
	Policies  []string
	// Duration is the measurement window of each (workload, policy) run,
	// after Warmup.
	Duration, Warmup time.Duration
	// Calibrate is how long each model's maximum throughput is measured
	// (alone, closed loop, one job at a time); at least 5 jobs run.
	Calibrate time.Duration
	// RestoreJobs is the number of jobs per model of the restore-overhead
	// measurement (every other job preempted once at a random moment and
	// restored at once); 0 skips it.
	RestoreJobs int
	// Alpha is the latency target of the violation rate (SPLIT §2): a
	// job violates it when its latency exceeds Alpha times its model's
	// job time alone (0: DefaultDISBAlpha).
	Alpha float64
	// Seed picks the inputs, the arrival phases and the Poisson gaps.
	Seed uint64
	// Profiles holds the models' kernel profiles at batch 1 for
	// reef-pad, by role (ModelProfile.Model); a model without one is
	// profiled by RunDISB (Instance.ProfileKernels).
	Profiles *Profile
	// Command is recorded in the report.
	Command string
	// Logf, when set, gets progress lines.
	Logf func(format string, args ...any)
	// trace keeps every run's spans in the rows (tests).
	trace bool
}

// DISBReport is the result of RunDISB.
type DISBReport struct {
	// Device names the GPU (set by the caller; RunDISB leaves it empty).
	Device   string
	Command  string
	SMs      int
	Window   int
	Alpha    float64
	Duration string
	Warmup   string
	Models   []DISBModelRow
	Rows     []*DISBRow
	Restore  []DISBRestoreRow
}

// DISBModelRow describes a model: its kernels (launches per job), weights,
// and its job time and maximum throughput alone.
type DISBModelRow struct {
	Role, Name, Size string
	Kernels          int
	WeightMiB        float64
	AloneMs          float64
	AloneP99Ms       float64
	MaxPerSec        float64
	// PadProfile says where reef-pad's kernel profile of the model came
	// from ("given", or "measured" and its timing); empty without reef-pad.
	PadProfile string `json:",omitempty"`
}

// DISBRow is one (workload, policy) run.
type DISBRow struct {
	Workload, Policy string
	// RT latency (scheduled arrival to output copied back) of the RT jobs
	// finished inside the window, and its ratios to rt-only's.
	RTMeanMs, RTP50Ms, RTP99Ms float64
	RTMeanNorm, RTP99Norm      float64
	RTDone, RTArrived          int
	// RTJitterMs is the standard deviation of the RT latencies.
	RTJitterMs float64
	// ViolRate is the share of jobs (RT and BE) inside the window whose
	// latency exceeded Alpha times their model's job time alone (a BE
	// job's latency runs from its submission, closed loop).
	ViolRate float64
	// Thr is REEF's normalized throughput: the sum over clients of jobs/s
	// over the model's maximum jobs/s; ThrNorm is Thr over seq's.
	Thr, ThrNorm         float64
	JobsPerSec, BEPerSec float64
	// Preemptions counts BE runs that came back preempted. PreemptN is
	// the number of RT arrivals that preempted running BE instances and
	// PreemptP50Us.. their preemption latency: host time from the first
	// Preempt call until every preempted instance's run had drained (its
	// Run returned).
	Preemptions                              int
	PreemptN                                 int
	PreemptP50Us, PreemptP99Us, PreemptMaxUs float64
	// RelaunchPerPreempt is the kernels BE jobs launched beyond their
	// plan (restores re-running an idempotent group, and kernels that
	// exited in their prologue) per preemption; ReexecShare those kernels
	// over all BE kernel launches.
	RelaunchPerPreempt float64
	ReexecShare        float64
	// Wrong counts jobs whose output differed from the model's
	// unpreempted output (must be 0).
	Wrong int
	// reef-pad: the RT kernels of RT jobs finished inside the window
	// (PadRTKernels), those launched padded (PadLaunches), the BE kernels
	// they carried, those of them in a version other than the default
	// (PadBEVersioned) and the BE blocks they ran; PadGain is Thr over
	// reef's in the same workload.
	PadRTKernels, PadLaunches int64
	PadBEKernels, PadBEBlocks int64
	PadBEVersioned            int64
	PadGain                   float64
	Clients                   []DISBClientRow
	spans                     []disbSpan
}

// DISBClientRow is one client's share of a run.
type DISBClientRow struct {
	Name, Role     string
	RT             bool
	Done, Arrived  int
	Preemptions    int
	NormThr        float64
	MeanMs, P99Ms  float64
	LaunchesPerJob float64
	PlannedPerJob  int
	WrongJobs      int
	MaxWrongDiff   float64 `json:",omitempty"`
}

// DISBRestoreRow is the restore-overhead measurement of one model (REEF
// §6.4): its jobs alone, every other one preempted once at a random
// moment of its run and restored at once.
type DISBRestoreRow struct {
	Role                string
	Jobs, Preempted     int
	BaseMs, PreemptedMs float64
	OverheadMs          float64
	OverheadPct         float64
	DrainP50Us          float64
	RelaunchPerPreempt  float64
}

// disbSpan is one run of kernels (a Run call) of a job: what the tests
// check the policies' ordering with.
type disbSpan struct {
	client    string
	rt        bool
	start     int64 // ns since the run's base
	end       int64
	preempted bool
}

// disbModel is a loaded model: its first instance, its plan size and its
// calibration.
type disbModel struct {
	spec    DISBModel
	base    *Instance
	planned int
	maxThr  float64
	aloneNs float64
	// wants caches the unpreempted outputs per input seed.
	mu    sync.Mutex
	wants map[uint64][]float32
}

// disbInput returns the deterministic N(0,1) input of a client.
func disbInput(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 0xd15b))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// want returns the model's unpreempted output for the input of seed.
func (m *disbModel) want(ctx context.Context, seed uint64) ([]float32, []float32, error) {
	in := disbInput(seed, m.base.InputSize())
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.wants[seed]; ok {
		return in, w, nil
	}
	out := make([]float32, m.base.OutputSize())
	if err := m.base.InferBatch(ctx, 1, in, out); err != nil {
		return nil, nil, err
	}
	m.wants[seed] = out
	return in, out, nil
}

// RunDISB loads the models on b (initialized), measures each one's job
// time and maximum throughput alone, runs every workload under every
// policy and, when cfg.RestoreJobs > 0, measures restore overhead. Every
// client's jobs are checked against the unpreempted output. Every
// workload's clients must name roles in models.
func RunDISB(ctx context.Context, b *Backend, models []DISBModel, cfg DISBConfig) (*DISBReport, error) {
	if cfg.Duration <= 0 {
		return nil, errors.New("cuda: DISB: no duration")
	}
	for _, p := range cfg.Policies {
		if !slices.Contains(DISBPolicies(), p) {
			return nil, fmt.Errorf("cuda: DISB: unknown policy %q (have %v)", p, DISBPolicies())
		}
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	byRole := map[string]*disbModel{}
	defer func() {
		for _, m := range byRole {
			m.base.Close()
		}
	}()
	needed := map[string]bool{}
	for _, w := range cfg.Workloads {
		for _, c := range w.Clients {
			needed[c.Role] = true
		}
	}
	for r := range needed {
		if !slices.ContainsFunc(models, func(m DISBModel) bool { return m.Role == r }) {
			return nil, fmt.Errorf("cuda: DISB: no model for role %s", r)
		}
	}
	if cfg.Alpha <= 0 {
		cfg.Alpha = DefaultDISBAlpha
	}
	rep := &DISBReport{Command: cfg.Command, SMs: b.SMs(), Window: b.Window(), Alpha: cfg.Alpha,
		Duration: cfg.Duration.String(), Warmup: cfg.Warmup.String()}
	for _, spec := range models {
		if !needed[spec.Role] {
			continue
		}
		if _, dup := byRole[spec.Role]; dup {
			return nil, fmt.Errorf("cuda: DISB: role %s given twice", spec.Role)
		}
		t0 := time.Now()
		inst, err := b.LoadModel(ctx, spec.Role, spec.Graph)
		if err != nil {
			return nil, fmt.Errorf("cuda: DISB: load %s (%s): %w", spec.Role, spec.Name, err)
		}
		m := &disbModel{spec: spec, base: inst.(*Instance), wants: map[uint64][]float32{}}
		byRole[spec.Role] = m
		if err := b.ConfigureBatch(inst, 1); err != nil {
			return nil, fmt.Errorf("cuda: DISB: configure %s: %w", spec.Role, err)
		}
		ls, err := m.base.Launches(1)
		if err != nil {
			return nil, fmt.Errorf("cuda: DISB: %s: %w", spec.Role, err)
		}
		for _, l := range ls {
			if l.Grid > 0 {
				m.planned++
			}
		}
		p50, p99, thr, err := calibrate(ctx, m, cfg.Calibrate, cfg.Seed)
		if err != nil {
			return nil, fmt.Errorf("cuda: DISB: calibrate %s: %w", spec.Role, err)
		}
		m.maxThr, m.aloneNs = thr, p50
		src := ""
		if slices.Contains(cfg.Policies, PolicyReefPad) {
			if src, err = disbProfile(m, cfg.Profiles); err != nil {
				return nil, fmt.Errorf("cuda: DISB: kernel profile of %s: %w", spec.Role, err)
			}
		}
		rep.Models = append(rep.Models, DISBModelRow{Role: spec.Role, Name: spec.Name, Size: spec.Size,
			Kernels: m.planned, WeightMiB: float64(m.base.WeightBytes()) / (1 << 20),
			AloneMs: p50 / 1e6, AloneP99Ms: p99 / 1e6, MaxPerSec: thr, PadProfile: src})
		logf("%s (%s): %d kernels, loaded in %v, alone p50 %.3f ms p99 %.3f ms, max %.1f jobs/s",
			spec.Role, spec.Name, m.planned, time.Since(t0).Round(time.Millisecond), p50/1e6, p99/1e6, thr)
	}
	for _, w := range cfg.Workloads {
		var rows []*DISBRow
		for _, pol := range cfg.Policies {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("cuda: DISB: %w", err)
			}
			row, err := runDISB(ctx, b, byRole, w, pol, &cfg)
			if err != nil {
				return nil, fmt.Errorf("cuda: DISB %s %s: %w", w.Name, pol, err)
			}
			logf("DISB %s %-7s RT mean %.3f ms p99 %.3f ms (%d/%d)  thr %.3f  preempt p50 %.1f us p99 %.1f us (n %d)  wrong %d",
				w.Name, pol, row.RTMeanMs, row.RTP99Ms, row.RTDone, row.RTArrived, row.Thr,
				row.PreemptP50Us, row.PreemptP99Us, row.PreemptN, row.Wrong)
			rows = append(rows, row)
		}
		normalize(rows)
		rep.Rows = append(rep.Rows, rows...)
	}
	if cfg.RestoreJobs > 0 {
		for _, spec := range models {
			m := byRole[spec.Role]
			if m == nil {
				continue
			}
			rr, err := measureRestore(ctx, b, m, cfg.RestoreJobs, cfg.Seed)
			if err != nil {
				return nil, fmt.Errorf("cuda: DISB: restore %s: %w", spec.Role, err)
			}
			logf("restore %s: base %.3f ms, preempted once %.3f ms (%+.1f%%), drain p50 %.1f us",
				rr.Role, rr.BaseMs, rr.PreemptedMs, rr.OverheadPct, rr.DrainP50Us)
			rep.Restore = append(rep.Restore, rr)
		}
	}
	return rep, nil
}

// normalize fills the rows' ratios to rt-only (RT latency) and seq
// (throughput) of the same workload.
func normalize(rows []*DISBRow) {
	var rto, seq, reef *DISBRow
	for _, r := range rows {
		switch r.Policy {
		case PolicyRTOnly:
			rto = r
		case PolicySeq:
			seq = r
		case PolicyReef:
			reef = r
		}
	}
	for _, r := range rows {
		if r.Policy == PolicyReefPad && reef != nil && reef.Thr > 0 {
			r.PadGain = r.Thr / reef.Thr
		}
	}
	for _, r := range rows {
		if rto != nil && rto.RTMeanMs > 0 && r.RTDone > 0 {
			r.RTMeanNorm = r.RTMeanMs / rto.RTMeanMs
			r.RTP99Norm = r.RTP99Ms / rto.RTP99Ms
		}
		if seq != nil && seq.Thr > 0 {
			r.ThrNorm = r.Thr / seq.Thr
		}
	}
}

// calibrate runs m's jobs alone, closed loop, for d (at least 5 jobs,
// after 2 warm-up jobs): job time p50 and p99 (ns) and jobs/s.
func calibrate(ctx context.Context, m *disbModel, d time.Duration, seed uint64) (p50, p99, thr float64, err error) {
	in, want, err := m.want(ctx, seed)
	if err != nil {
		return 0, 0, 0, err
	}
	out := make([]float32, len(want))
	var lat []float64
	for k := 0; k < 2; k++ {
		if err := m.base.InferBatch(ctx, 1, in, out); err != nil {
			return 0, 0, 0, err
		}
	}
	t0 := time.Now()
	for time.Since(t0) < d || len(lat) < 5 {
		t := time.Now()
		if err := m.base.InferBatch(ctx, 1, in, out); err != nil {
			return 0, 0, 0, err
		}
		lat = append(lat, float64(time.Since(t).Nanoseconds()))
	}
	el := time.Since(t0).Seconds()
	if !slices.Equal(out, want) {
		return 0, 0, 0, errors.New("repeated runs of one input differ")
	}
	slices.Sort(lat)
	return pctF(lat, 50), pctF(lat, 99), float64(len(lat)) / el, nil
}

// pctF is the p-th percentile of sorted v (nearest rank).
func pctF(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(v)))) - 1
	return v[min(max(k, 0), len(v)-1)]
}

// disbJob is one RT job of a client.
type disbJob struct {
	arrival int64
}

// dclient is a client during a run: its instance and its results.
type dclient struct {
	c    DISBClient
	m    *disbModel
	inst *Instance
	in   []float32
	want []float32
	out  []float32
	// inRun is set while the client's goroutine is inside Run (reef).
	inRun atomic.Bool
	// epoch is the RT arrival whose preemption this client's current run
	// is draining (reef; guarded by the reef scheduler's mutex).
	epoch *disbEpoch
	// reef-pad: pj is a BE client's job as padding sees it (its resume
	// point); padJobs gives an RT client's runs the suspended BE jobs.
	pj      *PadJob
	padJobs func() []*PadJob
	pad     PadStats // RT jobs finished inside the window

	mu       sync.Mutex
	done     int
	arrived  int
	preempts int
	lat      []float64
	viol     int
	lastEnd  int64 // the end of its last job (the next BE job's submission)
	launches int64
	wrong    int
	worst    float64
}

// disbRun is the state of one (workload, policy) run.
type disbRun struct {
	base         time.Time
	winLo, winHi int64
	stop         atomic.Bool
	trace        bool
	alpha        float64

	mu     sync.Mutex
	spans  []disbSpan
	drains []float64
	err    error
}

func (r *disbRun) now() int64 { return time.Since(r.base).Nanoseconds() }

func (r *disbRun) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.stop.Store(true)
}

func (r *disbRun) span(c *dclient, start, end int64, preempted bool) {
	if !r.trace {
		return
	}
	r.mu.Lock()
	r.spans = append(r.spans, disbSpan{client: c.c.Name, rt: c.c.RT, start: start, end: end, preempted: preempted})
	r.mu.Unlock()
}

// runJob runs one job of c to the end: input, runs (restoring after
// preemptions; gate, when set, is called before every run and after it
// with the outcome), output and its check. arrival is the job's arrival
// (an RT job's scheduled one; -1: now, a closed-loop BE job's). A job
// that ends inside the window counts, with its latency (end - arrival).
func (r *disbRun) runJob(c *dclient, gate func(enter bool, preempted bool) bool, arrival int64) error {
	if arrival < 0 {
		arrival = r.now()
	}
	if err := c.inst.SetInput(1, c.in); err != nil {
		return err
	}
	s0 := c.inst.Stats()
	var at ResumePoint
	var pst PadStats
	preempts := 0
	if c.pj != nil {
		c.pj.At = at
	}
	for {
		if gate != nil && !gate(true, false) {
			return nil // stopped while waiting
		}
		if c.pj != nil {
			at = c.pj.At // padding may have moved it while the job waited
		}
		t0 := r.now()
		var pre bool
		var resume int
		var err error
		if c.padJobs != nil {
			var st PadStats
			pre, resume, st, err = c.inst.RunPadded(1, at.Kernel, c.padJobs)
			pst.Kernels += st.Kernels
			pst.Padded += st.Padded
			pst.BEKernels += st.BEKernels
			pst.BEBlocks += st.BEBlocks
			pst.BEVersioned += st.BEVersioned
		} else {
			pre, resume, err = c.inst.RunFrom(1, at)
		}
		t1 := r.now()
		if pre && c.pj != nil {
			c.pj.At = ResumePoint{Kernel: resume} // before the gate lends it out
		}
		if gate != nil {
			gate(false, pre)
		}
		if err != nil {
			return err
		}
		r.span(c, t0, t1, pre)
		if !pre {
			break
		}
		preempts++
		at = ResumePoint{Kernel: resume}
	}
	if err := c.inst.Output(1, c.out); err != nil {
		return err
	}
	end := r.now()
	c.lastEnd = end
	lat := float64(end - arrival)
	s1 := c.inst.Stats()
	wrong, worst := false, 0.0
	for k := range c.want {
		if c.out[k] != c.want[k] {
			wrong = true
			worst = max(worst, math.Abs(float64(c.out[k])-float64(c.want[k])))
		}
	}
	if end >= r.winLo && end <= r.winHi {
		c.mu.Lock()
		c.done++
		c.preempts += preempts
		c.launches += s1.Launches - s0.Launches
		c.pad.Kernels += pst.Kernels
		c.pad.Padded += pst.Padded
		c.pad.BEKernels += pst.BEKernels
		c.pad.BEBlocks += pst.BEBlocks
		c.pad.BEVersioned += pst.BEVersioned
		if c.c.RT {
			c.lat = append(c.lat, lat)
		}
		if lat > r.alpha*c.m.aloneNs {
			c.viol++
		}
		if wrong {
			c.wrong++
			c.worst = max(c.worst, worst)
		}
		c.mu.Unlock()
	} else if wrong {
		c.mu.Lock()
		c.wrong++
		c.worst = max(c.worst, worst)
		c.mu.Unlock()
	}
	return nil
}

// arrivals returns an RT client's arrival times (ns since base) from
// start to the window's end.
func (r *disbRun) arrivals(c *dclient, start int64, rng *rand.Rand) []int64 {
	rate := c.c.Rate * c.m.maxThr
	if rate <= 0 {
		return nil
	}
	gap := 1e9 / rate
	var out []int64
	t := float64(start) + gap*rng.Float64()
	for t < float64(r.winHi) {
		out = append(out, int64(t))
		if c.c.Poisson {
			t += rng.ExpFloat64() * gap
		} else {
			t += gap
		}
	}
	return out
}

// sleepUntil waits until the run's clock reaches t or the run stops:
// a sleep to about 200 µs before t, then yielding.
func (r *disbRun) sleepUntil(t int64) bool {
	for {
		if r.stop.Load() {
			return false
		}
		d := t - r.now()
		if d <= 0 {
			return true
		}
		if d > int64(200*time.Microsecond) {
			time.Sleep(time.Duration(min(d-int64(150*time.Microsecond), int64(20*time.Millisecond))))
		} else {
			runtime.Gosched()
		}
	}
}

// runDISB runs one workload under one policy.
func runDISB(ctx context.Context, b *Backend, models map[string]*disbModel, w DISBWorkload, pol string, cfg *DISBConfig) (*DISBRow, error) {
	var clients []*dclient
	defer func() {
		for _, c := range clients {
			c.inst.Close()
		}
	}()
	for ci, c := range w.Clients {
		if pol == PolicyRTOnly && !c.RT {
			continue
		}
		m := models[c.Role]
		seed := cfg.Seed + uint64(ci)*7919
		in, want, err := m.want(ctx, seed)
		if err != nil {
			return nil, fmt.Errorf("%s: reference output: %w", c.Name, err)
		}
		li, err := b.LinkModel(ctx, m.base)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		inst := li.(*Instance)
		clients = append(clients, &dclient{c: c, m: m, inst: inst, in: in, want: want, out: make([]float32, len(want))})
		if err := b.ConfigureBatch(inst, 1); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		if c.RT && (pol == PolicyReef || pol == PolicyReefPad || pol == PolicyRTOnly) {
			if err := inst.SetPriority(RTPriority); err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
		}
	}
	r := &disbRun{base: time.Now(), trace: cfg.trace, alpha: cfg.Alpha}
	if r.alpha <= 0 {
		r.alpha = DefaultDISBAlpha
	}
	start := r.now() + int64(2*time.Millisecond)
	r.winLo = start + int64(cfg.Warmup)
	r.winHi = r.winLo + int64(cfg.Duration)
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(len(w.Name))*31+uint64(w.Name[0])))
	arr := map[*dclient][]int64{}
	for _, c := range clients {
		if c.c.RT {
			arr[c] = r.arrivals(c, start, rng)
			for _, t := range arr[c] {
				if t >= r.winLo && t <= r.winHi {
					c.arrived++
				}
			}
		}
	}
	var wg sync.WaitGroup
	switch pol {
	case PolicyConc:
		runConc(r, clients, arr, &wg)
	case PolicySeq:
		runSeq(r, clients, arr, &wg)
	default:
		runReef(r, clients, arr, &wg, pol == PolicyReefPad)
	}
	// stop at the window's end
	for !r.stop.Load() && r.now() < r.winHi {
		if ctx.Err() != nil {
			r.fail(ctx.Err())
			break
		}
		time.Sleep(time.Duration(min(r.winHi-r.now(), int64(5*time.Millisecond))))
	}
	r.stop.Store(true)
	wg.Wait()
	if r.err != nil {
		return nil, r.err
	}
	return r.row(w, pol, clients, cfg), nil
}

// runConc: every client on its own, one stream each, no priority.
func runConc(r *disbRun, clients []*dclient, arr map[*dclient][]int64, wg *sync.WaitGroup) {
	for _, c := range clients {
		wg.Add(1)
		if !c.c.RT {
			go func() {
				defer wg.Done()
				for !r.stop.Load() {
					if err := r.runJob(c, nil, -1); err != nil {
						r.fail(fmt.Errorf("%s: %w", c.c.Name, err))
						return
					}
				}
			}()
			continue
		}
		// an RT client serves its own arrivals in order on its stream
		q := make(chan *disbJob, len(arr[c])+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(q)
			for _, t := range arr[c] {
				if !r.sleepUntil(t) {
					return
				}
				q <- &disbJob{arrival: t}
			}
		}()
		go func() {
			defer wg.Done()
			for j := range q {
				if r.stop.Load() {
					continue
				}
				if err := r.runJob(c, nil, j.arrival); err != nil {
					r.fail(fmt.Errorf("%s: %w", c.c.Name, err))
					return
				}
			}
		}()
	}
}

// rtJob is a queued RT job.
type rtJob struct {
	c *dclient
	j *disbJob
}

// feedRT starts the RT clients' open-loop arrival goroutines; submit
// queues a job.
func feedRT(r *disbRun, clients []*dclient, arr map[*dclient][]int64, wg *sync.WaitGroup, submit func(rtJob)) {
	for _, c := range clients {
		if !c.c.RT {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, t := range arr[c] {
				if !r.sleepUntil(t) {
					return
				}
				submit(rtJob{c: c, j: &disbJob{arrival: t}})
			}
		}()
	}
}

// wakeAtStop starts a goroutine that, once the run stops, wakes
// cond's waiters (under cond.L) so that they see it.
func wakeAtStop(r *disbRun, cond *sync.Cond, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !r.stop.Load() {
			time.Sleep(time.Millisecond)
		}
		cond.L.Lock()
		cond.Broadcast()
		cond.L.Unlock()
	}()
}

// runSeq: one job at a time, RT first, BE clients round robin.
func runSeq(r *disbRun, clients []*dclient, arr map[*dclient][]int64, wg *sync.WaitGroup) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var rtq []rtJob
	var be []*dclient
	for _, c := range clients {
		if !c.c.RT {
			be = append(be, c)
		}
	}
	feedRT(r, clients, arr, wg, func(j rtJob) {
		mu.Lock()
		rtq = append(rtq, j)
		cond.Broadcast()
		mu.Unlock()
	})
	wakeAtStop(r, cond, wg) // the dispatcher
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := 0
		for {
			mu.Lock()
			for !r.stop.Load() && len(rtq) == 0 && len(be) == 0 {
				cond.Wait()
			}
			if r.stop.Load() {
				mu.Unlock()
				return
			}
			var job rtJob
			if len(rtq) > 0 {
				job, rtq = rtq[0], rtq[1:]
			}
			mu.Unlock()
			c := job.c
			if c == nil {
				c = be[next%len(be)]
				next++
			}
			// a BE job was submitted when its client's last one ended
			arrival := c.lastEnd
			if job.j != nil {
				arrival = job.j.arrival
			} else if arrival == 0 {
				arrival = -1
			}
			if err := r.runJob(c, nil, arrival); err != nil {
				r.fail(fmt.Errorf("%s: %w", c.c.Name, err))
				return
			}
		}
	}()
}

// disbEpoch is one RT arrival's preemption of the BE instances running
// then: the drain ends when the last of them returns from Run.
type disbEpoch struct {
	t0      int64
	pending int
}

// runReef: RT jobs in arrival order on high-priority streams; an RT
// arrival preempts the BE instances inside a run and holds new BE runs
// until the RT queue is empty; preempted BE jobs then restore. With pad
// (reef-pad) the RT jobs' kernels are padded with the suspended BE jobs'
// blocks (padLender).
func runReef(r *disbRun, clients []*dclient, arr map[*dclient][]int64, wg *sync.WaitGroup, pad bool) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var rtq []rtJob
	rtMode := false
	active := map[*dclient]bool{}
	var lend *padLender
	if pad {
		lend = newPadLender(&mu, clients)
	}
	feedRT(r, clients, arr, wg, func(j rtJob) {
		mu.Lock()
		defer mu.Unlock()
		rtq = append(rtq, j)
		cond.Broadcast()
		if rtMode {
			return
		}
		rtMode = true
		if len(active) == 0 {
			return
		}
		ep := &disbEpoch{t0: r.now()}
		for c := range active {
			c.epoch = ep
			ep.pending++
			if err := preemptRun(c); err != nil {
				r.fail(fmt.Errorf("preempt %s: %w", c.c.Name, err))
				return
			}
		}
	})
	wakeAtStop(r, cond, wg) // the waiters
	// the RT dispatcher
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			mu.Lock()
			for !r.stop.Load() && len(rtq) == 0 {
				cond.Wait()
			}
			if r.stop.Load() {
				rtq, rtMode = nil, false
				cond.Broadcast()
				mu.Unlock()
				return
			}
			job := rtq[0]
			mu.Unlock()
			if err := r.runJob(job.c, nil, job.j.arrival); err != nil {
				r.fail(fmt.Errorf("%s: %w", job.c.c.Name, err))
				return
			}
			mu.Lock()
			rtq = rtq[1:]
			if len(rtq) == 0 {
				rtMode = false
				cond.Broadcast()
			}
			mu.Unlock()
		}
	}()
	// BE clients: closed loop, a run only while no RT job is pending
	for _, c := range clients {
		if c.c.RT {
			continue
		}
		gate := func(enter, preempted bool) bool {
			if !enter {
				// before the lock: an RT arrival holding it may be
				// waiting for this run to take its preemption
				c.inRun.Store(false)
			}
			mu.Lock()
			defer mu.Unlock()
			if !enter {
				delete(active, c)
				if lend != nil && preempted {
					lend.suspend(c)
				}
				if ep := c.epoch; ep != nil {
					c.epoch = nil
					if ep.pending--; ep.pending == 0 {
						r.mu.Lock()
						r.drains = append(r.drains, float64(r.now()-ep.t0))
						r.mu.Unlock()
					}
				}
				return true
			}
			for !r.stop.Load() && rtMode {
				cond.Wait()
			}
			if r.stop.Load() {
				return false
			}
			active[c] = true
			if lend != nil {
				lend.resume(c)
			}
			c.inRun.Store(true)
			return true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !r.stop.Load() {
				if err := r.runJob(c, gate, -1); err != nil {
					r.fail(fmt.Errorf("%s: %w", c.c.Name, err))
					return
				}
			}
		}()
	}
}

// preemptRun preempts the run c's goroutine is in or about to start: a
// BE goroutine marks itself inRun before calling Run, and Preempt does
// nothing until the run has started, so it is repeated until a run has
// taken the request or the goroutine has left Run.
func preemptRun(c *dclient) error {
	for c.inRun.Load() {
		taken, err := c.inst.preemptIfRunning()
		if err != nil || taken {
			return err
		}
		runtime.Gosched()
	}
	return nil
}

// preemptIfRunning is Preempt that tells whether a run was under way to
// take the request (or had taken one already).
func (i *Instance) preemptIfRunning() (bool, error) {
	i.pmu.Lock()
	defer i.pmu.Unlock()
	if !i.running {
		return false, nil
	}
	if i.req.Load() {
		return true, nil
	}
	i.req.Store(true)
	return true, i.b.setFlag(i.state)
}

// row summarizes a run.
func (r *disbRun) row(w DISBWorkload, pol string, clients []*dclient, cfg *DISBConfig) *DISBRow {
	row := &DISBRow{Workload: w.Name, Policy: pol, spans: r.spans}
	secs := cfg.Duration.Seconds()
	var rtLat []float64
	var beLaunch, bePlanned int64
	var jobs, viol int
	for _, c := range clients {
		c.mu.Lock()
		cr := DISBClientRow{Name: c.c.Name, Role: c.c.Role, RT: c.c.RT, Done: c.done, Arrived: c.arrived,
			Preemptions: c.preempts, PlannedPerJob: c.m.planned, WrongJobs: c.wrong, MaxWrongDiff: c.worst}
		if c.m.maxThr > 0 {
			cr.NormThr = float64(c.done) / secs / c.m.maxThr
		}
		if c.done > 0 {
			cr.LaunchesPerJob = float64(c.launches) / float64(c.done)
		}
		lat := slices.Clone(c.lat)
		slices.Sort(lat)
		if len(lat) > 0 {
			cr.MeanMs, cr.P99Ms = mean(lat)/1e6, pctF(lat, 99)/1e6
		}
		row.Thr += cr.NormThr
		jobs += c.done
		viol += c.viol
		row.JobsPerSec += float64(c.done) / secs
		row.Wrong += c.wrong
		row.PadRTKernels += c.pad.Kernels
		row.PadLaunches += c.pad.Padded
		row.PadBEKernels += c.pad.BEKernels
		row.PadBEBlocks += c.pad.BEBlocks
		row.PadBEVersioned += c.pad.BEVersioned
		if c.c.RT {
			rtLat = append(rtLat, c.lat...)
			row.RTDone += c.done
			row.RTArrived += c.arrived
		} else {
			row.BEPerSec += float64(c.done) / secs
			row.Preemptions += c.preempts
			beLaunch += c.launches
			bePlanned += int64(c.done * c.m.planned)
		}
		c.mu.Unlock()
		row.Clients = append(row.Clients, cr)
	}
	slices.Sort(rtLat)
	if len(rtLat) > 0 {
		row.RTMeanMs, row.RTP50Ms, row.RTP99Ms = mean(rtLat)/1e6, pctF(rtLat, 50)/1e6, pctF(rtLat, 99)/1e6
		m, v := mean(rtLat), 0.0
		for _, x := range rtLat {
			v += (x - m) * (x - m)
		}
		row.RTJitterMs = math.Sqrt(v/float64(len(rtLat))) / 1e6
	}
	if jobs > 0 {
		row.ViolRate = float64(viol) / float64(jobs)
	}
	d := slices.Clone(r.drains)
	slices.Sort(d)
	row.PreemptN = len(d)
	if len(d) > 0 {
		row.PreemptP50Us, row.PreemptP99Us, row.PreemptMaxUs = pctF(d, 50)/1e3, pctF(d, 99)/1e3, d[len(d)-1]/1e3
	}
	if extra := beLaunch - bePlanned; beLaunch > 0 && extra > 0 {
		row.ReexecShare = float64(extra) / float64(beLaunch)
		if row.Preemptions > 0 {
			row.RelaunchPerPreempt = float64(extra) / float64(row.Preemptions)
		}
	}
	return row
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// measureRestore runs jobs of m alone on a linked instance; every other
// job is preempted once, at a random moment of its run (uniform over the
// model's job time alone), and restored at once. The overhead is the
// median preempted job time over the median unpreempted one.
func measureRestore(ctx context.Context, b *Backend, m *disbModel, jobs int, seed uint64) (DISBRestoreRow, error) {
	rr := DISBRestoreRow{Role: m.spec.Role}
	li, err := b.LinkModel(ctx, m.base)
	if err != nil {
		return rr, err
	}
	inst := li.(*Instance)
	defer inst.Close()
	if err := b.ConfigureBatch(inst, 1); err != nil {
		return rr, err
	}
	in, want, err := m.want(ctx, seed)
	if err != nil {
		return rr, err
	}
	out := make([]float32, len(want))
	rng := rand.New(rand.NewPCG(seed, 0x4e5))
	var base, pre, drains []float64
	var extra int64
	for k := 0; k < jobs+1; k++ {
		preempt := k%2 == 1
		if err := inst.SetInput(1, in); err != nil {
			return rr, err
		}
		s0 := inst.Stats()
		var drainT0 atomic.Int64
		var perr error
		var wg sync.WaitGroup
		inRun := atomic.Bool{}
		inRun.Store(true)
		t0 := time.Now()
		if preempt {
			at := time.Duration(rng.Float64() * m.aloneNs)
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(at)
				for inRun.Load() {
					// stored first: the run may drain before
					// preemptIfRunning returns
					drainT0.Store(time.Since(t0).Nanoseconds())
					taken, err := inst.preemptIfRunning()
					if err != nil || taken {
						perr = err
						return
					}
					drainT0.Store(0)
					runtime.Gosched()
				}
			}()
		}
		start, preempted := 0, false
		for {
			p, resume, err := inst.Run(1, start)
			if err != nil {
				inRun.Store(false)
				wg.Wait()
				return rr, err
			}
			if !p {
				break
			}
			if !preempted {
				if d0 := drainT0.Load(); d0 > 0 {
					drains = append(drains, float64(time.Since(t0).Nanoseconds()-d0))
				}
			}
			preempted = true
			start = resume
		}
		inRun.Store(false)
		wg.Wait()
		if perr != nil {
			return rr, fmt.Errorf("preempt: %w", perr)
		}
		if err := inst.Output(1, out); err != nil {
			return rr, err
		}
		el := float64(time.Since(t0).Nanoseconds())
		if !slices.Equal(out, want) {
			return rr, fmt.Errorf("job %d (preempted %v): output differs from the unpreempted one", k, preempted)
		}
		if k == 0 {
			continue // warm-up
		}
		if preempted {
			pre = append(pre, el)
			rr.Preempted++
			extra += inst.Stats().Launches - s0.Launches - int64(m.planned)
		} else {
			base = append(base, el)
		}
		rr.Jobs++
	}
	slices.Sort(base)
	slices.Sort(pre)
	slices.Sort(drains)
	rr.BaseMs = pctF(base, 50) / 1e6
	rr.PreemptedMs = pctF(pre, 50) / 1e6
	if rr.Preempted > 0 && rr.BaseMs > 0 {
		rr.OverheadMs = rr.PreemptedMs - rr.BaseMs
		rr.OverheadPct = 100 * rr.OverheadMs / rr.BaseMs
		rr.RelaunchPerPreempt = float64(extra) / float64(rr.Preempted)
	}
	rr.DrainP50Us = pctF(drains, 50) / 1e3
	return rr, nil
}
