// Package ifmanager runs inference functions (IFs): a model instance with
// its profile, a bounded queue of reassembled requests, and a worker that
// batches them, gathers their payloads into the input tensor, runs the
// model and answers each request. The Router hands requests from the
// dataplane to the IF serving their model id.
package ifmanager

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"sluice/dataplane/egress"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
	"sluice/libml"
)

// InputFormat says how a request's payload becomes the model's input.
type InputFormat string

// Input formats.
const (
	// InputF32 is the input tensor itself: InputSize float32 values,
	// little-endian.
	InputF32 InputFormat = "f32"
	// InputImageU8 is an 8-bit image in HWC order (H×W×C bytes, C = the
	// model's channel count): scaled to [0,1], normalized with Mean and Std
	// per channel, and transposed to the model's CHW layout.
	InputImageU8 InputFormat = "u8-hwc"
)

// Config is an IF's profile.
type Config struct {
	// Name names the IF in logs and metrics.
	Name string
	// ModelID is the wire model id routed to this IF.
	ModelID uint16
	// Class is the IF's scheduling class.
	Class wire.Class
	// MaxBatch bounds a batch.
	MaxBatch int
	// QueueLen bounds the queue; requests beyond it are answered
	// overloaded.
	QueueLen int
	// Input is the request payload format.
	Input InputFormat
	// Mean and Std normalize InputImageU8 channels (after scaling to
	// [0,1]); zero Std means 1.
	Mean, Std []float32
	// SLO is the latency objective, for reporting.
	SLO time.Duration
}

// Origin is where a request came from: the reassembly table holding its
// fragments and the egress that answers it.
type Origin struct {
	Table *reasm.Table
	Out   *egress.Egress
}

type item struct {
	r        *reasm.Request
	o        *Origin
	enqueued time.Time
}

// Counters are an IF's cumulative counts.
type Counters struct {
	Served     atomic.Uint64 // answered ok
	Failed     atomic.Uint64 // answered with an error after admission
	Overloaded atomic.Uint64 // refused: queue full
	Batches    atomic.Uint64
	BatchItems atomic.Uint64
	ComputeNS  atomic.Uint64
}

// IF is one inference function.
type IF struct {
	cfg   Config
	be    libml.Backend
	inst  libml.Instance
	log   *slog.Logger
	queue chan item
	C     Counters

	inElems, outElems int
	inBytes           int
	channels, hw      int
	stage             []byte    // gathered payloads, MaxBatch*inBytes
	in, out           []float32 // model input and output tensors
	batch             []item
	closing           atomic.Bool
}

// New makes an IF around a loaded instance and configures its batch size.
func New(cfg Config, be libml.Backend, inst libml.Instance, log *slog.Logger) (*IF, error) {
	if cfg.MaxBatch < 1 || cfg.QueueLen < 1 {
		return nil, fmt.Errorf("ifmanager: IF %q: max_batch and queue_len must be positive", cfg.Name)
	}
	if log == nil {
		log = slog.Default()
	}
	f := &IF{cfg: cfg, be: be, inst: inst, log: log.With("if", cfg.Name),
		queue: make(chan item, cfg.QueueLen), inElems: inst.InputSize(), outElems: inst.OutputSize()}
	switch cfg.Input {
	case InputF32, "":
		f.cfg.Input = InputF32
		f.inBytes = 4 * f.inElems
	case InputImageU8:
		shape := inst.InputShape()
		if len(shape) != 3 {
			return nil, fmt.Errorf("ifmanager: IF %q: input %q needs a CHW model input, model has shape %v", cfg.Name, cfg.Input, shape)
		}
		f.channels, f.hw = int(shape[0]), int(shape[1]*shape[2])
		if len(cfg.Mean) != 0 && len(cfg.Mean) != f.channels || len(cfg.Std) != 0 && len(cfg.Std) != f.channels {
			return nil, fmt.Errorf("ifmanager: IF %q: mean and std need %d values", cfg.Name, f.channels)
		}
		f.inBytes = f.inElems
	default:
		return nil, fmt.Errorf("ifmanager: IF %q: unknown input format %q (want %q or %q)", cfg.Name, cfg.Input, InputF32, InputImageU8)
	}
	if err := be.ConfigureBatch(inst, cfg.MaxBatch); err != nil {
		return nil, fmt.Errorf("ifmanager: IF %q: %w", cfg.Name, err)
	}
	f.stage = make([]byte, cfg.MaxBatch*f.inBytes)
	f.in = make([]float32, cfg.MaxBatch*f.inElems)
	f.out = make([]float32, cfg.MaxBatch*f.outElems)
	f.batch = make([]item, 0, cfg.MaxBatch)
	return f, nil
}

// Config returns the IF's profile.
func (f *IF) Config() Config { return f.cfg }

// RequestBytes is the payload size a request must have.
func (f *IF) RequestBytes() int { return f.inBytes }

// ResponseBytes is the size of an ok response's output.
func (f *IF) ResponseBytes() int { return 4 * f.outElems }

// QueueDepth is the number of queued requests.
func (f *IF) QueueDepth() int { return len(f.queue) }

// Enqueue admits r without blocking; it reports false when the queue is
// full or the IF is stopping, and the caller must answer r.
func (f *IF) Enqueue(r *reasm.Request, o *Origin) bool {
	if f.closing.Load() {
		return false
	}
	select {
	case f.queue <- item{r: r, o: o, enqueued: time.Now()}:
		return true
	default:
		f.C.Overloaded.Add(1)
		return false
	}
}

// Run serves batches until ctx ends, then answers everything still queued
// and returns.
func (f *IF) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			f.closing.Store(true)
			for len(f.queue) > 0 {
				f.serveBatch(<-f.queue)
			}
			return
		case it := <-f.queue:
			f.serveBatch(it)
		}
	}
}

// serveBatch serves first and whatever else is queued, up to MaxBatch.
func (f *IF) serveBatch(first item) {
	b := append(f.batch[:0], first)
	for len(b) < f.cfg.MaxBatch {
		select {
		case it := <-f.queue:
			b = append(b, it)
			continue
		default:
		}
		break
	}
	// Gather: each payload is copied once, from its packet buffers into
	// the staging tensor; the buffers go back to the driver right after.
	n := 0
	for _, it := range b {
		r := it.r
		st := wire.StatusOK
		if int(r.TotalLen) != f.inBytes {
			st = wire.StatusBadInput
		} else if err := it.o.Table.Gather(f.stage[n*f.inBytes:(n+1)*f.inBytes], r); err != nil {
			st = wire.StatusInternal
		}
		if st != wire.StatusOK {
			f.answer(it, st, nil)
			continue
		}
		b[n] = it
		n++
	}
	b = b[:n]
	if n == 0 {
		return
	}
	f.convert(n)
	start := time.Now()
	err := f.be.InferBatch(context.Background(), f.inst, n, f.in[:n*f.inElems], f.out[:n*f.outElems])
	f.C.ComputeNS.Add(uint64(time.Since(start)))
	f.C.Batches.Add(1)
	f.C.BatchItems.Add(uint64(n))
	if err != nil {
		f.log.Error("inference failed", "batch", n, "err", err)
		for _, it := range b {
			f.answer(it, wire.StatusInternal, nil)
		}
		return
	}
	outBytes := 4 * f.outElems
	buf := make([]byte, n*outBytes) // one allocation per batch, owned by egress until sent
	for i, it := range b {
		o := buf[i*outBytes : (i+1)*outBytes]
		for k, v := range f.out[i*f.outElems : (i+1)*f.outElems] {
			binary.LittleEndian.PutUint32(o[4*k:], math.Float32bits(v))
		}
		f.answer(it, wire.StatusOK, o)
	}
}

// answer gives r back to its table and queues its response.
func (f *IF) answer(it item, st wire.Status, out []byte) {
	r := it.r
	resp := egress.Response{To: r.From, Model: r.Model, Flow: r.Flow, ID: r.ID, Flags: r.Flags, Status: st, Output: out}
	it.o.Table.Done(r)
	if st == wire.StatusOK {
		f.C.Served.Add(1)
	} else {
		f.C.Failed.Add(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := it.o.Out.SendWait(ctx, &resp); err != nil {
		f.log.Warn("response dropped: egress full", "request", r.ID, "err", err)
	}
}

// convert turns the staged payloads of n requests into the input tensor.
func (f *IF) convert(n int) {
	switch f.cfg.Input {
	case InputF32:
		for i := 0; i < n*f.inElems; i++ {
			f.in[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.stage[4*i:]))
		}
	case InputImageU8:
		c, hw := f.channels, f.hw
		var scale, bias [16]float32
		for ch := 0; ch < c && ch < 16; ch++ {
			m, s := float32(0), float32(1)
			if len(f.cfg.Mean) > 0 {
				m = f.cfg.Mean[ch]
			}
			if len(f.cfg.Std) > 0 && f.cfg.Std[ch] != 0 {
				s = f.cfg.Std[ch]
			}
			scale[ch], bias[ch] = 1/(255*s), -m/s
		}
		for b := 0; b < n; b++ {
			src := f.stage[b*f.inBytes : (b+1)*f.inBytes]
			dst := f.in[b*f.inElems : (b+1)*f.inElems]
			for ch := 0; ch < c; ch++ {
				d := dst[ch*hw : (ch+1)*hw]
				sc, bi := scale[ch&15], bias[ch&15]
				for p := 0; p < hw; p++ {
					d[p] = float32(src[p*c+ch])*sc + bi
				}
			}
		}
	}
}

// Router is an ioloop.Sink: it hands each completed request to the IF
// serving its model id, answering unknown_model and overloaded itself.
type Router struct {
	origin Origin
	mu     sync.RWMutex
	ifs    map[uint16]*IF
	// Unknown counts requests for models no IF serves.
	Unknown atomic.Uint64
}

// NewRouter makes a router for one port.
func NewRouter(o Origin) *Router { return &Router{origin: o, ifs: map[uint16]*IF{}} }

// SetTable sets the origin's table once the I/O loop made it.
func (rt *Router) SetTable(t *reasm.Table) { rt.origin.Table = t }

// ErrDuplicateModel is returned by Add for a model id already routed.
var ErrDuplicateModel = errors.New("ifmanager: model id already served")

// Add routes f's model id to f.
func (rt *Router) Add(f *IF) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.ifs[f.cfg.ModelID]; ok {
		return fmt.Errorf("%w: %d", ErrDuplicateModel, f.cfg.ModelID)
	}
	rt.ifs[f.cfg.ModelID] = f
	return nil
}

// Deliver implements ioloop.Sink.
func (rt *Router) Deliver(r *reasm.Request) {
	rt.mu.RLock()
	f := rt.ifs[r.Model]
	rt.mu.RUnlock()
	st := wire.StatusUnknownModel
	if f != nil {
		if f.Enqueue(r, &rt.origin) {
			return
		}
		st = wire.StatusOverloaded
		if f.closing.Load() {
			st = wire.StatusShuttingDown
		}
	} else {
		rt.Unknown.Add(1)
	}
	_ = rt.origin.Out.Send(&egress.Response{To: r.From, Model: r.Model, Flow: r.Flow, ID: r.ID, Flags: r.Flags, Status: st})
	rt.origin.Table.Done(r)
}
