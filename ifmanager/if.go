// Package ifmanager runs inference functions (IFs): a model instance with
// its profile, a bounded queue of reassembled requests, and a worker that
// batches them (SLAB), hands their payloads (views into the packet buffers,
// still owned by the dataplane) to the backend, which gathers them into the
// model's input, and answers each request from pooled output buffers. Shares, batch bounds and even the
// model are changed by shadow swaps: a standby instance linked to the same
// weights is prepared and warmed while the active one serves, and the
// worker switches between batches, losing nothing. The Router hands
// requests from the dataplane to the IF serving their model id.
package ifmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/wire"
	"sluice/libml"
)

// InputFormat says how a request's payload becomes the model's input: the
// backends' one type, libml.InputFormat, under the name profiles and specs
// use.
type InputFormat = libml.InputFormat

// Input formats (see libml.InputF32 and libml.InputImageU8).
const (
	InputF32     = libml.InputF32
	InputImageU8 = libml.InputImageU8
)

// Config is what the IF manager needs to run an IF, in its own terms
// (a wire class, a duration): Spec.Config makes it from the IF's spec, the
// one schema of profiles and deploy commands, after Spec.Resolve.
type Config struct {
	// Name names the IF in logs and metrics.
	Name string
	// ModelID is the wire model id routed to this IF.
	ModelID uint16
	// Class is the IF's scheduling class.
	Class wire.Class
	// MinBatch and MaxBatch bound the batch; SLAB adapts between them.
	MinBatch, MaxBatch int
	// QueueLen bounds the queue; requests beyond it are answered
	// overloaded.
	QueueLen int
	// Input is the request payload format.
	Input InputFormat
	// Mean and Std normalize InputImageU8 channels (after scaling to
	// [0,1]); zero Std means 1.
	Mean, Std []float32
	// SLO is the latency objective: SLAB keeps batches within it. Zero
	// means batches of MaxBatch whenever that many are queued.
	SLO time.Duration
	// Batching is "slab" (default), "aimd" (Clipper's) or "fixed".
	Batching string
	// Share is the IF's resource share (0..1]; Units its unit mask on the
	// CPU backend (0: all units).
	Share float64
	Units uint64
	// ServeLate serves requests that cannot finish by their deadline
	// instead of answering them deadline_exceeded (timeout_action
	// "serve_late"; see deadline.go).
	ServeLate bool
	// State makes the IF stateful (flows.go): the instance's input and
	// output rows end with a flow's state, which the IF keeps per flow.
	State StateConfig
	// PayloadShape is the per-request shape of the payload when the
	// model was packed (libml/pack.Layout.DataShape: a u8-hwc payload is
	// an image of this CHW shape); nil: the instance's input shape.
	PayloadShape []int64
}

// Observer receives an IF's measurements; the appliance turns them into
// metrics. Calls come from the IF's worker goroutine.
type Observer interface {
	// Request reports one answered request: time in the queue, in its
	// batch's gather+compute, and from its first fragment to its answer.
	Request(status wire.Status, queue, compute, total time.Duration)
	// Batch reports one batch of n requests: its gather and compute times,
	// and its oldest request's time from first fragment to result.
	Batch(n int, gather, compute, latency time.Duration)
	// Swap reports one completed swap and its idle gap.
	Swap(gap time.Duration)
}

type nopObserver struct{}

func (nopObserver) Request(wire.Status, time.Duration, time.Duration, time.Duration) {}
func (nopObserver) Batch(int, time.Duration, time.Duration, time.Duration)           {}
func (nopObserver) Swap(time.Duration)                                               {}

type item struct {
	r        *ioloop.Request
	queued   int64  // the IF's clock at admission
	deadline int64  // when its result is due (deadlineOf); 0: none
	rt       bool   // the request's class is RT: it is served before BE ones
	seq      uint64 // admission order (a stateful IF runs a flow's requests in it)
	// mid, for a request forwarded from the previous stage of a pipeline,
	// is its payload here: that stage's output, in its output buffer,
	// which midSent gives back once this IF no longer reads it. The
	// request's packet buffers went back when that stage gathered them.
	mid     []byte
	midSent func([]byte)
	hops    int // the stages before this one
}

// start is when the request reached this IF's stage: its first fragment,
// or its admission when the previous stage of a pipeline forwarded it.
func (it *item) start() int64 {
	if it.mid != nil {
		return it.queued
	}
	return it.r.FirstNS
}

// releaseMid gives a forwarded request's payload back to the previous
// stage.
func (it *item) releaseMid() {
	if it.mid != nil {
		it.midSent(it.mid)
		it.mid = nil
	}
}

// Counters are an IF's cumulative counts. Every request handed to Admit
// is counted once: refused (Overloaded, DeadlineAdmission, or
// shutting_down, which the router counts) or admitted (Arrivals less
// DeadlineAdmission); every admitted request is answered once, and
// counted once: Served, Failed or DeadlineBatch.
type Counters struct {
	Served     atomic.Uint64 // answered ok
	Failed     atomic.Uint64 // answered with an error after admission (bad_input, internal)
	Overloaded atomic.Uint64 // refused: queue full
	// DeadlineAdmission counts requests refused deadline_exceeded at
	// admission: their predicted finish was past their deadline.
	DeadlineAdmission atomic.Uint64
	// DeadlineBatch counts admitted requests answered deadline_exceeded
	// when a batch was formed: they could no longer finish in time.
	DeadlineBatch atomic.Uint64
	// Late counts requests answered ok after their deadline (all the late
	// ones with timeout_action serve_late; with reject, those whose batch
	// ran longer than its estimate).
	Late       atomic.Uint64
	Batches    atomic.Uint64
	BatchItems atomic.Uint64
	ComputeNS  atomic.Uint64
	GatherNS   atomic.Uint64
	// PayloadCopies sums, over the requests of the batches run, the
	// copies of each request's payload the backend made on its way to the
	// model's input (libml.Input.Copies): divided by BatchItems, the
	// copies per request (1 on the cpu backend: packet → tensor).
	PayloadCopies atomic.Uint64
	Swaps         atomic.Uint64
	// LastSwapGapNS is the idle gap of the latest swap.
	LastSwapGapNS atomic.Int64
	// Arrivals counts the requests the IF admitted or refused for their
	// deadline: its demand, for the share tuner (a refusal for a deadline
	// is demand the IF's share did not meet).
	Arrivals atomic.Uint64
	// Flows counts a stateful IF's flows (a request refused because the
	// flow table was full is counted in Failed too).
	Flows FlowCounters
	// Forwarded counts the requests a pipeline stage handed to its next
	// stage, which answers them; ForwardRefused those the next stage
	// refused (queue full, deadline, stopping; counted there too),
	// answered with its status.
	Forwarded, ForwardRefused atomic.Uint64
}

// active is what the worker runs: the instance and its batch bound.
type active struct {
	inst  libml.Instance
	units uint64
	share float64
	max   int
}

// IF is one inference function.
type IF struct {
	cfg Config
	be  libml.Backend
	log *slog.Logger
	obs Observer
	C   Counters
	// recent holds the latest ok answers' latencies (Status.P99)
	recent latencyRing
	base   libml.Instance // the instance whose weights shadows link to

	// Admitted requests wait in rtQ (RT requests) and beQ (BE), each
	// with room for QueueLen; depth counts the requests admitted and not
	// yet taken into a batch or refused, rtDepth the RT ones among them,
	// and bounds the queue at QueueLen.
	rtQ, beQ       chan item
	depth, rtDepth atomic.Int64
	ctl            chan func()
	closing        atomic.Bool
	stopped        chan struct{}

	inElems, outElems int
	// reqBytes is a request's payload size and replyElems an answer's
	// float count: the instance's input and output less a stateful IF's
	// state
	reqBytes, replyElems int
	// flows holds a stateful IF's flow states (nil: stateless); states
	// is the running batch's, request by request
	flows  *flowTable
	states []*flowState
	seq    atomic.Uint64
	// next, when set, resolves the IF's next pipeline stage: the IF
	// hands each result to it instead of answering (SetNext)
	next     func() *IF
	nextName string
	// enc says how a payload becomes the model's input (the backend
	// converts it)
	enc *libml.Encoding
	// outs holds the output buffers responses are sent from
	outs outPool

	// What admission reads to predict a request's finish (deadline.go):
	// the batch estimates, the batch limit, when the running batch is
	// expected to end (0: none runs), the SLO (ns) and the timeout action.
	est       batchEstimate
	admLimit  atomic.Int64
	busyUntil atomic.Int64
	sloNS     atomic.Int64
	serveLate atomic.Bool
	// now is the IF's clock (dataplane.Now; tests set their own before
	// Run).
	now func() int64

	// owned by the worker
	act      *active
	batcher  BatchPolicy
	batch    []item
	cand     []item // the next batch's candidates: taken from the queues, not yet served
	minBatch int
	// warm is set after the first batch, which pages the model in: it is
	// not observed (unless the estimates were given a value before)
	warm bool
	// input is the batch's payload views for the backend; gatheredNS is
	// when the backend said the batch's input was in place (input.Loaded,
	// or else input.Gathered): the end of its gather, the start of its
	// compute
	input      libml.Input
	gatheredNS int64

	// status snapshot for other goroutines
	mu          sync.Mutex
	limit       int
	underProv   bool
	bottleneck  string
	shareNow    float64
	maxBatchNow int
	unitsNow    uint64
}

// ErrStopped is returned for operations on an IF that has stopped.
var ErrStopped = errors.New("ifmanager: IF stopped")

// New makes an IF around a loaded instance and configures its batch size.
// The IF owns inst from here on.
func New(cfg Config, be libml.Backend, inst libml.Instance, obs Observer, log *slog.Logger) (*IF, error) {
	if cfg.MaxBatch < 1 || cfg.MaxBatch > MaxBatchLimit || cfg.QueueLen < 1 || cfg.QueueLen > MaxQueueLen {
		return nil, fmt.Errorf("ifmanager: IF %q: max_batch %d and queue_len %d must be in 1..%d and 1..%d (see Spec.Validate)",
			cfg.Name, cfg.MaxBatch, cfg.QueueLen, MaxBatchLimit, MaxQueueLen)
	}
	if cfg.MinBatch < 1 {
		cfg.MinBatch = 1
	}
	if cfg.MinBatch > cfg.MaxBatch {
		return nil, fmt.Errorf("ifmanager: IF %q: min_batch %d > max_batch %d", cfg.Name, cfg.MinBatch, cfg.MaxBatch)
	}
	if cfg.Share <= 0 || cfg.Share > 1 {
		cfg.Share = 1
	}
	if log == nil {
		log = slog.Default()
	}
	if obs == nil {
		obs = nopObserver{}
	}
	f := &IF{cfg: cfg, be: be, base: inst, log: log.With("if", cfg.Name), obs: obs,
		rtQ: make(chan item, cfg.QueueLen), beQ: make(chan item, cfg.QueueLen), ctl: make(chan func()), stopped: make(chan struct{}),
		now:     dataplane.Now,
		inElems: inst.InputSize(), outElems: inst.OutputSize(), bottleneck: "unknown"}
	st := cfg.State
	shape := inst.InputShape()
	if cfg.PayloadShape != nil {
		shape = cfg.PayloadShape
	}
	if st.Elems > 0 && (st.Elems >= f.inElems || st.Elems >= f.outElems) {
		return nil, fmt.Errorf("ifmanager: IF %q: a state of %d floats leaves no data in the instance's input (%d) or output (%d)", cfg.Name, st.Elems, f.inElems, f.outElems)
	}
	enc, err := libml.NewEncoding(cfg.Input, cfg.Mean, cfg.Std, shape)
	if err != nil {
		// a spec field that does not fit the model: named as the field
		key := "input"
		if errors.Is(err, libml.ErrMeanStd) {
			key = "mean"
			if len(cfg.Mean) == 0 {
				key = "std"
			}
		}
		return nil, &FieldError{Key: key, Detail: ": " + strings.TrimPrefix(err.Error(), "libml: ")}
	}
	enc = enc.WithTail(st.Elems)
	if enc.Elems != f.inElems {
		return nil, fmt.Errorf("ifmanager: IF %q: input shape %v and a state of %d floats make %d elements, the instance takes %d", cfg.Name, shape, st.Elems, enc.Elems, f.inElems)
	}
	f.reqBytes, f.replyElems = enc.Bytes-4*enc.Tail, f.outElems-st.Elems
	if st.Elems > 0 {
		if f.flows, err = newFlowTable(st, &f.C.Flows); err != nil {
			return nil, &FieldError{Key: "max_flows", Detail: strings.TrimPrefix(err.Error(), "max_flows")}
		}
	}
	f.enc, f.cfg.Input = enc, enc.Format
	f.input = libml.Input{Enc: enc, Gathered: f.gathered, Loaded: f.loaded}
	f.outs.init(f.outElems)
	switch cfg.Batching {
	case "", "slab":
		s := NewSLAB(cfg.SLO, cfg.MinBatch, cfg.MaxBatch)
		s.UnderProvisioned = func() {
			f.mu.Lock()
			f.underProv = true
			f.mu.Unlock()
			f.log.Warn("under-provisioned: SLO missed at batch 1 five times in a row", "slo", cfg.SLO)
		}
		f.batcher = s
	case "aimd":
		f.batcher = NewAIMD(cfg.SLO, cfg.MinBatch, cfg.MaxBatch)
	case "fixed":
		f.batcher = &FixedBatch{N: cfg.MaxBatch}
	default:
		return nil, fmt.Errorf("ifmanager: IF %q: unknown batching %q (want slab, aimd or fixed)", cfg.Name, cfg.Batching)
	}
	f.minBatch = cfg.MinBatch
	act, err := f.prepare(inst, cfg.MaxBatch, cfg.Units, cfg.Share)
	if err != nil {
		return nil, err
	}
	f.act = act
	f.limit, f.shareNow, f.maxBatchNow, f.unitsNow = f.batcher.Limit(), cfg.Share, cfg.MaxBatch, cfg.Units
	f.admLimit.Store(int64(min(f.limit, cfg.MaxBatch)))
	f.sloNS.Store(int64(cfg.SLO))
	f.serveLate.Store(cfg.ServeLate)
	f.est.publish(cfg.MaxBatch)
	return f, nil
}

// unitSetter is implemented by instances whose compute units can be
// restricted (the cpu backend's).
type unitSetter interface{ SetUnits(mask uint64) }

// shareSetter is implemented by instances that turn a share into a
// partition of their accelerator (the cuda backend's: an SM partition in
// a green context of its own).
type shareSetter interface{ SetShare(share float64) error }

// applyShare gives inst its share when it takes one; a failure (no green
// contexts in the driver, say) leaves the instance on what it had, and
// says so.
func (f *IF) applyShare(inst libml.Instance, share float64) {
	ss, ok := inst.(shareSetter)
	if !ok || share <= 0 {
		return
	}
	if err := ss.SetShare(share); err != nil {
		f.log.Warn("share not applied: the instance keeps its partition", "share", share, "err", err)
	}
}

// prepare configures inst for batches up to max on units: everything a
// swap needs done before the switch.
func (f *IF) prepare(inst libml.Instance, max int, units uint64, share float64) (*active, error) {
	if err := f.be.ConfigureBatch(inst, max); err != nil {
		return nil, fmt.Errorf("ifmanager: IF %q: %w", f.cfg.Name, err)
	}
	if us, ok := inst.(unitSetter); ok {
		us.SetUnits(units)
	}
	f.applyShare(inst, share)
	return &active{inst: inst, units: units, share: share, max: max}, nil
}

// Config returns the IF's profile as created.
func (f *IF) Config() Config { return f.cfg }

// RequestBytes is the payload size a request must have.
func (f *IF) RequestBytes() int { return f.reqBytes }

// ResponseBytes is the size of an ok response's output.
func (f *IF) ResponseBytes() int { return 4 * f.replyElems }

// Stateful reports whether the IF keeps state per flow.
func (f *IF) Stateful() bool { return f.flows != nil }

// QueueDepth is the number of queued requests.
func (f *IF) QueueDepth() int { return int(f.depth.Load()) }

// Status is a snapshot of an IF's state.
type Status struct {
	Name       string
	ModelID    uint16
	Class      wire.Class
	SLO        time.Duration
	BatchLimit int
	MaxBatch   int
	Share      float64
	QueueDepth int
	Served     uint64
	Failed     uint64
	Overloaded uint64
	// DeadlineAdmission and DeadlineBatch count the requests answered
	// deadline_exceeded at admission and at batch formation, Late those
	// answered ok past their deadline.
	DeadlineAdmission, DeadlineBatch, Late uint64
	// ServeLate is the timeout action: true for serve_late, false for
	// reject.
	ServeLate   bool
	Swaps       uint64
	LastSwapGap time.Duration
	// UnderProvisioned is set when SLAB saw five SLO misses at batch 1 in
	// a row (and cleared when the SLO is met again).
	UnderProvisioned bool
	// Bottleneck is "cpu" when gathering and converting inputs takes longer
	// than the model, "compute" otherwise.
	Bottleneck string
	// OutBuffers and OutBuffersInUse count the IF's pooled output buffers
	// (one per batch whose responses are not all sent yet).
	OutBuffers, OutBuffersInUse int
	// P99 is the 99th percentile of the last RecentLatencies requests
	// answered ok, from first fragment to result (0 before the first).
	P99 time.Duration
}

// RecentLatencies is how many of the latest ok answers Status.P99 covers.
const RecentLatencies = 1024

// Status returns the IF's state.
func (f *IF) Status() Status {
	total, inUse := f.outs.counts()
	f.mu.Lock()
	defer f.mu.Unlock()
	return Status{Name: f.cfg.Name, ModelID: f.cfg.ModelID, Class: f.cfg.Class, SLO: f.cfg.SLO,
		BatchLimit: f.limit, MaxBatch: f.maxBatchNow, Share: f.shareNow, QueueDepth: f.QueueDepth(),
		Served: f.C.Served.Load(), Failed: f.C.Failed.Load(), Overloaded: f.C.Overloaded.Load(),
		DeadlineAdmission: f.C.DeadlineAdmission.Load(), DeadlineBatch: f.C.DeadlineBatch.Load(), Late: f.C.Late.Load(),
		ServeLate: f.serveLate.Load(),
		Swaps:     f.C.Swaps.Load(), LastSwapGap: time.Duration(f.C.LastSwapGapNS.Load()),
		UnderProvisioned: f.underProv, Bottleneck: f.bottleneck, OutBuffers: total, OutBuffersInUse: inUse,
		P99: f.recent.p99()}
}

// Admit admits r without blocking and returns wire.StatusOK: the IF
// answers r. Otherwise it returns the status the caller must answer r
// with: StatusShuttingDown when the IF is stopping, StatusOverloaded when
// its queue is full, and, unless the IF serves late, StatusDeadline when r
// is predicted to finish past its deadline (see deadline.go). RT requests
// are predicted, and served, ahead of every queued BE request.
func (f *IF) Admit(r *ioloop.Request) wire.Status {
	if f.closing.Load() {
		return wire.StatusShuttingDown
	}
	now := f.now()
	return f.enqueue(item{r: r, queued: now, deadline: deadlineOf(r, f.sloNS.Load()), rt: r.Flags&wire.FlagRT != 0, seq: f.seq.Add(1)}, now)
}

// accept admits a request the previous stage of a pipeline forwards, as
// Admit does: its payload is mid (that stage's output, given back with
// sent once this IF is done reading it), its deadline the pipeline's. On
// a status other than StatusOK the caller answers the request and keeps
// mid.
func (f *IF) accept(prev item, mid []byte, sent func([]byte)) wire.Status {
	if f.closing.Load() {
		return wire.StatusShuttingDown
	}
	if prev.hops+1 >= MaxStages {
		f.log.Error("a request went through more pipeline stages than allowed: the stages' next names form a loop", "max_stages", MaxStages)
		return wire.StatusInternal
	}
	now := f.now()
	return f.enqueue(item{r: prev.r, queued: now, deadline: prev.deadline, rt: prev.rt, seq: f.seq.Add(1), mid: mid, midSent: sent, hops: prev.hops + 1}, now)
}

// enqueue is admission: the queue bound, the deadline prediction, then a
// place in the class's queue.
func (f *IF) enqueue(it item, now int64) wire.Status {
	d := f.depth.Load()
	if d >= int64(f.cfg.QueueLen) {
		f.C.Overloaded.Add(1)
		return wire.StatusOverloaded
	}
	if it.deadline != 0 && !f.serveLate.Load() {
		ahead := d
		if it.rt {
			ahead = f.rtDepth.Load()
		}
		busy, est := f.busyUntil.Load(), f.est.get
		if f.est.stale(now, busy != 0) {
			est = noEstimate
		}
		fin := predictFinish(now, busy, int(ahead), int(f.admLimit.Load()), est)
		if fin > it.deadline {
			f.C.Arrivals.Add(1)
			f.C.DeadlineAdmission.Add(1)
			return wire.StatusDeadline
		}
	}
	// Take a place: depth bounds the two queues together.
	for !f.depth.CompareAndSwap(d, d+1) {
		if d = f.depth.Load(); d >= int64(f.cfg.QueueLen) {
			f.C.Overloaded.Add(1)
			return wire.StatusOverloaded
		}
	}
	// A worker that started draining after the place was taken waits for
	// the request (depth > 0); one that started before is seen here.
	if f.closing.Load() {
		f.depth.Add(-1)
		return wire.StatusShuttingDown
	}
	f.C.Arrivals.Add(1)
	if it.rt {
		f.rtDepth.Add(1)
		f.rtQ <- it // never blocks: depth <= QueueLen, the room of each queue
	} else {
		f.beQ <- it
	}
	return wire.StatusOK
}

// Closing reports whether the IF stopped admitting requests.
func (f *IF) Closing() bool { return f.closing.Load() }

// Run serves batches until ctx ends or Stop is called, then answers
// everything still queued, closes its instance and returns.
func (f *IF) Run(ctx context.Context) {
	defer close(f.stopped)
	defer func() {
		if err := f.act.inst.Close(); err != nil {
			f.log.Warn("closing instance", "err", err)
		}
	}()
	// control runs a control function; a nil one (Stop), or ctx's end,
	// drains and reports that the worker is done
	control := func(fn func(), cancelled bool) bool {
		if cancelled {
			f.closing.Store(true)
		}
		if cancelled || fn == nil {
			f.drain()
			return true
		}
		fn()
		return false
	}
	for {
		if len(f.cand) > 0 {
			// requests wait already: serve them unless told otherwise
			select {
			case <-ctx.Done():
				control(nil, true)
				return
			case fn := <-f.ctl:
				if control(fn, false) {
					return
				}
				continue
			default:
			}
			f.serveBatch()
			continue
		}
		select {
		case <-ctx.Done():
			control(nil, true)
			return
		case fn := <-f.ctl:
			if control(fn, false) {
				return
			}
		case it := <-f.rtQ:
			f.cand = append(f.cand, it)
			f.serveBatch()
		case it := <-f.beQ:
			f.cand = append(f.cand, it)
			f.serveBatch()
		}
	}
}

// drain serves (or, past their deadlines, refuses) every admitted request;
// admission is closed. A request whose admission took its place before
// admission closed is waited for.
func (f *IF) drain() {
	for f.depth.Load() > 0 {
		if len(f.cand) == 0 && len(f.rtQ) == 0 && len(f.beQ) == 0 {
			runtime.Gosched() // an Admit between its place and its send
			continue
		}
		f.serveBatch()
	}
}

// Stop stops admission, waits until the queue is served and the worker
// has exited, or until ctx ends.
func (f *IF) Stop(ctx context.Context) error {
	f.closing.Store(true)
	select {
	case f.ctl <- nil:
	case <-f.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ifmanager: stop %q: %w", f.cfg.Name, ctx.Err())
	}
	select {
	case <-f.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ifmanager: stop %q: %w", f.cfg.Name, ctx.Err())
	}
}

// do runs fn on the worker between batches and waits for it.
func (f *IF) do(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case f.ctl <- func() { fn(); close(done) }:
	case <-f.stopped:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("ifmanager: %q: %w", f.cfg.Name, ctx.Err())
	}
	select {
	case <-done:
		return nil
	case <-f.stopped:
		return ErrStopped
	}
}

// SetBatch changes the batch bounds, between batches.
func (f *IF) SetBatch(ctx context.Context, min, max int) error {
	if min < 1 || max < min {
		return fmt.Errorf("ifmanager: IF %q: batch bounds %d..%d invalid", f.cfg.Name, min, max)
	}
	f.mu.Lock()
	cur := f.maxBatchNow
	f.mu.Unlock()
	if max > cur {
		// Bigger batches need bigger buffers and plans: a swap.
		if _, err := f.Swap(ctx, SwapSpec{MaxBatch: max}); err != nil {
			return err
		}
	}
	return f.do(ctx, func() {
		f.minBatch = min
		f.batcher.SetBounds(min, max)
		f.mu.Lock()
		f.limit = f.batcher.Limit()
		f.mu.Unlock()
		f.admLimit.Store(int64(f.batchLimit()))
	})
}

// batchLimit is the largest batch the worker forms now.
func (f *IF) batchLimit() int { return min(f.batcher.Limit(), f.act.max) }

// SetSLO changes the SLO SLAB batches against, between batches.
func (f *IF) SetSLO(ctx context.Context, slo time.Duration) error {
	return f.do(ctx, func() {
		f.batcher.SetSLO(slo)
		f.mu.Lock()
		f.cfg.SLO = slo
		f.limit = f.batcher.Limit()
		f.mu.Unlock()
		f.sloNS.Store(int64(slo))
		f.admLimit.Store(int64(f.batchLimit()))
	})
}

// SetServeLate sets the timeout action (see Config.ServeLate); it applies
// to the requests admitted from now on and to the batches formed from now
// on (Config keeps the value the IF was made with; Status has the
// current one).
func (f *IF) SetServeLate(on bool) { f.serveLate.Store(on) }

// Units is the active instance's unit mask.
func (f *IF) Units() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unitsNow
}

// SetUnitsBeforeStart sets the unit mask and share of an IF whose worker
// has not started (at appliance start-up); later changes go through Swap.
func (f *IF) SetUnitsBeforeStart(mask uint64, share float64) {
	if us, ok := f.act.inst.(unitSetter); ok {
		us.SetUnits(mask)
	}
	f.applyShare(f.act.inst, share)
	f.act.units, f.act.share = mask, share
	f.mu.Lock()
	f.unitsNow, f.shareNow = mask, share
	f.mu.Unlock()
}

// SwapSpec says what a swap changes; zero fields keep the current value.
type SwapSpec struct {
	// Instance, when set, replaces the model (a model update); otherwise
	// the shadow links the active instance's weights.
	Instance libml.Instance
	MaxBatch int
	Share    float64
	Units    uint64
	SetUnits bool
}

// SwapResult describes a finished swap.
type SwapResult struct {
	// Prepare is how long building and warming the shadow took, while the
	// active instance kept serving.
	Prepare time.Duration
	// Gap is the worker's idle time at the switch.
	Gap time.Duration
}

// Swap prepares a shadow instance as spec says (linked to the same weights
// unless spec brings a new model), warms it with one batch, and switches to
// it between batches. Requests keep flowing; none is lost or answered
// twice. The old instance is closed after the switch.
func (f *IF) Swap(ctx context.Context, spec SwapSpec) (SwapResult, error) {
	start := time.Now()
	var cur *active
	if err := f.do(ctx, func() { cur = f.act }); err != nil {
		return SwapResult{}, err
	}
	max, units, share := cur.max, cur.units, cur.share
	if spec.MaxBatch > 0 {
		max = spec.MaxBatch
	}
	if spec.SetUnits {
		units = spec.Units
	}
	if spec.Share > 0 {
		share = spec.Share
	}
	inst := spec.Instance
	if inst == nil {
		var err error
		inst, err = f.be.LinkModel(ctx, f.base)
		if err != nil {
			return SwapResult{}, fmt.Errorf("ifmanager: swap %q: shadow: %w", f.cfg.Name, err)
		}
	} else if inst.InputSize() != f.inElems || inst.OutputSize() != f.outElems {
		return SwapResult{}, fmt.Errorf("ifmanager: swap %q: the new model's input/output sizes (%d/%d) differ from the IF's (%d/%d)",
			f.cfg.Name, inst.InputSize(), inst.OutputSize(), f.inElems, f.outElems)
	}
	shadow, err := f.prepare(inst, max, units, share)
	if err == nil {
		// Warm: one request through the shadow pages in its weights and
		// code; a full batch would steal more compute from the active
		// instance, which shares the units until the switch.
		err = f.be.InferBatch(ctx, inst, 1, make([]float32, f.inElems), make([]float32, f.outElems))
	}
	if err != nil {
		_ = inst.Close()
		return SwapResult{}, fmt.Errorf("ifmanager: swap %q: warm-up: %w", f.cfg.Name, err)
	}
	prep := time.Since(start)
	var old *active
	var gap time.Duration
	err = f.do(ctx, func() {
		t0 := time.Now()
		old, f.act = f.act, shadow
		if max != cur.max {
			f.batcher.SetBounds(min(f.minBatch, max), max)
			f.est.publish(max)
		}
		f.admLimit.Store(int64(f.batchLimit()))
		gap = time.Since(t0)
		f.mu.Lock()
		f.shareNow, f.maxBatchNow, f.limit, f.unitsNow = share, max, f.batcher.Limit(), units
		f.mu.Unlock()
	})
	if err != nil {
		_ = inst.Close()
		return SwapResult{}, err
	}
	// Later shadows link the weights through the new active instance.
	f.base = inst
	f.C.Swaps.Add(1)
	f.C.LastSwapGapNS.Store(int64(gap))
	f.obs.Swap(gap)
	if cerr := old.inst.Close(); cerr != nil {
		f.log.Warn("closing the replaced instance", "err", cerr)
	}
	f.log.Info("swapped", "prepare", prep, "gap", gap, "max_batch", max, "share", share)
	return SwapResult{Prepare: prep, Gap: gap}, nil
}

// topUp moves queued requests into the candidates: RT ones until limit
// RT requests wait there, then BE ones until limit requests do.
func (f *IF) topUp(limit int) {
	rt := 0
	for i := range f.cand {
		if f.cand[i].rt {
			rt++
		}
	}
	for ; rt < limit; rt++ {
		select {
		case it := <-f.rtQ:
			f.cand = append(f.cand, it)
			continue
		default:
		}
		break
	}
	for len(f.cand) < limit {
		select {
		case it := <-f.beQ:
			f.cand = append(f.cand, it)
			continue
		default:
		}
		break
	}
}

// unqueue counts it out of the queue (taken into a batch or refused).
func (f *IF) unqueue(it *item) {
	f.depth.Add(-1)
	if it.rt {
		f.rtDepth.Add(-1)
	}
}

// formBatch takes the next batch out of the candidates into f.batch, at
// most limit requests: RT ones first, then by deadline. Unless the IF
// serves late, candidates that can no longer finish by their deadline
// are answered deadline_exceeded first (and more are taken from the
// queues in their place), and the batch is chosen so its members finish
// in time (pickBatch): the candidates left out wait for the next batch.
func (f *IF) formBatch(limit int) []item {
	b := f.batch[:0]
	reject := !f.serveLate.Load()
	now, est := int64(0), f.est.get
	for reject {
		f.topUp(limit)
		now = f.now()
		if f.est.stale(now, false) {
			est = noEstimate
		}
		fin := now + est(1)
		k, dropped := 0, 0
		for _, it := range f.cand {
			if it.meets(fin) {
				f.cand[k] = it
				k++
				continue
			}
			f.refuseLate(it, now)
			dropped++
		}
		clear(f.cand[k:])
		f.cand = f.cand[:k]
		// the requests at the head of each queue that cannot finish are
		// answered now too, not when their turn comes
		dropped += f.sweep(f.rtQ, fin, now) + f.sweep(f.beQ, fin, now)
		if dropped == 0 || (len(f.rtQ) == 0 && len(f.beQ) == 0) {
			break
		}
	}
	if !reject {
		f.topUp(limit)
	}
	slices.SortStableFunc(f.cand, itemOrder)
	n, prefix, fin := min(limit, len(f.cand)), true, int64(0)
	if reject {
		n, prefix, fin = pickBatch(f.cand, limit, now, est)
	}
	if f.flows != nil {
		f.flows.markCandidates(f.cand)
	}
	k := 0
	for i, it := range f.cand {
		if len(b) < n && (prefix && i < n || !prefix && it.meets(fin)) && (f.flows == nil || f.flows.take(it)) {
			f.unqueue(&it)
			b = append(b, it)
			continue
		}
		f.cand[k] = it
		k++
	}
	clear(f.cand[k:])
	f.cand = f.cand[:k]
	return b
}

// refuseLate answers it deadline_exceeded at batch formation.
func (f *IF) refuseLate(it item, now int64) {
	f.unqueue(&it)
	f.C.DeadlineBatch.Add(1)
	f.answer(it, wire.StatusDeadline, nil, nil, now, now)
}

// sweep answers deadline_exceeded the requests at the head of q that
// cannot finish by fin, up to the first that can (a candidate now); it
// returns how many it answered. With deadlines of arrival + SLO, a queue
// is in deadline order and its head is its most urgent request.
func (f *IF) sweep(q chan item, fin, now int64) int {
	n := 0
	for {
		select {
		case it := <-q:
			if it.meets(fin) {
				f.cand = append(f.cand, it)
				return n
			}
			f.refuseLate(it, now)
			n++
			continue
		default:
		}
		return n
	}
}

// serveBatch serves the next batch (formBatch). The payloads stay in the
// packet buffers: the backend gathers and converts them into the model's
// input (one copy per request on the CPU) and says when it is done with
// them (gathered), and the buffers go back to the driver then, before the
// batch's results are in. The outputs are written into a pooled buffer the
// responses are sent from.
func (f *IF) serveBatch() {
	a := f.act
	b := f.formBatch(f.batchLimit())
	if len(b) == 0 {
		f.batch = b
		return
	}
	t0 := f.now()
	in := &f.input
	in.Reset()
	n := 0
	f.states = f.states[:0]
	if f.flows != nil {
		f.flows.sweep(t0)
	}
	for _, it := range b {
		r := it.r
		size := int(r.TotalLen)
		if it.mid != nil {
			size = len(it.mid)
		}
		if size != f.reqBytes {
			f.answer(it, wire.StatusBadInput, nil, nil, t0, t0)
			continue
		}
		var st *flowState
		if f.flows != nil {
			if st = f.flows.state(r, t0); st == nil {
				f.answer(it, wire.StatusOverloaded, nil, nil, t0, t0)
				continue
			}
		}
		if it.mid != nil {
			in.Payload = append(in.Payload, it.mid)
		} else {
			var err error
			if in.Payload, err = r.AppendPayload(in.Payload); err != nil {
				f.log.Error("request payload", "request", r.ID, "err", err)
				f.answer(it, wire.StatusInternal, nil, nil, t0, t0)
				continue
			}
		}
		if st != nil {
			// the flow's state follows the payload in the input row
			in.Payload = append(in.Payload, st.buf)
			f.states = append(f.states, st)
		}
		in.EndRequest()
		b[n] = it
		n++
	}
	clear(b[n:])
	b = b[:n]
	f.batch = b
	if n == 0 {
		return
	}
	ob := f.outs.get(a.max)
	f.gatheredNS = 0
	f.busyUntil.Store(max(t0+f.est.get(n), 1)) // not 0: a batch runs
	err := f.be.InferInput(context.Background(), a.inst, in, ob.f[:n*f.outElems])
	t2 := f.now()
	f.busyUntil.Store(0)
	t1 := f.gatheredNS
	if t1 == 0 { // the backend failed before it gathered
		t1 = t2
	}
	copies := in.Copies
	in.Reset()
	gather, compute := time.Duration(t1-t0), time.Duration(t2-t1)
	f.C.GatherNS.Add(uint64(gather))
	f.C.ComputeNS.Add(uint64(compute))
	f.C.Batches.Add(1)
	f.C.BatchItems.Add(uint64(n))
	f.C.PayloadCopies.Add(uint64(n * copies))
	if err != nil {
		f.outs.put(ob)
		f.obs.Batch(n, gather, compute, 0)
		f.log.Error("inference failed", "batch", n, "err", err)
		clear(f.states) // the flows keep the state they had
		for _, it := range b {
			f.answer(it, wire.StatusInternal, nil, nil, t0, t2)
		}
		f.batch = b[:0]
		clear(b)
		return
	}
	// SLAB learns from the oldest request's time to its result.
	oldest := b[0].start()
	for _, it := range b {
		oldest = min(oldest, it.start())
	}
	f.batcher.Observe(n, time.Duration(t2-oldest))
	if f.warm || f.est.lastEnd.Load() != 0 {
		f.est.observe(n, time.Duration(t2-t0), t2)
	}
	f.warm = true
	f.obs.Batch(n, gather, compute, time.Duration(t2-oldest))
	f.admLimit.Store(int64(f.batchLimit()))
	f.mu.Lock()
	f.limit = f.batcher.Limit()
	if gather > compute {
		f.bottleneck = "cpu"
	} else {
		f.bottleneck = "compute"
	}
	f.mu.Unlock()
	rowBytes, replyBytes := 4*f.outElems, 4*f.replyElems
	out := ob.bytes(n * f.outElems)
	for i, st := range f.states {
		// the flow's next request starts from the state this one left
		copy(st.buf, out[i*rowBytes+replyBytes:(i+1)*rowBytes])
	}
	clear(f.states)
	ob.pending.Store(int32(n))
	if f.next != nil {
		f.forward(b, out, rowBytes, replyBytes, ob.sent, t0, t2)
		f.batch = b[:0]
		clear(b)
		return
	}
	for i, it := range b {
		if it.deadline != 0 && t2 > it.deadline {
			f.C.Late.Add(1)
		}
		f.answer(it, wire.StatusOK, out[i*rowBytes:i*rowBytes+replyBytes], ob.sent, t0, t2)
	}
	f.batch = b[:0]
	clear(b)
}

// loaded is the input's Loaded hook: the batch's input is in place (the
// first time, if a restart gathers it again).
func (f *IF) loaded() {
	if f.gatheredNS == 0 {
		f.gatheredNS = f.now()
	}
}

// gathered is the input's Gathered hook: the backend no longer reads the
// batch's payloads, so their packet buffers go back to the driver now.
func (f *IF) gathered() {
	f.loaded()
	for i := range f.batch {
		f.batch[i].r.Release()
		f.batch[i].releaseMid()
	}
}

// SetNext makes the IF a stage of a pipeline, before Run: each result is
// handed to the IF next returns (its next stage, named name; nil when no
// IF of that name runs) as that IF's request, and the last stage answers.
// The next stage must take f32 payloads of this IF's result size.
func (f *IF) SetNext(name string, next func() *IF) { f.nextName, f.next = name, next }

// Next names the IF's next pipeline stage ("" for none).
func (f *IF) Next() string { return f.nextName }

// forward hands each request of a finished batch, with its result (row i
// of out, the batch's output buffer, which sent gives back), to the next
// stage; a request the next stage refuses is answered here with its
// status.
func (f *IF) forward(b []item, out []byte, rowBytes, replyBytes int, sent func([]byte), t0, t2 int64) {
	next := f.next()
	for i, it := range b {
		mid := out[i*rowBytes : i*rowBytes+replyBytes]
		st := wire.StatusUnknownModel
		if next != nil {
			st = next.accept(it, mid, sent)
		}
		if st == wire.StatusOK {
			f.C.Forwarded.Add(1)
			continue
		}
		if next == nil {
			f.log.Warn("the next stage of the pipeline is not running: request answered unknown_model", "next", f.nextName)
		}
		f.C.ForwardRefused.Add(1)
		sent(mid)
		it.r.Reply(st, nil, nil)
		f.obs.Request(st, time.Duration(t0-it.queued), time.Duration(t2-t0), time.Duration(t2-it.r.FirstNS))
	}
}

// answer replies to one request (which also releases its packet buffers
// if the batch did not) and counts it. The reply is never refused and
// never waits: the request's handle holds a reply slot the I/O loop
// drains (ioloop.Request.Reply). out, when set, stays untouched until
// sent is called.
func (f *IF) answer(it item, st wire.Status, out []byte, sent func([]byte), gathered, computed int64) {
	it.releaseMid()
	r := it.r
	first := r.FirstNS
	switch st {
	case wire.StatusOK:
		f.C.Served.Add(1)
	case wire.StatusDeadline: // counted by the caller (DeadlineBatch)
	default:
		f.C.Failed.Add(1)
	}
	// the reply first: whoever the observer tells (metrics, a test
	// waiting for the answer) finds it queued for the I/O loop
	r.Reply(st, out, sent)
	f.obs.Request(st, time.Duration(gathered-it.queued), time.Duration(computed-gathered), time.Duration(computed-first))
	if st == wire.StatusOK {
		f.recent.add(computed - first)
	}
}

// latencyRing keeps the latest RecentLatencies latencies (ns): writers
// and readers at any time; no lock, no allocation.
type latencyRing struct {
	ns   [RecentLatencies]atomic.Int64
	next atomic.Uint64
}

func (l *latencyRing) add(ns int64) {
	i := l.next.Add(1) - 1
	l.ns[i%RecentLatencies].Store(ns)
}

// p99 is the 99th percentile (nearest rank) of what the ring holds.
func (l *latencyRing) p99() time.Duration {
	n := min(l.next.Load(), RecentLatencies)
	if n == 0 {
		return 0
	}
	v := make([]int64, n)
	for i := range v {
		v[i] = l.ns[i].Load()
	}
	slices.Sort(v)
	return time.Duration(v[(99*int(n)+99)/100-1])
}
