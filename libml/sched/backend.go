package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
)

// Backend runs models through a Scheduler: it is the libml.Backend the
// appliance uses for IFs under a scheduling policy. Every InferBatch is
// one scheduler job of the instance's class (SetRealTime), so a real-time
// IF's batches preempt best-effort IFs' batches under reef, wait for them
// under seq, and so on.
//
// A model is compiled at batch buckets (1, 2, 4, ... and the configured
// maximum), all over one copy of its weights; a batch of n requests runs
// in the smallest bucket that holds it, with the unused rows ignored.
// Each bucket is profiled when it is configured (Config.ProfileRuns).
type Backend struct {
	cfg     Config
	runs    int
	mu      sync.Mutex
	s       *Scheduler
	groups  int
	nextBEQ int
}

// BackendOptions configure NewBackend.
type BackendOptions struct {
	// Config is the scheduler's configuration; Units and PinUnits of 0
	// take BackendConfig's at Init.
	Config Config
	// ProfileRuns is how often each kernel is timed, in every version,
	// when a bucket is configured (default 1).
	ProfileRuns int
}

// NewBackend makes a scheduler backend; Init starts the scheduler.
func NewBackend(opt BackendOptions) *Backend {
	if opt.ProfileRuns <= 0 {
		opt.ProfileRuns = 1
	}
	return &Backend{cfg: opt.Config, runs: opt.ProfileRuns}
}

// Name is "sched/<policy>" on the cpu, "sched/<policy>/<device>" on a
// segment device ("sched/reef/cuda").
func (b *Backend) Name() string {
	p := b.cfg.Policy
	if p == "" {
		p = PolicyREEF
	}
	if b.cfg.Segments != nil {
		return "sched/" + string(p) + "/" + b.cfg.Segments.Name()
	}
	return "sched/" + string(p)
}

// Init starts the scheduler and its units.
func (b *Backend) Init(_ context.Context, bc libml.BackendConfig) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.s != nil {
		return errors.New("sched backend: already initialised")
	}
	cfg := b.cfg
	if cfg.Units == 0 {
		cfg.Units = bc.Units
	}
	cfg.PinUnits = cfg.PinUnits || bc.PinUnits
	if cfg.ModelMemoryLimit == 0 {
		cfg.ModelMemoryLimit = bc.ModelMemoryLimit
	}
	s, err := New(cfg)
	if err != nil {
		return fmt.Errorf("sched backend: %w", err)
	}
	b.s, b.cfg = s, s.Config()
	return nil
}

// Deinit stops the scheduler; every instance must be closed first.
func (b *Backend) Deinit() error {
	b.mu.Lock()
	s := b.s
	b.s = nil
	groups := b.groups
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	if groups > 0 {
		// the models are freed by Close all the same
		_ = s.Close()
		return fmt.Errorf("sched backend: deinit with %d models still loaded", groups)
	}
	return s.Close()
}

// Loaded is the number of models loaded (each with its buckets) and not
// yet unloaded by the Close of their last instance.
func (b *Backend) Loaded() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.groups
}

// Scheduler is the running scheduler (nil before Init).
func (b *Backend) Scheduler() *Scheduler {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s
}

// SchedStats returns the scheduler's counters (libml.Scheduling).
func (b *Backend) SchedStats() (libml.SchedStats, bool) {
	s := b.Scheduler()
	if s == nil {
		return libml.SchedStats{}, false
	}
	st := s.counters()
	return libml.SchedStats{Policy: string(s.Config().Policy), Device: s.DeviceName(),
		RTJobs: st.Jobs[RT], BEJobs: st.Jobs[BE], Preemptions: st.Preemptions, Restores: st.Restores,
		PadBlocks: st.PadBlocks, ModeSwitches: st.ModeSwitches}, true
}

var (
	_ libml.Scheduling       = (*Backend)(nil)
	_ libml.RealTimeInstance = (*Instance)(nil)
)

// modelGroup is one loaded model: its batch buckets over shared weights,
// and the instances that use them.
type modelGroup struct {
	be      *Backend
	name    string
	batched bool
	// buckets ascend by batch size; buckets[0] is batch 1 and owns the
	// weights
	buckets  []*Model
	inShape  []int64
	outShape []int64
	refs     int
	queue    int // the BE queue of the model's BE jobs
	mu       sync.Mutex
}

// Instance is an instance of a model loaded by Backend.
type Instance struct {
	g      *modelGroup
	rt     bool
	maxB   int
	jobs   []Job
	in     []float32 // a bucket's input when the batch is smaller; InferInput's job input
	out    []float32
	ing    cpu.Ingester
	closed bool
}

// LoadModel compiles g at batch 1, loads its weights and profiles it.
func (b *Backend) LoadModel(_ context.Context, name string, g *graph.Graph) (libml.Instance, error) {
	s := b.Scheduler()
	if s == nil {
		return nil, errors.New("sched backend: not initialised")
	}
	m, err := s.Load(name, g, ModelOptions{Batch: 1, ProfileRuns: b.runs})
	if err != nil {
		return nil, fmt.Errorf("sched backend: %w", err)
	}
	mg := &modelGroup{be: b, name: name, batched: m.batched(), buckets: []*Model{m}, refs: 1}
	in, out := m.prog.Inputs[0].Shape, m.prog.Outputs[0].Shape
	if mg.batched {
		mg.inShape, mg.outShape = slices.Clone(in[1:]), slices.Clone(out[1:])
	} else {
		mg.inShape, mg.outShape = libml.PerRequestShape(in), libml.PerRequestShape(out)
	}
	b.mu.Lock()
	b.groups++
	mg.queue = b.nextBEQ % b.cfg.BEQueues
	b.nextBEQ++
	b.mu.Unlock()
	return &Instance{g: mg, maxB: 1}, nil
}

// LinkModel makes another instance of base's model over the same weights
// and buckets, of the same class.
func (b *Backend) LinkModel(_ context.Context, base libml.Instance) (libml.Instance, error) {
	bi, ok := base.(*Instance)
	if !ok || bi.g.be != b {
		return nil, errors.New("sched backend: link: not an instance of this backend")
	}
	mg := bi.g
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if mg.refs == 0 {
		return nil, errors.New("sched backend: link: model unloaded")
	}
	mg.refs++
	return &Instance{g: mg, rt: bi.rt, maxB: 1}, nil
}

// bucketSizes are the batch sizes a model runs at for batches up to max.
func bucketSizes(max int) []int {
	var bs []int
	for b := 1; b < max; b *= 2 {
		bs = append(bs, b)
	}
	return append(bs, max)
}

// ConfigureBatch compiles and profiles the buckets inst needs for batches
// up to maxBatch (once per model).
func (b *Backend) ConfigureBatch(inst libml.Instance, maxBatch int) error {
	in, ok := inst.(*Instance)
	if !ok || in.g.be != b {
		return errors.New("sched backend: configure: not an instance of this backend")
	}
	if maxBatch < 1 {
		return fmt.Errorf("sched backend: configure: batch %d", maxBatch)
	}
	s := b.Scheduler()
	if s == nil {
		return errors.New("sched backend: not initialised")
	}
	mg := in.g
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if mg.batched {
		for _, bs := range bucketSizes(maxBatch) {
			if mg.bucket(bs) != nil {
				continue
			}
			derive := deriveModel
			if mg.buckets[0].seg != nil {
				derive = deriveSegModel
			}
			m, err := derive(mg.buckets[0], ModelOptions{Batch: bs})
			if err != nil {
				return fmt.Errorf("sched backend: %s at batch %d: %w", mg.name, bs, err)
			}
			if err := s.install(m, ModelOptions{Batch: bs, ProfileRuns: b.runs}); err != nil {
				return fmt.Errorf("sched backend: %s at batch %d: %w", mg.name, bs, err)
			}
			i, _ := slices.BinarySearchFunc(mg.buckets, bs, func(m *Model, b int) int { return m.batch - b })
			mg.buckets = slices.Insert(mg.buckets, i, m)
		}
	}
	in.maxB = maxBatch
	njobs := 1
	if !mg.batched {
		njobs = maxBatch
	}
	in.jobs = make([]Job, njobs)
	top := mg.buckets[len(mg.buckets)-1]
	if mg.batched && top.batch > 1 {
		in.out = make([]float32, top.OutputSize())
	}
	// the bucket's input when a batch is smaller, and where InferInput
	// gathers requests: room for the top bucket and for maxBatch requests
	in.in = make([]float32, max(top.InputSize(), maxBatch*in.InputSize()))
	return nil
}

// bucket is the model compiled at exactly batch bs, or nil.
func (mg *modelGroup) bucket(bs int) *Model {
	for _, m := range mg.buckets {
		if m.batch == bs {
			return m
		}
	}
	return nil
}

// fit is the smallest bucket holding n requests. A linked instance may be
// adding buckets (ConfigureBatch during a swap) while this one serves.
func (mg *modelGroup) fit(n int) *Model {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	for _, m := range mg.buckets {
		if m.batch >= n {
			return m
		}
	}
	return nil
}

// InferBatch runs one batch as a scheduler job (a model without a batch
// dimension: one job per request, submitted together) and waits for it.
// The job runs to its end once submitted: ctx is not looked at.
func (b *Backend) InferBatch(_ context.Context, inst libml.Instance, n int, in, out []float32) error {
	ii, ok := inst.(*Instance)
	if !ok || ii.g.be != b {
		return errors.New("sched backend: infer: not an instance of this backend")
	}
	return b.infer(ii, n, in, out, false)
}

// InferInput runs one batch whose input is still the requests' payload,
// as one job that carries the payload itself (Job.Input). On the cpu the
// scheduler gathers and converts it in C (one pass) straight into the
// model instance it binds the job to: one copy per request. On a segment
// device the device gathers it, with no host copy where the packets lie
// in a region mapped into it. Either gathers it again if a preempted job
// restarts from its first kernel, so the packets go back when the job is
// done. A model without a batch dimension runs a batch of several
// requests as one job each, from an input gathered first (two copies).
func (b *Backend) InferInput(_ context.Context, inst libml.Instance, in *libml.Input, out []float32) error {
	ii, ok := inst.(*Instance)
	if !ok || ii.g.be != b {
		return errors.New("sched backend: infer: not an instance of this backend")
	}
	n := in.N()
	if ii.closed {
		return errors.New("sched backend: infer: instance closed")
	}
	if n < 1 || n > ii.maxB {
		return fmt.Errorf("sched backend: infer: batch %d outside 1..%d", n, ii.maxB)
	}
	is := ii.InputSize()
	if err := in.Check(n, is); err != nil {
		return fmt.Errorf("sched backend: infer: %w", err)
	}
	if m := ii.g.fit(n); m != nil && (ii.g.batched || n == 1) {
		// the job gathers the payload (the device itself, in place where
		// the packets lie in a region mapped into it), again if it
		// restarts from its first kernel: the packets go back when the
		// job is done
		defer in.Gather()
		if m.seg == nil {
			in.Copies = 1
		}
		return b.inferPayload(ii, m, in, out)
	}
	if err := ii.ing.Ingest(ii.in[:n*is], in, 0, n); err != nil {
		return fmt.Errorf("sched backend: infer: %w", err)
	}
	in.Copies = 2
	in.Gather()
	return b.infer(ii, n, ii.in[:n*is], out, true)
}

// inferPayload runs a batch whose input is the requests' payload as one
// job of bucket m (Job.Input).
func (b *Backend) inferPayload(ii *Instance, m *Model, in *libml.Input, out []float32) error {
	n, os := in.N(), ii.OutputSize()
	if len(out) < n*os {
		return fmt.Errorf("sched backend: infer: %d outputs for a batch of %d (%d each)", len(out), n, os)
	}
	s := b.Scheduler()
	if s == nil {
		return errors.New("sched backend: not initialised")
	}
	class, q := BE, ii.g.queue
	if ii.rt {
		class, q = RT, 0
	}
	jout := out[:n*os]
	if m.batch != n {
		jout = ii.out[:m.batch*os]
	}
	j := &ii.jobs[0]
	*j = Job{Model: m, Class: class, Queue: q, Input: in, Out: jout}
	if err := s.Submit(j); err != nil {
		return fmt.Errorf("sched backend: %s: %w", ii.g.name, err)
	}
	if err := j.Wait(); err != nil {
		return fmt.Errorf("sched backend: %s: %w", ii.g.name, err)
	}
	if m.batch != n {
		copy(out[:n*os], jout[:n*os])
	}
	return nil
}

// infer runs a batch of n requests whose input is in; staged says that in
// is the instance's own input buffer (ii.in), where a smaller batch's
// bucket already reads it.
func (b *Backend) infer(ii *Instance, n int, in, out []float32, staged bool) error {
	if ii.closed {
		return errors.New("sched backend: infer: instance closed")
	}
	if n < 1 || n > ii.maxB {
		return fmt.Errorf("sched backend: infer: batch %d outside 1..%d", n, ii.maxB)
	}
	mg := ii.g
	is, os := ii.InputSize(), ii.OutputSize()
	if len(in) < n*is || len(out) < n*os {
		return fmt.Errorf("sched backend: infer: %d inputs / %d outputs for a batch of %d (%d / %d each)", len(in), len(out), n, is, os)
	}
	s := b.Scheduler()
	if s == nil {
		return errors.New("sched backend: not initialised")
	}
	class, q := BE, mg.queue
	if ii.rt {
		class, q = RT, 0
	}
	if !mg.batched {
		m := mg.buckets[0]
		for r := 0; r < n; r++ {
			ii.jobs[r] = Job{Model: m, Class: class, Queue: q, In: in[r*is : (r+1)*is], Out: out[r*os : (r+1)*os]}
		}
		var err error
		submitted := 0
		for r := 0; r < n && err == nil; r++ {
			if err = s.Submit(&ii.jobs[r]); err == nil {
				submitted++
			}
		}
		for r := 0; r < submitted; r++ {
			if werr := ii.jobs[r].Wait(); werr != nil && err == nil {
				err = werr
			}
		}
		if err != nil {
			return fmt.Errorf("sched backend: %s: %w", mg.name, err)
		}
		return nil
	}
	m := mg.fit(n)
	jin, jout := in[:n*is], out[:n*os]
	if m.batch != n {
		if !staged {
			copy(ii.in, jin)
		}
		jin, jout = ii.in[:m.batch*is], ii.out[:m.batch*os]
	}
	j := &ii.jobs[0]
	*j = Job{Model: m, Class: class, Queue: q, In: jin, Out: jout}
	if err := s.Submit(j); err != nil {
		return fmt.Errorf("sched backend: %s: %w", mg.name, err)
	}
	if err := j.Wait(); err != nil {
		return fmt.Errorf("sched backend: %s: %w", mg.name, err)
	}
	if m.batch != n {
		copy(out[:n*os], jout[:n*os])
	}
	return nil
}

// SetRealTime makes the instance's batches real-time (RT) jobs, or
// best-effort (BE) ones, the default.
func (i *Instance) SetRealTime(rt bool) { i.rt = rt }

// RealTime reports the instance's class.
func (i *Instance) RealTime() bool { return i.rt }

// Buckets are the batch sizes the instance's model is compiled at.
func (i *Instance) Buckets() []int {
	i.g.mu.Lock()
	defer i.g.mu.Unlock()
	bs := make([]int, len(i.g.buckets))
	for k, m := range i.g.buckets {
		bs[k] = m.batch
	}
	return bs
}

// Model is the name the model was loaded under.
func (i *Instance) Model() string { return i.g.name }

// InputShape is the per-request input shape.
func (i *Instance) InputShape() []int64 { return slices.Clone(i.g.inShape) }

// OutputShape is the per-request output shape.
func (i *Instance) OutputShape() []int64 { return slices.Clone(i.g.outShape) }

// InputSize is the per-request input element count.
func (i *Instance) InputSize() int { return int(libml.Elems(i.g.inShape)) }

// OutputSize is the per-request output element count.
func (i *Instance) OutputSize() int { return int(libml.Elems(i.g.outShape)) }

// Close releases the instance; the last instance of a model unloads it
// from the scheduler (its buckets and weights are freed). No batch of the
// instance may be running.
func (i *Instance) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	mg := i.g
	mg.mu.Lock()
	mg.refs--
	last := mg.refs == 0
	ms := mg.buckets
	if last {
		mg.buckets = nil
	}
	mg.mu.Unlock()
	if !last {
		return nil
	}
	b := mg.be
	b.mu.Lock()
	b.groups--
	s := b.s
	b.mu.Unlock()
	if s != nil {
		s.unload(ms)
	}
	return nil
}

// unload removes models from the scheduler and frees them, derived
// buckets before the model that owns the weights (ms[0]). None of their
// jobs may be queued or running.
func (s *Scheduler) unload(ms []*Model) {
	s.mu.Lock()
	if s.closed {
		// Close has freed every model
		s.mu.Unlock()
		return
	}
	s.models = slices.DeleteFunc(s.models, func(m *Model) bool { return slices.Contains(ms, m) })
	s.mu.Unlock()
	for k := len(ms) - 1; k >= 0; k-- {
		m := ms[k]
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.release()
	}
}
