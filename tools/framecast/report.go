package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"sluice/appliance/buildinfo"
)

// Latency summarizes the latencies of a row's ok responses, in
// milliseconds: nearest-rank percentiles.
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// Row is one line of the report: a stream, a class, or everything.
type Row struct {
	Name  string      `json:"name"`
	Class string      `json:"class,omitempty"`
	Spec  *streamSpec `json:"spec,omitempty"`
	Flow  uint32      `json:"flow,omitempty"`

	// Sent requests end as exactly one of OK, an error, Lost, WrongModel,
	// WrongSize or Mismatched.
	Sent       int            `json:"sent"`
	OK         int            `json:"ok"`
	Errors     map[string]int `json:"errors"`
	ErrorTotal int            `json:"error_total"`
	Lost       int            `json:"lost"`
	WrongModel int            `json:"wrong_model"`
	WrongSize  int            `json:"wrong_size"`
	Mismatched int            `json:"mismatched"`

	// Response datagrams for requests that were not pending.
	Late       int `json:"late"`
	Duplicates int `json:"duplicates"`
	Unknown    int `json:"unknown"`
	// Fragments dropped while reassembling responses.
	BadFragments int `json:"bad_fragments"`
	DupFragments int `json:"duplicate_fragments"`

	// MaxRelDiff is the largest difference between outputs for equal
	// frames, relative to the reference output's magnitude.
	MaxRelDiff  float64  `json:"max_rel_diff"`
	MaxInFlight int      `json:"max_in_flight,omitempty"`
	Latency     *Latency `json:"latency,omitempty"`
	SentPerS    float64  `json:"sent_per_s"`
	OKPerS      float64  `json:"ok_per_s"`
	SendError   string   `json:"send_error,omitempty"`
	// WithinSLO is the fraction of ok responses within -slo (when given).
	WithinSLO *float64 `json:"within_slo,omitempty"`

	lat    []float64      // ok latencies, ms
	series []timedLatency // the same, by send time (the plot's time panel)
}

// timedLatency is one ok response: when its request was sent (s since the
// run's start) and its latency (ms).
type timedLatency struct{ at, ms float64 }

// newRow returns an empty row.
func newRow(name, class string) *Row {
	return &Row{Name: name, Class: class, Errors: map[string]int{}}
}

// add accumulates o's counts into r.
func (r *Row) add(o *Row) {
	r.Sent += o.Sent
	r.OK += o.OK
	for k, v := range o.Errors {
		r.Errors[k] += v
	}
	r.Lost += o.Lost
	r.WrongModel += o.WrongModel
	r.WrongSize += o.WrongSize
	r.Mismatched += o.Mismatched
	r.Late += o.Late
	r.Duplicates += o.Duplicates
	r.Unknown += o.Unknown
	r.BadFragments += o.BadFragments
	r.DupFragments += o.DupFragments
	r.MaxRelDiff = max(r.MaxRelDiff, o.MaxRelDiff)
	r.lat = append(r.lat, o.lat...)
	r.series = append(r.series, o.series...)
}

// finish computes the derived fields: error total, rates, latency.
func (r *Row) finish(sending time.Duration) {
	r.ErrorTotal = 0
	for _, v := range r.Errors {
		r.ErrorTotal += v
	}
	if s := sending.Seconds(); s > 0 {
		r.SentPerS = float64(r.Sent) / s
		r.OKPerS = float64(r.OK) / s
	}
	r.Latency = summarize(r.lat)
}

// summarize returns the latency summary of v (sorted in place), nil when
// empty.
func summarize(v []float64) *Latency {
	if len(v) == 0 {
		return nil
	}
	sort.Float64s(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return &Latency{Count: len(v), Mean: sum / float64(len(v)),
		P50: percentile(v, 50), P90: percentile(v, 90), P99: percentile(v, 99),
		P999: percentile(v, 99.9), Max: v[len(v)-1]}
}

// percentile is the nearest-rank p-th percentile of sorted v.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Report is everything a run found; -json writes it.
type Report struct {
	// Version is framecast's build (buildinfo), Start when sending began
	// (RFC 3339, UTC), Seed the frames' and arrivals' seed, PaceBps the
	// -pace rate (0: unpaced).
	Version string  `json:"version"`
	Start   string  `json:"start"`
	Seed    uint64  `json:"seed"`
	PaceBps float64 `json:"pace_bytes_per_s"`
	// SLOMS is -slo in ms (0: none given).
	SLOMS          float64  `json:"slo_ms,omitempty"`
	Target         string   `json:"target"`
	FirstFlow      uint32   `json:"first_flow"`
	SendSeconds    float64  `json:"send_seconds"`
	Seconds        float64  `json:"seconds"`
	TimeoutSeconds float64  `json:"timeout_seconds"`
	Streams        []*Row   `json:"streams"`
	Classes        []*Row   `json:"classes"`
	Total          *Row     `json:"total"`
	Foreign        int      `json:"foreign_datagrams"`
	Garbage        int      `json:"garbage_datagrams"`
	Batches        *Batches `json:"batches"`
}

// report gathers the results once every goroutine has stopped.
func (c *client) report(sending, total time.Duration) *Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &Report{Version: buildinfo.Version(), Start: c.start.UTC().Format(time.RFC3339Nano), Seed: c.cfg.Seed, PaceBps: c.cfg.Pace,
		SLOMS:  float64(c.cfg.SLO) / 1e6,
		Target: c.target.String(), FirstFlow: c.cfg.Flow, SendSeconds: sending.Seconds(),
		Seconds: total.Seconds(), TimeoutSeconds: c.cfg.Timeout.Seconds(),
		Total: newRow("all", ""), Foreign: c.foreign, Garbage: c.garbage}
	r.Total.MaxInFlight = c.maxInFlight
	classes := map[string]*Row{}
	for _, st := range c.streams {
		row := st.c
		r.Streams = append(r.Streams, row)
		cr := classes[row.Class]
		if cr == nil {
			cr = newRow("class "+row.Class, row.Class)
			classes[row.Class] = cr
			r.Classes = append(r.Classes, cr)
		}
		cr.add(row)
		r.Total.add(row)
	}
	slices.SortFunc(r.Classes, func(a, b *Row) int { return strings.Compare(b.Class, a.Class) }) // rt first
	for _, row := range r.rows() {
		row.finish(sending) // sorts the latencies
		if r.SLOMS > 0 && len(row.lat) > 0 {
			f := withinSLO(row.lat, r.SLOMS)
			row.WithinSLO = &f
		}
	}
	return r
}

// rows returns the stream rows, then the class rows, then the total.
func (r *Report) rows() []*Row {
	return append(append(slices.Clone(r.Streams), r.Classes...), r.Total)
}

// writeMarkdown prints the report as markdown tables.
func (r *Report) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "framecast: send window %.1fs, run %.1fs, target %s, flows %d..%d, timeout %gs\n\n",
		r.SendSeconds, r.Seconds, r.Target, r.FirstFlow, r.FirstFlow+uint32(max(len(r.Streams), 1)-1), r.TimeoutSeconds)
	fmt.Fprintln(w, "| stream | sent | ok | errors | lost | dup | mismatch | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | sent/s | ok/s |")
	fmt.Fprintln(w, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.rows() {
		l := row.Latency
		if l == nil {
			l = &Latency{P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), P999: math.NaN(), Max: math.NaN()}
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %d | %d | %d | %s | %s | %s | %s | %s | %.1f | %.1f |\n",
			row.Name, row.Sent, row.OK, errorList(row.Errors), row.Lost, row.Duplicates, row.Mismatched,
			ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max), row.SentPerS, row.OKPerS)
	}
	fmt.Fprintln(w, "\nResponse checks (see docs/framecast.md):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| stream | wrong model | wrong size | mismatch | max rel diff | late | dup | unknown | bad frags | dup frags | max in flight |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range append(slices.Clone(r.Streams), r.Total) {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.1e | %d | %d | %d | %d | %d | %d |\n",
			row.Name, row.WrongModel, row.WrongSize, row.Mismatched, row.MaxRelDiff, row.Late, row.Duplicates,
			row.Unknown, row.BadFragments, row.DupFragments, row.MaxInFlight)
	}
	if r.SLOMS > 0 {
		fmt.Fprintf(w, "\nWithin the SLO (%s ms), of the ok responses:", fmtTick(r.SLOMS))
		for _, row := range r.rows() {
			if row.WithinSLO != nil {
				fmt.Fprintf(w, " %s %.2f%%;", row.Name, 100**row.WithinSLO)
			}
		}
		fmt.Fprintln(w)
	}
	if r.Foreign+r.Garbage > 0 {
		fmt.Fprintf(w, "\n%d datagrams from another address or on another flow, %d not sluice responses\n", r.Foreign, r.Garbage)
	}
	for _, row := range r.Streams {
		if row.SendError != "" {
			fmt.Fprintf(w, "\n%s: sending failed: %s\n", row.Name, row.SendError)
		}
	}
	fmt.Fprintln(w)
	r.Batches.writeMarkdown(w)
}

// errorList formats error counts as "name=n name=n", or "0".
func errorList(m map[string]int) string {
	var es []string
	for k, v := range m {
		if v > 0 {
			es = append(es, fmt.Sprintf("%s=%d", k, v))
		}
	}
	if len(es) == 0 {
		return "0"
	}
	sort.Strings(es)
	return strings.Join(es, " ")
}

// ms formats a latency in milliseconds, "-" when there is none.
func ms(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// writeJSON writes the report as indented JSON to path.
func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return nil
}
