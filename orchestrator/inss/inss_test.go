package inss

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// On points that lie on a plane in (batch, 1/share), LWR reproduces the
// plane anywhere inside the grid; on a smooth curved surface (time ~
// batch / share, as a compute-bound model's) it interpolates held-out
// points within 10% and profiled ones within 2%.
func TestLWR(t *testing.T) {
	var plane, curve []Point
	for _, b := range []int{1, 2, 4, 8, 16} {
		for _, s := range []float64{1, 2, 3, 4} {
			plane = append(plane, Point{Batch: b, Share: s, RunNs: 1000 + 300*float64(b) + 2000/s})
			curve = append(curve, Point{Batch: b, Share: s, RunNs: 2e5 + 1e6*float64(b)/s})
		}
	}
	lp, err := NewLWR(plane, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		b int
		s float64
	}{{3, 1.5}, {6, 2}, {12, 3.5}, {1, 1}, {16, 4}} {
		want := 1000 + 300*float64(q.b) + 2000/q.s
		if got := lp.Predict(q.b, q.s); math.Abs(got-want) > 1e-6*want {
			t.Errorf("plane at (%d, %v): %v, want %v", q.b, q.s, got, want)
		}
	}
	lc, err := NewLWR(curve, 0.3)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		b int
		s float64
	}{{3, 2}, {6, 3}, {12, 4}} {
		want := 2e5 + 1e6*float64(q.b)/q.s
		if got := lc.Predict(q.b, q.s); math.Abs(got-want) > 0.1*want {
			t.Errorf("curve at (%d, %v): %.0f, want %.0f (%.1f%% off)", q.b, q.s, got, want, 100*(got-want)/want)
		}
	}
	if got, want := lc.Predict(4, 2), 2e5+1e6*4/2.0; math.Abs(got-want) > 0.02*want {
		t.Errorf("at a profiled point: %v, want %v", got, want)
	}
	// one share only: batch alone decides
	var one []Point
	for _, b := range []int{1, 2, 4, 8} {
		one = append(one, Point{Batch: b, Share: 2, RunNs: 500 * float64(b)})
	}
	lo, _ := NewLWR(one, 0)
	if got := lo.Predict(6, 2); math.Abs(got-3000) > 1e-3 {
		t.Errorf("one share, batch 6: %v, want 3000", got)
	}
	if _, err := NewLWR(nil, 0); err == nil {
		t.Error("no points accepted")
	}
	if _, err := NewLWR([]Point{{Batch: 0, Share: 1, RunNs: 1}}, 0); err == nil {
		t.Error("batch 0 accepted")
	}
}

// FitLinear recovers a line; FitSensitivity recovers α from co-located
// slowdowns and never goes negative.
func TestFits(t *testing.T) {
	l, err := FitLinear([]int{1, 2, 4, 8}, []float64{130, 160, 220, 340})
	if err != nil || math.Abs(l.A-30) > 1e-9 || math.Abs(l.B-100) > 1e-9 || l.At(3) != 190 {
		t.Errorf("line: %+v, %v", l, err)
	}
	if _, err := FitLinear([]int{2, 2}, []float64{1, 2}); err == nil {
		t.Error("one batch size accepted")
	}
	// a falling fit is noise: the mean; a line is never below 0
	if l, _ := FitLinear([]int{1, 2}, []float64{300, 100}); l.A != 0 || l.B != 200 {
		t.Errorf("falling samples: %+v, want the mean", l)
	}
	if v := (Linear{A: 10, B: -100}).At(2); v != 0 {
		t.Errorf("below 0: %v", v)
	}
	a, err := FitSensitivity([]float64{0.1, 0.2, 0.4}, []float64{1.05, 1.10, 1.20})
	if err != nil || math.Abs(a-0.5) > 1e-9 {
		t.Errorf("sensitivity %v, %v, want 0.5", a, err)
	}
	if a, _ := FitSensitivity([]float64{0.1, 0.2}, []float64{0.95, 0.9}); a != 0 {
		t.Errorf("faster beside others: sensitivity %v, want 0", a)
	}
}

// Execution latency is upload + compute + result, compute scaled by the
// pressure of the models beside it; eq. 3 in both of its cases.
func TestModel(t *testing.T) {
	pts := []Point{{1, 1, 1000}, {2, 1, 2000}, {4, 1, 4000}, {1, 2, 600}, {2, 2, 1100}, {4, 2, 2100}}
	profs := []Profile{
		{Model: "a", Device: "cpu", Capacity: 2, Points: pts, Upload: Linear{A: 10, B: 5}, Result: Linear{A: 1}, Pressure: 0.1, Sensitivity: 2},
		{Model: "b", Device: "cpu", Capacity: 2, Points: pts, Pressure: 0.3, Sensitivity: 0.5},
	}
	m, err := NewModel(profs, 0)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := m.RunNs("a", "cpu", 2, 1)
	c, err := m.ComputeNs("a", "cpu", 2, 1, []Colocated{{Model: "b"}})
	if err != nil || math.Abs(c-o*(1+2*0.3)) > 1e-6 {
		t.Errorf("a beside b: %v (alone %v), %v", c, o, err)
	}
	e, _ := m.ExecNs("a", "cpu", 2, 1, nil)
	if math.Abs(e-(25+o+2)) > 1e-6 {
		t.Errorf("exec %v, want %v", e, 25+o+2)
	}
	if _, err := m.ComputeNs("a", "cpu", 2, 1, []Colocated{{Model: "c"}}); err == nil {
		t.Error("an unprofiled model beside accepted")
	}
	if _, err := m.RunNs("a", "gpu", 1, 1); err == nil {
		t.Error("an unprofiled device accepted")
	}
	if _, err := NewModel(append(profs, profs[0]), 0); err == nil {
		t.Error("two profiles of one model and device accepted")
	}
	// eq. 3: 9 queued at batch 4 wait for the batch in progress and 3
	// batches; 1 queued at batch 4 with 1000 tasks/s waits 3 ms for its
	// batch to fill (longer than the 1 ms in progress), then its batch
	if got := TaskLatency(9, 4, 1e6, 2e6, 1000); got != 1e6+3*2e6 {
		t.Errorf("full queue: %v", got)
	}
	if got := TaskLatency(1, 4, 1e6, 2e6, 1000); math.Abs(got-(3e6+2e6)) > 1e-3 {
		t.Errorf("filling a batch: %v", got)
	}
	if got := TaskLatency(1, 4, 5e6, 2e6, 1000); got != 5e6+2e6 {
		t.Errorf("filling a batch behind a long one: %v", got)
	}
	var buf bytes.Buffer
	if err := WriteProfiles(&buf, profs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadProfiles(&buf)
	if err != nil || len(back) != 2 || back[0].Upload != profs[0].Upload || len(back[1].Points) != len(pts) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if _, err := ReadProfiles(strings.NewReader(`{"profiles":[{"model":"a","bogus":1}]}`)); err == nil {
		t.Error("an unknown field accepted")
	}
}

// One disturbed measurement (10x its neighbours') does not drag the
// prediction next to it: the robustness passes weigh it down.
func TestLWRRobust(t *testing.T) {
	var pts []Point
	for _, b := range []int{1, 2, 4, 8, 16} {
		for _, s := range []float64{1, 2} {
			ns := 1e5 * float64(b) / s
			if b == 4 && s == 1 {
				ns *= 10
			}
			pts = append(pts, Point{Batch: b, Share: s, RunNs: ns})
		}
	}
	l, err := NewLWR(pts, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Predict(3, 1), 3e5; math.Abs(got-want) > 0.15*want {
		t.Errorf("batch 3 beside the outlier: %.0f, want %.0f", got, want)
	}
}

// PlaceOnce spreads one instance per demand over the devices by work,
// then splits each device's units: the busy demand alone on a device
// with both its units, the two light ones on the other with one each;
// more demands than units fail.
func TestPlaceOnce(t *testing.T) {
	m := synthModel(t)
	devs := []Device{{Kind: "dev", Capacity: 2}, {Kind: "dev", Capacity: 2}}
	wl := []Demand{{Name: "light1", Model: "fast", SLONs: 50e6, Rate: 20}, {Name: "busy", Model: "fast", SLONs: 50e6, Rate: 1500},
		{Name: "light2", Model: "fast", SLONs: 50e6, Rate: 20}}
	p, err := PlaceOnce(m, devs, wl, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(m, devs, wl); err != nil {
		t.Fatal(err)
	}
	dev := map[string]Placement{}
	for _, pl := range p.Places {
		dev[wl[pl.Demand].Name] = pl
	}
	b, l1, l2 := dev["busy"], dev["light1"], dev["light2"]
	if len(p.Places) != 3 || b.Share != 2 || l1.Device == b.Device || l2.Device != l1.Device || l1.Share != 1 || l2.Share != 1 {
		t.Fatalf("plan %+v", p.Places)
	}
	if _, err := PlaceOnce(m, devs, append(wl, wl[0], wl[2]), PlanOptions{}); err == nil {
		t.Fatal("five demands on four units were placed")
	}
}
