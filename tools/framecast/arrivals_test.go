package main

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// meanRate counts a generator's arrivals in [0, horizon) per second, and
// checks they do not go back in time.
func meanRate(t *testing.T, g arrivalGen, horizon time.Duration) float64 {
	t.Helper()
	n, last := 0, time.Duration(-1)
	for {
		at, ok := g.next()
		if !ok || at >= horizon {
			break
		}
		if at < last {
			t.Fatalf("arrival %d at %v before the previous one at %v", n, at, last)
		}
		last = at
		n++
	}
	return float64(n) / horizon.Seconds()
}

func TestArrivalRates(t *testing.T) {
	const rate = 50.0
	horizon := 2000 * time.Second // 100,000 arrivals
	for _, tc := range []struct {
		spec streamSpec
		tol  float64 // relative
	}{
		{streamSpec{Arrival: arrivalUniform, Rate: rate}, 1e-4},
		{streamSpec{Arrival: arrivalPoisson, Rate: rate}, 0.02},
		{streamSpec{Arrival: arrivalLognormal, Rate: rate, Sigma: 1}, 0.03},
		{streamSpec{Arrival: arrivalLognormal, Rate: rate, Sigma: 0.25}, 0.02},
	} {
		g := newArrivals(tc.spec, rand.New(rand.NewPCG(42, 1)), nil)
		got := meanRate(t, g, horizon)
		if math.Abs(got-rate)/rate > tc.tol {
			t.Errorf("%s sigma %g: mean rate %.3f/s, want %g ± %g%%", tc.spec.Arrival, tc.spec.Sigma, got, rate, tc.tol*100)
		}
	}
}

// TestArrivalShapes checks that the random processes vary as they should:
// Poisson gaps have a coefficient of variation of 1, lognormal ones
// sqrt(exp(sigma²)-1).
func TestArrivalShapes(t *testing.T) {
	for _, tc := range []struct {
		spec   streamSpec
		wantCV float64
	}{
		{streamSpec{Arrival: arrivalPoisson, Rate: 100}, 1},
		{streamSpec{Arrival: arrivalLognormal, Rate: 100, Sigma: 0.5}, math.Sqrt(math.Exp(0.25) - 1)},
	} {
		g := newArrivals(tc.spec, rand.New(rand.NewPCG(7, 7)), nil)
		var sum, sum2 float64
		prev := time.Duration(0)
		const n = 50000
		for range n {
			at, _ := g.next()
			d := (at - prev).Seconds()
			prev = at
			sum += d
			sum2 += d * d
		}
		mean := sum / n
		cv := math.Sqrt(sum2/n-mean*mean) / mean
		if math.Abs(cv-tc.wantCV) > 0.05 {
			t.Errorf("%s: coefficient of variation %.3f, want %.3f", tc.spec.Arrival, cv, tc.wantCV)
		}
	}
}

func TestParseTrace(t *testing.T) {
	text := "# seconds model class\n0\n\n0.0125 1 rt\n0.0125,2,be\n  1.5\t2  \n"
	got, err := parseTrace(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []traceLine{
		{line: 2, at: 0, model: -1},
		{line: 4, at: 12500 * time.Microsecond, model: 1, class: "rt"},
		{line: 5, at: 12500 * time.Microsecond, model: 2, class: "be"},
		{line: 6, at: 1500 * time.Millisecond, model: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"0.1\nabc\n", `2: time "abc"`},
		{"0.1\n-1\n", `2: time "-1"`},
		{"0.1\nNaN\n", `2: time "NaN"`},
		{"0.5\n0.4\n", "2: time 400ms is before the previous line's 500ms"},
		{"0.1 x\n", `1: model "x"`},
		{"# c\n0.1 1 gold\n", `2: class "gold": want rt or be`},
		{"0.1 1 rt extra\n", "1: \"0.1 1 rt extra\": want SECONDS [MODEL [CLASS]]"},
		{"# nothing\n\n", "1: no arrivals"},
	} {
		_, err := parseTrace(strings.NewReader(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), strings.SplitN(tc.want, ":", 2)[0]+":") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestTraceTimes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.txt")
	if err := os.WriteFile(path, []byte("0.0 1 rt\n0.1\n0.2 2\n0.3 2 be\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, _ := parseStream("model=1,class=rt,trace=" + path)
	be, _ := parseStream("model=2,trace=" + path)
	other, _ := parseStream("model=9,rate=5")
	got, err := traceTimes([]streamSpec{rt, be, other})
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	want := [][]time.Duration{{0, 100 * ms}, {100 * ms, 200 * ms, 300 * ms}, nil}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	g := newArrivals(be, nil, got[1])
	var seen []time.Duration
	for at, ok := g.next(); ok; at, ok = g.next() {
		seen = append(seen, at)
	}
	if !reflect.DeepEqual(seen, want[1]) {
		t.Errorf("replayed %v, want %v", seen, want[1])
	}

	// A line no stream takes, a stream with no line, a missing file.
	if _, err := traceTimes([]streamSpec{rt}); err == nil || !strings.Contains(err.Error(), path+":3: model 2, any class matches no -stream") {
		t.Errorf("unused line: %v", err)
	}
	only1 := filepath.Join(dir, "only1.txt")
	os.WriteFile(only1, []byte("0.0 1\n"), 0o644)
	m1, _ := parseStream("model=1,trace=" + only1)
	m3, _ := parseStream("model=3,trace=" + only1)
	if _, err := traceTimes([]streamSpec{m1, m3}); err == nil || !strings.Contains(err.Error(), "no line for stream m3/be") {
		t.Errorf("stream without lines: %v", err)
	}
	gone, _ := parseStream("model=1,trace=" + filepath.Join(dir, "missing"))
	if _, err := traceTimes([]streamSpec{gone}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("0.1\n0.2 1 xx\n"), 0o644)
	bs, _ := parseStream("model=1,trace=" + bad)
	if _, err := traceTimes([]streamSpec{bs}); err == nil || !strings.Contains(err.Error(), "trace "+bad+":2: class \"xx\"") {
		t.Errorf("bad line: %v", err)
	}
}
