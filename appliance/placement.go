package appliance

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sluice/ifmanager"
	"sluice/orchestrator"
	"sluice/orchestrator/inss"
)

// loadPlacement reads placement_profiles (orchestrator/inss JSON, as
// tools/inssprof -json writes it) into the latency model InSS's local
// stage plans with; the cpu device's profiles are the ones it uses.
func loadPlacement(ctx context.Context, path string) (*inss.Model, error) {
	data, err := readRegularFile(ctx, path, MaxProfileBytes, ProfileReadTimeout)
	if err != nil {
		return nil, fmt.Errorf("appliance.placement_profiles: %w", err)
	}
	profs, err := inss.ReadProfiles(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("appliance.placement_profiles %s: %w", path, err)
	}
	cpuProfs := 0
	for _, p := range profs {
		if p.Device == "cpu" {
			cpuProfs++
		}
	}
	if cpuProfs == 0 {
		return nil, fmt.Errorf("appliance.placement_profiles %s: no profile of the cpu device", path)
	}
	m, err := inss.NewModel(profs, 0)
	if err != nil {
		return nil, fmt.Errorf("appliance.placement_profiles %s: %w", path, err)
	}
	return m, nil
}

// loadLearned reads placement_learned: a learned scheduler (as
// inss.Learned.Save writes it) for the cpu device.
func loadLearned(ctx context.Context, path string) (*inss.Learned, error) {
	data, err := readRegularFile(ctx, path, inss.MaxLearnedBytes, ProfileReadTimeout)
	if err != nil {
		return nil, fmt.Errorf("appliance.placement_learned: %w", err)
	}
	l, err := inss.LoadLearned(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("appliance.placement_learned %s: %w", path, err)
	}
	if l.Kind() != "cpu" {
		return nil, fmt.Errorf("appliance.placement_learned %s: trained for the %q device; the inss placement plans the cpu", path, l.Kind())
	}
	return l, nil
}

// Planners of the inss placement's rounds (PlanReply.Planner).
const (
	plannerGreedy   = "greedy"
	plannerLearned  = "learned"
	plannerFallback = "greedy, the learned plan left an IF without units"
)

// profileModel is the profile an IF is planned with: one named as the IF,
// else the zoo model's name, else the ONNX file's base name without its
// extension; "" when the profiles have none.
func profileModel(m *inss.Model, spec *IFSection) string {
	cands := []string{spec.Name}
	if z, ok := strings.CutPrefix(spec.Model, "zoo:"); ok {
		cands = append(cands, z)
	}
	if f, ok := strings.CutPrefix(spec.Model, "onnx:"); ok {
		cands = append(cands, strings.TrimSuffix(filepath.Base(f), filepath.Ext(f)))
	}
	for _, c := range cands {
		if m.Profile(c, "cpu") != nil {
			return c
		}
	}
	return ""
}

// plannedIFs are the IFs the inss placement plans (the cpu IFs under
// policy none), with a snapshot of their specs and of the rate the last
// round saw.
func (a *Appliance) plannedIFs() (runs []*ifRun, specs []IFSection, rates []float64) {
	a.mu.Lock()
	cpuBE := a.backends["cpu"]
	a.mu.Unlock()
	if cpuBE == nil {
		return nil, nil, nil
	}
	for _, r := range a.ifRuns() {
		a.mu.Lock()
		spec, rate := r.spec, r.planRate
		on := r.be == cpuBE && (spec.Policy == "" || spec.Policy == ifmanager.PolicyNone)
		a.mu.Unlock()
		if on {
			runs, specs, rates = append(runs, r), append(specs, spec), append(rates, rate)
		}
	}
	return runs, specs, rates
}

// sloNs is an IF's latency objective in ns for the latency model (no
// objective: any batch time will do).
func sloNs(spec *IFSection) float64 {
	if spec.SLOMS <= 0 {
		return math.Inf(1)
	}
	return spec.SLOMS * 1e6
}

// planShares runs InSS's local stage every plan_interval_ms until ctx
// ends (placement "inss").
func (a *Appliance) planShares(ctx context.Context) {
	a.shareRounds(ctx, time.Duration(a.prof.Appliance.PlanIntervalMS)*time.Millisecond,
		func(_ time.Time, window time.Duration) bool { return a.planStep(window) })
}

// planStep is one round of the local stage over the arrivals of the
// last window: the cpu IFs under policy none get the shares
// inss.LocalShares gives them for their observed rates (arrivals plus the
// queue left, over the window) and SLOs. It
// reports whether a share changed (the caller applies them). A round
// with no arrival, or with an IF the profiles do not cover (logged once
// per IF), changes nothing.
func (a *Appliance) planStep(window time.Duration) bool {
	if a.plan == nil || window <= 0 {
		return false
	}
	runs, specs, _ := a.plannedIFs()
	ds := make([]inss.Demand, 0, len(runs))
	arrived := uint64(0)
	covered := true
	for i, r := range runs {
		spec := &specs[i]
		arr := r.f.C.Arrivals.Load()
		n := arr - r.planArrivals
		r.planArrivals = arr
		arrived += n
		model := profileModel(a.plan, spec)
		if model == "" {
			covered = false
			if !r.planWarned {
				r.planWarned = true
				a.log.Warn("inss placement: no cpu profile for the IF; shares stay as they are", "if", spec.Name, "model", spec.Model)
			}
		}
		// the rate to serve: what arrived in the window, and the queue
		// left at its end, which the next window must serve as well
		// (InSS's state holds each model's queued workload)
		queued := uint64(max(r.f.Status().QueueDepth, 0))
		ds = append(ds, inss.Demand{Name: spec.Name, Model: model, SLONs: sloNs(spec), Rate: float64(n+queued) / window.Seconds()})
		a.mu.Lock()
		r.planRate = ds[len(ds)-1].Rate
		a.mu.Unlock()
	}
	a.planRound.Store(time.Now().UnixNano())
	if len(runs) == 0 || arrived == 0 || !covered {
		return false
	}
	if a.learned != nil {
		return a.placeLearned(runs, ds)
	}
	if a.prof.Appliance.PlacementDevices > 1 {
		return a.placeGlobal(runs, ds, plannerGreedy)
	}
	a.setPlanner(plannerGreedy)
	shares, _ := inss.LocalShares(a.plan, "cpu", a.totalUnits(), ds, inss.PlanOptions{})
	changed := false
	for i, r := range runs {
		a.mu.Lock()
		prev := r.spec.Share
		moved := math.Abs(prev-shares[i]) > 1e-9
		if moved {
			r.spec.Share = shares[i]
		}
		a.mu.Unlock()
		if moved {
			changed = true
			cfg := r.f.Config()
			a.log.Info("inss placement: share", "if", cfg.Name, "from", prev, "to", shares[i], "rate", ds[i].Rate)
			a.metrics.shareChanges.WithLabelValues(cfg.Name, cfg.Class.String()).Inc()
		}
	}
	return changed
}

// unitGroups are the placement's devices: the cpu units cut into
// placement_devices groups of consecutive units (the last takes what
// the division leaves), each group's first unit.
func (a *Appliance) unitGroups() (devs []inss.Device, first []int) {
	total, n := a.totalUnits(), a.prof.Appliance.PlacementDevices
	per := total / n
	if per < 1 {
		return nil, nil
	}
	for k := range n {
		c := per
		if k == n-1 {
			c = total - per*(n-1)
		}
		devs = append(devs, inss.Device{Kind: "cpu", Capacity: c})
		first = append(first, k*per)
	}
	return devs, first
}

// placeGlobal is a round of InSS's two stages over the unit groups
// (placement_devices > 1, or a learned plan's stand-in): each IF is placed
// on one group and the group's units are split among its IFs
// (inss.PlaceOnce), each IF's units consecutive within its group; planner
// names the round. It reports whether an IF's units changed; a round that
// cannot place every IF changes nothing.
func (a *Appliance) placeGlobal(runs []*ifRun, ds []inss.Demand, planner string) bool {
	devs, first := a.unitGroups()
	plan, err := inss.PlaceOnce(a.plan, devs, ds, inss.PlanOptions{Interference: true})
	if err != nil {
		a.log.Warn("inss placement: the IFs do not fit the unit groups; units stay as they are", "groups", len(devs), "err", err)
		return false
	}
	a.setPlanner(planner)
	return a.applyPlacement(runs, ds, plan, first)
}

// placeLearned is a round planned by placement_learned's scheduler over
// the unit groups (one group when placement_devices is 1): its SACD
// actor places each IF on one or more groups, its TD3 actor splits each
// group's units. An IF the learned plan gives no units (the actor may
// stop before placing it), or a plan over a group's units, sends the
// round to the greedy stages instead: every IF keeps serving.
func (a *Appliance) placeLearned(runs []*ifRun, ds []inss.Demand) bool {
	devs, first := a.unitGroups()
	plan := a.learned.Plan(a.plan, devs, ds)
	err := plan.Check(a.plan, devs, ds)
	placed := make([]bool, len(ds))
	for _, p := range plan.Places {
		placed[p.Demand] = true
	}
	missing := slices.Index(placed, false)
	if err == nil && missing < 0 {
		if a.setPlanner(plannerLearned) {
			a.log.Info("inss placement: the learned scheduler plans")
		}
		return a.applyPlacement(runs, ds, plan, first)
	}
	if a.setPlanner(plannerFallback) {
		why := "the plan does not fit: " + fmt.Sprint(err)
		if err == nil {
			why = "no units for IF " + ds[missing].Name
		}
		a.log.Warn("inss placement: the learned plan is incomplete; the greedy stages plan until it is not", "why", why)
	}
	return a.placeGlobal(runs, ds, plannerFallback)
}

// setPlanner records what planned the round and reports whether it
// changed.
func (a *Appliance) setPlanner(name string) bool {
	if old := a.planner.Load(); old != nil && *old == name {
		return false
	}
	a.planner.Store(&name)
	return true
}

// applyPlacement gives each IF the units plan places it on: per
// placement, Share consecutive units of the group (first holds each
// group's first unit), an IF placed on several groups taking the union;
// its group is the first it is placed on. It reports whether an IF's
// units changed.
func (a *Appliance) applyPlacement(runs []*ifRun, ds []inss.Demand, plan *inss.Plan, first []int) bool {
	next := make([]int, len(first))
	masks := make([]uint64, len(runs))
	units := make([]int, len(runs))
	device := make([]int, len(runs))
	for d := range device {
		device[d] = -1
	}
	for _, p := range plan.Places {
		lo := first[p.Device] + next[p.Device]
		next[p.Device] += p.Share
		masks[p.Demand] |= (uint64(1)<<p.Share - 1) << lo
		units[p.Demand] += p.Share
		if device[p.Demand] < 0 || p.Device < device[p.Demand] {
			device[p.Demand] = p.Device
		}
	}
	total := a.totalUnits()
	changed := false
	for d, r := range runs {
		if masks[d] == 0 {
			continue
		}
		a.mu.Lock()
		moved := r.planMask != masks[d]
		r.planMask, r.planDevice = masks[d], device[d]
		r.spec.Share = float64(units[d]) / float64(total)
		a.mu.Unlock()
		if moved {
			changed = true
			cfg := r.f.Config()
			a.log.Info("inss placement: units", "if", cfg.Name, "group", device[d], "units", units[d], "rate", ds[d].Rate)
			a.metrics.shareChanges.WithLabelValues(cfg.Name, cfg.Class.String()).Inc()
		}
	}
	return changed
}

// Plan implements orchestrator.Handler.
func (h *controlHandler) Plan(ctx context.Context, _ orchestrator.PlanArgs) (orchestrator.PlanReply, error) {
	return h.a.planReply(), nil
}

// planReply describes the cpu IFs under policy none: their units and,
// under the inss placement, the profile each is planned with, the rate
// the last round saw, and the latency the model predicts at their units
// against the latency observed.
func (a *Appliance) planReply() orchestrator.PlanReply {
	a.mu.Lock()
	place, every := a.prof.Appliance.Placement, a.prof.Appliance.PlanIntervalMS
	a.mu.Unlock()
	units := a.totalUnits()
	rep := orchestrator.PlanReply{Placement: place, Units: units, Devices: a.prof.Appliance.PlacementDevices, IFs: []orchestrator.PlanIF{}}
	if p := a.planner.Load(); p != nil {
		rep.Planner = *p
	}
	if a.plan != nil {
		rep.IntervalMS = every
		if t := a.planRound.Load(); t != 0 {
			rep.RoundS = time.Since(time.Unix(0, t)).Seconds()
		}
	}
	runs, specs, rates := a.plannedIFs()
	for i, r := range runs {
		st := r.f.Status()
		p := orchestrator.PlanIF{Name: specs[i].Name, Units: unitsOf(r.f.Units()), Share: st.Share, SLOMS: specs[i].SLOMS,
			ObservedP99MS: float64(st.P99) / 1e6}
		if a.prof.Appliance.PlacementDevices > 1 {
			a.mu.Lock()
			dev := r.planDevice
			a.mu.Unlock()
			p.Device = &dev
		}
		if a.plan != nil {
			p.RateRPS = rates[i]
			p.Profile = profileModel(a.plan, &specs[i])
		}
		rep.IFs = append(rep.IFs, p)
	}
	// predictions: each IF at its units, the other planned IFs beside it
	for i := range rep.IFs {
		p := &rep.IFs[i]
		if a.plan == nil || p.Profile == "" || p.Units == 0 {
			continue
		}
		var beside []inss.Colocated
		for j, o := range rep.IFs {
			if j != i && o.Profile != "" {
				beside = append(beside, inss.Colocated{Model: o.Profile})
			}
		}
		if b, inf, ok := inss.BestBatch(a.plan, p.Profile, "cpu", float64(p.Units), sloNs(&specs[i]), beside, inss.PlanOptions{}); ok {
			p.Batch, p.PredictedMS = b, inss.ExpectedLatencyNs(inf)/1e6
		}
	}
	slices.SortFunc(rep.IFs, func(x, y orchestrator.PlanIF) int { return strings.Compare(x.Name, y.Name) })
	return rep
}
