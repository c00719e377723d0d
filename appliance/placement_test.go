package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/orchestrator/inss"
)

// writePlacementProfiles writes synthetic cpu profiles for the named
// models on units units: a batch of b on s units takes 1 ms + 2 ms x b /
// s.
func writePlacementProfiles(t *testing.T, units int, models ...string) string {
	t.Helper()
	profs := synthProfiles(units, models...)
	path := filepath.Join(t.TempDir(), "profiles.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := inss.WriteProfiles(f, profs); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// synthProfiles are writePlacementProfiles' profiles.
func synthProfiles(units int, models ...string) []inss.Profile {
	var profs []inss.Profile
	for _, name := range models {
		p := inss.Profile{Model: name, Device: "cpu", Capacity: units}
		for _, b := range []int{1, 2, 4, 8} {
			for s := 1; s <= units; s++ {
				p.Points = append(p.Points, inss.Point{Batch: b, Share: float64(s), RunNs: 1e6 + 2e6*float64(b)/float64(s)})
			}
		}
		profs = append(profs, p)
	}
	return profs
}

// Placement keys: an unknown mode, inss without profiles, auto_share
// under inss and a plan interval out of range are refused; a profiles
// file that is missing, not JSON or without a cpu profile fails New.
func TestPlacementProfileErrors(t *testing.T) {
	head := "[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:mlp\"\n"
	for _, tc := range []struct{ text, want string }{
		{"[appliance]\nplacement = \"best\"\n" + head, `appliance.placement "best": want "gslice" or "inss"`},
		{"[appliance]\nplacement = \"inss\"\n" + head, `appliance.placement_profiles: required with placement "inss"`},
		{"[appliance]\nplacement = \"inss\"\nplacement_profiles = \"p.json\"\n" + head + "auto_share = true\n", `if[0].auto_share: the inss placement sets the shares`},
		{"[appliance]\nplan_interval_ms = 5\n" + head, `appliance.plan_interval_ms 5: out of range 10..3600000`},
	} {
		if _, err := ParseProfile("test.toml", tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("profile %q:\nerror %v\nwant it to contain %q", tc.text, err, tc.want)
		}
	}
	dir := t.TempDir()
	notJSON, gpuOnly := filepath.Join(dir, "x.json"), filepath.Join(dir, "gpu.json")
	os.WriteFile(notJSON, []byte("not json"), 0o644)
	os.WriteFile(gpuOnly, []byte(`{"profiles":[{"model":"m","device":"h200","capacity":132,"points":[{"batch":1,"share":1,"run_ns":1}],"upload":{"a_ns":0,"b_ns":0},"result":{"a_ns":0,"b_ns":0},"pressure":0,"sensitivity":0}]}`), 0o644)
	for path, want := range map[string]string{
		filepath.Join(dir, "missing.json"): "appliance.placement_profiles",
		notJSON:                            "appliance.placement_profiles " + notJSON,
		gpuOnly:                            "no profile of the cpu device",
	} {
		newFails(t, fmt.Sprintf("[appliance]\nmetrics=\"off\"\ncontrol=\"off\"\nplacement = \"inss\"\nplacement_profiles = %q\n%s", path, head), want)
	}
}

// Under placement "inss" a round of the local stage gives the busy IF
// three of the four units and the idle one one, by shadow swaps; a round
// without arrivals changes nothing; an IF the profiles do not cover
// keeps every share as it is.
func TestPlacementInSS(t *testing.T) {
	path := writePlacementProfiles(t, 4, "busy", "idle")
	text := fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 4
metrics = "off"
control = "off"
placement = "inss"
placement_profiles = %q
# rounds run from the test, not the clock
plan_interval_ms = 3600000

[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"

[[if]]
name = "busy"
model_id = 1
model = "zoo:mlp"
slo_ms = 20

[[if]]
name = "idle"
model_id = 2
model = "zoo:mlp"
slo_ms = 20
`, path)
	a, stop := startAppliance(t, "inss.toml", text)
	defer stop()
	busy, idle := a.ifs["busy"], a.ifs["idle"]
	if a.planStep(time.Second) {
		t.Fatal("a round without arrivals changed the shares")
	}
	busy.f.C.Arrivals.Add(1500)
	idle.f.C.Arrivals.Add(20)
	if !a.planStep(time.Second) {
		t.Fatal("the busy IF got no more units")
	}
	if err := a.applySharesCtx(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if b, i := bits.OnesCount64(busy.f.Units()), bits.OnesCount64(idle.f.Units()); b != 3 || i != 1 || busy.f.Units()&idle.f.Units() != 0 {
		t.Errorf("units: busy %b, idle %b; want 3 and 1, disjoint", busy.f.Units(), idle.f.Units())
	}
	if busy.spec.Share != 0.75 || idle.spec.Share != 0.25 {
		t.Errorf("shares %v and %v, want 0.75 and 0.25", busy.spec.Share, idle.spec.Share)
	}
	// the plan command: the units, the profiles, the rates and the
	// model's predictions
	rep := a.planReply()
	if rep.Placement != PlacementInSS || rep.Units != 4 || rep.IntervalMS != 3600000 || len(rep.IFs) != 2 {
		t.Fatalf("plan %+v", rep)
	}
	for i, want := range []struct {
		name  string
		units int
		rate  float64
	}{{"busy", 3, 1500}, {"idle", 1, 20}} {
		p := rep.IFs[i]
		if p.Name != want.name || p.Profile != want.name || p.Units != want.units || p.RateRPS != want.rate ||
			p.Batch < 1 || !(p.PredictedMS > 0) || p.PredictedMS > p.SLOMS {
			t.Errorf("plan IF %d: %+v, want %s on %d units at %v/s with a prediction within its SLO", i, p, want.name, want.units, want.rate)
		}
	}
	// the prediction is exported as a metric too
	mfs, err := a.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_if_predicted_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "if" {
					got[lp.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	for _, p := range rep.IFs {
		if v := got[p.Name]; math.Abs(v*1e3-p.PredictedMS) > 1e-9 {
			t.Errorf("sluice_if_predicted_latency_seconds{if=%q} = %v, plan says %v ms", p.Name, v, p.PredictedMS)
		}
	}
	// the same rates again: nothing to change
	busy.f.C.Arrivals.Add(1500)
	idle.f.C.Arrivals.Add(20)
	if a.planStep(time.Second) {
		t.Error("the same rates changed the shares again")
	}
	// an IF without a profile: the round changes nothing
	a.mu.Lock()
	idle.spec.Name = "unprofiled"
	a.mu.Unlock()
	idle.f.C.Arrivals.Add(1500)
	if a.planStep(time.Second) {
		t.Error("a round with an unprofiled IF changed the shares")
	}
}

// With placement_devices = 2 the inss placement runs InSS's global stage
// too: the four units are two groups of two; the busy IF gets a group of
// its own, both units, and the two idle IFs share the other, one unit
// each, by shadow swaps; the plan command names each IF's group. A
// placement_devices without the inss placement is refused.
func TestPlacementGlobalStage(t *testing.T) {
	path := writePlacementProfiles(t, 2, "busy", "idle1", "idle2")
	text := fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 4
metrics = "off"
control = "off"
placement = "inss"
placement_profiles = %q
placement_devices = 2
plan_interval_ms = 3600000

[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
`, path)
	for i, name := range []string{"idle1", "busy", "idle2"} {
		text += fmt.Sprintf("\n[[if]]\nname = %q\nmodel_id = %d\nmodel = \"zoo:mlp\"\nslo_ms = 20\n", name, i+1)
	}
	a, stop := startAppliance(t, "global.toml", text)
	defer stop()
	busy, idle1, idle2 := a.ifs["busy"], a.ifs["idle1"], a.ifs["idle2"]
	busy.f.C.Arrivals.Add(1500)
	idle1.f.C.Arrivals.Add(20)
	idle2.f.C.Arrivals.Add(20)
	if !a.planStep(time.Second) {
		t.Fatal("the first round placed nothing")
	}
	if err := a.applySharesCtx(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	groups := []uint64{0b0011, 0b1100}
	b, i1, i2 := busy.f.Units(), idle1.f.Units(), idle2.f.Units()
	if b != groups[busy.planDevice] || bits.OnesCount64(i1) != 1 || bits.OnesCount64(i2) != 1 || i1&i2 != 0 ||
		(i1|i2) != groups[1-busy.planDevice] || idle1.planDevice != idle2.planDevice {
		t.Fatalf("units: busy %04b (group %d), idle1 %04b, idle2 %04b; want busy on a group of its own, the idle IFs one unit each on the other",
			b, busy.planDevice, i1, i2)
	}
	rep := a.planReply()
	if rep.Devices != 2 || len(rep.IFs) != 3 {
		t.Fatalf("plan %+v", rep)
	}
	for _, p := range rep.IFs {
		if p.Device == nil || *p.Device != a.ifs[p.Name].planDevice {
			t.Errorf("plan IF %s: device %v", p.Name, p.Device)
		}
	}
	// the same rates again: nothing moves
	busy.f.C.Arrivals.Add(1500)
	idle1.f.C.Arrivals.Add(20)
	idle2.f.C.Arrivals.Add(20)
	if a.planStep(time.Second) {
		t.Error("the same rates moved the IFs")
	}
	if _, err := ParseProfile("p.toml", "[appliance]\nplacement_devices = 2\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:mlp\"\n"); err == nil ||
		!strings.Contains(err.Error(), `appliance.placement_devices 2: only with placement "inss"`) {
		t.Errorf("placement_devices under gslice: %v", err)
	}
}

// writeLearned trains a small learned scheduler on profs (cpu devices of
// units units) for the given demands, saves it and returns its path, with
// the latency model.
func writeLearned(t *testing.T, profs []inss.Profile, units int, ds []inss.Demand) (string, *inss.Model, *inss.Learned) {
	t.Helper()
	m, err := inss.NewModel(profs, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := inss.Train(m, inss.Device{Kind: "cpu", Capacity: units}, ds,
		inss.LearnConfig{Episodes: 60, Hidden: 16, Seed: 5, Plan: inss.PlanOptions{Interference: true}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "learned.json")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(out); err != nil {
		t.Fatal(err)
	}
	out.Close()
	return path, m, l
}

// placement_learned: the learned scheduler plans the round, and every IF
// gets the units its placements give it (the shares of the groups it is
// placed on, inside those groups, no unit given twice); ifctl plan says
// the learned scheduler planned. A learned scheduler whose placement
// actor always stops places nobody: the greedy stages plan that round
// instead, and plan says so. Bad placement_learned files and keys are
// refused.
func TestPlacementLearned(t *testing.T) {
	names := []string{"busy", "idle"}
	rates := []float64{1500, 20}
	profPath := writePlacementProfiles(t, 2, names...)
	var ds []inss.Demand
	for i, n := range names {
		ds = append(ds, inss.Demand{Name: n, Model: n, SLONs: 20e6, Rate: rates[i]})
	}
	learnedPath, m, l := writeLearned(t, synthProfiles(2, names...), 2, ds)
	run := func(learned string) (*running, func()) {
		text := fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 4
metrics = "off"
control = "off"
placement = "inss"
placement_profiles = %q
placement_learned = %q
placement_devices = 2
plan_interval_ms = 3600000

[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
`, profPath, learned)
		for i, name := range names {
			text += fmt.Sprintf("\n[[if]]\nname = %q\nmodel_id = %d\nmodel = \"zoo:mlp\"\nslo_ms = 20\n", name, i+1)
		}
		return startAppliance(t, "learned.toml", text)
	}
	round := func(a *running) {
		t.Helper()
		for i, n := range names {
			a.ifs[n].f.C.Arrivals.Add(uint64(rates[i]))
		}
		a.planStep(time.Second)
		if err := a.applySharesCtx(context.Background(), true); err != nil {
			t.Fatal(err)
		}
	}

	a, stop := run(learnedPath)
	round(a)
	devs, first := a.unitGroups()
	plan := l.Plan(m, devs, ds)
	if err := plan.Check(m, devs, ds); err != nil {
		t.Fatal(err)
	}
	rep := a.planReply()
	placed := map[int]bool{}
	for _, p := range plan.Places {
		placed[p.Demand] = true
	}
	// training is deterministic: this scheduler places both IFs
	if len(placed) != len(names) {
		t.Fatalf("the learned plan %+v leaves an IF out: the test wants one that places both", plan.Places)
	}
	if rep.Planner != plannerLearned {
		t.Fatalf("planner %q, want %q: the learned plan places every IF", rep.Planner, plannerLearned)
	}
	{
		var all uint64
		for d, n := range names {
			var groups uint64
			units := 0
			for _, p := range plan.Places {
				if p.Demand == d {
					groups |= (uint64(1)<<devs[p.Device].Capacity - 1) << first[p.Device]
					units += p.Share
				}
			}
			got := a.ifs[n].f.Units()
			if bits.OnesCount64(got) != units || got&^groups != 0 || got&all != 0 {
				t.Errorf("IF %s: units %04b, want %d units inside groups %04b, none given before (%04b)", n, got, units, groups, all)
			}
			all |= got
		}
	}
	t.Logf("planner %q, places %+v", rep.Planner, plan.Places)
	stop()

	// an actor that always stops: the greedy stages stand in
	raw, err := os.ReadFile(learnedPath)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	pl := file["placement"].(map[string]any)
	bias := pl["b"].([]any)
	last := bias[len(bias)-1].([]any)
	last[len(last)-1] = 1e6 // the stop action
	stops := filepath.Join(t.TempDir(), "stops.json")
	raw, _ = json.Marshal(file)
	if err := os.WriteFile(stops, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	a, stop = run(stops)
	defer stop()
	round(a)
	if rep := a.planReply(); rep.Planner != plannerFallback {
		t.Fatalf("planner %q, want %q", rep.Planner, plannerFallback)
	}
	var all uint64
	for _, n := range names {
		u := a.ifs[n].f.Units()
		if u == 0 || u&all != 0 {
			t.Errorf("fallback round: IF %s has units %04b (others %04b)", n, u, all)
		}
		all |= u
	}

	// bad keys and files
	head := "[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:mlp\"\n"
	if _, err := ParseProfile("p.toml", "[appliance]\nplacement_learned = \"x.json\"\n"+head); err == nil ||
		!strings.Contains(err.Error(), `appliance.placement_learned: only with placement "inss"`) {
		t.Errorf("placement_learned under gslice: %v", err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"format":"sluice-inss-learned/9"}`), 0o644)
	gpu := filepath.Join(dir, "gpu.json")
	raw, _ = os.ReadFile(learnedPath)
	os.WriteFile(gpu, []byte(strings.Replace(string(raw), `"kind":"cpu"`, `"kind":"h200"`, 1)), 0o644)
	for path, want := range map[string]string{
		filepath.Join(dir, "missing.json"): "appliance.placement_learned",
		bad:                                `format "sluice-inss-learned/9"`,
		gpu:                                `trained for the "h200" device`,
	} {
		newFails(t, fmt.Sprintf("[appliance]\nmetrics=\"off\"\ncontrol=\"off\"\nplacement = \"inss\"\nplacement_profiles = %q\nplacement_learned = %q\n%s", profPath, path, head), want)
	}
}

// newFails checks that profile text parses and that New refuses it with
// an error containing want.
func newFails(t *testing.T, text, want string) {
	t.Helper()
	prof, err := ParseProfile("test.toml", text)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), prof, nil)
	if err == nil {
		a.Close()
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("New: %v, want an error containing %q", err, want)
	}
}
