package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"image/color"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/appliance/buildinfo"
)

const testFlow = 1000

// testConfig parses a command line aimed at target, bound to loopback.
func testConfig(t *testing.T, target string, args ...string) config {
	t.Helper()
	base := []string{"-target", target, "-bind", "127.0.0.1:0", "-frag", "1000", "-frames", "4",
		"-flow", fmt.Sprint(testFlow)}
	cfg, _, err := parseArgs(append(base, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// settleGoroutines waits until at most n goroutines run, and fails if
// that takes more than a second.
func settleGoroutines(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > n; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left, want %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// misbehave answers the first frames right, then cycles through every
// kind of misbehaviour by request id.
func misbehave(_ uint32, id uint64) action {
	switch {
	case id <= 4:
		return actAnswer
	case id == 5:
		return actLate
	case id == 6:
		return actUnknown
	}
	switch id % 10 {
	case 6:
		return actDrop
	case 7:
		return actDup
	case 8:
		return actCorrupt
	case 9:
		return actError
	case 0:
		if id%20 == 10 {
			return actWrongModel
		}
		return actWrongSize
	}
	return actAnswer
}

// checkRow compares a stream's report row with what the fake did.
func checkRow(t *testing.T, row *Row, did [numActions]int, received int) {
	t.Helper()
	want := map[string][2]int{
		"sent":        {row.Sent, received},
		"ok":          {row.OK, did[actAnswer] + did[actDup] + did[actUnknown]},
		"lost":        {row.Lost, did[actDrop] + did[actLate]},
		"late":        {row.Late, did[actLate]},
		"overloaded":  {row.Errors["overloaded"], did[actError]},
		"error total": {row.ErrorTotal, did[actError]},
		"duplicates":  {row.Duplicates, did[actDup]},
		"mismatched":  {row.Mismatched, did[actCorrupt]},
		"wrong model": {row.WrongModel, did[actWrongModel]},
		"wrong size":  {row.WrongSize, did[actWrongSize]},
		"unknown":     {row.Unknown, did[actUnknown]},
		"bad frags":   {row.BadFragments, 0},
		"dup frags":   {row.DupFragments, 0},
		"sum":         {row.OK + row.ErrorTotal + row.Lost + row.WrongModel + row.WrongSize + row.Mismatched, row.Sent},
	}
	for k, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s: %s = %d, want %d", row.Name, k, v[0], v[1])
		}
	}
	if row.OK > 0 && (row.Latency == nil || row.Latency.Count != row.OK || !(row.Latency.P50 > 0) ||
		row.Latency.P50 > row.Latency.P99 || row.Latency.P99 > row.Latency.P999 || row.Latency.P999 > row.Latency.Max) {
		t.Errorf("%s: latency %+v for %d ok", row.Name, row.Latency, row.OK)
	}
}

func TestEndToEnd(t *testing.T) {
	fake := startFake(t, misbehave, func(f *fakeApp) {
		f.lateBy = 700 * time.Millisecond // well after the 300ms timeout, well before the end
	})
	dir := t.TempDir()
	cfg := testConfig(t, fake.addr(), "-duration", "1500ms", "-timeout", "300ms",
		"-json", filepath.Join(dir, "r.json"), "-plot", filepath.Join(dir, "p.svg"),
		"-stream", "model=1,class=rt,rate=100,size=3000",
		"-stream", "model=2,class=be,rate=60,size=2500,arrival=poisson,deadline=50",
		"-stream", "model=3,class=be,rate=40,size=999,arrival=lognormal,sigma=0.5")
	goroutines := runtime.NumGoroutine()
	var out, prog bytes.Buffer
	start := time.Now()
	rep, err := run(context.Background(), cfg, &out, &progressOut{w: &prog})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 1500*time.Millisecond+300*time.Millisecond+time.Second {
		t.Errorf("run took %v, want about duration + timeout at most", el)
	}
	settleGoroutines(t, goroutines)

	for i, row := range rep.Streams {
		did, received := fake.counts(testFlow + uint32(i))
		checkRow(t, row, did, received)
		if i == 0 {
			for a := range numActions {
				if did[a] == 0 {
					t.Errorf("stream 0: the fake never did action %d: the test is too short", a)
				}
			}
		}
	}
	// Class rows aggregate the streams.
	if len(rep.Classes) != 2 || rep.Classes[0].Class != "rt" || rep.Classes[1].Class != "be" {
		t.Fatalf("classes %+v", rep.Classes)
	}
	s := rep.Streams
	for _, c := range []struct {
		row  *Row
		rows []*Row
	}{{rep.Classes[0], s[:1]}, {rep.Classes[1], s[1:]}, {rep.Total, s}} {
		var sent, ok, lost, dup, mis int
		for _, r := range c.rows {
			sent, ok, lost, dup, mis = sent+r.Sent, ok+r.OK, lost+r.Lost, dup+r.Duplicates, mis+r.Mismatched
		}
		if c.row.Sent != sent || c.row.OK != ok || c.row.Lost != lost || c.row.Duplicates != dup || c.row.Mismatched != mis ||
			c.row.Latency == nil || c.row.Latency.Count != ok {
			t.Errorf("%s: %+v, want sent %d ok %d lost %d dup %d mismatched %d", c.row.Name, c.row, sent, ok, lost, dup, mis)
		}
	}
	if rate := s[0].SentPerS; rate < 90 || rate > 110 {
		t.Errorf("stream 0 sent %.1f/s, want 100", rate)
	}
	if rep.Foreign != 0 || rep.Garbage != 0 {
		t.Errorf("foreign %d, garbage %d", rep.Foreign, rep.Garbage)
	}

	// The markdown, the progress lines, the JSON and the plot.
	md := out.String()
	for _, want := range []string{"| m1/rt | ", "| m2/be | ", "| class rt | ", "| class be | ", "| all | ",
		"overloaded=", "Response checks", "Batch sizes: the wire protocol does not carry batch sizes"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(prog.String(), "in flight") || strings.Contains(prog.String(), "\r") {
		t.Errorf("progress (not a terminal) should be whole lines: %q", prog.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Streams) != 3 || back.Streams[0].Sent != s[0].Sent || back.Streams[0].Errors["overloaded"] != s[0].Errors["overloaded"] ||
		back.Total.Latency.P999 != rep.Total.Latency.P999 || back.Batches == nil || back.Batches.Note == "" {
		t.Errorf("JSON does not round-trip: %s", b)
	}
	if n := checkSVG(t, filepath.Join(dir, "p.svg")); n != 3 {
		t.Errorf("plot has %d curves, want 3", n)
	}
}

// attr is an XML element's attribute value ("" when absent).
func attr(se xml.StartElement, name string) string {
	for _, a := range se.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// checkSVG checks that path is an SVG document and returns its number of
// CDF curves.
func checkSVG(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	curves, root := 0, ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q", se.Name.Space)
				}
			}
			if se.Name.Local == "polyline" && attr(se, "class") == "cdf" {
				curves++
			}
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	return curves
}

func TestClosedLoop(t *testing.T) {
	fake := startFake(t, func(_ uint32, id uint64) action {
		if id%7 == 0 {
			return actDrop
		}
		return actAnswer
	}, func(f *fakeApp) { f.delay = 20 * time.Millisecond })
	dir := t.TempDir()
	writeImage(t, filepath.Join(dir, "a.png"), solid(20, 10, color.NRGBA{1, 2, 3, 255}), pngEnc)
	writeImage(t, filepath.Join(dir, "b.jpeg"), solid(10, 20, color.NRGBA{200, 100, 0, 255}), jpegEnc)
	cfg := testConfig(t, fake.addr(), "-duration", "1s", "-timeout", "100ms",
		"-stream", "model=1,loop=closed,concurrency=3,size=1500",
		"-stream", "model=2,class=rt,concurrency=1,images="+dir+",hw=8x8")
	goroutines := runtime.NumGoroutine()
	rep, err := run(context.Background(), cfg, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	settleGoroutines(t, goroutines)
	for i, want := range []int{3, 1} {
		row := rep.Streams[i]
		did, received := fake.counts(testFlow + uint32(i))
		checkRow(t, row, did, received)
		fake.mu.Lock()
		maxOut := fake.maxOut[testFlow+uint32(i)]
		sizes := fake.sizes[testFlow+uint32(i)]
		fake.mu.Unlock()
		if row.MaxInFlight != want || maxOut > want {
			t.Errorf("%s: %d in flight at most (the fake held %d), want %d", row.Name, row.MaxInFlight, maxOut, want)
		}
		// Each slot cycles every 20ms, or 100ms when dropped (1 in 7):
		// about 31ms, so 1s sends about 32 per slot.
		if lo, hi := 10*want, 50*want; row.Sent < lo || row.Sent > hi {
			t.Errorf("%s: sent %d, want %d..%d", row.Name, row.Sent, lo, hi)
		}
		if row.Lost == 0 {
			t.Errorf("%s: nothing lost: slots were not freed by the timeout", row.Name)
		}
		if i == 1 && (len(sizes) != 1 || !sizes[8*8*3]) {
			t.Errorf("image stream sent sizes %v, want 192 bytes", sizes)
		}
	}
}

// -pace bounds what a run sends: an open-loop stream of 5000 requests a
// second (1500 bytes in two datagrams of -frag 1000: 1540 bytes with
// their headers) paced at 1 MB/s sends at most the 256 KiB burst plus
// 1 MB in its second (a slower machine sends fewer).
func TestPacedRun(t *testing.T) {
	fake := startFake(t, func(uint32, uint64) action { return actAnswer })
	cfg := testConfig(t, fake.addr(), "-duration", "1s", "-timeout", "200ms", "-pace", "1MB",
		"-stream", "model=1,rate=5000,size=1500")
	rep, err := run(context.Background(), cfg, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != buildinfo.Version() || rep.Seed != 1 || rep.PaceBps != 1e6 || rep.Start == "" {
		t.Errorf("report header: version %q seed %d pace %v start %q", rep.Version, rep.Seed, rep.PaceBps, rep.Start)
	}
	sent := rep.Streams[0].Sent
	t.Logf("paced at 1 MB/s for 1 s: %d requests sent", sent)
	if limit := (256<<10+1_000_000)/1540 + 1; sent > limit || sent == 0 {
		t.Fatalf("paced at 1 MB/s for 1 s: sent %d requests of 1540 bytes, want 1..%d", sent, limit)
	}
}

// The verdict on a finished run: nothing answered is said whatever the
// thresholds; -max-loss and -max-errors fail the run (exit status 3) only
// when passed.
func TestVerdict(t *testing.T) {
	fake := startFake(t, func(_ uint32, id uint64) action {
		if id%4 == 0 {
			return actDrop
		}
		return actAnswer
	})
	cfg := testConfig(t, fake.addr(), "-duration", "300ms", "-timeout", "100ms", "-stream", "model=1,rate=100,size=1500")
	rep, err := run(context.Background(), cfg, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	tot := rep.Total
	if tot.Lost == 0 || tot.OK == 0 {
		t.Fatalf("the fake dropped nothing or answered nothing: %d ok, %d lost", tot.OK, tot.Lost)
	}
	loss := float64(tot.Lost) / float64(tot.Sent)
	for _, tc := range []struct {
		maxLoss, maxErrors float64
		fail               bool
	}{{-1, -1, false}, {loss + 0.01, 0, false}, {loss / 2, -1, true}, {1, 0, false}} {
		cfg.MaxLoss, cfg.MaxErrors = tc.maxLoss, tc.maxErrors
		msgs, failed := verdict(rep, cfg)
		if failed != tc.fail || failed != (len(msgs) > 0) {
			t.Errorf("max-loss %v max-errors %v with %.2f lost: failed %v %q, want %v", tc.maxLoss, tc.maxErrors, loss, failed, msgs, tc.fail)
		}
	}

	// nothing listens: every request lost, and the verdict says so
	dead := testConfig(t, "127.0.0.1:9", "-duration", "200ms", "-timeout", "100ms", "-stream", "model=1,rate=50,size=100")
	rep, err = run(context.Background(), dead, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, failed := verdict(rep, dead)
	if failed || len(msgs) != 1 || !strings.Contains(msgs[0], "nothing answered: is sluice running at 127.0.0.1:9") {
		t.Fatalf("verdict with nothing answered: %v %q", failed, msgs)
	}
}

func TestTraceRun(t *testing.T) {
	fake := startFake(t, func(uint32, uint64) action { return actAnswer })
	path := filepath.Join(t.TempDir(), "trace.txt")
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "%.3f 5\n", float64(i)*0.01)
		if i%2 == 0 {
			fmt.Fprintf(&b, "%.3f 6 rt\n", float64(i)*0.01)
		}
	}
	b.WriteString("9.5 5\n") // past -duration: not sent
	os.WriteFile(path, []byte(b.String()), 0o644)
	cfg := testConfig(t, fake.addr(), "-duration", "500ms", "-timeout", "200ms",
		"-stream", "model=5,size=100,trace="+path, "-stream", "model=6,class=rt,size=100,trace="+path)
	rep, err := run(context.Background(), cfg, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{20, 10} {
		did, received := fake.counts(testFlow + uint32(i))
		checkRow(t, rep.Streams[i], did, received)
		if rep.Streams[i].Sent != want || rep.Streams[i].OK != want {
			t.Errorf("%s: sent %d ok %d, want %d", rep.Streams[i].Name, rep.Streams[i].Sent, rep.Streams[i].OK, want)
		}
	}
}

func TestMetricsBatches(t *testing.T) {
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		n := scrapes.Add(1) - 1
		fmt.Fprintf(w, "# HELP sluice_batch_size Requests per batch.\n# TYPE sluice_batch_size histogram\n")
		fmt.Fprintf(w, "sluice_batch_size_bucket{if=\"mnv2\",class=\"rt\",le=\"+Inf\"} %d\n", 10+5*n)
		fmt.Fprintf(w, "sluice_batch_size_count{if=\"mnv2\",class=\"rt\"} %d\n", 10+5*n)
		fmt.Fprintf(w, "sluice_batch_size_sum{if=\"mnv2\",class=\"rt\"} %d\n", 40+22*n)
		fmt.Fprintf(w, "sluice_batch_size_count{class=\"be\",if=\"res\\\"net\"} 3 1700000000000\n")
		fmt.Fprintf(w, "sluice_batch_size_sum{class=\"be\",if=\"res\\\"net\"} 9\n")
		fmt.Fprintf(w, "sluice_if_responses_total{if=\"mnv2\",class=\"rt\",status=\"ok\"} 1e3\n")
	}))
	defer srv.Close()
	fake := startFake(t, func(uint32, uint64) action { return actAnswer })
	cfg := testConfig(t, fake.addr(), "-duration", "200ms", "-timeout", "100ms", "-metrics", srv.URL+"/metrics",
		"-stream", "model=1,rate=20,size=100")
	var out bytes.Buffer
	rep, err := run(context.Background(), cfg, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := rep.Batches
	if scrapes.Load() != 2 || b == nil || len(b.IFs) != 2 || b.Note != "" {
		t.Fatalf("%d scrapes, batches %+v", scrapes.Load(), b)
	}
	m, r := b.IFs[0], b.IFs[1]
	if m.IF != "mnv2" || m.Class != "rt" || m.Batches != 5 || m.Items != 22 || m.Mean == nil || *m.Mean != 4.4 {
		t.Errorf("mnv2: %+v", m)
	}
	if r.IF != `res"net` || r.Class != "be" || r.Batches != 0 || r.Mean != nil {
		t.Errorf("resnet: %+v", r)
	}
	if !strings.Contains(out.String(), "| mnv2 | rt | 5 | 22 | 4.40 |") {
		t.Errorf("report:\n%s", out.String())
	}

	// A metrics endpoint that cannot be read fails the run before it sends.
	cfg.MetricsURL = srv.URL + "/nothing-here"
	if _, err := run(context.Background(), cfg, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "before the run") {
		t.Errorf("bad endpoint: %v", err)
	}
	nan := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `sluice_batch_size_count{if="a",class="rt"} NaN`)
	}))
	defer nan.Close()
	if _, err := scrapeBatches(context.Background(), nan.URL); err == nil || !strings.Contains(err.Error(), "not a counter's value") {
		t.Errorf("NaN counter: %v", err)
	}
}

func TestParseProm(t *testing.T) {
	text := `# TYPE x counter
x 1
x{a="1"} 2
x{a="q\"\\\n",b="2",} 3 123
x {a="sp"}  4
other{a="1"} 5
`
	got, err := parseProm(strings.NewReader(text), func(n string) bool { return n == "x" })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].value != 1 || got[1].labels["a"] != "1" || got[2].labels["a"] != "q\"\\\n" ||
		got[2].labels["b"] != "2" || got[2].value != 3 || got[3].labels["a"] != "sp" || got[3].value != 4 {
		t.Errorf("got %+v", got)
	}
	for in, want := range map[string]string{
		"x{a=\"1\"}\n":         "line 1: x: want a value",
		"\n\nx{a=1} 2\n":       "line 3: x: label a: value not quoted",
		"x{a=\"1} 2\n":         "unterminated value",
		"x{a=\"\\t\"} 2\n":     `unknown escape \t`,
		"x{=\"1\"} 2\n":        "want name=",
		"x abc\n":              `value "abc"`,
		"x{a=\"1\"} 2 3 4\n":   "want a value and an optional timestamp",
		"other{{{ nonsense\nx": "line 2: x: want a value",
	} {
		_, err := parseProm(strings.NewReader(in), func(n string) bool { return n == "x" })
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
}

func TestSVGEdgeCases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.svg")
	rows := []*Row{newRow(`a <&> "b"`, "rt"), newRow("one", "be"), newRow("many", "be")}
	rows[1].lat = []float64{0.5}
	for i := range 10000 {
		rows[2].lat = append(rows[2].lat, float64(i)/100)
	}
	r := &Report{Streams: rows}
	if err := r.writePlot(path); err != nil {
		t.Fatal(err)
	}
	if n := checkSVG(t, path); n != 2 {
		t.Errorf("%d curves, want 2 (a stream without responses has none)", n)
	}
	if err := (&Report{}).writePlot(path); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, path)
	for _, x := range []float64{0, 0.7, 1, 9.9, 12, 250, 1e5} {
		ticks := niceTicks(x)
		if ticks[0] != 0 || ticks[len(ticks)-1] < x || len(ticks) > 11 {
			t.Errorf("ticks for %g: %v", x, ticks)
		}
	}
}

// The plot's panels: per stream with ok responses a CDF, a tail curve and
// a group of dots over time; with -slo a marker in each of the three
// panels and the share within it in the legend; the run's target and
// parameters in the title.
func TestPlotPanels(t *testing.T) {
	rows := []*Row{newRow("m1/rt", "rt"), newRow("m2/be", "be")}
	for i := range 500 {
		ms := 1 + float64(i)/10
		rows[0].lat = append(rows[0].lat, ms)
		rows[0].series = append(rows[0].series, timedLatency{at: float64(i) / 100, ms: ms})
	}
	r := &Report{Streams: rows, Target: "127.0.0.1:9400", SendSeconds: 5, Seed: 7, SLOMS: 40, Version: "v-test", Start: "2026-11-26T09:00:00Z"}
	var b bytes.Buffer
	writeSVG(&b, r)
	d := xml.NewDecoder(&b)
	count := map[string]int{}
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			count[x.Name.Local+"."+attr(x, "class")]++
		case xml.CharData:
			text.Write(x)
		}
	}
	if count["polyline.cdf"] != 1 || count["polyline.tail"] != 1 || count["g.time"] != 1 || count["circle."] != 500 || count["line.slo"] != 3 {
		t.Errorf("elements %v: want one CDF, one tail, one dot group of 500, three SLO markers", count)
	}
	for _, want := range []string{"framecast → 127.0.0.1:9400: m1/rt, m2/be", "seed 7", "SLO 40 ms", "within the SLO: 78.20%", "m2/be: no ok responses", "latency over time", "tail"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("plot text lacks %q", want)
		}
	}
	if f := withinSLO(rows[0].lat, 40); f != 0.782 {
		t.Errorf("withinSLO = %v, want 0.782 (391 of 500 at or below 40 ms)", f)
	}
}
