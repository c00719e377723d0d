package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/orchestrator/inss"
)

// The comparison over the recorded profiles, small (the learned
// scheduler trained for 30 episodes only): every policy runs at
// every size and load with a valid plan; the workload is 8 demands of
// two SLO tiers; the report and the plot name every run; the runs are
// deterministic (the same seed gives the same goodput).
func TestPlacementSim(t *testing.T) {
	f, err := os.Open("testdata/cpu-profiles.json")
	if err != nil {
		t.Fatal(err)
	}
	profs, err := inss.ReadProfiles(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	o := options{profiles: "testdata/cpu-profiles.json", devices: []int{2, 5}, loads: []float64{0.5, 0.9}, horizon: 2, seed: 7, episodes: 30,
		saveLearned: filepath.Join(t.TempDir(), "learned.json")}
	rep, err := run(profs, o)
	if err != nil {
		t.Fatal(err)
	}
	// -save-learned wrote a scheduler the appliance can load
	lf, err := os.Open(o.saveLearned)
	if err != nil {
		t.Fatal(err)
	}
	l, err := inss.LoadLearned(lf)
	lf.Close()
	if err != nil || l.Kind() != profs[0].Device || l.Capacity() != profs[0].Capacity {
		t.Fatalf("saved scheduler: %v, %v", l, err)
	}
	o.saveLearned = ""
	rows := rep.rows
	if len(rows) != 2*2*len(policies) {
		t.Fatalf("%d runs", len(rows))
	}
	for _, r := range rows {
		if r.res.Goodput < 0 || r.res.ViolationRate < 0 || r.res.ViolationRate > 1 || r.places == 0 {
			t.Errorf("%+v: %+v", r, r.res)
		}
	}
	again, _ := run(profs, o)
	for k := range rows {
		if again.rows[k].res.Goodput != rows[k].res.Goodput {
			t.Fatalf("run %d: goodput %v then %v", k, rows[k].res.Goodput, again.rows[k].res.Goodput)
		}
	}
	m, _ := inss.NewModel(profs, 0)
	devs := []inss.Device{{Kind: profs[0].Device, Capacity: profs[0].Capacity}, {Kind: profs[0].Device, Capacity: profs[0].Capacity}}
	wl, err := workload(m, profs, devs, 0.5)
	if err != nil || len(wl) != 8 || !strings.HasSuffix(wl[0].Name, "/tight") || !strings.HasSuffix(wl[len(profs)].Name, "/loose") {
		t.Fatalf("workload %+v, %v", wl, err)
	}
	md, plot := markdown(rep, o), svg(rows, o)
	for _, want := range []string{"| 5 | 0.9 | inss-greedy |", "| 5 | 0.9 | inss-learned |", "| 2 | 0.5 | gslice |", "`-episodes 30`) trained in"} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in\n%s", want, md)
		}
	}
	if !strings.HasPrefix(plot, "<svg") || !strings.Contains(plot, "5 dev, load 0.9") || !strings.HasSuffix(plot, "</svg>\n") {
		t.Errorf("plot:\n%s", plot)
	}
}
