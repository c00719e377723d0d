// Command appbench measures the appliance end to end: a real sluice
// (kernel UDP on loopback, the cpu backend) serving ResNet-18 at batch 1,
// driven at several loads; it reports client-side p50/p99 latency per class
// and the appliance's own overhead, end to end minus the model's compute
// time measured on the same backend in the same run.
//
//	go build -o bin/appbench ./tools/appbench && bin/appbench
//
// With -backend cuda the IFs run on the cuda backend (a GPU; -cuda emu:
// the kernel emulator), under policy "none" on their own SMs or under a
// scheduling policy on the cuda device, and the compute baseline is the
// cuda backend's (run-gpu.sh's appliance step).
//
// With -overload it drives one IF at 1, 2 and 4 times its capacity
// instead, RT and BE requests mixed, under timeout_action "reject" and
// "serve_late" (overload.go; make bench-overload).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"sluice/appliance"
	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
	"sluice/ifmanager"
	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/cuda"
	"sluice/libml/zoo"
)

type options struct {
	model    string
	duration time.Duration
	loads    []float64
	threads  int
	warm     int
	jsonOut  string
	swaps    int
	policies []string
	// backend is the IFs' backend ("cpu" or "cuda"); cuda the
	// appliance's cuda mode with it ("driver" or "emu")
	backend, cuda string
}

type row struct {
	Setup       string  `json:"setup"`
	Policy      string  `json:"policy"`
	Load        float64 `json:"load"`
	Class       string  `json:"class"`
	RatePerS    float64 `json:"rate_per_s"`
	Sent        int     `json:"sent"`
	OK          int     `json:"ok"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	MeanMS      float64 `json:"mean_ms"`
	ComputeMS   float64 `json:"compute_ms"`
	OverheadMS  float64 `json:"overhead_ms"`
	OverheadPct float64 `json:"overhead_pct"`
}

func main() {
	var o options
	flag.StringVar(&o.model, "model", "resnet18", "zoo model")
	flag.DurationVar(&o.duration, "duration", 6*time.Second, "time per load point")
	flag.IntVar(&o.threads, "threads", 0, "cpu backend units (0: all cores)")
	flag.IntVar(&o.warm, "warm", 20, "model runs to measure compute time")
	flag.StringVar(&o.jsonOut, "json", "", "also write the rows as JSON")
	flag.IntVar(&o.swaps, "swaps", 50, "shadow swaps to run under load (RT IF alone, first policy)")
	pols := flag.String("policies", "none,reef", "scheduling policies to run the set-ups under (appliance.policy), compared at the same request rates")
	flag.StringVar(&o.backend, "backend", "cpu", "the IFs' backend: cpu, or cuda (a GPU; each IF names the policy, and the compute baseline runs on the cuda backend)")
	flag.StringVar(&o.cuda, "cuda", "driver", "with -backend cuda: the appliance's cuda mode, driver (a GPU) or emu (the kernel emulator: the path, not its speed)")
	overload := flag.Bool("overload", false, "overload mode: one IF at -loads-x times its capacity under each timeout_action")
	var ov overloadOptions
	flag.Float64Var(&ov.sloMS, "slo-ms", 100, "overload mode: the IF's slo_ms")
	flag.IntVar(&ov.maxBatch, "max-batch", 8, "overload mode: the IF's max_batch")
	flag.IntVar(&ov.queueLen, "queue-len", 256, "overload mode: the IF's queue_len")
	loadsX := flag.String("loads-x", "1,2,4", "overload mode: loads, as multiples of the IF's capacity")
	flag.Parse()
	if *overload {
		ov.model, ov.threads, ov.duration, ov.jsonOut = o.model, o.threads, o.duration, o.jsonOut
		for _, f := range strings.Split(*loadsX, ",") {
			var x float64
			if _, err := fmt.Sscan(f, &x); err != nil || x <= 0 {
				fmt.Fprintf(os.Stderr, "appbench: -loads-x %q: want positive numbers\n", *loadsX)
				os.Exit(2)
			}
			ov.loads = append(ov.loads, x)
		}
		if err := runOverload(ov); err != nil {
			fmt.Fprintln(os.Stderr, "appbench:", err)
			os.Exit(1)
		}
		return
	}
	if o.backend != "cpu" && o.backend != "cuda" {
		fmt.Fprintf(os.Stderr, "appbench: -backend %q: want cpu or cuda\n", o.backend)
		os.Exit(2)
	}
	if o.cuda != "driver" && o.cuda != "emu" {
		fmt.Fprintf(os.Stderr, "appbench: -cuda %q: want driver or emu\n", o.cuda)
		os.Exit(2)
	}
	o.policies = strings.Split(*pols, ",")
	o.loads = []float64{0.1, 0.3, 0.6, 0.9}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "appbench:", err)
		os.Exit(1)
	}
}

// serve starts an appliance on prof in this process, serving until done is
// called, and a client on loopback (flow, socket buffers of bufBytes) for
// its first port.
func serve(ctx context.Context, prof *appliance.Profile, flow uint32, bufBytes int) (a *appliance.Appliance, addr netip.AddrPort, cl *dptest.Client, done func(), err error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if a, err = appliance.New(ctx, prof, log); err != nil {
		return nil, addr, nil, nil, err
	}
	addr, _ = a.PortAddr("port0")
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(runCtx) }()
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		stop()
		<-runErr
		a.Close()
		return nil, addr, nil, nil, err
	}
	_ = conn.SetReadBuffer(bufBytes)
	_ = conn.SetWriteBuffer(bufBytes)
	done = func() {
		conn.Close()
		stop()
		<-runErr
		a.Close()
	}
	return a, addr, dptest.NewClient(conn, flow, wire.DefaultFragSize), done, nil
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func mean(v []float64) float64 {
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(max(len(v), 1))
}

// computeTime measures the model alone at batch 1 on its own backend
// (the IFs' backend, -backend).
func computeTime(ctx context.Context, o options) ([]float64, error) {
	var be libml.Backend = cpu.New()
	cfg := libml.BackendConfig{Units: o.threads, PinUnits: true}
	if o.backend == "cuda" {
		be, cfg = cuda.NewBackend(cuda.Options{Emulate: o.cuda == "emu"}), libml.BackendConfig{}
	}
	if err := be.Init(ctx, cfg); err != nil {
		return nil, err
	}
	defer be.Deinit()
	g, err := zoo.Build(o.model, zoo.Options{})
	if err != nil {
		return nil, err
	}
	inst, err := be.LoadModel(ctx, o.model, g)
	if err != nil {
		return nil, err
	}
	defer inst.Close()
	if err := be.ConfigureBatch(inst, 1); err != nil {
		return nil, err
	}
	in := zoo.Input(1, inst.InputSize())
	out := make([]float32, inst.OutputSize())
	var ms []float64
	for i := 0; i < o.warm+3; i++ {
		t := time.Now()
		if err := be.InferBatch(ctx, inst, 1, in, out); err != nil {
			return nil, err
		}
		if i >= 3 {
			ms = append(ms, float64(time.Since(t))/1e6)
		}
	}
	return ms, nil
}

func run(o options) error {
	ctx := context.Background()
	comp, err := computeTime(ctx, o)
	if err != nil {
		return fmt.Errorf("compute baseline: %w", err)
	}
	computeMS := percentile(comp, 50)
	fmt.Printf("appbench: %s at batch 1, %s backend, model compute alone (all units) p50 %.2f ms (mean %.2f, p99 %.2f, %d runs)\n",
		o.model, o.backend, computeMS, mean(comp), percentile(comp, 99), len(comp))

	var rows []row
	// the request rates are fractions of the first policy's capacities,
	// so that every policy sees the same arrivals
	capRT := map[bool]float64{}
	for pi, pol := range o.policies {
		for _, mixed := range []bool{false, true} {
			rs, c, err := phase(ctx, o, pol, pi == 0, mixed, computeMS, capRT[mixed])
			if err != nil {
				return fmt.Errorf("policy %s: %w", pol, err)
			}
			if pi == 0 {
				capRT[mixed] = c
			}
			rows = append(rows, rs...)
		}
	}
	fmt.Println("| IFs | policy | load per stream (of the RT IF's capacity) | class | rate/s | sent | ok | p50 ms | p99 ms | mean ms | compute in the IF, mean ms | overhead mean ms | overhead % of compute |")
	fmt.Println("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %.1f | %s | %.1f | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f%% |\n",
			r.Setup, r.Policy, r.Load, r.Class, r.RatePerS, r.Sent, r.OK, r.P50MS, r.P99MS, r.MeanMS, r.ComputeMS, r.OverheadMS, r.OverheadPct)
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"compute_ms": comp, "rows": rows}, "", "  ")
		return os.WriteFile(o.jsonOut, b, 0o644)
	}
	return nil
}

// phase runs one appliance set-up under a policy: an RT IF alone, or an
// RT and a BE IF (with policy "none": one share each; otherwise the
// policy's scheduler shares the units), at each load, and reports per
// class. Loads are fractions of capRT, or of the RT IF's capacity probed
// here when capRT is 0 (returned). The overhead is the mean end-to-end
// latency minus the mean compute time the IF itself measured over the same
// load point. swaps: run the shadow-swap measurement (RT alone).
func phase(ctx context.Context, o options, policy string, swaps, mixed bool, computeMS, capRT float64) ([]row, float64, error) {
	prof, err := appliance.ParseProfile("appbench", profileText(o, policy, mixed))
	if err != nil {
		return nil, 0, err
	}
	a, addr, cl, done, err := serve(ctx, prof, 77, 16<<20)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	frame := make([]byte, 224*224*3)
	for i := range frame {
		frame[i] = byte(i * 13)
	}
	id := uint64(0)
	// capacity: a short closed-loop probe of the RT IF as configured
	// (it also warms the IFs up)
	probe := time.Now()
	k := 0
	for time.Since(probe) < 2*time.Second {
		id++
		_ = cl.Send(addr, 1, id, 0, frame)
		if _, ok := cl.Wait(id, 5*time.Second); !ok {
			break
		}
		k++
	}
	probed := float64(k) / time.Since(probe).Seconds()
	setup := "rt alone"
	if mixed {
		setup = "rt + be"
	}
	fmt.Printf("%s, policy %s: closed-loop capacity of the RT IF at batch 1: %.1f requests/s\n", setup, policy, probed)
	if capRT == 0 {
		capRT = probed
	}
	ifStats := func() map[string]appliance.IFStats {
		m := map[string]appliance.IFStats{}
		for _, f := range a.Stats().IFs {
			m[f.Name] = f
		}
		return m
	}
	var rows []row
	copies, items := map[string]float64{}, map[string]float64{}
	for _, load := range o.loads {
		rate := load * capRT
		type sent struct {
			id    uint64
			class string
			at    time.Time
		}
		var reqs []sent
		before := ifStats()
		interval := time.Duration(float64(time.Second) / rate)
		start := time.Now()
		next := start
		for time.Since(start) < o.duration {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			id++
			reqs = append(reqs, sent{id, "rt", time.Now()})
			_ = cl.Send(addr, 1, id, wire.FlagRT, frame)
			if mixed {
				id++
				reqs = append(reqs, sent{id, "be", time.Now()})
				_ = cl.Send(addr, 2, id, 0, frame)
			}
			next = next.Add(interval)
		}
		lat := map[string][]float64{}
		count := map[string]int{}
		for _, r := range reqs {
			count[r.class]++
			resp, ok := cl.Wait(r.id, 5*time.Second)
			if ok && resp.Status == wire.StatusOK {
				lat[r.class] = append(lat[r.class], float64(resp.At.Sub(r.at))/1e6)
			}
		}
		after := ifStats()
		classes := []string{"rt"}
		if mixed {
			classes = append(classes, "be")
		}
		for _, c := range classes {
			b0, b1 := before[c], after[c]
			if n := b1.BatchItems - b0.BatchItems; n > 0 {
				copies[c] += float64(b1.PayloadCopies - b0.PayloadCopies)
				items[c] += float64(n)
			}
			comp := math.NaN()
			if nb := float64(b1.Batches - b0.Batches); nb > 0 {
				comp = (b1.MeanComputeMS*float64(b1.Batches) - b0.MeanComputeMS*float64(b0.Batches)) / nb
			}
			m := mean(lat[c])
			rows = append(rows, row{Setup: setup, Policy: policy, Load: load, Class: c, RatePerS: rate, Sent: count[c], OK: len(lat[c]),
				P50MS: percentile(lat[c], 50), P99MS: percentile(lat[c], 99), MeanMS: m, ComputeMS: comp,
				OverheadMS: m - comp, OverheadPct: 100 * (m - comp) / comp})
		}
	}
	fmt.Printf("%s, policy %s: payload copies per request (the backend's count, if_payload_copies_total):", setup, policy)
	for _, c := range []string{"rt", "be"} {
		if items[c] > 0 {
			fmt.Printf(" %s %.2f", c, copies[c]/items[c])
		}
	}
	fmt.Println()
	if swaps && !mixed && o.swaps > 0 {
		if err := swapUnderLoad(ctx, o, a, cl, addr, frame, &id, capRT*0.5); err != nil {
			return nil, 0, err
		}
	}
	return rows, capRT, nil
}

// swapUnderLoad runs o.swaps shadow swaps of the RT IF while requests
// arrive at rate, and reports the idle gap of each and whether any request
// was lost.
func swapUnderLoad(ctx context.Context, o options, a *appliance.Appliance, cl *dptest.Client, addr netip.AddrPort,
	frame []byte, id *uint64, rate float64) error {
	done := make(chan struct{})
	sentc := make(chan []uint64, 1)
	go func() {
		var ids []uint64
		interval := time.Duration(float64(time.Second) / rate)
		for {
			select {
			case <-done:
				sentc <- ids
				return
			case <-time.After(interval):
				*id++
				ids = append(ids, *id)
				_ = cl.Send(addr, 1, *id, wire.FlagRT, frame)
			}
		}
	}()
	var gaps, preps []float64
	for i := 0; i < o.swaps; i++ {
		res, err := a.Swap(ctx, "rt", ifmanager.SwapSpec{})
		if err != nil {
			close(done)
			return fmt.Errorf("swap %d: %w", i, err)
		}
		gaps = append(gaps, float64(res.Gap)/1e3)
		preps = append(preps, float64(res.Prepare)/1e6)
	}
	close(done)
	ids := <-sentc
	lost, bad := 0, 0
	for _, r := range ids {
		resp, ok := cl.Wait(r, 5*time.Second)
		switch {
		case !ok:
			lost++
		case resp.Status != wire.StatusOK:
			bad++
		}
	}
	fmt.Printf("\nshadow swaps under load (%.1f requests/s): %d swaps, idle gap p50 %.2f µs, p99 %.2f µs, max %.2f µs; "+
		"shadow preparation (link + configure + warm) p50 %.1f ms; %d requests during the swaps, %d lost, %d not ok, %d duplicate fragments\n\n",
		rate, len(gaps), percentile(gaps, 50), percentile(gaps, 99), percentile(gaps, 100), percentile(preps, 50), len(ids), lost, bad, cl.Duplicates())
	return nil
}

// profileText is the appliance profile of a set-up: an RT IF, and with
// mixed a BE IF, of o.model on o.backend, under policy. A cpu IF takes
// the appliance's policy; a cuda IF names it itself, and the appliance
// runs the cuda backend in o.cuda's mode.
func profileText(o options, policy string, mixed bool) string {
	text := fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = %d
metrics = "off"
control = "off"
policy = %q
`, o.threads, policy)
	backend := ""
	if o.backend == "cuda" {
		text += fmt.Sprintf("cuda = %q\n", o.cuda)
		backend = fmt.Sprintf("backend = \"cuda\"\npolicy = %q\n", policy)
	}
	text += `
[[port]]
driver = "udp"
listen = "127.0.0.1:0"
`
	for _, c := range []struct {
		name, class string
		id          int
	}{{"rt", "rt", 1}, {"be", "be", 2}} {
		if c.class == "be" && !mixed {
			break
		}
		text += fmt.Sprintf(`
[[if]]
name = %q
model_id = %d
model = "zoo:%s"
class = %q
max_batch = 1
batching = "fixed"
queue_len = 1024
input = "u8-hwc"
%s`, c.name, c.id, o.model, c.class, backend)
	}
	return text
}
