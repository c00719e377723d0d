package main

import (
	"bufio"
	"fmt"
	"math"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"sluice/libml/sched"
	"sluice/libml/zoo"
)

// modelSpec is one DISB model scaled for this machine.
type modelSpec struct {
	// Role is REEF's model name (RNET, VGG, YOLO, BERT, GPT2); Zoo the zoo
	// model standing in for it and Opt its size.
	Role, Zoo string
	Opt       zoo.Options
}

func (m modelSpec) size() string {
	if m.Zoo == "bert" && m.Opt.Layers == 0 {
		return "BERT-base: 12 layers, seq 128, hidden 768, 12 heads, FF 3072"
	}
	if m.Opt.Height == 0 && m.Zoo != "bert" {
		return "224x224, 1000 classes"
	}
	if m.Zoo == "bert" {
		return fmt.Sprintf("%d layers, seq %d, hidden %d, %d heads, FF %d", m.Opt.Layers, m.Opt.SeqLen, m.Opt.Hidden, m.Opt.Heads, m.Opt.FF)
	}
	return fmt.Sprintf("%dx%d, %d classes", m.Opt.Height, m.Opt.Width, m.Opt.Classes)
}

// fullModels maps REEF's five DISB models to zoo models at their standard
// sizes (for a GPU: -full).
func fullModels() map[string]modelSpec {
	std := zoo.Options{Seed: 1}
	return map[string]modelSpec{
		"RNET": {"RNET", "resnet50", std},
		"VGG":  {"VGG", "vgg16", std},
		"YOLO": {"YOLO", "resnet18", std},
		"BERT": {"BERT", "bert", std},
		"GPT2": {"GPT2", "mobilenetv2", std},
	}
}

// defaultModels maps REEF's five DISB models to zoo models sized for a
// 2-core CPU (the real ones take seconds here).
func defaultModels(scale int) map[string]modelSpec {
	img := func(h int) zoo.Options { return zoo.Options{Height: h * scale, Width: h * scale, Classes: 10, Seed: 1} }
	return map[string]modelSpec{
		"RNET": {"RNET", "resnet50", img(32)},
		"VGG":  {"VGG", "vgg16", img(32)},
		"YOLO": {"YOLO", "resnet18", img(32)},
		"BERT": {"BERT", "bert", zoo.Options{Layers: 4, SeqLen: 32 * scale, Hidden: 128, Heads: 4, FF: 512, Seed: 1}},
		"GPT2": {"GPT2", "mobilenetv2", img(48)},
	}
}

var allRoles = []string{"RNET", "VGG", "YOLO", "BERT", "GPT2"}

// client is one DISB client.
type client struct {
	Name  string
	Role  string // model role
	Class sched.Class
	// RT clients: Rate is the fraction of the model's max throughput, and
	// Poisson picks exponential gaps (else uniform); Trace replaces both
	// with explicit arrival offsets.
	Rate    float64
	Poisson bool
	Trace   []time.Duration
}

// workload is one DISB workload (REEF Table 2) or a trace.
type workload struct {
	Name, Desc string
	Clients    []client
}

func disbWorkloads() map[string]workload {
	be1 := []client{{Name: "be0", Role: "RNET", Class: sched.BE}}
	var be5, rt5u, rt5p []client
	for i, r := range allRoles {
		be5 = append(be5, client{Name: fmt.Sprint("be", i), Role: r, Class: sched.BE})
		rt5u = append(rt5u, client{Name: fmt.Sprint("rt", i), Role: r, Class: sched.RT, Rate: 0.1})
		rt5p = append(rt5p, client{Name: fmt.Sprint("rt", i), Role: r, Class: sched.RT, Rate: 0.1, Poisson: true})
	}
	rtVGG := func(rate float64) []client {
		return []client{{Name: "rt0", Role: "VGG", Class: sched.RT, Rate: rate}}
	}
	return map[string]workload{
		"A": {"A", "1 RT VGG at 50% (uniform), 1 BE RNET", append(rtVGG(0.5), be1...)},
		"B": {"B", "1 RT VGG at 100% (uniform), 1 BE RNET", append(rtVGG(1.0), be1...)},
		"C": {"C", "1 RT VGG at 50% (uniform), 5 BE (all models)", append(rtVGG(0.5), be5...)},
		"D": {"D", "5 RT (all models) at 10% each (uniform), 5 BE (all models)", append(rt5u, be5...)},
		"E": {"E", "5 RT (all models) at 10% each (Poisson), 5 BE (all models)", append(rt5p, be5...)},
	}
}

// readTrace reads a trace file: one request per line, "<arrival ms>
// <model>" where model is a DISB role (RNET, VGG, YOLO, BERT, GPT2) or a
// zoo model name; '#' starts a comment. The requests become RT clients
// (one per model) next to DISB C-E's five BE clients.
func readTrace(path string, models map[string]modelSpec) (workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return workload{}, err
	}
	defer f.Close()
	byRole := map[string]*client{}
	var order []string
	sc := bufio.NewScanner(f)
	line := 0
	n := 0
	for sc.Scan() {
		line++
		txt := sc.Text()
		if i := strings.IndexByte(txt, '#'); i >= 0 {
			txt = txt[:i]
		}
		fs := strings.Fields(txt)
		if len(fs) == 0 {
			continue
		}
		if len(fs) != 2 {
			return workload{}, fmt.Errorf("%s:%d: want \"<arrival ms> <model>\", got %q", path, line, sc.Text())
		}
		ms, err := strconv.ParseFloat(fs[0], 64)
		if err != nil || ms < 0 || math.IsInf(ms, 0) || math.IsNaN(ms) {
			return workload{}, fmt.Errorf("%s:%d: bad arrival time %q", path, line, fs[0])
		}
		role := ""
		for r, m := range models {
			if strings.EqualFold(fs[1], r) || fs[1] == m.Zoo {
				role = r
			}
		}
		if role == "" {
			return workload{}, fmt.Errorf("%s:%d: unknown model %q (have RNET, VGG, YOLO, BERT, GPT2 or their zoo names)", path, line, fs[1])
		}
		c := byRole[role]
		if c == nil {
			c = &client{Name: "trace-" + role, Role: role, Class: sched.RT}
			byRole[role] = c
			order = append(order, role)
		}
		c.Trace = append(c.Trace, time.Duration(ms*float64(time.Millisecond)))
		n++
	}
	if err := sc.Err(); err != nil {
		return workload{}, fmt.Errorf("%s: %w", path, err)
	}
	if n == 0 {
		return workload{}, fmt.Errorf("%s: no requests", path)
	}
	w := workload{Name: "T", Desc: fmt.Sprintf("trace %s (%d RT requests), 5 BE (all models)", path, n)}
	for _, r := range order {
		c := byRole[r]
		sort.Slice(c.Trace, func(a, b int) bool { return c.Trace[a] < c.Trace[b] })
		w.Clients = append(w.Clients, *c)
	}
	for i, r := range allRoles {
		w.Clients = append(w.Clients, client{Name: fmt.Sprint("be", i), Role: r, Class: sched.BE})
	}
	return w, nil
}

// clientResult is what one client measured inside the window.
type clientResult struct {
	Name, Role string
	Class      string
	Done       int
	// LatNs are the RT requests' latencies (arrival -> finish).
	LatNs []int64
	// Preempt counts preemptions of its jobs; ReexecNs their re-run work.
	Preempt  int
	ReexecNs float64
	PadBlk   int64
	BusyNs   int64
	// SvcNs, WaitNs and TailNs split RT latencies into first kernel start
	// -> last kernel end, arrival -> first kernel start, and last kernel
	// end -> finished.
	SvcNs, WaitNs, TailNs []int64
	// Viol counts requests whose latency exceeded alpha x standalone.
	Viol int
	// NormThr is jobs/s over the model's max jobs/s (summed over rounds).
	NormThr float64
	// Arrived counts RT requests scheduled inside the window.
	Arrived int
	// Wrong counts jobs (inside the window or not) whose output differs
	// from the model's output for the same input alone, in any bit.
	Wrong int
}

// runWorkload runs w's clients (rtOnly: only the RT ones) on s for warm +
// dur and returns the per-client results inside the window.
func runWorkload(s *sched.Scheduler, w workload, models map[string]*sched.Model, maxThr map[string]float64,
	standalone map[string]float64, rtOnly bool, warm, dur time.Duration, alpha float64, seed int64) []*clientResult {
	// every client's input, and the model's output for it alone: the
	// reference each job's output must equal, bit for bit
	inputs := make([][]float32, len(w.Clients))
	refs := make([][]float32, len(w.Clients))
	for ci, c := range w.Clients {
		if rtOnly && c.Class != sched.RT {
			continue
		}
		m := models[c.Role]
		in := make([]float32, m.InputSize())
		rng := rand.New(rand.NewSource(seed + int64(ci)))
		for i := range in {
			in[i] = float32(rng.NormFloat64())
		}
		j := &sched.Job{Model: m, Class: sched.BE, In: in, Out: make([]float32, m.OutputSize())}
		if err := s.Submit(j); err != nil {
			fatalf("reference of %s: %v", c.Name, err)
		}
		if err := j.Wait(); err != nil {
			fatalf("reference of %s: %v", c.Name, err)
		}
		inputs[ci], refs[ci] = in, j.Out
	}
	start := sched.Now() + int64(2*time.Millisecond)
	winLo, winHi := start+int64(warm), start+int64(warm+dur)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var results []*clientResult
	var mu sync.Mutex
	beQueue := 0
	for ci, c := range w.Clients {
		if rtOnly && c.Class != sched.RT {
			continue
		}
		m := models[c.Role]
		r := &clientResult{Name: c.Name, Role: c.Role, Class: c.Class.String()}
		results = append(results, r)
		in, ref := inputs[ci], refs[ci]
		rng := rand.New(rand.NewSource(seed + int64(ci) + 7919))
		std := standalone[c.Role]
		record := func(j *sched.Job) {
			if j.Err == nil && !sameBits(j.Out, ref) {
				mu.Lock()
				r.Wrong++
				mu.Unlock()
			}
			if j.Err != nil || j.Finished < winLo || j.Finished > winHi {
				return
			}
			mu.Lock()
			r.Done++
			r.Preempt += j.Preemptions
			r.ReexecNs += j.ReexecNs
			r.PadBlk += j.PadBlocks
			r.BusyNs += j.Finished - j.Started
			if c.Class == sched.RT {
				r.SvcNs = append(r.SvcNs, j.KernelEnd-j.KernelStart)
				r.WaitNs = append(r.WaitNs, j.KernelStart-j.Arrival)
				r.TailNs = append(r.TailNs, j.Finished-j.KernelEnd)
				r.LatNs = append(r.LatNs, j.LatencyNs())
			}
			if float64(j.LatencyNs()) > alpha*std {
				r.Viol++
			}
			mu.Unlock()
		}
		user := 1 + ci
		if c.Class == sched.BE {
			q := beQueue
			beQueue++
			out := make([]float32, m.OutputSize()) // closed loop: one job at a time
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sched.Now() < start {
					time.Sleep(100 * time.Microsecond)
				}
				for {
					select {
					case <-stop:
						return
					default:
					}
					j := &sched.Job{Model: m, Class: sched.BE, Queue: q, User: user, In: in, Out: out}
					if err := s.Submit(j); err != nil {
						return
					}
					j.Wait()
					record(j)
				}
			}()
			continue
		}
		// RT: open loop at the arrival times
		var arrivals []int64
		if c.Trace != nil {
			for _, t := range c.Trace {
				if int64(t) <= int64(warm+dur) {
					arrivals = append(arrivals, start+int64(t))
				}
			}
		} else {
			rate := c.Rate * maxThr[c.Role] // requests per second
			gap := float64(time.Second) / rate
			t := float64(start) + gap*rng.Float64()
			for t < float64(winHi) {
				arrivals = append(arrivals, int64(t))
				if c.Poisson {
					t += rng.ExpFloat64() * gap
				} else {
					t += gap
				}
			}
		}
		for _, at := range arrivals {
			if at >= winLo && at <= winHi {
				r.Arrived++
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// sleep on a thread of its own with nanosleep and no timer
			// slack: Go's timers wake up to a millisecond late when every
			// P is idle
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			syscall.Syscall(syscall.SYS_PRCTL, 29 /* PR_SET_TIMERSLACK */, 1, 0)
			var pending []*sched.Job
			for _, at := range arrivals {
				for {
					d := at - sched.Now()
					if d <= 0 {
						break
					}
					select {
					case <-stop:
						return
					default:
					}
					d = min(d, int64(50*time.Millisecond))
					ts := syscall.NsecToTimespec(d)
					syscall.Nanosleep(&ts, nil)
				}
				j := &sched.Job{Model: m, Class: sched.RT, User: user, In: in, Out: make([]float32, m.OutputSize()), Arrival: at, Done: record}
				if err := s.Submit(j); err != nil {
					return
				}
				pending = append(pending, j)
			}
			for _, j := range pending {
				j.Wait()
			}
		}()
	}
	// counters start with the window
	for sched.Now() < winLo {
		time.Sleep(time.Millisecond)
	}
	s.ResetStats()
	// stop at the end of the window
	for sched.Now() < winHi {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "disb: clients did not stop within 30 s; closing the scheduler")
	}
	mu.Lock()
	for _, r := range results {
		r.NormThr = float64(r.Done) / dur.Seconds() / maxThr[r.Role]
	}
	mu.Unlock()
	return results
}

// measureMax measures a model's maximum throughput alone: closed loop, one
// job at a time, on its own scheduler (seq).
func measureMax(s *sched.Scheduler, m *sched.Model, d time.Duration) (jobsPerSec, meanNs float64) {
	in := make([]float32, m.InputSize())
	for i := 0; i < 3; i++ {
		j := &sched.Job{Model: m, Class: sched.BE, In: in}
		s.Submit(j)
		j.Wait()
	}
	var n int64
	t0 := time.Now()
	var busy atomic.Int64
	for time.Since(t0) < d || n < 5 {
		j := &sched.Job{Model: m, Class: sched.BE, In: in}
		if err := s.Submit(j); err != nil {
			break
		}
		j.Wait()
		busy.Add(j.Finished - j.Submitted)
		n++
	}
	el := time.Since(t0).Seconds()
	return float64(n) / el, float64(busy.Load()) / float64(n)
}

// sameBits reports whether two outputs are equal bit for bit.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
