// Command disb is REEF's DNN inference serving benchmark (DISB, REEF §6.2,
// Table 2) on sluice's scheduler (libml/sched), scaled for the CPU
// backend: workloads A-E and an optional trace, each run under every
// policy plus RT-only (the RT clients alone), in one invocation, on one
// machine.
//
//	disb [-workloads A,B,C,D,E] [-policies rt-only,reef,reef-nopad,seq,conc,srpt,split]
//	     [-device cpu|cuda] [-cuda driver|emu] [-full]
//	     [-duration 5s] [-warmup 500ms] [-units 2] [-trace file] [-scale 1]
//	     [-window 4] [-alpha 4] [-md report.md] [-json report.json] [-svg plot.svg]
//
// RT clients send open-loop at a fraction of their model's measured
// maximum throughput (uniform or Poisson gaps, or trace times); BE clients
// are closed-loop. The report gives, per workload and policy: RT latency
// (mean, p99) normalized to RT-only, total throughput normalized to seq
// (REEF's metric: each client's jobs/s over its model's maximum,
// summed), preemption latency (p50, p99), the re-executed share of BE
// work, padding's blocks and gain (reef vs reef-nopad), SPLIT's violation
// rate (latency > alpha x standalone) and latency jitter (standard
// deviation), and kernel-selection time; then a restore-overhead
// measurement (each BE job preempted once at a random moment and restored
// at once) and the models' sizes.
//
// -device cuda runs the same workloads through the same scheduler on the
// cuda backend: a GPU through the driver (-cuda driver), or the kernel
// emulator (-cuda emu: the CUDA path on the CPU, to check it, not to time
// it). reef pads there with the device's own selector (sg_pad).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"sluice/libml/graph"
	"sluice/libml/kprof"
	"sluice/libml/sched"
	"sluice/libml/zoo"
)

// row is one (workload, policy) result.
type row struct {
	Workload, Policy           string
	RTMeanMs, RTP50Ms, RTP99Ms float64
	RTJitterMs                 float64
	RTMeanNorm, RTP99Norm      float64
	RTCount, RTArrived         int
	// Thr is REEF's normalized throughput (sum over clients of jobs/s over
	// the model's max); JobsPerSec the raw total; ThrNorm Thr / seq's.
	Thr, JobsPerSec, ThrNorm float64
	BEJobsPerSec             float64
	PreemptN                 int
	PreemptP50Us             float64
	PreemptP99Us             float64
	PreemptMaxUs             float64
	ReexecShare              float64
	PadBlocks                int64
	PadJobs                  int64
	PadBackoffs              int64
	PadGain                  float64
	SelMeanNs, SelMaxNs      float64
	SelCalls                 int64
	SelOver2us               float64
	ViolRate                 float64
	// Wrong counts jobs whose output differed from the model's alone
	// (must be 0: a model's output depends on its input only).
	Wrong int
	// RTMeanNormRounds and ThrNormRounds are the ratios round by round
	// (RT mean over RT-only's, throughput over seq's, each in the same
	// round): their spread is the run-to-run noise of the machine.
	RTMeanNormRounds, ThrNormRounds []float64
	// Disturbed says the RT-only baseline of the workload was disturbed
	// in some round: a policy that runs BE work beside the RT clients
	// had a mean RT latency below 0.9 x RT-only's in that round, which
	// only a slowed baseline explains. Its ratios are not reported.
	Disturbed bool
	Clients   []*clientResult `json:"-"`
}

// roundStat is one policy's RT mean latency and normalized throughput in
// one round.
type roundStat struct{ rtMean, thr float64 }

// roundOf summarizes one round's client results.
func roundOf(res []*clientResult) roundStat {
	var st roundStat
	var sum float64
	var n int
	for _, c := range res {
		st.thr += c.NormThr
		for _, l := range c.LatNs {
			sum += float64(l)
			n++
		}
	}
	if n > 0 {
		st.rtMean = sum / float64(n)
	}
	return st
}

// disturbedBelow is the ratio to RT-only under which a round's RT-only
// baseline counts as disturbed (Disturbed).
const disturbedBelow = 0.9

// roundRatios fills each policy's row with its ratios round by round
// (RT mean over RT-only's, throughput over seq's, in the same round) and
// reports whether the RT-only baseline was disturbed in some round.
func roundRatios(byPol map[string]*row, perRound map[string][]roundStat) (disturbed bool) {
	base, seq := perRound["rt-only"], perRound["seq"]
	for p, r := range byPol {
		r.RTMeanNormRounds, r.ThrNormRounds = nil, nil
		for rd, st := range perRound[p] {
			if len(base) > rd && base[rd].rtMean > 0 && st.rtMean > 0 {
				x := st.rtMean / base[rd].rtMean
				r.RTMeanNormRounds = append(r.RTMeanNormRounds, x)
				disturbed = disturbed || (p != "rt-only" && x < disturbedBelow)
			}
			if len(seq) > rd && seq[rd].thr > 0 {
				r.ThrNormRounds = append(r.ThrNormRounds, st.thr/seq[rd].thr)
			}
		}
	}
	return disturbed
}

type report struct {
	Host string
	// Device is where the schedulers ran: "cpu", "cuda" (a GPU) or
	// "cuda-emu" (the kernel emulator).
	Device string
	// Load is the 1-minute load average at the start of every round (the
	// machine is shared).
	Load       []float64
	Units      int
	Duration   string
	Window     int
	Alpha      float64
	Models     []modelRow
	Rows       []*row
	Restore    []restoreRow
	Splits     []splitRow
	BandwidthM int64
	Command    string
	// Full: the models at their standard sizes (-full)
	Full bool `json:",omitempty"`
}

type modelRow struct {
	Role, Zoo, Size string
	Kernels         int
	StandaloneMs    float64
	MaxPerSec       float64
	Narrow          int
	NarrowMs        float64
	Versions, Kept  int
}

type restoreRow struct {
	Role                string
	Jobs                int
	BaseMs, PreemptedMs float64
	OverheadPct         float64
	// WokenMs: jobs during which the probing thread woke at a random
	// moment and did nothing (the control: what the wake alone costs on
	// a machine whose cores the units fill); OverWokenPct: preempted over
	// woken
	WokenMs, OverWokenPct  float64
	GapUs                  float64
	WorkPct                float64
	Preemptions            int
	ReexecMs, PreemptUsP50 float64
}

type splitRow struct {
	Role             string
	Blocks           int
	Cuts             []int
	MeanMs, StdMs    float64
	Overhead, Fitnes float64
}

func main() {
	wls := flag.String("workloads", "A,B,C,D,E", "DISB workloads to run (A-E; T needs -trace)")
	pols := flag.String("policies", "rt-only,reef,reef-nopad,seq,conc,srpt,split", "policies (rt-only = the RT clients alone under reef)")
	dur := flag.Duration("duration", 4*time.Second, "measurement window per workload and policy (split over the rounds)")
	rounds := flag.Int("rounds", 3, "rounds: each policy runs duration/rounds per round, policies interleaved")
	warm := flag.Duration("warmup", 400*time.Millisecond, "warm-up before each round's window")
	units := flag.Int("units", 2, "worker units")
	window := flag.Int("window", 4, "device window (kernels outstanding per stream)")
	unitNice := flag.Int("unit-nice", 5, "unit threads' nice value above the process's (0: same)")
	padMargin := flag.Float64("pad-margin", 1, "padding's rule 1: block time below this fraction of the RT kernel's remaining time")
	alpha := flag.Float64("alpha", 4, "SPLIT latency target: violation when latency > alpha x standalone time")
	tracePath := flag.String("trace", "", "trace file (\"<arrival ms> <model>\" per line): adds workload T")
	scale := flag.Int("scale", 1, "model size multiplier (image side 32*scale)")
	calib := flag.Duration("calibrate", 250*time.Millisecond, "per round, measure each model's max throughput for this long first (0: once at start)")
	restoreJobs := flag.Int("restore-jobs", 60, "jobs per model in the restore-overhead measurement (0 = skip)")
	mdPath := flag.String("md", "", "write the markdown report here")
	jsonPath := flag.String("json", "", "write the results as JSON here")
	svgPath := flag.String("svg", "", "write the plot (SVG) here")
	seed := flag.Int64("seed", 1, "random seed (arrivals, inputs)")
	replot := flag.String("replot", "", "only re-render the markdown (-md, stdout) and plot (-svg) from a JSON report (-json of an earlier run)")
	profDir := flag.String("profiles", "", "directory of kernel profiles (tools/kprof -o DIR/<ROLE>.json); missing or stale ones are measured")
	devName := flag.String("device", "cpu", "device the schedulers run on: cpu or cuda")
	cudaMode := flag.String("cuda", "driver", "with -device cuda: driver (a GPU) or emu (the kernel emulator)")
	full := flag.Bool("full", false, "the models at their standard sizes (224x224 images, BERT-base) instead of sizes for a 2-core CPU (-scale)")
	flag.Parse()
	if *replot != "" {
		b, err := os.ReadFile(*replot)
		if err != nil {
			fatalf("%v", err)
		}
		var rep report
		if err := json.Unmarshal(b, &rep); err != nil {
			fatalf("%s: %v", *replot, err)
		}
		var pols []string
		seen := map[string]bool{}
		for _, r := range rep.Rows {
			if !seen[r.Policy] {
				seen[r.Policy] = true
				pols = append(pols, r.Policy)
			}
		}
		render(&rep, pols, *mdPath, *svgPath)
		return
	}
	// RT clients sleep in nanosleep on threads of their own, which hold
	// their P while they sleep: spare Ps keep the scheduler's goroutines
	// running
	runtime.GOMAXPROCS(max(8, 2*runtime.NumCPU()))

	specs := defaultModels(*scale)
	if *full {
		specs = fullModels()
	}
	all := disbWorkloads()
	var runs []workload
	for _, w := range strings.Split(*wls, ",") {
		w = strings.TrimSpace(strings.ToUpper(w))
		if w == "" || w == "T" { // T: -trace
			continue
		}
		wl, ok := all[w]
		if !ok {
			fatalf("unknown workload %q (have A, B, C, D, E, T)", w)
		}
		runs = append(runs, wl)
	}
	if *tracePath != "" {
		tw, err := readTrace(*tracePath, specs)
		if err != nil {
			fatalf("%v", err)
		}
		runs = append(runs, tw)
	}
	if len(runs) == 0 {
		fatalf("no workload to run")
	}
	var policies []string
	for _, p := range strings.Split(*pols, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if p != "rt-only" && p != "reef-nopad" {
			if _, err := sched.ParsePolicy(p); err != nil {
				fatalf("%v", err)
			}
		}
		policies = append(policies, p)
	}

	dev, err := openDevice(*devName, *cudaMode, *units, *window, *unitNice)
	if err != nil {
		fatalf("%v", err)
	}
	defer dev.close()
	rep := &report{Units: dev.units(), Duration: dur.String(), Window: *window, Alpha: *alpha, Device: dev.label, Full: *full,
		Command: "disb " + strings.Join(os.Args[1:], " ")}
	rep.Host, _ = os.Hostname()
	if dev.cuda == nil {
		rep.BandwidthM = sched.MeasureBandwidth()
	}

	// graphs, profiles, standalone times and max throughputs, once
	built := map[string]*graph.Graph{} // built once: the weights take seconds to generate
	profiles := map[string]*kprof.Model{}
	maxThr := map[string]float64{}
	standalone := map[string]float64{}
	{
		s, err := sched.New(dev.config(sched.PolicySeq))
		if err != nil {
			fatalf("%v", err)
		}
		for _, r := range allRoles {
			spec := specs[r]
			g, err := zoo.Build(spec.Zoo, spec.Opt)
			if err != nil {
				fatalf("%v", err)
			}
			built[r] = g
			var m *sched.Model
			if *profDir != "" {
				path := filepath.Join(*profDir, r+".json")
				if p, err := kprof.Load(path); err == nil {
					if m, err = s.Load(r, g, sched.ModelOptions{Profile: p}); err != nil {
						fmt.Fprintf(os.Stderr, "disb: profile %s does not fit (%v): measuring\n", path, err)
						m = nil
					}
				}
			}
			if m == nil {
				if m, err = s.Load(r, g, sched.ModelOptions{ProfileRuns: 10}); err != nil {
					fatalf("load %s: %v", r, err)
				}
			}
			profiles[r] = m.Profile()
			thr, mean := measureMax(s, m, 700*time.Millisecond)
			maxThr[r], standalone[r] = thr, mean
			sm := kprof.Summarize(m.Profile(), dev.units())
			rep.Models = append(rep.Models, modelRow{Role: r, Zoo: spec.Zoo, Size: spec.size(), Kernels: m.Kernels(),
				StandaloneMs: mean / 1e6, MaxPerSec: thr, Narrow: sm.NarrowKernels, NarrowMs: sm.NarrowNs / 1e6,
				Versions: sm.Versions, Kept: sm.Kept})
			sp := sched.SplitBest(m.Profile(), 8, sched.GAConfig{Seed: *seed})
			rep.Splits = append(rep.Splits, splitRow{Role: r, Blocks: len(sp.BlockNs), Cuts: sp.Cuts, MeanMs: sp.MeanNs / 1e6,
				StdMs: sp.StdNs / 1e6, Overhead: sp.Overhead, Fitnes: sp.Fitness})
			fmt.Fprintf(os.Stderr, "model %-4s %-12s %-28s %3d kernels  alone %7.2f ms  max %7.1f jobs/s\n",
				r, spec.Zoo, spec.size(), m.Kernels(), mean/1e6, thr)
		}
		s.Close()
	}

	newSched := func(p string) (*sched.Scheduler, map[string]*sched.Model) {
		var cfg sched.Config
		switch p {
		case "rt-only":
			cfg = dev.config(sched.PolicyREEF)
		case "reef-nopad":
			cfg = dev.config(sched.PolicyREEF)
			cfg.NoPadding = true
		default:
			cfg = dev.config(sched.Policy(p))
		}
		cfg.BEQueues, cfg.Alpha, cfg.PadMargin = 5, *alpha, *padMargin
		s, err := sched.New(cfg)
		if err != nil {
			fatalf("%v", err)
		}
		ms := map[string]*sched.Model{}
		for _, r := range allRoles {
			m, err := s.Load(r, built[r], sched.ModelOptions{Profile: profiles[r]})
			if err != nil {
				fatalf("load %s: %v", r, err)
			}
			ms[r] = m
		}
		return s, ms
	}

	type polSched struct {
		s  *sched.Scheduler
		ms map[string]*sched.Model
	}
	scheds := map[string]*polSched{}
	for wi, w := range runs {
		fmt.Fprintf(os.Stderr, "workload %s: %s\n", w.Name, w.Desc)
		// rounds: every policy runs dur/rounds per round, in an order
		// rotated each round, so that slow phases of a shared machine hit
		// every policy alike
		acc := map[string]*accum{}
		perRound := map[string][]roundStat{}
		for _, p := range policies {
			acc[p] = &accum{clients: map[string]*clientResult{}}
		}
		for rd := 0; rd < *rounds; rd++ {
			// calibrate: the models' max throughput now (RT rates are
			// fractions of it; throughput is normalized by it)
			if *calib > 0 {
				maxThr, standalone = calibrate(dev, w, built, profiles, *calib)
			}
			rep.Load = append(rep.Load, loadAvg())
			for k := range policies {
				p := policies[(k+rd)%len(policies)]
				ps := scheds[p]
				if ps == nil {
					// one scheduler per policy for the whole run (loading
					// five models takes a while); idle between runs
					ps = &polSched{}
					ps.s, ps.ms = newSched(p)
					scheds[p] = ps
				}
				runtime.GC() // not inside a window
				res := runWorkload(ps.s, w, ps.ms, maxThr, standalone, p == "rt-only", *warm, *dur/time.Duration(*rounds),
					*alpha, *seed+int64(wi)*1000+int64(rd)*100)
				acc[p].add(res, ps.s.Stats())
				perRound[p] = append(perRound[p], roundOf(res))
			}
		}
		byPol := map[string]*row{}
		for _, p := range policies {
			a := acc[p]
			r := summarize(w.Name, p, a.results(), a.st, *rounds, *dur)
			byPol[p] = r
			rep.Rows = append(rep.Rows, r)
			var svc, wait, tail []int64
			for _, c := range a.results() {
				svc, wait, tail = append(svc, c.SvcNs...), append(wait, c.WaitNs...), append(tail, c.TailNs...)
			}
			fmt.Fprintf(os.Stderr, "  %-10s RT mean %7.2f ms p99 %7.2f ms (n %4d; kernels p50 %.2f p99 %.2f, before p50 %.3f p99 %.3f, after p50 %.3f p99 %.3f)  thr %.3f (%.1f jobs/s)  preempt p50/p90/p99/max %.0f/%.0f/%.0f/%.0f us (n %d)  pad %d blk, %d back-offs\n",
				p, r.RTMeanMs, r.RTP99Ms, r.RTCount, pct(svc, 50)/1e6, pct(svc, 99)/1e6, pct(wait, 50)/1e6, pct(wait, 99)/1e6, pct(tail, 50)/1e6, pct(tail, 99)/1e6,
				r.Thr, r.JobsPerSec, r.PreemptP50Us, pct(a.st.PreemptNs, 90)/1e3, r.PreemptP99Us, r.PreemptMaxUs, r.PreemptN, r.PadBlocks, r.PadBackoffs)
		}
		base, seq, nopad := byPol["rt-only"], byPol["seq"], byPol["reef-nopad"]
		disturbed := roundRatios(byPol, perRound)
		if disturbed {
			fmt.Fprintf(os.Stderr, "  workload %s: the RT-only baseline was disturbed in some round (a policy with BE work below %.1fx RT-only): its latency ratios are not reported\n", w.Name, disturbedBelow)
		}
		for _, p := range policies {
			r := byPol[p]
			r.Disturbed = disturbed
			if base != nil && base.RTMeanMs > 0 && !disturbed {
				r.RTMeanNorm, r.RTP99Norm = r.RTMeanMs/base.RTMeanMs, r.RTP99Ms/base.RTP99Ms
			}
			if seq != nil && seq.Thr > 0 {
				r.ThrNorm = r.Thr / seq.Thr
			}
			if p == "reef" && nopad != nil && nopad.Thr > 0 {
				r.PadGain = r.Thr/nopad.Thr - 1
			}
		}
	}

	for _, ps := range scheds {
		ps.s.Close()
	}
	if *restoreJobs > 0 {
		rep.Restore = measureRestore(dev, built, profiles, *restoreJobs, *seed)
	}

	render(rep, policies, *mdPath, *svgPath)
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(rep, "", " ")
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	for _, r := range rep.Rows {
		if r.Wrong > 0 {
			fatalf("%s %s: %d jobs with an output other than the model's alone", r.Workload, r.Policy, r.Wrong)
		}
	}
}

// render prints the markdown report and writes it to mdPath and the plot
// of policies to svgPath (either "": not written).
func render(rep *report, policies []string, mdPath, svgPath string) {
	md := markdown(rep)
	fmt.Print(md)
	if mdPath != "" {
		if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	if svgPath != "" {
		if err := os.WriteFile(svgPath, []byte(plot(rep, policies)), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
}

func fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "disb: "+f+"\n", a...)
	os.Exit(1)
}

func pct(v []int64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]int64(nil), v...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return float64(s[max(0, min(i, len(s)-1))])
}

func summarize(wl, pol string, res []*clientResult, st sched.Stats, rounds int, dur time.Duration) *row {
	r := &row{Workload: wl, Policy: pol, Clients: res}
	var lat []int64
	var beBusy, reexec float64
	var viol, total int
	for _, c := range res {
		lat = append(lat, c.LatNs...)
		r.RTArrived += c.Arrived
		ps := float64(c.Done) / dur.Seconds()
		r.JobsPerSec += ps
		r.Thr += c.NormThr / float64(rounds)
		if c.Class == "BE" {
			r.BEJobsPerSec += ps
			beBusy += float64(c.BusyNs)
			reexec += c.ReexecNs
		}
		viol += c.Viol
		total += c.Done
		r.Wrong += c.Wrong
	}
	if len(lat) > 0 {
		var sum, sq float64
		for _, l := range lat {
			sum += float64(l)
		}
		mean := sum / float64(len(lat))
		for _, l := range lat {
			sq += (float64(l) - mean) * (float64(l) - mean)
		}
		r.RTMeanMs = mean / 1e6
		r.RTJitterMs = math.Sqrt(sq/float64(len(lat))) / 1e6
		r.RTP50Ms = pct(lat, 50) / 1e6
		r.RTP99Ms = pct(lat, 99) / 1e6
		r.RTCount = len(lat)
	}
	if total > 0 {
		r.ViolRate = float64(viol) / float64(total)
	}
	if beBusy > 0 {
		r.ReexecShare = reexec / beBusy
	}
	r.PreemptN = len(st.PreemptNs)
	r.PreemptP50Us = pct(st.PreemptNs, 50) / 1e3
	r.PreemptP99Us = pct(st.PreemptNs, 99) / 1e3
	r.PreemptMaxUs = pct(st.PreemptNs, 100) / 1e3
	r.PadBlocks = st.PadBlocks
	r.PadJobs = st.PadJobs
	r.PadBackoffs = st.PadBackoffs
	r.SelCalls = st.PadSelect.Calls
	if st.PadSelect.Calls > 0 {
		r.SelMeanNs = float64(st.PadSelect.Ns) / float64(st.PadSelect.Calls)
		r.SelMaxNs = float64(st.PadSelect.MaxNs)
		r.SelOver2us = float64(st.PadSelect.Over2us) / float64(st.PadSelect.Calls)
	}
	return r
}

// measureRestore runs each BE model's jobs alone under reef, preempting
// every other job once at a random moment and restoring it at once (REEF
// §6.4, Fig. 22): overhead = mean time of preempted jobs over unpreempted
// ones, minus one.
func measureRestore(dev *device, graphs map[string]*graph.Graph, profiles map[string]*kprof.Model, jobs int, seed int64) []restoreRow {
	var out []restoreRow
	rng := rand.New(rand.NewSource(seed))
	// precise sleeps: a thread of our own without timer slack
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Syscall(syscall.SYS_PRCTL, 29 /* PR_SET_TIMERSLACK */, 1, 0)
	for _, r := range allRoles {
		cfg := dev.config(sched.PolicyREEF)
		cfg.BEQueues, cfg.NoPadding = 1, true
		s, err := sched.New(cfg)
		if err != nil {
			fatalf("%v", err)
		}
		m, err := s.Load(r, graphs[r], sched.ModelOptions{Profile: profiles[r]})
		if err != nil {
			fatalf("%v", err)
		}
		in := make([]float32, m.InputSize())
		var base, woken, pre, gap, work []float64
		var preempts int
		var reexec float64
		// jobs in turn: undisturbed, woken (control), preempted
		for i := 0; i < jobs*3/2+6; i++ {
			j := &sched.Job{Model: m, Class: sched.BE, In: in}
			if err := s.Submit(j); err != nil {
				fatalf("%v", err)
			}
			preempt, wake := i%3 == 2, i%3 == 1
			if preempt || wake {
				// a random moment inside the job (sleeping: a spinning
				// thread would take a core from the units)
				d := time.Duration(rng.Float64() * 0.9 * m.StandaloneNs())
				ts := syscall.NsecToTimespec(int64(d))
				syscall.Nanosleep(&ts, nil)
				if preempt {
					s.PreemptRestore()
				}
			}
			j.Wait()
			if i < 6 {
				continue // warm-up
			}
			if wake {
				woken = append(woken, float64(j.Finished-j.Started))
				continue
			}
			t := float64(j.Finished - j.Started)
			if preempt && j.Preemptions == 0 {
				continue // it ended before the preemption
			}
			if preempt {
				pre = append(pre, t)
				gap = append(gap, float64(j.RestoreGapNs))
				work = append(work, t-float64(j.RestoreGapNs))
				preempts += j.Preemptions
				reexec += j.ReexecNs
			} else {
				base = append(base, t)
			}
		}
		st := s.Stats()
		s.Close()
		bm, pm, wm := median(base), median(pre), median(woken)
		out = append(out, restoreRow{Role: r, Jobs: len(pre), BaseMs: bm / 1e6, PreemptedMs: pm / 1e6,
			WokenMs: wm / 1e6, OverWokenPct: (pm/wm - 1) * 100,
			OverheadPct: (pm/bm - 1) * 100, GapUs: median(gap) / 1e3, WorkPct: (median(work)/bm - 1) * 100,
			Preemptions: preempts, ReexecMs: reexec / float64(max(1, len(pre))) / 1e6,
			PreemptUsP50: pct(st.PreemptNs, 50) / 1e3})
		fmt.Fprintf(os.Stderr, "restore %-4s alone %.2f ms, woken %.2f ms, preempted once %.2f ms (%+.1f%%), %d preemptions\n", r, bm/1e6, wm/1e6, pm/1e6, (pm/bm-1)*100, preempts)
	}
	return out
}

// accum merges a policy's results over rounds.
type accum struct {
	clients map[string]*clientResult
	order   []string
	st      sched.Stats
}

func (a *accum) add(res []*clientResult, st sched.Stats) {
	for _, c := range res {
		m := a.clients[c.Name]
		if m == nil {
			cp := *c
			a.clients[c.Name] = &cp
			a.order = append(a.order, c.Name)
			continue
		}
		m.Done += c.Done
		m.NormThr += c.NormThr
		m.Arrived += c.Arrived
		m.LatNs = append(m.LatNs, c.LatNs...)
		m.SvcNs = append(m.SvcNs, c.SvcNs...)
		m.WaitNs = append(m.WaitNs, c.WaitNs...)
		m.TailNs = append(m.TailNs, c.TailNs...)
		m.Preempt += c.Preempt
		m.ReexecNs += c.ReexecNs
		m.PadBlk += c.PadBlk
		m.BusyNs += c.BusyNs
		m.Viol += c.Viol
		m.Wrong += c.Wrong
	}
	a.st.Preemptions += st.Preemptions
	a.st.PreemptNs = append(a.st.PreemptNs, st.PreemptNs...)
	a.st.Restores += st.Restores
	a.st.ReexecNs += st.ReexecNs
	a.st.PadBlocks += st.PadBlocks
	a.st.PadNs += st.PadNs
	a.st.PadJobs += st.PadJobs
	a.st.PadBackoffs += st.PadBackoffs
	a.st.PadSelect.Calls += st.PadSelect.Calls
	a.st.PadSelect.Ns += st.PadSelect.Ns
	a.st.PadSelect.MaxNs = max(a.st.PadSelect.MaxNs, st.PadSelect.MaxNs)
	a.st.PadSelect.Over2us += st.PadSelect.Over2us
	a.st.PadSelect.Rule1 += st.PadSelect.Rule1
	a.st.PadSelect.Rule2 += st.PadSelect.Rule2
	a.st.ModeSwitches += st.ModeSwitches
	a.st.Jobs[0] += st.Jobs[0]
	a.st.Jobs[1] += st.Jobs[1]
}

func (a *accum) results() []*clientResult {
	var out []*clientResult
	for _, n := range a.order {
		out = append(out, a.clients[n])
	}
	return out
}

// calibrate measures the max throughput (jobs/s, closed loop, alone) and
// standalone time of every model w uses, on a fresh seq scheduler.
func calibrate(dev *device, w workload, graphs map[string]*graph.Graph, profiles map[string]*kprof.Model, d time.Duration) (map[string]float64, map[string]float64) {
	s, err := sched.New(dev.config(sched.PolicySeq))
	if err != nil {
		fatalf("%v", err)
	}
	defer s.Close()
	thr, alone := map[string]float64{}, map[string]float64{}
	for _, c := range w.Clients {
		if _, ok := thr[c.Role]; ok {
			continue
		}
		m, err := s.Load(c.Role, graphs[c.Role], sched.ModelOptions{Profile: profiles[c.Role]})
		if err != nil {
			fatalf("%v", err)
		}
		thr[c.Role], alone[c.Role] = measureMax(s, m, d)
	}
	return thr, alone
}

// loadAvg is the 1-minute load average (0 if unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
