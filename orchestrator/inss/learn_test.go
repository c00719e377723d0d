package inss

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// backward's gradients match finite differences of the network's output.
func TestMLPGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := newMLP(r, 1, 5, 7, 6, 3)
	x := []float64{0.3, -0.2, 0.9, 0.1, -0.7}
	dOut := []float64{0.5, -1, 2}
	loss := func() float64 {
		y := n.forward(x, nil)
		s := 0.0
		for i := range y {
			s += y[i] * dOut[i]
		}
		return s
	}
	var a acts
	n.forward(x, &a)
	dx := n.backward(a, dOut)
	const h = 1e-6
	for l := range n.w {
		for _, i := range []int{0, len(n.w[l]) / 2, len(n.w[l]) - 1} {
			old := n.w[l][i]
			n.w[l][i] = old + h
			up := loss()
			n.w[l][i] = old - h
			down := loss()
			n.w[l][i] = old
			if num := (up - down) / (2 * h); math.Abs(num-n.gw[l][i]) > 1e-5*(1+math.Abs(num)) {
				t.Errorf("layer %d weight %d: gradient %v, finite difference %v", l, i, n.gw[l][i], num)
			}
		}
	}
	for i := range x {
		old := x[i]
		x[i] = old + h
		up := loss()
		x[i] = old - h
		down := loss()
		x[i] = old
		if num := (up - down) / (2 * h); math.Abs(num-dx[i]) > 1e-5*(1+math.Abs(num)) {
			t.Errorf("input %d: gradient %v, finite difference %v", i, dx[i], num)
		}
	}
}

// The learned scheduler learns: on the synthetic cluster, the plan after
// training gets a better eq. 2 reward from the latency model than the
// untrained networks' plan, and serves more of the offered rate; its
// plans fit the cluster (shares within each device, no memory
// overflow); training is deterministic for a seed.
func TestLearnedScheduler(t *testing.T) {
	m := synthModel(t)
	devs := devices(4)
	wl := []Demand{
		{Name: "f1", Model: "fast", SLONs: 20e6, Rate: 400},
		{Name: "f2", Model: "fast", SLONs: 60e6, Rate: 300},
		{Name: "s1", Model: "slow", SLONs: 80e6, Rate: 60},
		{Name: "h1", Model: "hot", SLONs: 30e6, Rate: 200},
	}
	cfg := LearnConfig{Episodes: 120, Hidden: 32, Seed: 7, Plan: PlanOptions{Interference: true}}
	score := func(l *Learned) (reward, served float64) {
		p := l.Plan(m, devs, wl)
		if err := p.Check(m, devs, wl); err != nil {
			t.Fatal(err)
		}
		ev := Evaluate(m, devs, wl, p, cfg.Plan)
		total := 0.0
		for d := range wl {
			reward += ev.Served[d] - 40*ev.Violated[d]
			served += ev.Served[d] * wl[d].Rate
			total += wl[d].Rate
		}
		return reward, served / total
	}
	untrained, err := Train(m, devs[0], wl, LearnConfig{Episodes: 1, Hidden: 32, Seed: 7, Plan: cfg.Plan})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Train(m, devs[0], wl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r0, s0 := score(untrained)
	r1, s1 := score(l)
	t.Logf("eq. 2 reward %.2f → %.2f, served %.0f%% → %.0f%%", r0, r1, 100*s0, 100*s1)
	if !(r1 > r0) || !(s1 > s0) {
		t.Errorf("training did not help: reward %.2f → %.2f, served %.2f → %.2f", r0, r1, s0, s1)
	}
	again, _ := Train(m, devs[0], wl, cfg)
	if !reflect.DeepEqual(l.Plan(m, devs, wl), again.Plan(m, devs, wl)) || !reflect.DeepEqual(l.Curve, again.Curve) {
		t.Error("two trainings with one seed differ")
	}
	// 16 devices: four groups, each a quarter of every demand
	big := devices(16)
	p := l.Plan(m, big, wl)
	if err := p.Check(m, big, wl); err != nil {
		t.Fatal(err)
	}
}

// A saved scheduler loads back into one that plans exactly the same, on
// one group and on several; damaged or foreign files are refused with an
// error that says what is wrong.
func TestLearnedSaveLoad(t *testing.T) {
	m := synthModel(t)
	wl := []Demand{
		{Name: "f1", Model: "fast", SLONs: 20e6, Rate: 400},
		{Name: "s1", Model: "slow", SLONs: 80e6, Rate: 60},
		{Name: "h1", Model: "hot", SLONs: 30e6, Rate: 200},
	}
	devs := devices(4)
	l, err := Train(m, devs[0], wl, LearnConfig{Episodes: 30, Hidden: 16, Seed: 3, Plan: PlanOptions{Interference: true}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := l.Save(&buf); err != nil {
		t.Fatal(err)
	}
	saved := buf.String()
	back, err := LoadLearned(strings.NewReader(saved))
	if err != nil {
		t.Fatal(err)
	}
	if back.Kind() != l.Kind() || back.Capacity() != l.Capacity() {
		t.Fatalf("loaded kind %q capacity %d, saved %q %d", back.Kind(), back.Capacity(), l.Kind(), l.Capacity())
	}
	for _, n := range []int{2, 4, 16} {
		d := devices(n)
		if got, want := back.Plan(m, d, wl), l.Plan(m, d, wl); !reflect.DeepEqual(got, want) {
			t.Errorf("%d devices: the loaded scheduler plans %+v, the saved one %+v", n, got.Places, want.Places)
		}
	}
	var f map[string]any
	if err := json.Unmarshal([]byte(saved), &f); err != nil {
		t.Fatal(err)
	}
	edit := func(change func(f map[string]any)) string {
		var g map[string]any
		_ = json.Unmarshal([]byte(saved), &g)
		change(g)
		b, _ := json.Marshal(g)
		return string(b)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "EOF"},
		{"truncated", saved[:len(saved)/2], "unexpected EOF"},
		{"format", edit(func(g map[string]any) { g["format"] = "other/2" }), `format "other/2"`},
		{"unknown field", edit(func(g map[string]any) { g["bogus"] = 1 }), `unknown field "bogus"`},
		{"kind", edit(func(g map[string]any) { g["kind"] = "" }), "no device kind"},
		{"group size", edit(func(g map[string]any) { g["group_size"] = 3 }), "placement network has layer sizes"},
		{"slots", edit(func(g map[string]any) { g["slots"] = 0 }), "0 instance slots"},
		{"layer", edit(func(g map[string]any) {
			p := g["shares"].(map[string]any)
			w := p["w"].([]any)
			w[1] = w[1].([]any)[1:]
		}), "shares network layer 1 has"},
		{"headroom", edit(func(g map[string]any) { g["plan"].(map[string]any)["Headroom"] = 2 }), "plan options"},
	} {
		_, err := LoadLearned(strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
