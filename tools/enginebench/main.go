// Command enginebench measures libml's CPU engine on the zoo models and
// PaddleOCR's classifier and detector (ppocr-cls, ppocr-det; `make deps`
// unpacks them):
// latency at each batch size (with ONNX Runtime at the same thread count
// when libml/ort can load it), the cost of the preemption checks (a second
// binary built with -tags sluice_nopreempt), resident memory per instance,
// and load time with and without LinkModel. It prints a markdown report.
//
// Every measurement runs in a child process of its own, so peak RSS is per
// model and the backends do not disturb each other.
//
//	enginebench [-models resnet18,mobilenetv2,resnet50] [-batches 1,8]
//	            [-units N] [-time 3s] [-nochk path] [-ort=true] [-json file]
//	enginebench -profile resnet18 -batch 1   # per-kernel times
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/ort"
	"sluice/libml/zoo"
	ncpu "sluice/native/cpu"
	"sluice/tools/internal/zoomodel"
)

// Result is one child's measurements.
type Result struct {
	Model, Backend string
	Checks         bool
	Units          int
	Version        string `json:",omitempty"`
	Error          string `json:",omitempty"`
	// LoadMs is LoadModel (weights in, batch-1 plan compiled); ConfigMs
	// ConfigureBatch(max batch); LinkMs LinkModel + ConfigureBatch.
	LoadMs, ConfigMs, LinkMs float64
	WeightMB                 float64
	Kernels                  int
	// RSS in MB: before loading, after the first instance is configured,
	// after a linked second instance is configured; peak over the run.
	RSSBaseMB, RSSLoadedMB, RSSLinkedMB, PeakRSSMB float64
	// ArenaMB is the activation arena of one instance (max batch).
	ArenaMB float64
	Lat     []Lat
	// Preempt: latency from Preempt() to the preempted run returning, at
	// the largest batch size.
	Preempt *PreemptStats `json:",omitempty"`
}

// PreemptStats summarizes preemption latency trials.
type PreemptStats struct {
	Batch, Trials, Preempted int
	MedianUs, P99Us, MaxUs   float64
	RestoreExtraPct          float64
	RunMs                    float64
}

// Lat is the latency of one batch size.
type Lat struct {
	Batch              int
	MedianMs, P90Ms    float64
	MinMs              float64
	Iters              int
	ImagesPerS         float64
	GFLOPs, GFLOPsPerS float64 `json:",omitempty"`
}

func main() {
	models := flag.String("models", "resnet18,mobilenetv2,resnet50", "zoo models")
	batches := flag.String("batches", "1,8", "batch sizes")
	units := flag.Int("units", runtime.NumCPU(), "compute units (and ONNX Runtime intra-op threads)")
	dur := flag.Duration("time", 3*time.Second, "measuring time per model and batch size")
	nochk := flag.String("nochk", "", "enginebench built with -tags sluice_nopreempt, for the check overhead")
	withORT := flag.Bool("ort", true, "compare with ONNX Runtime when libml/ort can load it")
	int8Kernels := flag.Bool("int8-kernels", false, "for -int8 models, also measure the cpu backend without AMX (backend cpu-noamx: VNNI) and without VNNI (cpu-novnni: AVX2)")
	unitsToo := flag.Bool("units-too", false, "also measure the cpu backend with every batch on the units (backend cpu-units: cpu.InlineNever), the baseline of its inline choice")
	rounds := flag.Int("rounds", 2, "alternating rounds of checked / unchecked runs")
	jsonOut := flag.String("json", "", "also write the results as JSON here")
	child := flag.String("child", "", "(internal) measure one model: backend:model")
	profile := flag.String("profile", "", "print per-kernel times of one model")
	batch := flag.Int("batch", 1, "batch size for -profile")
	pin := flag.Bool("pin", false, "pin compute units to cores")
	trials := flag.Int("preempt-trials", 30, "preemption latency trials per model (0: none)")
	ortProfile := flag.Bool("ort-profile", false, "with -profile: also run the model under ONNX Runtime's profiler and print its time per node beside ours")
	flag.Parse()
	bs, err := parseInts(*batches)
	if err != nil {
		fatal(err)
	}
	switch {
	case *child != "":
		backend, model, _ := strings.Cut(*child, ":")
		r := measure(backend, model, bs, *units, *dur, *pin, *trials)
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			fatal(err)
		}
	case *profile != "":
		if err := profileModel(*profile, *batch, *units, *pin, *ortProfile); err != nil {
			fatal(err)
		}
	default:
		if err := report(strings.Split(*models, ","), *batches, *units, *dur, *nochk, *withORT, *unitsToo, *int8Kernels, *rounds, *jsonOut, *pin, *trials); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "enginebench:", err)
	os.Exit(1)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad batch size %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// gflop is the multiply-add work of one request of the standard zoo models
// at 224x224 (2 flops per MAC).
var gflop = map[string]float64{"resnet18": 3.64, "resnet50": 8.18, "mobilenetv2": 0.60, "vgg16": 30.9, "squeezenet11": 0.70, "bert": 22.35,
	"mlp": 2 * (1536*128 + 128*128 + 128) / 1e9,
	// the 3-D U-Net at 32x64x64: its 3x3x3 and 1x1x1 convolutions and
	// 2x2x2 transposed ones, multiply-adds x 2
	"unet3d": 12.33}

// msf formats milliseconds with three significant digits or more (a
// tiny model's batch takes microseconds).
func msf(v float64) string {
	switch {
	case v < 0.1:
		return fmt.Sprintf("%.4f", v)
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// rssMB reads VmRSS and VmHWM from /proc/self/status.
func rssMB() (rss, hwm float64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, k := range []string{"VmRSS:", "VmHWM:"} {
			if strings.HasPrefix(line, k) {
				fs := strings.Fields(line)
				if len(fs) >= 2 {
					v, _ := strconv.ParseFloat(fs[1], 64)
					if k == "VmRSS:" {
						rss = v / 1024
					} else {
						hwm = v / 1024
					}
				}
			}
		}
	}
	return rss, hwm
}

func settle() float64 {
	runtime.GC()
	debug.FreeOSMemory()
	r, _ := rssMB()
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// measure runs in a child: one backend, one model.
func measure(backend, model string, batches []int, units int, dur time.Duration, pin bool, trials int) (r Result) {
	r = Result{Model: model, Backend: backend, Checks: ncpu.ChecksCompiled(), Units: units}
	ctx := context.Background()
	maxB := 0
	for _, b := range batches {
		maxB = max(maxB, b)
	}
	var be libml.Backend
	switch backend {
	case "cpu":
		be = cpu.New()
	case "cpu-noamx", "cpu-novnni":
		// the integer GEMM without AMX tiles (VNNI), or without VNNI
		// either (AVX2): the same bits, other instructions
		be = cpu.New()
		if backend == "cpu-noamx" {
			ncpu.SetQGemmKernel(ncpu.QGemmNoAMX)
		} else {
			ncpu.SetQGemmKernel(ncpu.QGemmNoVNNI)
		}
	case "cpu-units":
		// every batch on the units (cpu.InlineNever): the baseline of the
		// inline choice
		cb := cpu.New()
		cb.SetInline(cpu.InlineNever)
		be = cb
	case "ort":
		be = ort.New(ort.Options{IntraOpThreads: units, Quiet: true})
	default:
		r.Error = "unknown backend " + backend
		return r
	}
	if err := be.Init(ctx, libml.BackendConfig{Units: units, PinUnits: pin}); err != nil {
		r.Error = err.Error()
		return r
	}
	defer be.Deinit()
	if backend == "ort" {
		r.Version = ort.Version()
	}
	r.RSSBaseMB = settle() // before the graph exists
	g, err := zoomodel.Build(ctx, model, zoo.Options{})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.WeightMB = float64(g.WeightBytes()) / 1e6
	t0 := time.Now()
	inst, err := be.LoadModel(ctx, model, g)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.LoadMs = ms(time.Since(t0))
	defer inst.Close()
	t0 = time.Now()
	if err := be.ConfigureBatch(inst, maxB); err != nil {
		r.Error = err.Error()
		return r
	}
	r.ConfigMs = ms(time.Since(t0))
	g = nil // the engine holds its own copy of the weights
	if ci, ok := inst.(*cpu.Instance); ok {
		r.ArenaMB = float64(ci.ArenaBytes()) / 1e6
		if p, err := ci.Program(1); err == nil {
			r.Kernels = len(p.Kernels)
		}
	}
	isz, osz := inst.InputSize(), inst.OutputSize()
	in := zoo.Input(1, maxB*isz)
	out := make([]float32, maxB*osz)
	if err := be.InferBatch(ctx, inst, maxB, in, out); err != nil { // touch the arena
		r.Error = err.Error()
		return r
	}
	r.RSSLoadedMB = settle()
	t0 = time.Now()
	second, err := be.LinkModel(ctx, inst)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if err := be.ConfigureBatch(second, maxB); err != nil {
		r.Error = err.Error()
		return r
	}
	r.LinkMs = ms(time.Since(t0))
	if err := be.InferBatch(ctx, second, maxB, in, out); err != nil {
		r.Error = err.Error()
		return r
	}
	r.RSSLinkedMB = settle()
	second.Close()
	for _, b := range batches {
		// warm up, then measure for dur (at least 5, at most 200 runs)
		for i := 0; i < 2; i++ {
			if err := be.InferBatch(ctx, inst, b, in, out); err != nil {
				r.Error = err.Error()
				return r
			}
		}
		var ts []float64
		start := time.Now()
		for len(ts) < 5 || (time.Since(start) < dur && len(ts) < 200) {
			t := time.Now()
			if err := be.InferBatch(ctx, inst, b, in, out); err != nil {
				r.Error = err.Error()
				return r
			}
			ts = append(ts, ms(time.Since(t)))
		}
		sort.Float64s(ts)
		l := Lat{Batch: b, MedianMs: ts[len(ts)/2], P90Ms: ts[len(ts)*9/10], MinMs: ts[0], Iters: len(ts)}
		l.ImagesPerS = float64(b) / (l.MedianMs / 1000)
		if gf, ok := gflop[model]; ok {
			l.GFLOPs = gf * float64(b)
			l.GFLOPsPerS = l.GFLOPs / (l.MedianMs / 1000)
		}
		r.Lat = append(r.Lat, l)
	}
	if ci, ok := inst.(*cpu.Instance); ok && ncpu.ChecksCompiled() && trials > 0 {
		r.Preempt = preemptTrials(ci, maxB, in[:maxB*isz], trials)
	}
	_, r.PeakRSSMB = rssMB()
	return r
}

// preemptTrials preempts runs at random moments and measures how long the
// run takes to stop (flag seen by running blocks, queue reset, waiter
// woken), and how much longer preempted-then-restored runs take than
// uninterrupted ones.
func preemptTrials(inst *cpu.Instance, batch int, in []float32, trials int) *PreemptStats {
	st := &PreemptStats{Batch: batch, Trials: trials}
	buf, err := inst.Input(batch)
	if err != nil {
		return nil
	}
	copy(buf, in)
	t := time.Now()
	for i := 0; i < 3; i++ {
		if _, _, err := inst.Run(batch, 0); err != nil {
			return nil
		}
	}
	run := time.Since(t) / 3
	st.RunMs = ms(run)
	seed := uint64(12345)
	var lat []float64
	var total time.Duration
	for i := 0; i < st.Trials; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		delay := time.Duration(seed>>33) % run
		var t0 time.Time
		timer := make(chan struct{})
		go func() {
			time.Sleep(delay)
			t0 = time.Now()
			inst.Preempt()
			close(timer)
		}()
		start := time.Now()
		pre, resume, err := inst.Run(batch, 0)
		t1 := time.Now()
		<-timer
		if err != nil {
			return nil
		}
		if pre {
			st.Preempted++
			lat = append(lat, float64(t1.Sub(t0).Nanoseconds())/1000)
			if _, _, err := inst.Run(batch, resume); err != nil {
				return nil
			}
			total += time.Since(start) - t1.Sub(t0)
		} else {
			total += time.Since(start)
		}
	}
	if len(lat) > 0 {
		sort.Float64s(lat)
		st.MedianUs, st.P99Us, st.MaxUs = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	st.RestoreExtraPct = 100 * (float64(total)/float64(st.Trials)/float64(run) - 1)
	return st
}

// runChild runs bin as a child measuring backend:model.
func runChild(bin, backend, model, batches string, units int, dur time.Duration, pin bool, trials int) Result {
	args := []string{"-child", backend + ":" + model, "-batches", batches, "-units", strconv.Itoa(units),
		"-time", dur.String(), fmt.Sprintf("-pin=%v", pin), "-preempt-trials", strconv.Itoa(trials)}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	var r Result
	if jerr := json.Unmarshal(outb, &r); jerr != nil {
		msg := fmt.Sprintf("child %s %s: %v", backend, model, err)
		if err == nil {
			msg = fmt.Sprintf("child %s %s: %v", backend, model, jerr)
		}
		return Result{Model: model, Backend: backend, Error: msg}
	}
	return r
}

func report(models []string, batches string, units int, dur time.Duration, nochk string, withORT, unitsToo, int8Kernels bool,
	rounds int, jsonOut string, pin bool, trials int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if !ncpu.ChecksCompiled() {
		return errors.New("run the checked build (this one was built with -tags sluice_nopreempt)")
	}
	loadStart := loadavg()
	ortNote := "ONNX Runtime not compared (-ort=false)"
	if withORT {
		lib, err := ort.LibraryPath()
		if err == nil {
			_, err = os.Stat(lib)
		}
		if err != nil {
			withORT = false
			ortNote = fmt.Sprintf("ONNX Runtime not compared: %v", err)
		}
	}
	var all []Result
	type pair struct{ chk, nochk []Result }
	over := map[string]*pair{}
	for _, m := range models {
		fmt.Fprintf(os.Stderr, "enginebench: %s\n", m)
		p := &pair{}
		over[m] = p
		for i := 0; i < max(rounds, 1); i++ {
			tr := 0
			if i == 0 {
				tr = trials
			}
			r := runChild(self, "cpu", m, batches, units, dur, pin, tr)
			p.chk = append(p.chk, r)
			if nochk != "" {
				p.nochk = append(p.nochk, runChild(nochk, "cpu", m, batches, units, dur, pin, 0))
			}
			if nochk == "" {
				break
			}
		}
		all = append(all, best(p.chk))
		if int8Kernels && strings.HasSuffix(m, zoomodel.Int8Suffix) {
			for _, kb := range []string{"cpu-noamx", "cpu-novnni"} {
				var ks []Result
				for i := 0; i < max(rounds, 1); i++ {
					ks = append(ks, runChild(self, kb, m, batches, units, dur, pin, 0))
				}
				all = append(all, best(ks))
			}
		}
		if unitsToo {
			var us []Result
			for i := 0; i < max(rounds, 1); i++ {
				us = append(us, runChild(self, "cpu-units", m, batches, units, dur, pin, 0))
			}
			all = append(all, best(us))
		}
		if withORT {
			var ors []Result
			for i := 0; i < max(rounds, 1); i++ {
				ors = append(ors, runChild(self, "ort", m, batches, units, dur, pin, 0))
			}
			r := best(ors)
			all = append(all, r)
			if r.Version != "" {
				ortNote = fmt.Sprintf("ONNX Runtime %s with %d intra-op threads", r.Version, units)
			}
		}
	}
	w := os.Stdout
	host, _ := os.Hostname()
	fmt.Fprintf(w, "## libml CPU engine benchmark\n\n")
	fmt.Fprintf(w, "Host %s, %d CPUs, %d compute units (pinned: %v), Go %s, %s. %s.\n\n",
		host, runtime.NumCPU(), units, pin, runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 MST"), ortNote)
	fmt.Fprintf(w, "Latency per batch: median of repeated runs (%v per model and batch size, best median of %d child processes per backend); seeded inputs; the zoo models with seeded, untrained weights at their standard sizes (224x224 images, unet3d 32x64x64 volumes), PaddleOCR's (ppocr-cls 3x48x192, ppocr-det 3x320x320) with their trained ones. Load average at start: %s (the host is shared; other jobs' load shows as noise).\n\n", dur, max(rounds, 1), loadStart)
	fmt.Fprintf(w, "| model | backend | batch | median ms | p90 ms | images/s | GFLOP/s |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range all {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | %s | – | error: %s | | | |\n", r.Model, r.Backend, strings.ReplaceAll(r.Error, "|", "/"))
			continue
		}
		for _, l := range r.Lat {
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %.1f | %.1f |\n", r.Model, r.Backend, l.Batch, msf(l.MedianMs), msf(l.P90Ms), l.ImagesPerS, l.GFLOPsPerS)
		}
	}
	if nochk != "" {
		fmt.Fprintf(w, "\nPreemption checks (prologue + in-block polls) compiled in vs out (-tags sluice_nopreempt); best median of %d alternating runs each; goal: within 2%%.\n\n", rounds)
		fmt.Fprintf(w, "| model | batch | checks in ms | checks out ms | overhead |\n|---|---:|---:|---:|---:|\n")
		for _, m := range models {
			p := over[m]
			a, b := best(p.chk), best(p.nochk)
			if a.Error != "" || b.Error != "" {
				fmt.Fprintf(w, "| %s | – | error: %s %s | | |\n", m, a.Error, b.Error)
				continue
			}
			for i, l := range a.Lat {
				if i < len(b.Lat) {
					fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %+.1f%% |\n", m, l.Batch, l.MedianMs, b.Lat[i].MedianMs,
						100*(l.MedianMs-b.Lat[i].MedianMs)/b.Lat[i].MedianMs)
				}
			}
		}
	}
	fmt.Fprintf(w, "\nPreemption latency: a goroutine calls Preempt() at a random moment of a run at the largest batch size; latency is until the preempted run returns (running blocks exit at their next check, queued kernels are dropped, the waiter wakes). Restore re-runs from the interrupted kernel's idempotent group; extra is the mean cost of preempt+restore over an uninterrupted run (timer latency excluded).\n\n")
	fmt.Fprintf(w, "| model | batch | run ms | preempted/trials | median µs | p99 µs | max µs | restore extra |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range all {
		if r.Error != "" || r.Preempt == nil {
			continue
		}
		p := r.Preempt
		fmt.Fprintf(w, "| %s | %d | %.1f | %d/%d | %.0f | %.0f | %.0f | %+.1f%% |\n", r.Model, p.Batch, p.RunMs, p.Preempted, p.Trials,
			p.MedianUs, p.P99Us, p.MaxUs, p.RestoreExtraPct)
	}
	fmt.Fprintf(w, "\nMemory and load time (one process per row; RSS after GC, relative to the process before the model graph was built; the graph itself is dropped after loading; the linked instance shares the weights and adds its own activation arena, configured for the largest batch).\n\n")
	fmt.Fprintf(w, "| model | backend | weights MB | arena MB | RSS loaded MB | + linked instance MB | peak RSS MB | load ms | configure ms | LinkModel+configure ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range all {
		if r.Error != "" {
			continue
		}
		arena := "–"
		if r.Backend == "cpu" {
			arena = fmt.Sprintf("%.1f", r.ArenaMB)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %.1f | %+.1f | %.1f | %.1f | %.1f | %.1f |\n", r.Model, r.Backend, r.WeightMB, arena,
			r.RSSLoadedMB-r.RSSBaseMB, r.RSSLinkedMB-r.RSSLoadedMB, r.PeakRSSMB, r.LoadMs, r.ConfigMs, r.LinkMs)
	}
	if jsonOut != "" {
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"results": all, "overhead": over}); err != nil {
			return err
		}
		if err := os.WriteFile(jsonOut, []byte(buf.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// best keeps, per batch size, the run with the lowest median.
func best(rs []Result) Result {
	if len(rs) == 0 {
		return Result{Error: "no run"}
	}
	out := rs[0]
	out.Lat = append([]Lat{}, out.Lat...)
	for _, r := range rs[1:] {
		if r.Error != "" {
			continue
		}
		if out.Preempt == nil {
			out.Preempt = r.Preempt
		}
		if out.Error != "" {
			out = r
			continue
		}
		for i := range out.Lat {
			if i < len(r.Lat) && r.Lat[i].MedianMs < out.Lat[i].MedianMs {
				out.Lat[i] = r.Lat[i]
			}
		}
	}
	return out
}

// profileModel prints per-kernel metadata and measured times.
func profileModel(model string, batch, units int, pin, withORT bool) error {
	ctx := context.Background()
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: units, PinUnits: pin}); err != nil {
		return err
	}
	defer be.Deinit()
	g, err := zoomodel.Build(ctx, model, zoo.Options{})
	if err != nil {
		return err
	}
	inst, err := be.LoadModel(ctx, model, g)
	if err != nil {
		return err
	}
	defer inst.Close()
	if err := be.ConfigureBatch(inst, batch); err != nil {
		return err
	}
	ci := inst.(*cpu.Instance)
	in, _ := ci.Input(batch)
	copy(in, zoo.Input(1, len(in)))
	if _, err := ci.Profile(ctx, batch, 2); err != nil {
		return err
	}
	ks, err := ci.Profile(ctx, batch, 5)
	if err != nil {
		return err
	}
	var total float64
	for _, k := range ks {
		total += k.WallNs
	}
	var ortNodes, ortRest map[string]ortNode
	var ortTotal float64
	if withORT {
		nodes, t, og, err := ortNodeTimes(model, batch, units, 2, 5)
		if err != nil {
			return fmt.Errorf("onnxruntime profile: %w", err)
		}
		names := map[string]string{} // a fused kernel is "pointwise>depthwise"
		for _, k := range ks {
			for _, n := range strings.Split(k.Name, ">") {
				names[n] = k.Name
			}
		}
		ortNodes, ortRest = attributeORT(nodes, og, names)
		ortTotal = t
	}
	w := io.Writer(os.Stdout)
	var cpuSum float64
	for _, k := range ks {
		cpuSum += k.BlockNs * float64(k.Grid)
	}
	fmt.Fprintf(w, "%s batch %d: %d kernels, %.2f ms (sum of kernel times), %.2f ms of unit time in blocks\n", model, batch, len(ks), total/1e6, cpuSum/1e6)
	fmt.Fprintf(w, "%4s %-9s %-24s %-22s %5s %5s %10s %10s %6s %8s\n", "#", "op", "ops", "node", "grid", "units", "block us", "kernel us", "%", "GFLOP/s")
	fmt.Fprintf(w, "     (block us: mean time of one block; kernel us: wall time of the kernel; GFLOP/s: its arithmetic over its wall time, a multiply-add two)\n")
	if withORT {
		fmt.Fprintf(w, "     (ort: ONNX Runtime's node of the same name, its op and median time, and ours ÷ its; %.2f ms of node time in all)\n", ortTotal/1e3)
	}
	for _, k := range ks {
		idem := ""
		if !k.Idempotent {
			idem = fmt.Sprintf(" in-place, restart at %d", k.IdemEntry)
		}
		rate := "-"
		if k.Flops > 0 && k.WallNs > 0 {
			rate = fmt.Sprintf("%.1f", k.Flops/k.WallNs)
		}
		fmt.Fprintf(w, "%4d %-9s %-24s %-22s %5d %5d %10.1f %10.1f %6.1f %8s%s%s\n", k.Index, k.Op, trunc(k.Ops, 24), trunc(k.Name, 22),
			k.Grid, k.MaxUnits, k.BlockNs/1e3, k.WallNs/1e3, 100*k.WallNs/total, rate, idem, ortColumn(ortNodes, k.Name, k.WallNs))
	}
	if withORT {
		var rest []string
		for name := range ortRest {
			rest = append(rest, name)
		}
		sort.Strings(rest)
		for _, name := range rest {
			n := ortRest[name]
			fmt.Fprintf(w, "     ort only: %-22s %-16s %8.1f us\n", name, n.Op, n.Us)
		}
	}
	return nil
}

// ortColumn is the ONNX Runtime column of kernel name's row: the time of
// the nodes attributed to it.
func ortColumn(nodes map[string]ortNode, name string, wallNs float64) string {
	n, ok := nodes[name]
	if !ok {
		return ""
	}
	ratio := "-"
	if n.Us > 0 {
		ratio = fmt.Sprintf("%.2f", wallNs/1e3/n.Us)
	}
	return fmt.Sprintf("   ort %-16s %8.1f us %6s", trunc(n.Op, 16), n.Us, ratio)
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
