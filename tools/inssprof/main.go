// Command inssprof profiles zoo models on the cpu device for InSS's
// latency model (orchestrator/inss) and checks the model against
// measurement, as InSS Tables 3 and 4 do: unit groups play the devices
// and unit counts the shares.
//
//	inssprof [-models mlp,squeezenet11,mobilenetv2,resnet18] [-size 112]
//	         [-batches 1,2,4,8] [-holdout 3,6] [-reps 7] [-json F] [-md F]
//
// Per model it measures, on 1..units units (the instance's unit mask),
// the batch's computing time (median of -reps) at each batch size of
// -batches, which the profile keeps, and of -holdout, which the LWR
// predicts from the profile; the upload and the result per batch size
// (a proxy: the batch's float32 input copied into a tensor of the
// model's input size, its output copied out; the appliance's own gather
// converts u8 images inside the backend's InferInput); its pressure: the slowdown of a memory-streaming probe on
// unit 0's core while the model runs on the last unit; and, for every
// pair of models, its computing time on unit 0 beside the other on the
// last unit. Each model's sensitivity is fitted from its pairs, and each
// pair is predicted with the sensitivity fitted from the other pairs
// (leave one out), against the prediction without an interference term.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/zoo"
	"sluice/orchestrator/inss"
)

type options struct {
	device           string // cpu, cuda or emu (cuda on the kernel emulator)
	models           []string
	size, units      int
	batches, holdout []int
	reps             int
	probeFloats      int // the cuda probe's values
	jsonOut, mdOut   string
}

func main() {
	var o options
	flag.StringVar(&o.device, "device", "cpu", "cpu (unit groups), cuda (SM partitions of GPU 0) or emu (cuda on the kernel emulator)")
	models := flag.String("models", "mlp,squeezenet11,mobilenetv2,resnet18", "zoo models")
	flag.IntVar(&o.size, "size", 112, "image side of the CNNs")
	batches := flag.String("batches", "1,2,4,8", "batch sizes profiled")
	holdout := flag.String("holdout", "3,6", "batch sizes measured and predicted, not profiled")
	flag.IntVar(&o.units, "units", runtime.NumCPU(), "cpu units (2 or more: co-location needs two unit groups)")
	flag.IntVar(&o.reps, "reps", 7, "runs per configuration (the median counts)")
	flag.IntVar(&o.probeFloats, "probe", 16<<20, "cuda: values the memory-streaming probe streams")
	flag.StringVar(&o.jsonOut, "json", "", "write the profiles here (orchestrator/inss JSON)")
	flag.StringVar(&o.mdOut, "md", "", "write the report here as well as to stdout")
	flag.Parse()
	var err error
	o.models = strings.Split(*models, ",")
	if o.batches, err = ints(*batches); err == nil {
		o.holdout, err = ints(*holdout)
	}
	if err == nil && (o.units < 2 || o.reps < 1 || len(o.batches) < 2) {
		err = fmt.Errorf("want -units >= 2, -reps >= 1 and two or more -batches")
	}
	if err == nil && o.device != "cpu" && o.device != "cuda" && o.device != "emu" {
		err = fmt.Errorf("-device %q: want cpu, cuda or emu", o.device)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inssprof:", err)
		os.Exit(2)
	}
	run := runCPU
	if o.device != "cpu" {
		run = runCUDA
	}
	rep, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inssprof:", err)
		os.Exit(1)
	}
	md := rep.markdown(o)
	fmt.Print(md)
	if o.mdOut != "" {
		if err := os.WriteFile(o.mdOut, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "inssprof:", err)
			os.Exit(1)
		}
	}
	if o.jsonOut != "" {
		f, err := os.Create(o.jsonOut)
		if err == nil {
			err = inss.WriteProfiles(f, rep.profiles)
			if e := f.Close(); err == nil {
				err = e
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "inssprof:", err)
			os.Exit(1)
		}
	}
}

func ints(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("batch size %q", f)
		}
		v = append(v, n)
	}
	return v, nil
}

// heldOut is a measured configuration the profile does not hold.
type heldOut struct {
	model       string
	batch       int
	share       float64
	observedNs  float64
	predictedNs float64
}

// pair is model beside other: its computing time alone and beside, and
// the predictions with and without the interference term.
type pair struct {
	model, other       string
	aloneNs, besideNs  float64
	predictedNs        float64
	sensitivityWithout float64
}

type report struct {
	profiles []inss.Profile
	held     []heldOut
	pairs    []pair
	probeNs  float64
	// what was profiled: the device, its share unit and capacity, where
	// pairs and the probe ran
	deviceName, shareUnit  string
	capacity               int
	coLocation, probeWhere string
}

// model is a loaded model with a second instance sharing its weights (to
// run beside it), on a backend whose instances are I.
type model[I libml.Instance] struct {
	name       string
	inst, peer I
	in, out    []float32
	peerOut    []float32 // the peer's outputs (it runs beside inst)
	weights    int64
}

// loadModels loads each zoo model of names at side x side twice
// (loadTwice), with inputs and outputs for batches up to maxB. On an
// error it closes what it loaded.
func loadModels[I libml.Instance](ctx context.Context, be libml.Backend, names []string, side, maxB int) ([]*model[I], error) {
	var ms []*model[I]
	for _, name := range names {
		inst, peer, weights, err := loadTwice(ctx, be, name, side, maxB)
		if err != nil {
			closeModels(ms)
			return nil, err
		}
		ms = append(ms, &model[I]{name: name, inst: inst.(I), peer: peer.(I), weights: weights,
			in: zoo.Input(1, maxB*inst.InputSize()), out: make([]float32, maxB*inst.OutputSize()),
			peerOut: make([]float32, maxB*inst.OutputSize())})
		slog.Info("inssprof: loaded", "model", name)
	}
	return ms, nil
}

// closeModels closes both instances of each model.
func closeModels[I libml.Instance](ms []*model[I]) {
	for _, m := range ms {
		m.inst.Close()
		m.peer.Close()
	}
}

// sweep times model m at every batch size of o (the grid, into p's
// points) and every held-out size (into rep) at the share its instance
// has now, share in the profile's units.
func sweep[I libml.Instance](ctx context.Context, be libml.Backend, m *model[I], share float64, o options, p *inss.Profile, rep *report) error {
	for _, b := range append(slices.Clone(o.batches), o.holdout...) {
		ns, err := timeBatch(ctx, be, m.inst, b, m.in, m.out, o.reps)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if slices.Contains(o.batches, b) {
			p.Points = append(p.Points, inss.Point{Batch: b, Share: share, RunNs: ns})
		} else {
			rep.held = append(rep.held, heldOut{model: m.name, batch: b, share: share, observedNs: ns})
		}
	}
	return nil
}

// fitTransfers fits p's upload and result costs, linear in the batch
// size, to the times transfer measures at each of batches.
func fitTransfers(p *inss.Profile, batches []int, transfer func(b int) (up, res float64, err error)) error {
	var up, res []float64
	for _, b := range batches {
		u, r, err := transfer(b)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Model, err)
		}
		up, res = append(up, u), append(res, r)
	}
	var err error
	if p.Upload, err = inss.FitLinear(batches, up); err != nil {
		return err
	}
	p.Result, err = inss.FitLinear(batches, res)
	return err
}

// timePair is model m's batch of b alone and beside other's peer (its
// goroutine pinned by pin, when given), alternated one batch each, reps
// times, so that a drift of the machine does not land on one side: the
// medians.
func timePair[I libml.Instance](ctx context.Context, be libml.Backend, m, other *model[I], b, reps int, pin func() func()) (pair, error) {
	var alone, besideNs []float64
	for r := 0; r < reps; r++ {
		a, err := timeBatch(ctx, be, m.inst, b, m.in, m.out, 1)
		if err != nil {
			return pair{}, fmt.Errorf("%s: %w", m.name, err)
		}
		bs, err := beside(ctx, be, other.peer, b, other.in, other.peerOut, pin,
			func() (float64, error) { return timeBatch(ctx, be, m.inst, b, m.in, m.out, 1) })
		if err != nil {
			return pair{}, fmt.Errorf("%s beside %s: %w", m.name, other.name, err)
		}
		alone, besideNs = append(alone, a), append(besideNs, bs)
	}
	return pair{model: m.name, other: other.name, aloneNs: median(alone), besideNs: median(besideNs)}, nil
}

func runCPU(ctx context.Context, o options) (*report, error) {
	be := cpu.New()
	be.SetInline(cpu.InlineNever) // a share is the units a batch runs on
	if err := be.Init(ctx, libml.BackendConfig{Units: o.units, PinUnits: true}); err != nil {
		return nil, err
	}
	defer be.Deinit()
	maxB := slices.Max(append(slices.Clone(o.batches), o.holdout...))
	ms, err := loadModels[*cpu.Instance](ctx, be, o.models, o.size, maxB)
	if err != nil {
		return nil, err
	}
	defer closeModels(ms)
	rep := &report{deviceName: cpuModel(), shareUnit: "units", capacity: o.units,
		coLocation: "on unit 0 beside a model on the last unit",
		probeWhere: "on unit 0's core while the model runs on the last unit"}
	first, last := uint64(1), uint64(1)<<(o.units-1)
	// the grid alone, the held-out sizes, upload and result
	for _, m := range ms {
		// an instance's memory: the weights and its arena at the largest
		// batch
		p := inss.Profile{Model: m.name, Device: "cpu", Capacity: o.units, MemBytes: m.weights + m.inst.ArenaBytes()}
		for s := 1; s <= o.units; s++ {
			m.inst.SetUnits(uint64(1)<<s - 1)
			if err := sweep(ctx, be, m, float64(s), o, &p, rep); err != nil {
				return nil, err
			}
		}
		m.inst.SetUnits(0)
		err := fitTransfers(&p, o.batches, func(b int) (float64, float64, error) {
			u, r := copyTimes(m, b, o.reps)
			return u, r, nil
		})
		if err != nil {
			return nil, err
		}
		rep.profiles = append(rep.profiles, p)
	}
	// pressure: the probe on unit 0's core, alone and beside each model
	// on the last unit
	probe := newProbe(32 << 20)
	if rep.probeNs, err = probe.time(nil, o.reps); err != nil {
		return nil, err
	}
	refB := o.batches[len(o.batches)/2]
	for k, m := range ms {
		m.peer.SetUnits(last)
		ns, err := probe.time(func(stop *atomic.Bool) error {
			defer pinTo(o.units - 1)()
			return loop(ctx, be, m.peer, refB, m.in, m.peerOut, stop)
		}, o.reps)
		if err != nil {
			return nil, err
		}
		rep.profiles[k].Pressure = max(ns/rep.probeNs-1, 0)
	}
	// pairs: each model on unit 0 beside each model (itself too) on the
	// last unit (timePair; the goroutines that submit the batches run on
	// their units' cores, so that neither takes the other's core)
	defer pinTo(0)()
	for _, m := range ms {
		m.inst.SetUnits(first)
		if _, err := timeBatch(ctx, be, m.inst, refB, m.in, m.out, 1); err != nil {
			return nil, err
		}
		for _, other := range ms {
			other.peer.SetUnits(last)
			pr, err := timePair(ctx, be, m, other, refB, o.reps, func() func() { return pinTo(o.units - 1) })
			if err != nil {
				return nil, err
			}
			rep.pairs = append(rep.pairs, pr)
		}
		m.inst.SetUnits(0)
	}
	rep.fit("cpu")
	return rep, nil
}

// fit fits each model's sensitivity from all its pairs, predicts each
// pair from the others (leave one out) and predicts the held-out sizes on
// the device kind profiled.
func (r *report) fit(kind string) {
	press := map[string]float64{}
	for _, p := range r.profiles {
		press[p.Model] = p.Pressure
	}
	sens := func(model string, skip int) float64 {
		var ps, sl []float64
		for k, pr := range r.pairs {
			if pr.model == model && k != skip {
				ps, sl = append(ps, press[pr.other]), append(sl, pr.besideNs/pr.aloneNs)
			}
		}
		a, err := inss.FitSensitivity(ps, sl)
		if err != nil {
			return 0
		}
		return a
	}
	for k := range r.profiles {
		r.profiles[k].Sensitivity = sens(r.profiles[k].Model, -1)
	}
	for k := range r.pairs {
		pr := &r.pairs[k]
		pr.sensitivityWithout = sens(pr.model, k)
		pr.predictedNs = pr.aloneNs * (1 + pr.sensitivityWithout*press[pr.other])
	}
	m, err := inss.NewModel(r.profiles, 0)
	if err != nil {
		return
	}
	for k := range r.held {
		h := &r.held[k]
		h.predictedNs, _ = m.RunNs(h.model, kind, h.batch, h.share)
	}
}

// minSampleNs is the least time a measurement's batches take together:
// a batch of a few µs is measured that many times more (at most
// maxReps), so that one disturbed batch does not decide its median.
const (
	minSampleNs = 2e6
	maxReps     = 200
)

// loadTwice loads zoo model name at side x side on be, links a second
// instance to its weights (to run beside it) and configures both for
// batches up to maxB.
func loadTwice(ctx context.Context, be libml.Backend, name string, side, maxB int) (inst, peer libml.Instance, weights int64, err error) {
	g, err := zoo.Build(name, zoo.Options{Height: side, Width: side})
	if err != nil {
		return nil, nil, 0, err
	}
	if inst, err = be.LoadModel(ctx, name, g); err != nil {
		return nil, nil, 0, err
	}
	if peer, err = be.LinkModel(ctx, inst); err != nil {
		inst.Close()
		return nil, nil, 0, err
	}
	for _, i := range []libml.Instance{inst, peer} {
		if err := be.ConfigureBatch(i, maxB); err != nil {
			inst.Close()
			peer.Close()
			return nil, nil, 0, err
		}
	}
	return inst, peer, g.WeightBytes(), nil
}

// timeBatch is the median time of reps batches of b (after one warm-up),
// or of more where reps batches take under minSampleNs.
func timeBatch(ctx context.Context, be libml.Backend, inst libml.Instance, b int, in, out []float32, reps int) (float64, error) {
	isz, osz := inst.InputSize(), inst.OutputSize()
	ts := make([]float64, 0, reps)
	for r := -1; r < reps; r++ {
		t0 := time.Now()
		if err := be.InferBatch(ctx, inst, b, in[:b*isz], out[:b*osz]); err != nil {
			return 0, fmt.Errorf("batch %d: %w", b, err)
		}
		ns := float64(time.Since(t0).Nanoseconds())
		if r < 0 {
			reps = min(max(reps, int(minSampleNs/max(ns, 1))), maxReps)
			continue
		}
		ts = append(ts, ns)
	}
	return median(ts), nil
}

// beside runs batches of b on peer (its goroutine pinned by pin, when
// given: pin returns what unpins) until measure returns, and returns what
// it measured.
func beside(ctx context.Context, be libml.Backend, peer libml.Instance, b int, in, out []float32,
	pin func() func(), measure func() (float64, error)) (float64, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bgErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if pin != nil {
			defer pin()()
		}
		bgErr = loop(ctx, be, peer, b, in, out, &stop)
	}()
	time.Sleep(10 * time.Millisecond)
	ns, err := measure()
	stop.Store(true)
	wg.Wait()
	return ns, errors.Join(err, bgErr)
}

// loop runs batches of b until stop is set.
func loop(ctx context.Context, be libml.Backend, inst libml.Instance, b int, in, out []float32, stop *atomic.Bool) error {
	isz, osz := inst.InputSize(), inst.OutputSize()
	for !stop.Load() {
		if err := be.InferBatch(ctx, inst, b, in[:b*isz], out[:b*osz]); err != nil {
			return err
		}
	}
	return nil
}

// copyTimes are the medians of copying a batch's input into a tensor of
// the model's input size (the upload: on the cpu the backend converts the
// payload into the model's input) and its output out (the result).
func copyTimes[I libml.Instance](m *model[I], b, reps int) (float64, float64) {
	isz, osz := m.inst.InputSize(), m.inst.OutputSize()
	dstIn, dstOut := make([]float32, b*isz), make([]float32, b*osz)
	var up, res []float64
	for r := 0; r < reps; r++ {
		t0 := time.Now()
		copy(dstIn, m.in[:b*isz])
		t1 := time.Now()
		copy(dstOut, m.out[:b*osz])
		up, res = append(up, float64(t1.Sub(t0).Nanoseconds())), append(res, float64(time.Since(t1).Nanoseconds()))
	}
	return median(up), median(res)
}

// probe is a memory-streaming loop over a buffer larger than the
// last-level cache, on one core.
type probe struct{ a, b []byte }

func newProbe(n int) *probe { return &probe{a: make([]byte, n), b: make([]byte, n)} }

// time is the median time of one pass (reps passes) on the first
// allowed CPU while beside, if given, runs until the passes end.
func (p *probe) time(beside func(stop *atomic.Bool) error, reps int) (float64, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bgErr error
	if beside != nil {
		wg.Add(1)
		go func() { defer wg.Done(); bgErr = beside(&stop) }()
		time.Sleep(20 * time.Millisecond)
	}
	ts := make([]float64, 0, reps)
	done := make(chan error, 1)
	go func() {
		defer pinTo(0)()
		for r := -1; r < 3*reps; r++ {
			t0 := time.Now()
			copy(p.b, p.a)
			copy(p.a, p.b)
			if r >= 0 {
				ts = append(ts, float64(time.Since(t0).Nanoseconds()))
			}
		}
		done <- nil
	}()
	<-done
	stop.Store(true)
	wg.Wait()
	return median(ts), bgErr
}

// pinTo locks the calling goroutine to its thread and the thread to the
// k-th CPU the process may use (where the cpu device pins unit k), and
// returns what undoes both.
func pinTo(k int) (unpin func()) {
	runtime.LockOSThread()
	var cur, set unix.CPUSet
	if unix.SchedGetaffinity(0, &cur) != nil {
		return runtime.UnlockOSThread
	}
	n := 0
	for c := 0; c < 1024; c++ {
		if cur.IsSet(c) {
			if n == k {
				set.Set(c)
				_ = unix.SchedSetaffinity(0, &set)
				break
			}
			n++
		}
	}
	return func() {
		_ = unix.SchedSetaffinity(0, &cur)
		runtime.UnlockOSThread()
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
