package inss

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// InSS's learned two-stage scheduler (TS, InSS §5), trained offline
// against the latency model:
//
//   - global stage, SAC-Discrete (Christodoulou 2019): for each demand in
//     turn, an actor picks the device of its next instance, or stops,
//     among the devices with room left (InSS's "safe action space":
//     units, memory, instance slots); twin Q-networks with target
//     networks, an entropy bonus whose temperature is learned;
//   - local stage, TD3 (Fujimoto 2018): per device, an actor gives each
//     placement a share (a softmax over the placements, so the shares sum
//     to the device and every placement keeps at least one unit: no
//     fragments) and a batch size; twin critics, target policy smoothing,
//     delayed actor and target updates;
//   - reward, InSS eq. 2: each demand's normalised throughput less ω
//     times its SLO-violation fraction (unserved or late), by the latency
//     model's steady state (Evaluate).
//
// Scalability as InSS §5.1 proposes: devices are grouped in fours and the
// demands spread evenly over the groups, each group deciding on its own
// with the one trained agent; so one agent plans 4, 16 or 64 devices.

// LearnConfig configures the learned scheduler and its training.
type LearnConfig struct {
	// Episodes of training (default 1500).
	Episodes int
	// GroupSize is the devices per group (default 4).
	GroupSize int
	// MaxReplicas bounds a demand's instances in a group (default 3).
	MaxReplicas int
	// Hidden is the width of the networks' two hidden layers (default
	// 64; InSS uses 256).
	Hidden int
	// Omega is eq. 2's penalty factor (default 40, InSS's).
	Omega float64
	// Seed makes training deterministic.
	Seed uint64
	// Plan bounds the batch sizes and sets the headroom and whether the
	// interference terms are used.
	Plan PlanOptions
}

func (c LearnConfig) withDefaults() LearnConfig {
	if c.Episodes <= 0 {
		c.Episodes = 1500
	}
	if c.GroupSize <= 0 {
		c.GroupSize = 4
	}
	if c.MaxReplicas <= 0 {
		c.MaxReplicas = 3
	}
	if c.Hidden <= 0 {
		c.Hidden = 64
	}
	if !(c.Omega > 0) {
		c.Omega = 40
	}
	c.Plan = c.Plan.withDefaults()
	return c
}

// EpisodeStat is one training episode's outcome on its workload.
type EpisodeStat struct {
	// Reward is eq. 2 summed over the demands; Served and Violated are
	// the fractions of the offered rate.
	Reward, Served, Violated float64
}

// Learned is a trained scheduler for one kind of device.
type Learned struct {
	cfg      LearnConfig
	kind     string
	capacity int
	mem      int64
	slots    int // placements a device holds at most
	// SACD: actor, twin critics and their targets, log temperature
	pi, q1, q2, q1t, q2t *mlp
	logAlpha             float64
	// TD3: actor, twin critics and their targets
	mu, c1, c2, mut, c1t, c2t *mlp
	updates                   int
	// Curve is the training curve, an entry per episode; Validation the
	// validation reward of the actors kept (see validate).
	Curve      []EpisodeStat
	Validation float64
}

// Sizes of the feature vectors.
const (
	demandFeats = 7
	deviceFeats = 5
	slotFeats   = 5
)

// group is one group's decision problem: its devices (unit capacity 0
// for the places of a smaller last group) and demands at the group's
// part of their rates.
type group struct {
	devs []Device
	wl   []Demand
}

// sacdStep is one global-stage transition.
type sacdStep struct {
	s, s2    []float64
	smask    []bool // the state's safe actions
	mask     []bool // the next state's safe actions
	a        int
	r        float64
	terminal bool
	// shapedTo is, on the last step, the potential its reward reached;
	// the episode's true reward adds the rest
	shapedTo float64
}

// td3Step is one local-stage transition (one decision step: terminal).
type td3Step struct {
	s, a []float64
	r    float64
	k    int // the device
}

// Train trains the scheduler for devices like dev on workloads around
// base: the demands of one group of cfg.GroupSize devices, their rates
// scaled per episode by a load factor in [0.4, 1.3] and a demand's own
// factor in [0.6, 1.4].
func Train(m *Model, dev Device, base []Demand, cfg LearnConfig) (*Learned, error) {
	cfg = cfg.withDefaults()
	if len(base) == 0 {
		return nil, errors.New("inss: train: no demands")
	}
	for _, d := range base {
		if m.Profile(d.Model, dev.Kind) == nil {
			return nil, fmt.Errorf("inss: train: %s has no profile on %s", d.Model, dev.Kind)
		}
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x1155))
	l := &Learned{cfg: cfg, kind: dev.Kind, capacity: dev.Capacity, mem: dev.MemBytes, slots: min(dev.Capacity, 8)}
	G, h := cfg.GroupSize, cfg.Hidden
	sdim, adim := demandFeats+deviceFeats*G, G+1
	l.pi = newMLP(r, 0.1, sdim, h, h, adim)
	l.q1, l.q2 = newMLP(r, 0.1, sdim, h, h, adim), newMLP(r, 0.1, sdim, h, h, adim)
	l.q1t, l.q2t = l.q1.clone(), l.q2.clone()
	l.logAlpha = math.Log(0.05)
	tdim, tact := slotFeats*l.slots+2, 2*l.slots
	l.mu = newMLP(r, 0.1, tdim, h, h, tact)
	l.c1, l.c2 = newMLP(r, 0.1, tdim+tact, h, h, 1), newMLP(r, 0.1, tdim+tact, h, h, 1)
	l.mut, l.c1t, l.c2t = l.mu.clone(), l.c1.clone(), l.c2.clone()

	var sb []sacdStep
	var tb []td3Step
	const bufMax = 100000
	devs := make([]Device, G)
	for k := range devs {
		devs[k] = dev
	}
	every := max(cfg.Episodes/30, 5)
	bestV, bestPi, bestMu := math.Inf(-1), l.pi.clone(), l.mu.clone()
	for ep := 0; ep < cfg.Episodes; ep++ {
		load := 0.4 + 0.9*r.Float64()
		wl := slices.Clone(base)
		for d := range wl {
			wl[d].Rate *= load * (0.6 + 0.8*r.Float64())
		}
		g := group{devs: devs, wl: wl}
		plan, steps := l.placeGroup(m, g, r)
		tsteps := l.localGroup(m, g, plan, r)
		ev := Evaluate(m, g.devs, g.wl, plan, cfg.Plan)
		// eq. 2: each demand's normalised throughput less ω times its
		// violations, summed
		st := EpisodeStat{}
		for d := range wl {
			st.Reward += ev.Served[d] - cfg.Omega*ev.Violated[d]
			st.Served += ev.Served[d] * wl[d].Rate
			st.Violated += ev.Violated[d] * wl[d].Rate
		}
		total := 0.0
		for _, d := range wl {
			total += d.Rate
		}
		st.Served, st.Violated = st.Served/total, st.Violated/total
		l.Curve = append(l.Curve, st)
		// eq. 2's r_t, the sum over the demands, ends the placement
		// episode: every placement decision is credited with what it
		// did to every demand (scaled: the same optimum, tamer targets)
		if n := len(steps); n > 0 {
			steps[n-1].r += (st.Reward - steps[n-1].shapedTo) / cfg.Omega
		}
		for i := range tsteps {
			tsteps[i].r = l.deviceReward(g, plan, ev, tsteps[i].k) / cfg.Omega
		}
		sb = append(sb, steps...)
		tb = append(tb, tsteps...)
		if len(sb) > bufMax {
			sb = sb[len(sb)-bufMax:]
		}
		if len(tb) > bufMax {
			tb = tb[len(tb)-bufMax:]
		}
		for range steps {
			l.sacdUpdate(sb, r)
		}
		for range max(len(tsteps), 1) {
			l.td3Update(tb, r)
		}
		if (ep+1)%every == 0 || ep+1 == cfg.Episodes {
			if v := l.validate(m, devs, base); v > bestV {
				bestV, bestPi, bestMu = v, l.pi.clone(), l.mu.clone()
			}
		}
	}
	// the actors that planned the validation workloads best (early
	// stopping: off-policy training does not improve steadily)
	l.pi, l.mu = bestPi, bestMu
	l.Validation = bestV
	return l, nil
}

// validate is eq. 2's reward of the actors' plans (no exploration) for
// the base workload at three loads, summed.
func (l *Learned) validate(m *Model, devs []Device, base []Demand) float64 {
	sum := 0.0
	for _, f := range []float64{0.5, 0.8, 1.1} {
		g := group{devs: devs, wl: slices.Clone(base)}
		for d := range g.wl {
			g.wl[d].Rate *= f
		}
		plan, _ := l.placeGroup(m, g, nil)
		l.localGroup(m, g, plan, nil)
		ev := Evaluate(m, g.devs, g.wl, plan, l.cfg.Plan)
		for d := range g.wl {
			sum += ev.Served[d] - l.cfg.Omega*ev.Violated[d]
		}
	}
	return sum
}

// Plan plans devs (of the kind the scheduler was trained for) for wl:
// the devices in groups, every demand spread over the groups in
// proportion to their units, each group's placement by the SACD actor's
// most likely actions and its shares and batches by the TD3 actor.
func (l *Learned) Plan(m *Model, devs []Device, wl []Demand) *Plan {
	G := l.cfg.GroupSize
	total := 0
	for _, d := range devs {
		total += d.Capacity
	}
	plan := &Plan{}
	for g0 := 0; g0 < len(devs); g0 += G {
		g := group{devs: make([]Device, G)}
		units := 0
		for k := range G {
			if g0+k < len(devs) {
				g.devs[k] = devs[g0+k]
				units += devs[g0+k].Capacity
			} else {
				g.devs[k] = Device{Kind: l.kind}
			}
		}
		if units == 0 || total == 0 {
			continue
		}
		g.wl = slices.Clone(wl)
		for d := range g.wl {
			g.wl[d].Rate *= float64(units) / float64(total)
		}
		gp, _ := l.placeGroup(m, g, nil)
		l.localGroup(m, g, gp, nil)
		for _, p := range gp.Places {
			p.Device += g0
			plan.Places = append(plan.Places, p)
		}
	}
	return plan
}

// demandRefs are a demand's reference times on a whole device at batch
// 1, and its model's pressure and sensitivity.
func (l *Learned) demandRef(m *Model, d Demand) (t1, press, sens float64) {
	t1, err := m.ExecNs(d.Model, l.kind, 1, float64(l.capacity), nil)
	if err != nil || !(t1 > 0) {
		t1 = 1e6
	}
	if p := m.Profile(d.Model, l.kind); p != nil {
		press, sens = p.Pressure, p.Sensitivity
	}
	return t1, press, sens
}

// placeGroup runs the global stage on g: the demands by their work,
// largest first; for each, up to MaxReplicas actions (a device, or
// stop). With r set it samples the actor (training) and records the
// transitions, one episode across all the demands; without, it takes
// the most likely safe action. Placements get one unit and batch 1 until the
// local stage.
func (l *Learned) placeGroup(m *Model, g group, r *rand.Rand) (*Plan, []sacdStep) {
	G := len(g.devs)
	plan := &Plan{}
	used := make([]int, G)
	mem := make([]int64, G)
	press := make([]float64, G)
	count := make([]int, G)
	order := make([]int, len(g.wl))
	t1 := make([]float64, len(g.wl))
	work := make([]float64, len(g.wl))
	for d := range g.wl {
		order[d] = d
		t1[d], _, _ = l.demandRef(m, g.wl[d])
		work[d] = g.wl[d].Rate * t1[d] * 1e-9 / float64(G)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpF(work[b], work[a]) })
	var steps []sacdStep
	last := 0.0
	if r != nil {
		last = l.potential(m, g, plan)
	}
	for oi, d := range order {
		on := make([]bool, G)
		covered := 0.0
		later := 0.0
		for _, e := range order[oi+1:] {
			later += work[e]
		}
		_, pd, sd := l.demandRef(m, g.wl[d])
		prof := m.Profile(g.wl[d].Model, l.kind)
		for j := 0; j < l.cfg.MaxReplicas; j++ {
			s := make([]float64, 0, demandFeats+deviceFeats*G)
			s = append(s, math.Min(work[d], 4)/4, math.Min(covered, 1), math.Log(g.wl[d].SLONs/t1[d])/4, pd, sd,
				math.Min(later, 8)/8, float64(j)/float64(l.cfg.MaxReplicas))
			mask := make([]bool, G+1)
			mask[G] = true
			for k, dev := range g.devs {
				s = append(s, float64(dev.Capacity-used[k])/float64(max(l.capacity, 1)), memFrac(mem[k], dev.MemBytes),
					math.Min(press[k], 4)/4, float64(count[k])/float64(l.slots), b2f(on[k]))
				mask[k] = dev.Capacity-used[k] >= 1 && count[k] < l.slots && !on[k] && prof != nil &&
					(dev.MemBytes <= 0 || mem[k]+prof.MemBytes <= dev.MemBytes)
			}
			a := l.act(s, mask, r)
			if r != nil {
				if n := len(steps); n > 0 {
					steps[n-1].s2, steps[n-1].mask = s, mask
				}
				steps = append(steps, sacdStep{s: s, smask: mask, a: a})
			}
			if a == G {
				break
			}
			on[a] = true
			used[a]++
			count[a]++
			press[a] += pd
			if prof != nil {
				mem[a] += prof.MemBytes
			}
			plan.Places = append(plan.Places, Placement{Demand: d, Device: a, Share: 1, Batch: 1})
			if r != nil {
				// shaped reward: what the placement added to eq. 2
				phi := l.potential(m, g, plan)
				steps[len(steps)-1].r, last = (phi-last)/l.cfg.Omega, phi
			}
			// what one unit at the largest batch covers of the demand
			if t, err := m.ExecNs(g.wl[d].Model, l.kind, l.cfg.Plan.MaxBatch, 1, nil); err == nil && t > 0 && g.wl[d].Rate > 0 {
				covered += float64(l.cfg.Plan.MaxBatch) / t * 1e9 / g.wl[d].Rate
			}
		}
	}
	if n := len(steps); n > 0 {
		steps[n-1].terminal = true
		steps[n-1].shapedTo = last
	}
	return plan, steps
}

// potential is eq. 2 summed over the demands for a plan the global stage
// is building: its placements at the shares and batches they have, the
// batches fitted to the SLOs. The global stage's steps are rewarded with
// its differences (potential-based shaping: the sum over an episode is the
// final reward less a constant, so the best placements stay the best, and
// each decision learns what it added at once).
func (l *Learned) potential(m *Model, g group, plan *Plan) float64 {
	p := &Plan{Places: slices.Clone(plan.Places)}
	for k := range g.devs {
		var idx []int
		for i, pl := range p.Places {
			if pl.Device == k {
				p.Places[i].Batch = l.cfg.Plan.MaxBatch
				idx = append(idx, i)
			}
		}
		l.fitBatches(m, g, p, k, idx)
	}
	ev := Evaluate(m, g.devs, g.wl, p, l.cfg.Plan)
	sum := 0.0
	for d := range g.wl {
		sum += ev.Served[d] - l.cfg.Omega*ev.Violated[d]
	}
	return sum
}

// act picks an action among the safe ones: a sample of the actor's
// distribution (r set) or its most likely one.
func (l *Learned) act(s []float64, mask []bool, r *rand.Rand) int {
	p := maskedSoftmax(l.pi.forward(s, nil), mask)
	if r == nil {
		best := len(p) - 1
		for a, v := range p {
			if mask[a] && v > p[best] {
				best = a
			}
		}
		return best
	}
	u, c := r.Float64(), 0.0
	for a, v := range p {
		if c += v; u < c && mask[a] {
			return a
		}
	}
	return len(p) - 1
}

// slotState is the TD3 state of device k's placements.
func (l *Learned) slotState(m *Model, g group, plan *Plan, k int) (s []float64, idx []int) {
	replicas := make([]int, len(g.wl))
	for _, p := range plan.Places {
		replicas[p.Demand]++
	}
	s = make([]float64, 0, slotFeats*l.slots+2)
	for i, p := range plan.Places {
		if p.Device != k || len(idx) == l.slots {
			continue
		}
		idx = append(idx, i)
		d := g.wl[p.Demand]
		t1, pd, sd := l.demandRef(m, d)
		s = append(s, 1, math.Min(d.Rate/float64(replicas[p.Demand])*t1*1e-9, 4)/4, math.Log(d.SLONs/t1)/4, pd, sd)
	}
	for len(s) < slotFeats*l.slots {
		s = append(s, 0)
	}
	s = append(s, float64(len(idx))/float64(l.slots), float64(g.devs[k].Capacity)/float64(max(l.capacity, 1)))
	return s, idx
}

// localGroup runs the local stage on every device of g with placements:
// the TD3 actor's action (plus exploration noise when r is set) gives
// their shares and batches. It returns the transitions, rewards to come.
func (l *Learned) localGroup(m *Model, g group, plan *Plan, r *rand.Rand) []td3Step {
	var steps []td3Step
	for k := range g.devs {
		s, idx := l.slotState(m, g, plan, k)
		if len(idx) == 0 {
			continue
		}
		a := l.mu.forward(s, nil)
		for i := range a {
			a[i] = math.Tanh(a[i])
			if r != nil {
				a[i] = math.Max(-1, math.Min(1, a[i]+0.2*r.NormFloat64()))
			}
		}
		l.decode(a, g.devs[k].Capacity, plan, idx)
		l.fitBatches(m, g, plan, k, idx)
		if r != nil {
			steps = append(steps, td3Step{s: s, a: a, k: k})
		}
	}
	return steps
}

// decode turns a local action into the placements' shares (a softmax of
// the first values over the placements, in whole units, at least one
// each, summing to the device's capacity) and batch sizes (powers of two
// up to MaxBatch).
func (l *Learned) decode(a []float64, capacity int, plan *Plan, idx []int) {
	n := len(idx)
	logits := make([]float64, n)
	for i := range n {
		logits[i] = 3 * a[i]
	}
	f := maskedSoftmax(logits, nil)
	spare := capacity - n
	units := make([]int, n)
	rem := make([]float64, n)
	given := 0
	for i := range n {
		x := f[i] * float64(spare)
		units[i] = 1 + int(x)
		rem[i] = x - math.Floor(x)
		given += int(x)
	}
	for ; given < spare; given++ { // the largest remainders
		best := 0
		for i := range n {
			if rem[i] > rem[best] {
				best = i
			}
		}
		units[best]++
		rem[best] = -1
	}
	steps := int(math.Round(math.Log2(float64(l.cfg.Plan.MaxBatch))))
	for i, pi := range idx {
		plan.Places[pi].Share = units[i]
		e := int(math.Round((a[l.slots+i] + 1) / 2 * float64(steps)))
		plan.Places[pi].Batch = 1 << max(0, min(e, steps))
	}
}

// fitBatches is the local stage's action correction (as InSS corrects
// placements that would overflow memory): a placement whose batch time at
// its share misses its SLO gets the largest smaller batch that meets it
// (batch 1 if none does).
func (l *Learned) fitBatches(m *Model, g group, plan *Plan, k int, idx []int) {
	for _, i := range idx {
		p := &plan.Places[i]
		for p.Batch > 1 {
			inf, ok := placeTime(m, g.devs, g.wl, plan, k, p.Demand, p.Share, p.Batch, l.cfg.Plan.Interference, i)
			if ok && latencyOK(inf, g.wl[p.Demand].SLONs) {
				break
			}
			p.Batch /= 2
		}
	}
}

// deviceReward is eq. 2 over device k's placements (the local stage's
// reward).
func (l *Learned) deviceReward(g group, plan *Plan, ev *Evaluation, k int) float64 {
	r := 0.0
	for i, p := range plan.Places {
		if rate := g.wl[p.Demand].Rate; p.Device == k && rate > 0 {
			r += (ev.PlaceServed[i] - l.cfg.Omega*ev.PlaceViolated[i]) / rate
		}
	}
	return r
}

// sacdUpdate is one SACD gradient step on a minibatch of the buffer.
func (l *Learned) sacdUpdate(buf []sacdStep, r *rand.Rand) {
	const batch, gamma, lr, kappa = 64, 0.99, 3e-4, 0.005
	if len(buf) < batch {
		return
	}
	alpha := math.Exp(l.logAlpha)
	A := l.pi.sizes[len(l.pi.sizes)-1]
	targetH := 0.3 * math.Log(float64(A))
	var a1, a2, ap acts
	alphaGrad := 0.0
	for range batch {
		t := buf[r.IntN(len(buf))]
		y := t.r
		if !t.terminal && t.s2 != nil {
			p := maskedSoftmax(l.pi.forward(t.s2, nil), t.mask)
			q1, q2 := l.q1t.forward(t.s2, nil), l.q2t.forward(t.s2, nil)
			v := 0.0
			for a, pa := range p {
				if pa > 0 {
					v += pa * (math.Min(q1[a], q2[a]) - alpha*math.Log(pa))
				}
			}
			y += gamma * v
		}
		for _, q := range []struct {
			n *mlp
			c *acts
		}{{l.q1, &a1}, {l.q2, &a2}} {
			out := q.n.forward(t.s, q.c)
			d := make([]float64, len(out))
			d[t.a] = 2 * (out[t.a] - y)
			q.n.backward(*q.c, d)
		}
		// actor: E_a~π [α log π(a|s) − min Q(s,a)] over the safe actions
		logits := l.pi.forward(t.s, &ap)
		p := maskedSoftmax(logits, t.smask)
		q1, q2 := l.q1.forward(t.s, nil), l.q2.forward(t.s, nil)
		g := make([]float64, A)
		mean, ent := 0.0, 0.0
		for a, pa := range p {
			if pa > 0 {
				g[a] = alpha*math.Log(pa) + alpha - math.Min(q1[a], q2[a])
				mean += pa * g[a]
				ent -= pa * math.Log(pa)
			}
		}
		d := make([]float64, A)
		for a, pa := range p {
			if pa > 0 {
				d[a] = pa * (g[a] - mean)
			}
		}
		l.pi.backward(ap, d)
		alphaGrad += alpha * (ent - targetH)
	}
	l.q1.step(lr, 1.0/batch)
	l.q2.step(lr, 1.0/batch)
	l.pi.step(lr, 1.0/batch)
	l.logAlpha -= lr * alphaGrad / batch
	l.q1t.softUpdate(l.q1, kappa)
	l.q2t.softUpdate(l.q2, kappa)
}

// td3Update is one TD3 step on a minibatch: the critics every time, the
// actor and the targets every second time.
func (l *Learned) td3Update(buf []td3Step, r *rand.Rand) {
	const batch, lr, kappa = 32, 3e-4, 0.005
	if len(buf) < batch {
		return
	}
	l.updates++
	var ca1, ca2 acts
	samples := make([]td3Step, batch)
	for i := range samples {
		samples[i] = buf[r.IntN(len(buf))]
	}
	// one decision per episode and device: terminal, the target is r
	for _, t := range samples {
		in := append(slices.Clone(t.s), t.a...)
		for _, c := range []struct {
			n *mlp
			a *acts
		}{{l.c1, &ca1}, {l.c2, &ca2}} {
			q := c.n.forward(in, c.a)
			c.n.backward(*c.a, []float64{2 * (q[0] - t.r)})
		}
	}
	l.c1.step(lr, 1.0/batch)
	l.c2.step(lr, 1.0/batch)
	if l.updates%2 != 0 {
		return
	}
	var ma, qa acts
	for _, t := range samples {
		raw := l.mu.forward(t.s, &ma)
		a := make([]float64, len(raw))
		for i := range raw {
			a[i] = math.Tanh(raw[i])
		}
		in := append(slices.Clone(t.s), a...)
		l.c1.forward(in, &qa)
		dIn := l.c1.backward(qa, []float64{-1}) // ascend Q1
		d := make([]float64, len(raw))
		for i := range raw {
			d[i] = dIn[len(t.s)+i] * (1 - a[i]*a[i])
		}
		l.mu.backward(ma, d)
	}
	l.c1.zeroGrad() // the critic's gradients were only a path to the action
	l.mu.step(lr, 1.0/batch)
	l.mut.softUpdate(l.mu, kappa)
	l.c1t.softUpdate(l.c1, kappa)
	l.c2t.softUpdate(l.c2, kappa)
}

// Evaluation is a plan's steady state under the latency model.
type Evaluation struct {
	// Served and Violated are, per demand, the fractions of its rate
	// answered within the SLO and not (unserved, or late).
	Served, Violated []float64
	// PlaceServed and PlaceViolated are the rates per placement.
	PlaceServed, PlaceViolated []float64
}

// Evaluate is the latency model's steady state of a plan (the reward of
// the learned scheduler's training): each placement's capacity is its
// batch over its batch time (beside the device's other placements when
// o.Interference is set); a demand's rate splits over its placements in
// proportion to their capacities; a placement serves up to o.Headroom of
// its capacity, and nothing within the SLO if its batch time misses it
// (InSS eq. 3 with a queue of one batch).
func Evaluate(m *Model, devs []Device, wl []Demand, plan *Plan, o PlanOptions) *Evaluation {
	o = o.withDefaults()
	ev := &Evaluation{Served: make([]float64, len(wl)), Violated: make([]float64, len(wl)),
		PlaceServed: make([]float64, len(plan.Places)), PlaceViolated: make([]float64, len(plan.Places))}
	mu := make([]float64, len(plan.Places))
	ok := make([]bool, len(plan.Places))
	sum := make([]float64, len(wl))
	for i, p := range plan.Places {
		inf, fine := placeTime(m, devs, wl, plan, p.Device, p.Demand, p.Share, p.Batch, o.Interference, i)
		if !fine || !(inf > 0) {
			continue
		}
		mu[i] = float64(p.Batch) / inf * 1e9
		ok[i] = latencyOK(inf, wl[p.Demand].SLONs)
		sum[p.Demand] += mu[i]
	}
	for i, p := range plan.Places {
		d := p.Demand
		if sum[d] == 0 {
			continue
		}
		lam := wl[d].Rate * mu[i] / sum[d]
		if ok[i] {
			ev.PlaceServed[i] = math.Min(lam, o.Headroom*mu[i])
		}
		ev.PlaceViolated[i] = lam - ev.PlaceServed[i]
	}
	for d := range wl {
		if wl[d].Rate <= 0 {
			continue
		}
		served := 0.0
		for i, p := range plan.Places {
			if p.Demand == d {
				served += ev.PlaceServed[i]
			}
		}
		ev.Served[d] = served / wl[d].Rate
		ev.Violated[d] = 1 - ev.Served[d]
	}
	return ev
}

func maskedSoftmax(z []float64, mask []bool) []float64 {
	p := make([]float64, len(z))
	top := math.Inf(-1)
	for i, v := range z {
		if mask == nil || mask[i] {
			top = math.Max(top, v)
		}
	}
	sum := 0.0
	for i, v := range z {
		if mask == nil || mask[i] {
			p[i] = math.Exp(v - top)
			sum += p[i]
		}
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

func memFrac(used, capacity int64) float64 {
	if capacity <= 0 {
		return 0
	}
	return float64(used) / float64(capacity)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
