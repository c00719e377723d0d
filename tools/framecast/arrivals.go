package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
)

// arrivalGen yields a stream's send times as offsets from the start of the
// run, in order. ok is false when there are no more.
type arrivalGen interface {
	next() (at time.Duration, ok bool)
}

// newArrivals returns the generator for an open-loop stream. rng seeds the
// random processes; trace holds the stream's lines of its trace file.
func newArrivals(s streamSpec, rng *rand.Rand, trace []time.Duration) arrivalGen {
	mean := 1 / s.Rate // seconds between arrivals
	switch s.Arrival {
	case arrivalPoisson:
		return &renewal{gap: func() float64 { return rng.ExpFloat64() * mean }}
	case arrivalLognormal:
		// A lognormal gap exp(mu + sigma·Z) has mean exp(mu + sigma²/2);
		// choose mu so that it is 1/rate.
		mu := math.Log(mean) - s.Sigma*s.Sigma/2
		return &renewal{gap: func() float64 { return math.Exp(mu + s.Sigma*rng.NormFloat64()) }}
	case arrivalTrace:
		return &traceArrivals{at: trace}
	default:
		return &uniformArrivals{period: mean}
	}
}

// uniformArrivals sends every period seconds, the first at once.
type uniformArrivals struct {
	period float64
	n      int
}

func (u *uniformArrivals) next() (time.Duration, bool) {
	at := seconds(float64(u.n) * u.period)
	u.n++
	return at, true
}

// renewal is a renewal process: independent gaps drawn from gap (seconds),
// the first arrival one gap after the start.
type renewal struct {
	gap func() float64
	t   float64
}

func (r *renewal) next() (time.Duration, bool) {
	r.t += r.gap()
	return seconds(r.t), true
}

// traceArrivals replays recorded times.
type traceArrivals struct {
	at []time.Duration
	i  int
}

func (t *traceArrivals) next() (time.Duration, bool) {
	if t.i >= len(t.at) {
		return 0, false
	}
	t.i++
	return t.at[t.i-1], true
}

// seconds converts seconds to a Duration, saturating.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/1e9 {
		return math.MaxInt64
	}
	return time.Duration(s * 1e9)
}

// traceLine is one arrival of a trace file.
type traceLine struct {
	line int
	at   time.Duration
	// model is -1 and class "" when the line leaves them open.
	model int
	class string
}

// matches says whether the line is an arrival of stream s.
func (l traceLine) matches(s streamSpec) bool {
	return (l.model < 0 || l.model == int(s.Model)) && (l.class == "" || l.class == s.Class)
}

// describe names the model and class a line asks for.
func (l traceLine) describe() string {
	m, c := "any model", "any class"
	if l.model >= 0 {
		m = fmt.Sprintf("model %d", l.model)
	}
	if l.class != "" {
		c = "class " + l.class
	}
	return m + ", " + c
}

// loadTrace reads a trace file: one arrival per line, "SECONDS [MODEL
// [CLASS]]", fields separated by blanks or commas; blank lines and lines
// starting with '#' are skipped. Times must not decrease.
func loadTrace(path string) ([]traceLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	lines, err := parseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s:%w", path, err)
	}
	return lines, nil
}

// parseTrace parses a trace's text; errors start with the line number.
func parseTrace(r io.Reader) ([]traceLine, error) {
	var out []traceLine
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		l, err := parseTraceLine(text)
		if err != nil {
			return nil, fmt.Errorf("%d: %w", n, err)
		}
		l.line = n
		if len(out) > 0 && l.at < out[len(out)-1].at {
			return nil, fmt.Errorf("%d: time %v is before the previous line's %v (times must not decrease)",
				n, l.at, out[len(out)-1].at)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%d: %w", n+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("1: no arrivals in the file")
	}
	return out, nil
}

// parseTraceLine parses "SECONDS [MODEL [CLASS]]".
func parseTraceLine(text string) (traceLine, error) {
	l := traceLine{model: -1}
	fields := strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	if len(fields) == 0 || len(fields) > 3 {
		return l, fmt.Errorf("%q: want SECONDS [MODEL [CLASS]]", text)
	}
	t, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || t < 0 || math.IsNaN(t) || math.IsInf(t, 0) || t > 1e9 {
		return l, fmt.Errorf("time %q: want seconds since the start, >= 0", fields[0])
	}
	l.at = seconds(t)
	if len(fields) > 1 {
		m, err := strconv.ParseUint(fields[1], 10, 16)
		if err != nil {
			return l, fmt.Errorf("model %q: want an id 0..65535", fields[1])
		}
		l.model = int(m)
	}
	if len(fields) > 2 {
		if fields[2] != "rt" && fields[2] != "be" {
			return l, fmt.Errorf("class %q: want rt or be", fields[2])
		}
		l.class = fields[2]
	}
	return l, nil
}

// traceTimes loads the trace files of the streams that use one and gives
// each stream its arrival times. Every line must belong to at least one
// stream reading the file (its model and class, where given, match the
// stream's), and every such stream must get at least one arrival.
func traceTimes(specs []streamSpec) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(specs))
	files := map[string][]traceLine{}
	for i, s := range specs {
		if s.Loop != loopOpen || s.Arrival != arrivalTrace {
			continue
		}
		lines, ok := files[s.Trace]
		if !ok {
			var err error
			if lines, err = loadTrace(s.Trace); err != nil {
				return nil, err
			}
			files[s.Trace] = lines
		}
		for _, l := range lines {
			if l.matches(s) {
				out[i] = append(out[i], l.at)
			}
		}
		if len(out[i]) == 0 {
			return nil, fmt.Errorf("trace %s: no line for stream %s (model %d, class %s)", s.Trace, s.Name, s.Model, s.Class)
		}
	}
	for path, lines := range files {
		if err := checkTraceUsed(path, lines, specs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkTraceUsed fails on the first line of a trace that no stream reading
// it takes.
func checkTraceUsed(path string, lines []traceLine, specs []streamSpec) error {
	for _, l := range lines {
		taken := false
		for _, s := range specs {
			if s.Loop == loopOpen && s.Trace == path && l.matches(s) {
				taken = true
				break
			}
		}
		if !taken {
			return fmt.Errorf("trace %s:%d: %s matches no -stream with trace=%s", path, l.line, l.describe(), path)
		}
	}
	return nil
}
