// Package appliance wires sluice together: ports and their I/O loops,
// reassembly, routing to inference functions, backends, and an orderly
// drain on shutdown.
package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"sluice/dataplane"
	"sluice/dataplane/dpdk"
	"sluice/dataplane/egress"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/reasm"
	"sluice/dataplane/udp"
	"sluice/ifmanager"
	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/cuda"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/ort"
	"sluice/libml/pack"
	"sluice/libml/sched"
	"sluice/libml/zoo"
	"sluice/orchestrator/inss"
)

// Appliance is a running sluice.
type Appliance struct {
	log     *slog.Logger
	metrics *metricsSet
	started time.Time
	// plan is the latency model of placement "inss" (nil otherwise);
	// planRound is when its last round ran (unix ns; 0 before the first)
	plan *inss.Model
	// learned is placement_learned's scheduler (nil: the greedy stages
	// plan); planner names what planned the last round.
	learned   *inss.Learned
	planner   atomic.Pointer[string]
	planRound atomic.Int64
	draining  atomic.Bool
	// shuttingDown is set when Run's context ends: the process's own
	// drain, which resume cannot undo.
	shuttingDown atomic.Bool

	mu       sync.Mutex // guards everything below
	prof     *Profile
	path     string // the profile's file, for reloads ("" when parsed from text)
	backends map[string]libml.Backend
	ifs      map[string]*ifRun
	order    []string // IF names in profile order
	ports    []*portRun
	eal      bool // the appliance started the EAL (and cleans it up)
	running  bool
	ifCtx    context.Context
	ifWG     sync.WaitGroup
	iso      isolation // IFs that failed to load; one reload at a time
	regions  []*packetRegion
	cpuDev   *cpu.Device // the units of every cpu-side backend (cpuDevice)
	// replaceLoaded, when set (tests), runs in replace once the new IF
	// has loaded and before the routes move to it.
	replaceLoaded atomic.Pointer[func()]

	// metricsAddr is the metrics listener's address (a string).
	metricsAddr atomic.Value
	// controlEndpoint is the bound control endpoint (a string).
	controlEndpoint atomic.Value
}

// ifRun is one IF and what the appliance knows about it.
type ifRun struct {
	spec IFSection
	f    *ifmanager.IF
	obs  *ifObserver
	// tuner is the self-tuning share state (nil without auto_share).
	tuner atomic.Pointer[ifmanager.ShareTuner]
	// arrivals is the admitted count at the last tuning round,
	// planArrivals at the last placement round (planWarned: the round
	// logged that no profile covers the IF)
	arrivals     uint64
	planArrivals uint64
	planWarned   bool
	// planRate is the arrival rate the last placement round observed;
	// planMask and planDevice the units and the unit group the global
	// stage gave the IF (placement_devices > 1; 0 and -1 before)
	planRate   float64
	planMask   uint64
	planDevice int
	// be is the backend the IF runs on: its spec's, or the one it fell
	// back to (cpu without a CUDA driver, ort for operators the engine
	// lacks).
	be libml.Backend
	// load is how long loading the IF took (its model read, compiled
	// and warmed).
	load time.Duration
}

type portRun struct {
	name   string
	port   dataplane.Port
	out    *egress.Egress
	loop   *ioloop.Loop
	router *ifmanager.Router
}

// New loads models and opens ports as the profile says. Close undoes it.
// An IF whose model fails to load is logged and shown as failed, and the
// rest of the profile serves (see Options.Strict).
func New(ctx context.Context, prof *Profile, log *slog.Logger) (*Appliance, error) {
	return NewWithOptions(ctx, prof, log, Options{})
}

// NewWithOptions is New with start-up options.
func NewWithOptions(ctx context.Context, prof *Profile, log *slog.Logger, opts Options) (_ *Appliance, err error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Appliance{prof: prof, log: log, backends: map[string]libml.Backend{}, ifs: map[string]*ifRun{},
		metrics: newMetricsSet(), started: time.Now()}
	a.iso = isolation{opts: opts, reload: make(chan struct{}, 1)}
	a.metrics.registerCollector(a)
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if prof.Appliance.Placement == PlacementInSS {
		if a.plan, err = loadPlacement(ctx, prof.Appliance.PlacementProfiles); err != nil {
			return nil, err
		}
		if p := prof.Appliance.PlacementLearned; p != "" {
			if a.learned, err = loadLearned(ctx, p); err != nil {
				return nil, err
			}
		}
	}
	if err := a.loadIFs(ctx, prof); err != nil {
		return nil, err
	}
	a.applyShares(false)
	for i := range prof.Ports {
		pr, err := a.openPort(ctx, &prof.Ports[i])
		if err != nil {
			return nil, err
		}
		a.ports = append(a.ports, pr)
		a.addRegion(pr.name, pr.port)
	}
	return a, nil
}

// SetProfilePath records the file the profile came from, for reloads.
func (a *Appliance) SetProfilePath(path string) {
	a.mu.Lock()
	a.path = path
	a.mu.Unlock()
}

func (a *Appliance) backend(ctx context.Context, name string) (libml.Backend, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.backends[name]; ok {
		return b, nil
	}
	var b libml.Backend
	memLimit := a.prof.Appliance.ModelMemoryMB << 20
	cfg := libml.BackendConfig{Units: a.prof.Appliance.Threads, PinUnits: true, ModelMemoryLimit: memLimit}
	switch name {
	case "cpu":
		dev, err := a.cpuDevice()
		if err != nil {
			return nil, err
		}
		b = cpu.OnDevice(dev)
	case "ort":
		b = ort.New(ort.Options{NoSpin: true})
	case "cuda":
		// Units is an SM partition on the cuda backend: instances get the
		// whole device unless a share says otherwise.
		cfg = libml.BackendConfig{ModelMemoryLimit: memLimit}
		b = cuda.NewBackend(cuda.Options{Emulate: a.prof.Appliance.CUDA == CUDAEmu})
	default:
		if pol, ok := strings.CutSuffix(strings.TrimPrefix(name, "sched/"), "/cuda"); ok && strings.HasPrefix(name, "sched/") {
			// A policy on the cuda device: its scheduler drives the cuda
			// backend's instances (a GPU, or the kernel emulator). Where
			// "cuda" fell back to the cpu, the IFs share the cpu
			// scheduler of their policy.
			p, err := sched.ParsePolicy(pol)
			if err != nil {
				return nil, fmt.Errorf("appliance: backend %s: %w", name, err)
			}
			a.mu.Unlock()
			cb, cerr := a.backend(ctx, "cuda")
			if cerr == nil {
				if _, ok := cb.(libml.SegmentBackend); !ok {
					cb, cerr = a.backend(ctx, "sched/"+pol)
				}
			}
			a.mu.Lock()
			if cerr != nil {
				return nil, cerr
			}
			if prev, ok := a.backends[name]; ok {
				return prev, nil
			}
			seg, ok := cb.(libml.SegmentBackend)
			if !ok {
				a.backends[name] = cb
				return cb, nil
			}
			lat := a.metrics.preemptLat.WithLabelValues(string(p), seg.Name())
			b = sched.NewBackend(sched.BackendOptions{Config: sched.Config{Policy: p, Segments: seg,
				OnPreempt: func(ns int64) { lat.Observe(float64(ns) / 1e9) }}})
			break
		}
		if pol, ok := strings.CutPrefix(name, "sched/"); ok {
			p, err := sched.ParsePolicy(pol)
			if err != nil {
				return nil, fmt.Errorf("appliance: backend %s: %w", name, err)
			}
			// One scheduler per policy, all on the one cpu device: the
			// cpu IFs of every policy take turns on the same units. The
			// unit threads keep the process's nice value: a DPDK port
			// polls a core without pause, and units at a higher nice
			// value than the poller get a fraction of that core.
			dev, err := a.cpuDevice()
			if err != nil {
				return nil, err
			}
			// every preemption's latency goes into the histogram as it
			// is measured
			lat := a.metrics.preemptLat.WithLabelValues(string(p), "cpu")
			b = sched.NewBackend(sched.BackendOptions{Config: sched.Config{Policy: p, Device: dev,
				OnPreempt: func(ns int64) { lat.Observe(float64(ns) / 1e9) }}})
			break
		}
		return nil, fmt.Errorf("appliance: unknown backend %q", name)
	}
	if err := b.Init(ctx, cfg); err != nil {
		if name == "cuda" && a.prof.Appliance.CUDA == CUDAAuto && errors.Is(err, cuda.ErrNoDriver) {
			// One binary serves both cases: without a GPU driver the
			// cuda IFs run on the CPU engine. Said once.
			a.log.Warn("no CUDA driver: IFs asking for the cuda backend run on the cpu backend", "err", err)
			a.mu.Unlock()
			cb, cerr := a.backend(ctx, "cpu")
			a.mu.Lock()
			if cerr != nil {
				return nil, cerr
			}
			a.backends[name] = cb
			return cb, nil
		}
		return nil, fmt.Errorf("appliance: backend %s: %w", name, err)
	}
	if name == "cuda" && a.prof.Appliance.CUDA == CUDAEmu {
		a.log.Warn("cuda IFs run on the kernel emulator (appliance.cuda = \"emu\"): the CUDA path on the CPU, for tests and demos, not for speed")
	}
	a.backends[name] = b
	a.mapRegions(b)
	return b, nil
}

// checkSocketBuffers warns when the kernel gave a udp port smaller socket
// buffers than the profile asks for (Linux reports twice the size it
// granted; without root it caps the request at net.core.rmem_max and
// wmem_max): bursts of large requests then overflow the receive buffer.
func (a *Appliance) checkSocketBuffers(s *PortSection, st udp.DriverStats) {
	for _, b := range []struct {
		what, sysctl  string
		asked, gotten int
	}{{"receive", "net.core.rmem_max", s.RecvBufferBytes, st.RecvBuffer / 2},
		{"send", "net.core.wmem_max", s.SendBufferBytes, st.SendBuffer / 2}} {
		if b.gotten < b.asked {
			a.log.Warn("udp port: the kernel capped a socket buffer below the profile's size; raise "+b.sysctl+" or run as root",
				"port", s.Name, "buffer", b.what, "asked_bytes", b.asked, "got_bytes", b.gotten, "sysctl", b.sysctl)
		}
	}
	a.log.Debug("udp port socket buffers", "port", s.Name, "recv_bytes", st.RecvBuffer/2, "send_bytes", st.SendBuffer/2)
}

// cpuDevice is the cpu device (one pool of pinned units, appliance.threads
// of them) that the cpu backend and every scheduler share, started on
// first use; a.mu is held.
func (a *Appliance) cpuDevice() (*cpu.Device, error) {
	if a.cpuDev == nil {
		d, err := cpu.NewDevice(a.prof.Appliance.Threads, true)
		if err != nil {
			return nil, fmt.Errorf("appliance: %w", err)
		}
		a.cpuDev = d
	}
	return a.cpuDev, nil
}

// packetRegion is a port's packet region, mapped into the backends that
// read payloads in place (libml.RegionMapper).
type packetRegion struct {
	port  string
	base  unsafe.Pointer
	size  int
	unmap map[libml.Backend]func() error
}

// addRegion records a port's packet region and maps it into every
// backend that takes one; a.mu must not be held.
func (a *Appliance) addRegion(port string, p dataplane.Port) {
	pr, ok := p.(dataplane.PacketRegioner)
	if !ok {
		return
	}
	base, size := pr.PacketRegion()
	if base == nil || size <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.regions = append(a.regions, &packetRegion{port: port, base: base, size: size, unmap: map[libml.Backend]func() error{}})
	for _, b := range a.backends {
		a.mapRegions(b)
	}
}

// mapRegions maps every recorded packet region into b if b reads
// payloads in place and has not mapped it yet; a.mu is held. A region
// that cannot be mapped is logged: the backend then gathers on the host.
func (a *Appliance) mapRegions(b libml.Backend) {
	m, ok := b.(libml.RegionMapper)
	if !ok {
		return
	}
	for _, r := range a.regions {
		if r.unmap[b] != nil {
			continue
		}
		unmap, err := m.MapRegion(r.base, r.size)
		if err != nil {
			a.log.Warn("packet region not mapped into the backend: its IFs gather on the host", "port", r.port, "backend", b.Name(), "err", err)
			continue
		}
		r.unmap[b] = unmap
		a.log.Info("packet region mapped into the backend: payloads reach the device in place", "port", r.port, "backend", b.Name(), "bytes", r.size)
	}
}

// unmapRegions undoes every mapping (before the ports free their
// regions); a.mu must not be held.
func (a *Appliance) unmapRegions() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.regions {
		for b, unmap := range r.unmap {
			if err := unmap(); err != nil {
				a.log.Warn("packet region unmap", "port", r.port, "backend", b.Name(), "err", err)
			}
		}
	}
	a.regions = nil
}

// loadInstance loads the model an IF section names. A stateful IF's
// model is packed (libml/pack) into one input and one output row,
// laid out as layout says (nil for other IFs).
func (a *Appliance) loadInstance(ctx context.Context, s *IFSection) (libml.Backend, libml.Instance, *pack.Layout, error) {
	be, err := a.backend(ctx, backendKey(s))
	if err != nil {
		return nil, nil, nil, err
	}
	var layout *pack.Layout
	var inst libml.Instance
	kind, ref, _ := strings.Cut(s.Model, ":")
	bl, loadsBytes := be.(libml.ModelBytesLoader)
	switch {
	case kind == "onnx" && loadsBytes:
		inst, layout, err = loadModelFile(ctx, bl, s, ref)
	default:
		var g *graph.Graph
		if kind == "zoo" {
			g, err = zoo.Build(ref, zoo.Options{})
		} else {
			g, err = readONNX(ctx, ref)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("appliance: IF %q: model %s: %w", s.Name, s.Model, err)
		}
		if layout, err = prepareGraph(g, s); err != nil {
			return nil, nil, nil, fmt.Errorf("appliance: IF %q: model %s: %w", s.Name, s.Model, err)
		}
		inst, err = be.LoadModel(ctx, s.Name, g)
		var ue *engine.UnsupportedError
		var ie *engine.InternalError
		if err != nil && kind == "onnx" && (errors.As(err, &ue) || errors.As(err, &ie)) && fallsBack(s) {
			// an operator the engine lacks, or a fault of the engine on
			// this model: ONNX Runtime serves the file
			ob, oerr := a.backend(ctx, "ort")
			if oerr != nil {
				return nil, nil, nil, fmt.Errorf("appliance: IF %q: %w; no fallback: %w", s.Name, err, oerr)
			}
			obl, ok := ob.(libml.ModelBytesLoader)
			if !ok {
				return nil, nil, nil, fmt.Errorf("appliance: IF %q: %w; no fallback: backend %s does not load ONNX files", s.Name, err, ob.Name())
			}
			fi, fl, ferr := loadModelFile(ctx, obl, s, ref)
			if ferr != nil {
				return nil, nil, nil, fmt.Errorf("appliance: IF %q: %w; the fallback to ONNX Runtime failed too: %w", s.Name, err, ferr)
			}
			layout = fl
			if ie != nil {
				a.log.Error("the engine failed on the model (an engine bug; please report it with the model): ONNX Runtime serves the IF (fallback = \"none\" in the IF's spec refuses instead)",
					"if", s.Name, "model", s.Model, "err", ie, "backend", s.Backend)
			} else {
				a.log.Warn("the engine lacks an operator of the model, or a use of one: ONNX Runtime serves the IF (fallback = \"none\" in the IF's spec refuses instead)",
					"if", s.Name, "model", s.Model, "op", ue.Op, "why", ue.Why, "backend", s.Backend)
			}
			be, inst, err = ob, fi, nil
		}
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("appliance: IF %q: %w", s.Name, err)
	}
	if ri, ok := inst.(libml.RealTimeInstance); ok {
		ri.SetRealTime(s.Class == "rt")
	}
	return be, inst, layout, nil
}

// prepareGraph fixes g's input shape as s says and packs a stateful IF's
// model, then checks that the IF manager can serve it.
func prepareGraph(g *graph.Graph, s *IFSection) (*pack.Layout, error) {
	if len(s.InputShape) > 0 {
		if err := fixInputShape(g, s.InputShape, s.State); err != nil {
			return nil, err
		}
	}
	var layout *pack.Layout
	if packs(s) {
		var err error
		if layout, err = pack.Pack(g, pack.Spec{Inputs: s.Inputs, Outputs: s.Outputs, State: s.State}); err != nil {
			return nil, err
		}
	}
	return layout, checkServable(g)
}

// fallsBack reports whether an IF may fall back to ONNX Runtime when the
// engine lacks an operator of its model: cpu and cuda IFs without a
// scheduling policy, unless the spec says fallback = "none".
func fallsBack(s *IFSection) bool {
	return s.Fallback != ifmanager.FallbackNone && (s.Policy == "" || s.Policy == PolicyNone) &&
		(s.Backend == "" || s.Backend == "cpu" || s.Backend == "cuda")
}

// loadModelFile reads the ONNX file ref and loads it into bl, a backend
// that compiles ONNX files itself, with the IF's input shape; a stateful
// IF's model is packed first, and handed over re-encoded.
func loadModelFile(ctx context.Context, bl libml.ModelBytesLoader, s *IFSection, ref string) (libml.Instance, *pack.Layout, error) {
	data, err := readModelFile(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if !packs(s) {
		inst, err := bl.LoadModelBytes(ctx, s.Name, data, s.InputShape)
		return inst, nil, err
	}
	g, err := onnx.Decode(data)
	if err != nil {
		return nil, nil, err
	}
	layout, err := prepareGraph(g, s)
	if err != nil {
		return nil, nil, err
	}
	if data, err = onnx.Encode(g); err != nil {
		return nil, nil, err
	}
	inst, err := bl.LoadModelBytes(ctx, s.Name, data, nil)
	return inst, layout, err
}

// Empty polls before a dpdk port's loop sleeps (ioloop.Config.Spin).
const (
	// spinOwnCore is for a loop with a core the worker units leave free:
	// poll mode, as DPDK means it.
	spinOwnCore = 2000
	// spinSharedCore is for a loop that shares its core with a unit: a
	// spinning loop takes half the core from the unit beside it, and a
	// unit held off its core cannot see a preemption flag (in make run,
	// 2000 empty polls put most preemptions at 250-500 us, 100 polls
	// under 100 us, for the same RT latency).
	spinSharedCore = 100
)

// spinFor is a port's spin: the profile's, or one chosen by whether the
// worker units (threads, 0 = one per core) leave a core free.
func spinFor(spin, threads, cpus int) int {
	if spin > 0 {
		return spin
	}
	if threads > 0 && threads < cpus {
		return spinOwnCore
	}
	return spinSharedCore
}

// backendKey names the backend an IF runs on: its backend, or the
// scheduler of its policy on its device ("sched/reef" on the cpu,
// "sched/reef/cuda" on the cuda device).
func backendKey(s *IFSection) string {
	if s.Policy != "" && s.Policy != PolicyNone {
		if s.Backend == "cuda" {
			return "sched/" + s.Policy + "/cuda"
		}
		return "sched/" + s.Policy
	}
	return s.Backend
}

// loadIF loads an IF's model and makes the IF (not yet started or routed).
func (a *Appliance) loadIF(ctx context.Context, s IFSection) (*ifRun, error) {
	start := time.Now()
	be, inst, layout, err := a.loadInstance(ctx, &s)
	if err != nil {
		return nil, err
	}
	obs := a.metrics.observer(s.Name, s.Class)
	cfg := s.Config()
	if layout != nil {
		cfg.State.Elems, cfg.PayloadShape = layout.StateElems, layout.DataShape
	}
	f, err := ifmanager.New(cfg, be, inst, obs, a.log)
	if err != nil {
		_ = inst.Close()
		return nil, err
	}
	if s.Next != "" {
		next := s.Next
		a.mu.Lock()
		nr := a.ifs[next]
		a.mu.Unlock()
		if nr != nil {
			if err := fitsNextStage(f, nr.f); err != nil {
				_ = inst.Close()
				return nil, err
			}
		}
		f.SetNext(next, func() *ifmanager.IF {
			a.mu.Lock()
			defer a.mu.Unlock()
			if n := a.ifs[next]; n != nil {
				return n.f
			}
			return nil
		})
	}
	r := &ifRun{spec: s, f: f, obs: obs, be: be, load: time.Since(start), planDevice: -1}
	obs.run = r
	if s.AutoShare {
		r.tuner.Store(ifmanager.NewShareTuner(s.SLO()))
	}
	a.log.Info("IF loaded", "if", s.Name, "model", s.Model, "backend", be.Name(), "policy", s.Policy, "model_id", s.ModelID,
		"class", s.Class, "input_shape", inst.InputShape(), "output_shape", inst.OutputShape(),
		"request_bytes", f.RequestBytes(), "share", s.Share, "auto_share", s.AutoShare,
		"load_ms", time.Since(start).Milliseconds())
	return r, nil
}

// packs reports whether an IF's model is packed into one input and one
// output row (libml/pack): it keeps state per flow, or names its data
// inputs or outputs.
func packs(s *IFSection) bool { return s.State != nil || s.Inputs != nil || s.Outputs != nil }

// fitsNextStage checks that next, the next stage of f's pipeline, takes
// f's results as its payload.
func fitsNextStage(f, next *ifmanager.IF) error {
	name := next.Config().Name
	if in := next.Config().Input; in != ifmanager.InputF32 {
		return &ifmanager.FieldError{Key: "next", Detail: fmt.Sprintf(": the next stage %q takes %q payloads; a pipeline stage after the first takes f32, the previous stage's result", name, in)}
	}
	if got, want := f.ResponseBytes(), next.RequestBytes(); got != want {
		return &ifmanager.FieldError{Key: "next", Detail: fmt.Sprintf(": the next stage %q takes %d-byte payloads, this IF's result is %d bytes", name, want, got)}
	}
	return nil
}

// fixInputShape gives the graph's data input (the one input that is not an
// initializer) the per-request shape, keeping a leading batch dimension.
func fixInputShape(g *graph.Graph, shape []int64, state []pack.Binding) error {
	var data []int
	for i, in := range g.Inputs {
		if g.Initializer(in.Name) == nil && !slices.ContainsFunc(state, func(b pack.Binding) bool { return b.Input == in.Name }) {
			data = append(data, i)
		}
	}
	if len(data) != 1 {
		return fmt.Errorf("input_shape: the model has %d data inputs, want 1", len(data))
	}
	in := &g.Inputs[data[0]]
	if len(in.Dims) != len(shape)+1 {
		return fmt.Errorf("input_shape %v: input %q has %d dimensions including the batch", shape, in.Name, len(in.Dims))
	}
	for i, d := range shape {
		if old := in.Dims[i+1]; old > 0 && old != d {
			return fmt.Errorf("input_shape %v: dimension %d of input %q is fixed at %d", shape, i+1, in.Name, old)
		}
		in.Dims[i+1] = d
	}
	in.DimParams = nil
	return nil
}

func (a *Appliance) openPort(ctx context.Context, s *PortSection) (*portRun, error) {
	ap := &a.prof.Appliance
	var (
		port dataplane.Port
		bufs int
		err  error
	)
	switch s.Driver {
	case "udp":
		bufs = s.PoolSize
		if bufs == 0 {
			bufs = 16384
		}
		addr, _ := netip.ParseAddrPort(s.Listen)
		var up *udp.Port
		up, err = udp.Open(ctx, udp.Config{Addr: addr, BufCount: bufs, BufSize: 9216,
			RecvBuffer: s.RecvBufferBytes, SendBuffer: s.SendBufferBytes})
		if err == nil {
			port = up
			a.checkSocketBuffers(s, up.DriverStats())
		}
	case "dpdk":
		switch {
		case a.eal:
		case dpdk.EALInitialized():
			// the process (a program embedding the appliance, a test
			// binary) runs the EAL already: its ports open on it, and
			// it is the process's to clean up
			a.log.Debug("dpdk: the EAL is already running in this process: appliance.eal is not applied", "port", s.Name)
		default:
			args := ap.EAL
			if len(args) == 0 {
				args = dpdk.DefaultEALArgs()
			}
			if err := dpdk.InitEAL(args); err != nil {
				return nil, fmt.Errorf("appliance: port %s: %w", s.Name, err)
			}
			a.eal = true
		}
		bufs = s.PoolSize
		if bufs == 0 {
			bufs = 65535
		}
		ip, _ := netip.ParseAddr(s.IP)
		port, err = dpdk.Open(dpdk.Config{Vdev: s.Vdev, IP: ip, UDPPort: uint16(s.UDPPort), PoolSize: uint32(bufs), Logger: a.log})
	}
	if err != nil {
		return nil, fmt.Errorf("appliance: port %s: %w", s.Name, err)
	}
	ecfg := egress.DefaultConfig()
	ecfg.FragSize = s.FragSize
	ecfg.OnSent = a.metrics.sentObserver(s.Name)
	out, err := egress.New(ecfg)
	if err != nil {
		port.Close()
		return nil, fmt.Errorf("appliance: port %s: %w", s.Name, err)
	}
	router := ifmanager.NewRouter()
	for _, name := range a.order {
		if err := router.Add(a.ifs[name].f); err != nil {
			port.Close()
			return nil, err
		}
	}
	lcfg := ioloop.DefaultConfig()
	lcfg.Spin = spinFor(s.Spin, ap.Threads, runtime.NumCPU())
	if ap.DrainTimeoutMS > 0 { // at most half the drain timeout (see ApplianceSection)
		lcfg.DrainTimeout = min(lcfg.DrainTimeout, time.Duration(ap.DrainTimeoutMS)*time.Millisecond/2)
	}
	loop, err := ioloop.New(lcfg, port, out, router, a.log.With("port", s.Name))
	if err != nil {
		port.Close()
		return nil, err
	}
	rc := reasm.DefaultConfig()
	rc.MaxRequests = ap.MaxInflight
	rc.MaxRequestBytes = uint32(ap.MaxRequestBytes)
	rc.Timeout = time.Duration(ap.ReassemblyTimeoutMS) * time.Millisecond
	rc.LateWindow = time.Duration(ap.LateWindowMS) * time.Millisecond
	rc.MaxLate = ap.MaxLate
	rc.MaxHeldFragments = min(rc.MaxHeldFragments, bufs-2*ioloop.DefaultConfig().Burst-2048)
	if _, err := loop.NewTable(rc); err != nil {
		port.Close()
		return nil, fmt.Errorf("appliance: port %s: %w", s.Name, err)
	}
	a.log.Info("port open", "port", s.Name, "driver", s.Driver, "buffers", bufs)
	return &portRun{name: s.Name, port: port, out: out, loop: loop, router: router}, nil
}

// Run serves until ctx ends, then drains: ports stop receiving, requests
// still being reassembled are answered shutting_down, queued requests are
// served and answered, and Run returns.
func (a *Appliance) Run(ctx context.Context) error {
	var ready atomic.Bool
	hctx, stopAux := context.WithCancel(context.Background())
	defer stopAux()
	if m := a.prof.Appliance.Metrics; m != "off" {
		if err := a.serveHTTP(hctx, m, &ready); err != nil {
			return err
		}
	}
	var auxWG sync.WaitGroup
	defer auxWG.Wait()
	if a.prof.Appliance.Control != "off" {
		srv, err := a.newControlServer()
		if err != nil {
			return err
		}
		if err := srv.Listen(); err != nil {
			return fmt.Errorf("appliance: control: %w", err)
		}
		a.controlEndpoint.Store(srv.Endpoint())
		a.log.Info("control listening", "endpoint", srv.Endpoint())
		auxWG.Add(1)
		go func() {
			defer auxWG.Done()
			if err := srv.Run(hctx); err != nil {
				a.log.Error("control server", "err", err)
			}
		}()
	}
	ifCtx, stopIFs := context.WithCancel(context.Background())
	a.mu.Lock()
	a.ifCtx, a.running = ifCtx, true
	for _, name := range a.order {
		a.startIF(a.ifs[name])
	}
	a.mu.Unlock()
	auxWG.Add(1)
	go func() {
		defer auxWG.Done()
		a.tuneShares(hctx)
	}()
	if a.plan != nil {
		auxWG.Add(1)
		go func() {
			defer auxWG.Done()
			a.planShares(hctx)
		}()
	}
	errc := make(chan error, len(a.ports))
	for _, p := range a.ports {
		go func() {
			if err := p.loop.Run(ctx); err != nil {
				errc <- fmt.Errorf("port %s: %w", p.name, err)
				return
			}
			errc <- nil
		}()
	}
	ready.Store(true)
	a.log.Info("sluice serving", "ports", len(a.ports), "ifs", len(a.order))
	<-ctx.Done()
	a.shuttingDown.Store(true)
	ready.Store(false) // draining: no longer ready for new work
	a.log.Info("draining")
	var errs []error
	for range a.ports {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	stopAux()
	stopIFs()
	a.mu.Lock()
	a.running = false // a control command abandoned at shutdown starts no IF now
	a.mu.Unlock()
	a.ifWG.Wait()
	for _, p := range a.ports {
		p.loop.Flush() // the answers of requests the IFs finished after the loop stopped
	}
	a.log.Info("sluice drained")
	return errors.Join(errs...)
}

// startIF runs r's worker; a.mu must be held.
func (a *Appliance) startIF(r *ifRun) {
	a.ifWG.Add(1)
	go func() {
		defer a.ifWG.Done()
		r.f.Run(a.ifCtx)
	}()
}

// PortAddr returns the local address of a udp port (useful when the
// profile listens on port 0), or false.
func (a *Appliance) PortAddr(name string) (netip.AddrPort, bool) {
	for _, p := range a.ports {
		if u, ok := p.port.(*udp.Port); ok && p.name == name {
			return u.LocalAddr(), true
		}
	}
	return netip.AddrPort{}, false
}

// Stats is a snapshot of the appliance's counters.
type Stats struct {
	Ports []PortStats
	IFs   []IFStats
}

// PortStats are one port's counters.
type PortStats struct {
	Name      string
	Port      dataplane.PortStats
	Completed uint64
	// Drops counts requests and datagrams dropped, by reason
	// (sluice_drops_total's reasons; only those seen).
	Drops     map[string]uint64
	Responses uint64
}

// IFStats are one IF's counters.
type IFStats struct {
	Name                                string
	Served, Failed, Overloaded, Batches uint64
	MeanBatch                           float64
	MeanComputeMS                       float64
	// BatchItems counts the requests run in batches, PayloadCopies the
	// copies of their payloads the backend made on their way to the
	// model's input (ifmanager.Counters).
	BatchItems, PayloadCopies uint64
	// DeadlineAdmission and DeadlineBatch count the requests answered
	// deadline_exceeded at admission and at batch formation, Late those
	// answered ok past their deadline (ifmanager.Counters).
	DeadlineAdmission, DeadlineBatch, Late uint64
}

// eachDrop calls f with every reason the port drops for and its count:
// the reassembler's, the router's unknown_model and the I/O loop's
// no_reply_slot (sluice_drops_total and Stats both read them here).
func (p *portRun) eachDrop(f func(reason string, n uint64)) {
	t := p.loop.Table()
	for _, r := range reasm.Reasons() {
		f(r.String(), t.C.Drops(r))
	}
	f("unknown_model", p.router.Unknown.Load())
	f("no_reply_slot", p.loop.C.NoReplySlot.Load())
}

// Stats returns the appliance's counters.
func (a *Appliance) Stats() Stats {
	var s Stats
	for _, p := range a.ports {
		t := p.loop.Table()
		ps := PortStats{Name: p.name, Port: p.port.Stats(), Completed: t.C.Completed.Load(),
			Drops: map[string]uint64{}, Responses: p.out.C.Responses.Load()}
		p.eachDrop(func(reason string, n uint64) {
			if n > 0 {
				ps.Drops[reason] = n
			}
		})
		s.Ports = append(s.Ports, ps)
	}
	for _, r := range a.ifRuns() {
		f := r.f
		b := f.C.Batches.Load()
		st := IFStats{Name: f.Config().Name, Served: f.C.Served.Load(), Failed: f.C.Failed.Load(),
			Overloaded: f.C.Overloaded.Load(), Batches: b}
		st.BatchItems, st.PayloadCopies = f.C.BatchItems.Load(), f.C.PayloadCopies.Load()
		st.DeadlineAdmission, st.DeadlineBatch, st.Late = f.C.DeadlineAdmission.Load(), f.C.DeadlineBatch.Load(), f.C.Late.Load()
		if b > 0 {
			st.MeanBatch = float64(f.C.BatchItems.Load()) / float64(b)
			st.MeanComputeMS = float64(f.C.ComputeNS.Load()) / float64(b) / 1e6
		}
		s.IFs = append(s.IFs, st)
	}
	return s
}

// Close releases ports, models and backends.
func (a *Appliance) Close() {
	a.unmapRegions()
	for _, p := range a.ports {
		if err := p.port.Close(); err != nil {
			a.log.Warn("port close", "port", p.name, "err", err)
		}
	}
	a.ports = nil
	// Stop the backends (their worker threads, device contexts), once
	// each: "cuda" may be the cpu backend. An IF that never ran still
	// holds its instance; the backend then says so (a scheduler frees its
	// models all the same).
	// Schedulers go first: one on the cuda device holds instances of
	// the cuda backend.
	a.mu.Lock()
	stopped := map[libml.Backend]bool{}
	for _, schedulers := range []bool{true, false} {
		for name, b := range a.backends {
			if _, ok := b.(libml.Scheduling); ok != schedulers {
				continue
			}
			if !stopped[b] {
				stopped[b] = true
				if err := b.Deinit(); err != nil {
					a.log.Debug("backend stopped with instances open", "backend", name, "err", err)
				}
			}
			delete(a.backends, name)
		}
	}
	if a.cpuDev != nil {
		if err := a.cpuDev.Close(); err != nil {
			a.log.Debug("cpu device stopped with users", "err", err)
		}
		a.cpuDev = nil
	}
	a.mu.Unlock()
	if a.eal {
		if err := dpdk.CleanupEAL(); err != nil {
			a.log.Warn("dpdk cleanup", "err", err)
		}
		a.eal = false
	}
}
