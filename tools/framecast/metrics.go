package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The appliance's batch-size histogram (docs/metrics.md), labelled by if
// and class: its count is the batches run, its sum the requests in them.
const (
	metricBatches = "sluice_batch_size_count"
	metricItems   = "sluice_batch_size_sum"
)

// noBatchNote is the report's note when -metrics is not given.
const noBatchNote = "the wire protocol does not carry batch sizes; pass -metrics http://HOST:PORT/metrics to read them from the appliance"

// ifKey names one IF's series.
type ifKey struct{ IF, Class string }

// batchCounts are one IF's batch counters at one moment.
type batchCounts struct{ Batches, Items float64 }

// IFBatch is one IF's batching over the run: the difference of its
// counters between the scrapes before and after.
type IFBatch struct {
	IF      string  `json:"if"`
	Class   string  `json:"class"`
	Batches float64 `json:"batches"`
	Items   float64 `json:"items"`
	// Mean is Items/Batches; absent when no batch ran.
	Mean *float64 `json:"mean_batch,omitempty"`
}

// Batches is the report's batch-size section.
type Batches struct {
	Source string    `json:"source,omitempty"`
	Note   string    `json:"note,omitempty"`
	IFs    []IFBatch `json:"ifs,omitempty"`
}

// scrapeBatches fetches url and returns the batch counters per IF.
func scrapeBatches(ctx context.Context, url string) (map[ifKey]batchCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	req.Close = true // leave no idle connection (nor its goroutines) behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: %s", url, resp.Status)
	}
	samples, err := parseProm(io.LimitReader(resp.Body, 64<<20), func(name string) bool {
		return name == metricBatches || name == metricItems
	})
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	out := map[ifKey]batchCounts{}
	for _, s := range samples {
		if math.IsNaN(s.value) || math.IsInf(s.value, 0) || s.value < 0 {
			return nil, fmt.Errorf("metrics %s: %s{if=%q,class=%q} is %v: not a counter's value", url, s.name, s.labels["if"], s.labels["class"], s.value)
		}
		k := ifKey{s.labels["if"], s.labels["class"]}
		c := out[k]
		if s.name == metricBatches {
			c.Batches += s.value
		} else {
			c.Items += s.value
		}
		out[k] = c
	}
	return out, nil
}

// batchReport turns the scrapes before and after the run into the
// report's section. A counter that went down (the appliance restarted)
// counts from zero.
func batchReport(url string, before, after map[ifKey]batchCounts, err error) *Batches {
	b := &Batches{Source: url}
	if err != nil {
		b.Note = "batch sizes unavailable: " + err.Error()
		return b
	}
	keys := make([]ifKey, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y ifKey) int {
		return strings.Compare(x.IF+"\x00"+x.Class, y.IF+"\x00"+y.Class)
	})
	for _, k := range keys {
		a, o := after[k], before[k]
		if a.Batches < o.Batches || a.Items < o.Items {
			o = batchCounts{}
		}
		ib := IFBatch{IF: k.IF, Class: k.Class, Batches: a.Batches - o.Batches, Items: a.Items - o.Items}
		if ib.Batches > 0 {
			m := ib.Items / ib.Batches
			ib.Mean = &m
		}
		b.IFs = append(b.IFs, ib)
	}
	if len(b.IFs) == 0 {
		b.Note = "the endpoint has no " + metricBatches + " series"
	}
	return b
}

// writeMarkdown prints the batch section.
func (b *Batches) writeMarkdown(w io.Writer) {
	if b == nil || b.Source == "" {
		fmt.Fprintf(w, "Batch sizes: %s.\n", noBatchNote)
		return
	}
	fmt.Fprintf(w, "Batch sizes over the run, from %s (all clients' requests):\n\n", b.Source)
	if b.Note != "" {
		fmt.Fprintf(w, "%s\n", b.Note)
		return
	}
	fmt.Fprintln(w, "| if | class | batches | requests | mean batch |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, ib := range b.IFs {
		mean := "-"
		if ib.Mean != nil {
			mean = fmt.Sprintf("%.2f", *ib.Mean)
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %s |\n", ib.IF, ib.Class, ib.Batches, ib.Items, mean)
	}
}

// promSample is one sample of the Prometheus text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseProm parses the Prometheus text exposition format, keeping the
// samples whose metric name want accepts. Errors name the line.
func parseProm(r io.Reader, want func(string) bool) ([]promSample, error) {
	var out []promSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := splitName(line)
		if !want(name) {
			continue
		}
		s, err := parseSample(name, rest)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return out, nil
}

// splitName splits a sample line after its metric name.
func splitName(line string) (name, rest string) {
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return line, ""
	}
	return line[:i], line[i:]
}

// parseSample parses what follows a metric name: optional {labels}, the
// value, and an optional timestamp.
func parseSample(name, rest string) (promSample, error) {
	s := promSample{name: name, labels: map[string]string{}}
	rest = strings.TrimLeft(rest, " \t")
	if strings.HasPrefix(rest, "{") {
		var err error
		if rest, err = parseLabels(rest[1:], s.labels); err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return s, fmt.Errorf("%s: want a value and an optional timestamp, got %q", name, rest)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("%s: value %q: %w", name, fields[0], err)
	}
	s.value = v
	return s, nil
}

// parseLabels parses `k="v",...}` into m and returns what follows the '}'.
// Values may hold the escapes \\, \" and \n.
func parseLabels(s string, m map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " \t,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return "", fmt.Errorf("labels: want name=\"value\" at %q", s)
		}
		key := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t")
		if !strings.HasPrefix(s, `"`) {
			return "", fmt.Errorf("label %s: value not quoted", key)
		}
		val, tail, err := unquoteLabel(s[1:])
		if err != nil {
			return "", fmt.Errorf("label %s: %w", key, err)
		}
		m[key] = val
		s = tail
	}
}

// unquoteLabel reads a label value up to its closing quote.
func unquoteLabel(s string) (val, tail string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 >= len(s) {
				return "", "", fmt.Errorf("unterminated escape")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case '\\', '"':
				b.WriteByte(s[i])
			default:
				return "", "", fmt.Errorf("unknown escape \\%c", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("unterminated value")
}
