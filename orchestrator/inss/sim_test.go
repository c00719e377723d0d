package inss

import (
	"math"
	"testing"
)

// synthModel is a latency model over two synthetic models on 4-unit
// devices: time = 1 ms + 2 ms x batch / share, fast and slow; "hot"
// presses hard and is sensitive, "cool" neither.
func synthModel(t *testing.T) *Model {
	t.Helper()
	mk := func(name string, scale, press, sens float64) Profile {
		p := Profile{Model: name, Device: "dev", Capacity: 4, Pressure: press, Sensitivity: sens, MemBytes: 1 << 20}
		for _, b := range []int{1, 2, 4, 8} {
			for s := 1; s <= 4; s++ {
				p.Points = append(p.Points, Point{Batch: b, Share: float64(s), RunNs: scale * (1e6 + 2e6*float64(b)/float64(s))})
			}
		}
		return p
	}
	m, err := NewModel([]Profile{mk("fast", 1, 0, 0), mk("slow", 4, 0, 0), mk("hot", 1, 1, 1)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func devices(n int) []Device {
	d := make([]Device, n)
	for k := range d {
		d[k] = Device{Kind: "dev", Capacity: 4, MemBytes: 8 << 20}
	}
	return d
}

// A light load is served within its SLO; the same plan under ten times
// the load violates; a run is the same twice with one seed.
func TestSimulate(t *testing.T) {
	m := synthModel(t)
	plan := &Plan{Places: []Placement{{Demand: 0, Device: 0, Share: 4, Batch: 4}}}
	light := []Demand{{Name: "a", Model: "fast", SLONs: 20e6, Rate: 100}}
	r, err := Simulate(m, devices(1), light, plan, 10, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Arrived[0] < 900 || r.ViolationRate > 0.01 || r.Good[0]+r.Violated[0] != r.Arrived[0] {
		t.Errorf("light load: %+v", r)
	}
	r2, _ := Simulate(m, devices(1), light, plan, 10, 1, true)
	if r2.Good[0] != r.Good[0] || r2.Arrived[0] != r.Arrived[0] {
		t.Errorf("not deterministic: %+v then %+v", r, r2)
	}
	heavy := []Demand{{Name: "a", Model: "fast", SLONs: 20e6, Rate: 5000}}
	r, _ = Simulate(m, devices(1), heavy, plan, 10, 1, true)
	if r.ViolationRate < 0.3 || r.Good[0]+r.Violated[0] != r.Arrived[0] {
		t.Errorf("ten times the capacity: %+v", r)
	}
	// unserved demand: all violated
	r, _ = Simulate(m, devices(1), append(light, Demand{Name: "b", Model: "slow", SLONs: 50e6, Rate: 10}), plan, 10, 1, true)
	if r.Good[1] != 0 || r.Violated[1] != r.Arrived[1] || r.Arrived[1] == 0 {
		t.Errorf("a demand with no placement: %+v", r)
	}
	// no SLO and ten times the capacity: the queue stays bounded, the
	// excess is refused
	endless := []Demand{{Name: "a", Model: "fast", SLONs: math.Inf(1), Rate: 20000}}
	r, _ = Simulate(m, devices(1), endless, plan, 10, 1, true)
	if r.Violated[0] < r.Arrived[0]/2 || r.Good[0]+r.Violated[0] != r.Arrived[0] {
		t.Errorf("an endless queue: %+v", r)
	}
	bad := &Plan{Places: []Placement{{Demand: 0, Device: 0, Share: 3, Batch: 1}, {Demand: 0, Device: 0, Share: 2, Batch: 1}}}
	if _, err := Simulate(m, devices(1), light, bad, 10, 1, true); err == nil {
		t.Error("5 units on a 4-unit device accepted")
	}
}

// Greedy covers a workload that fits, with every plan within the
// devices; GSLICE's even split serves less of a skewed workload; a
// planner that knows interference keeps two sensitive models apart and
// violates less than one that does not, judged with interference.
func TestPlanners(t *testing.T) {
	m := synthModel(t)
	wl := []Demand{
		{Name: "heavy", Model: "slow", SLONs: 80e6, Rate: 600},
		{Name: "l1", Model: "fast", SLONs: 20e6, Rate: 20},
		{Name: "l2", Model: "fast", SLONs: 20e6, Rate: 20},
		{Name: "l3", Model: "fast", SLONs: 20e6, Rate: 20},
	}
	devs := devices(4)
	g := Greedy(m, devs, wl, PlanOptions{Interference: true})
	gs := GSLICE(m, devs, wl, PlanOptions{})
	for name, p := range map[string]*Plan{"greedy": g, "gslice": gs} {
		if err := p.Check(m, devs, wl); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	rg, _ := Simulate(m, devs, wl, g, 20, 3, true)
	rs, _ := Simulate(m, devs, wl, gs, 20, 3, true)
	t.Logf("greedy %+v\ngslice %+v", rg, rs)
	if rg.ViolationRate > 0.05 || rg.Goodput <= rs.Goodput {
		t.Errorf("greedy goodput %.0f/s (violations %.1f%%), gslice %.0f/s (%.1f%%)", rg.Goodput, 100*rg.ViolationRate, rs.Goodput, 100*rs.ViolationRate)
	}
	hot := []Demand{
		{Name: "h1", Model: "hot", SLONs: 12e6, Rate: 150},
		{Name: "h2", Model: "hot", SLONs: 12e6, Rate: 150},
	}
	with := Greedy(m, devices(2), hot, PlanOptions{Interference: true})
	without := Greedy(m, devices(2), hot, PlanOptions{})
	rw, _ := Simulate(m, devices(2), hot, with, 20, 5, true)
	ro, _ := Simulate(m, devices(2), hot, without, 20, 5, true)
	t.Logf("with %+v: %+v\nwithout %+v: %+v", with.Places, rw, without.Places, ro)
	if rw.ViolationRate >= ro.ViolationRate {
		t.Errorf("knowing interference: %.1f%% violated, not knowing: %.1f%%", 100*rw.ViolationRate, 100*ro.ViolationRate)
	}
}

// The local stage gives the busier model more units, each at least one,
// all of them used; a balanced load splits them evenly; more models than
// units, or one without a profile, share evenly.
func TestLocalShares(t *testing.T) {
	m := synthModel(t)
	ds := []Demand{
		{Name: "busy", Model: "fast", SLONs: 20e6, Rate: 1500},
		{Name: "idle", Model: "fast", SLONs: 20e6, Rate: 50},
	}
	sh, b := LocalShares(m, "dev", 4, ds, PlanOptions{})
	if sh[0] != 0.75 || sh[1] != 0.25 || b[0] == 0 || b[1] == 0 {
		t.Errorf("busy and idle: shares %v, batches %v", sh, b)
	}
	ds[1].Rate = 1500
	if sh, _ := LocalShares(m, "dev", 4, ds, PlanOptions{}); sh[0] != 0.5 || sh[1] != 0.5 {
		t.Errorf("balanced: shares %v", sh)
	}
	three := append(ds, ds[0], ds[0], ds[0])
	if sh, b := LocalShares(m, "dev", 4, three, PlanOptions{}); sh[0] != 0.2 || b[0] != 0 {
		t.Errorf("5 models on 4 units: shares %v, batches %v", sh, b)
	}
	if sh, _ := LocalShares(m, "dev", 4, []Demand{ds[0], {Model: "nope"}}, PlanOptions{}); sh[0] != 0.5 {
		t.Errorf("an unprofiled model: shares %v", sh)
	}
	// interference: a sensitive model beside one that presses runs its
	// batches longer, so it fits a smaller batch in the same SLO
	bAlone, infAlone, _ := BestBatch(m, "hot", "dev", 2, 12e6, nil, PlanOptions{})
	bBeside, infBeside, ok := BestBatch(m, "hot", "dev", 2, 12e6, []Colocated{{Model: "hot"}}, PlanOptions{})
	if !ok || bBeside >= bAlone || infBeside/float64(bBeside) <= infAlone/float64(bAlone) {
		t.Errorf("hot alone: batch %d in %.1f ms; beside hot: batch %d in %.1f ms", bAlone, infAlone/1e6, bBeside, infBeside/1e6)
	}
}

// Eight models on 64 units (553 million splits) are planned unit by unit,
// at once: every unit given, the busiest models the most.
func TestLocalSharesMany(t *testing.T) {
	mk := func(units int) *Model {
		var profs []Profile
		for _, name := range []string{"a", "b"} {
			p := Profile{Model: name, Device: "big", Capacity: units}
			for _, b := range []int{1, 2, 4, 8} {
				for _, s := range []int{1, 2, 4, 8, 16, 32, 64} {
					p.Points = append(p.Points, Point{Batch: b, Share: float64(s), RunNs: 1e6 + 8e6*float64(b)/float64(s)})
				}
			}
			profs = append(profs, p)
		}
		m, err := NewModel(profs, 0)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := mk(64)
	var ds []Demand
	for i := 0; i < 8; i++ {
		ds = append(ds, Demand{Model: []string{"a", "b"}[i%2], SLONs: 50e6, Rate: float64(100 * (i + 1))})
	}
	if compositions(64, 8) <= maxSplits {
		t.Fatalf("%d splits: the test wants more than %d", compositions(64, 8), maxSplits)
	}
	sh, _ := LocalShares(m, "big", 64, ds, PlanOptions{})
	sum := 0.0
	for i, s := range sh {
		sum += s
		if s < 1.0/64-1e-12 {
			t.Errorf("demand %d: share %v, under one unit", i, s)
		}
	}
	if math.Abs(sum-1) > 1e-9 || sh[7] <= sh[0] {
		t.Errorf("shares %v (sum %v): the busiest should have the most", sh, sum)
	}
}
