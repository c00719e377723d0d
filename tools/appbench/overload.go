package main

// The overload mode (-overload, make bench-overload): one IF driven past
// its capacity, half the requests RT and half BE, under each timeout
// action. It reports, per action, load and class, the share answered ok,
// the latency of the ok answers against the SLO, how fast refusals come
// back, and goodput: ok answers within the SLO per second.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"sluice/appliance"
	"sluice/dataplane/wire"
)

type overloadOptions struct {
	model    string
	threads  int
	duration time.Duration
	sloMS    float64
	maxBatch int
	queueLen int
	loads    []float64
	jsonOut  string
}

type overloadRow struct {
	Action      string  `json:"timeout_action"`
	Load        float64 `json:"load"`
	Class       string  `json:"class"`
	RatePerS    float64 `json:"rate_per_s"`
	Sent        int     `json:"sent"`
	OK          int     `json:"ok"`
	OKPct       float64 `json:"ok_pct"`
	P50MS       float64 `json:"ok_p50_ms"`
	P99MS       float64 `json:"ok_p99_ms"`
	WithinSLO   int     `json:"ok_within_slo"`
	GoodputPerS float64 `json:"goodput_per_s"`
	Deadline    int     `json:"deadline_exceeded"`
	Overloaded  int     `json:"overloaded"`
	RefusalP50  float64 `json:"refusal_p50_ms"`
	RefusalP99  float64 `json:"refusal_p99_ms"`
	NoAnswer    int     `json:"no_answer"`
}

// overloadIF is the IF under test, as a profile.
func overloadProfile(o overloadOptions, action string) string {
	return fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = %d
metrics = "off"
control = "off"
[[port]]
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "ovl"
model_id = 1
model = "zoo:%s"
class = "be"
slo_ms = %g
max_batch = %d
queue_len = %d
input = "u8-hwc"
timeout_action = %q
`, o.threads, o.model, o.sloMS, o.maxBatch, o.queueLen, action)
}

func runOverload(o overloadOptions) error {
	ctx := context.Background()
	var rows []overloadRow
	capacity := 0.0
	// serve_late first: its closed loop measures the capacity, which
	// reject then sees at the same request rates
	for _, action := range []string{"serve_late", "reject"} {
		rs, c, err := overloadPhase(ctx, o, action, capacity)
		if err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		capacity = c
		rows = append(rows, rs...)
	}
	fmt.Printf("\n%s, slo_ms %g, max_batch %d, queue_len %d, %s per load point; requests alternate RT and BE, each at half the rate\n\n",
		o.model, o.sloMS, o.maxBatch, o.queueLen, o.duration)
	fmt.Println("| timeout_action | load (× capacity) | class | rate/s | sent | ok | ok % | ok p50 ms | ok p99 ms | ok within SLO | goodput/s | deadline_exceeded | overloaded | refusal p50 ms | refusal p99 ms | no answer |")
	fmt.Println("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %.0f | %s | %.1f | %d | %d | %.1f | %.1f | %.1f | %d | %.1f | %d | %d | %.1f | %.1f | %d |\n",
			r.Action, r.Load, r.Class, r.RatePerS, r.Sent, r.OK, r.OKPct, r.P50MS, r.P99MS, r.WithinSLO, r.GoodputPerS,
			r.Deadline, r.Overloaded, r.RefusalP50, r.RefusalP99, r.NoAnswer)
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"capacity_per_s": capacity, "rows": rows}, "", "  ")
		return os.WriteFile(o.jsonOut, b, 0o644)
	}
	return nil
}

// overloadPhase runs the IF under one timeout action at each load, as
// multiples of capacity (probed here when 0, and returned).
func overloadPhase(ctx context.Context, o overloadOptions, action string, capacity float64) ([]overloadRow, float64, error) {
	prof, err := appliance.ParseProfile("overload", overloadProfile(o, action))
	if err != nil {
		return nil, 0, err
	}
	a, addr, cl, done, err := serve(ctx, prof, 91, 32<<20)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	frame := make([]byte, 224*224*3)
	for i := range frame {
		frame[i] = byte(i * 13)
	}
	id := uint64(0)
	// warm-up: requests one at a time (the IF measures its batches)
	for range 20 {
		id++
		_ = cl.Send(addr, 1, id, 0, frame)
		cl.Wait(id, 10*time.Second)
	}
	// capacity: closed loop with max_batch requests outstanding (the
	// IF's batches fill), ok answers per second
	probe := func(d time.Duration) float64 {
		out := map[uint64]bool{}
		for range o.maxBatch {
			id++
			out[id] = true
			_ = cl.Send(addr, 1, id, 0, frame)
		}
		start, okN := time.Now(), 0
		for time.Since(start) < d {
			for r := range out {
				resp, done := cl.Get(r)
				if !done {
					continue
				}
				delete(out, r)
				if resp.Status == wire.StatusOK {
					okN++
				}
				id++
				out[id] = true
				_ = cl.Send(addr, 1, id, 0, frame)
			}
			time.Sleep(200 * time.Microsecond)
		}
		el := time.Since(start)
		for r := range out {
			cl.Wait(r, 10*time.Second)
		}
		return float64(okN) / el.Seconds()
	}
	if capacity == 0 {
		probe(time.Second)
		capacity = probe(3 * time.Second)
		fmt.Printf("timeout_action %s: closed-loop capacity (%d outstanding): %.1f requests/s\n", action, o.maxBatch, capacity)
		if capacity <= 0 {
			return nil, 0, fmt.Errorf("no request answered ok in the capacity probe")
		}
	}
	slo := time.Duration(o.sloMS * float64(time.Millisecond))
	var rows []overloadRow
	for _, load := range o.loads {
		rate := load * capacity
		type sent struct {
			id uint64
			rt bool
			at time.Time
		}
		var reqs []sent
		st0 := a.Stats().IFs[0]
		interval := time.Duration(float64(time.Second) / rate)
		start := time.Now()
		next := start
		for time.Since(start) < o.duration {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			id++
			rt := id%2 == 0
			var flags uint8
			if rt {
				flags = wire.FlagRT
			}
			reqs = append(reqs, sent{id, rt, time.Now()})
			_ = cl.Send(addr, 1, id, flags, frame)
			next = next.Add(interval)
		}
		el := time.Since(start)
		type acc struct {
			sent, ok, within, deadline, over, none int
			lat, refusal                           []float64
		}
		by := map[bool]*acc{true: {}, false: {}}
		for _, r := range reqs {
			c := by[r.rt]
			c.sent++
			resp, ok := cl.Wait(r.id, 60*time.Second)
			if !ok {
				c.none++
				continue
			}
			ms := float64(resp.At.Sub(r.at)) / 1e6
			switch resp.Status {
			case wire.StatusOK:
				c.ok++
				c.lat = append(c.lat, ms)
				if resp.At.Sub(r.at) <= slo {
					c.within++
				}
			case wire.StatusDeadline:
				c.deadline++
				c.refusal = append(c.refusal, ms)
			case wire.StatusOverloaded:
				c.over++
				c.refusal = append(c.refusal, ms)
			}
		}
		for _, rt := range []bool{true, false} {
			c := by[rt]
			class := "be"
			if rt {
				class = "rt"
			}
			rows = append(rows, overloadRow{Action: action, Load: load, Class: class, RatePerS: rate / 2, Sent: c.sent, OK: c.ok,
				OKPct: 100 * float64(c.ok) / float64(max(c.sent, 1)), P50MS: percentile(c.lat, 50), P99MS: percentile(c.lat, 99),
				WithinSLO: c.within, GoodputPerS: float64(c.within) / el.Seconds(), Deadline: c.deadline, Overloaded: c.over,
				RefusalP50: percentile(c.refusal, 50), RefusalP99: percentile(c.refusal, 99), NoAnswer: c.none})
		}
		st := a.Stats().IFs[0]
		nb := st.Batches - st0.Batches
		fmt.Printf("timeout_action %s, load %.0fx (%.1f requests/s), the IF's counts: served %d (late %d), deadline_exceeded %d at admission + %d at batch formation, overloaded %d; %d batches, mean %.2f requests\n",
			action, load, rate, st.Served-st0.Served, st.Late-st0.Late, st.DeadlineAdmission-st0.DeadlineAdmission, st.DeadlineBatch-st0.DeadlineBatch,
			st.Overloaded-st0.Overloaded, nb, float64(st.BatchItems-st0.BatchItems)/float64(max(nb, 1)))
	}
	return rows, capacity, nil
}
