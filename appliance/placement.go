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

// planShares runs InSS's local stage every plan_interval_ms until ctx
// ends (placement "inss").
func (a *Appliance) planShares(ctx context.Context) {
	every := time.Duration(a.prof.Appliance.PlanIntervalMS) * time.Millisecond
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if a.planStep(now.Sub(last)) {
				a.applyShares(true)
			}
			last = now
		}
	}
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
	a.mu.Lock()
	cpuBE := a.backends["cpu"]
	a.mu.Unlock()
	var runs []*ifRun
	var ds []inss.Demand
	arrived := uint64(0)
	covered := true
	for _, r := range a.ifRuns() {
		a.mu.Lock()
		spec := r.spec
		on := r.be == cpuBE && cpuBE != nil && (spec.Policy == "" || spec.Policy == ifmanager.PolicyNone)
		a.mu.Unlock()
		if !on {
			continue
		}
		arr := r.f.C.Arrivals.Load()
		n := arr - r.planArrivals
		r.planArrivals = arr
		arrived += n
		model := profileModel(a.plan, &spec)
		if model == "" {
			covered = false
			if !r.planWarned {
				r.planWarned = true
				a.log.Warn("inss placement: no cpu profile for the IF; shares stay as they are", "if", spec.Name, "model", spec.Model)
			}
		}
		slo := spec.SLOMS * 1e6
		if slo <= 0 {
			slo = math.Inf(1) // no objective: any batch time will do
		}
		// the rate to serve: what arrived in the window, and the queue
		// left at its end, which the next window must serve as well
		// (InSS's state holds each model's queued workload)
		queued := uint64(max(r.f.Status().QueueDepth, 0))
		runs = append(runs, r)
		ds = append(ds, inss.Demand{Name: spec.Name, Model: model, SLONs: slo, Rate: float64(n+queued) / window.Seconds()})
		a.mu.Lock()
		r.planRate = ds[len(ds)-1].Rate
		a.mu.Unlock()
	}
	a.planRound.Store(time.Now().UnixNano())
	if len(runs) == 0 || arrived == 0 || !covered {
		return false
	}
	shares, _ := inss.LocalShares(a.plan, "cpu", a.totalUnits(), ds, inss.PlanOptions{})
	changed := false
	for i, r := range runs {
		a.mu.Lock()
		prev := r.spec.Share
		if math.Abs(prev-shares[i]) > 1e-9 {
			r.spec.Share = shares[i]
			changed = true
		}
		a.mu.Unlock()
		if math.Abs(prev-shares[i]) > 1e-9 {
			cfg := r.f.Config()
			a.log.Info("inss placement: share", "if", cfg.Name, "from", prev, "to", shares[i], "rate", ds[i].Rate)
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
	cpuBE := a.backends["cpu"]
	place, every := a.prof.Appliance.Placement, a.prof.Appliance.PlanIntervalMS
	a.mu.Unlock()
	units := a.totalUnits()
	rep := orchestrator.PlanReply{Placement: place, Units: units, IFs: []orchestrator.PlanIF{}}
	if a.plan != nil {
		rep.IntervalMS = every
		if t := a.planRound.Load(); t != 0 {
			rep.RoundS = time.Since(time.Unix(0, t)).Seconds()
		}
	}
	type entry struct {
		spec IFSection
		p    orchestrator.PlanIF
	}
	var es []entry
	for _, r := range a.ifRuns() {
		a.mu.Lock()
		spec, rate := r.spec, r.planRate
		on := r.be == cpuBE && cpuBE != nil && (spec.Policy == "" || spec.Policy == ifmanager.PolicyNone)
		a.mu.Unlock()
		if !on {
			continue
		}
		st := r.f.Status()
		p := orchestrator.PlanIF{Name: spec.Name, Units: unitsOf(r.f.Units()), Share: st.Share, SLOMS: spec.SLOMS,
			ObservedP99MS: float64(st.P99) / 1e6}
		if a.plan != nil {
			p.RateRPS = rate
			p.Profile = profileModel(a.plan, &spec)
		}
		es = append(es, entry{spec, p})
	}
	// predictions: each IF at its units, the other planned IFs beside it
	for i := range es {
		p := &es[i].p
		if a.plan == nil || p.Profile == "" || p.Units == 0 {
			continue
		}
		var beside []inss.Colocated
		for j, o := range es {
			if j != i && o.p.Profile != "" {
				beside = append(beside, inss.Colocated{Model: o.p.Profile})
			}
		}
		slo := es[i].spec.SLOMS * 1e6
		if slo <= 0 {
			slo = math.Inf(1)
		}
		if b, inf, ok := inss.BestBatch(a.plan, p.Profile, "cpu", float64(p.Units), slo, beside, inss.PlanOptions{}); ok {
			p.Batch, p.PredictedMS = b, inss.ExpectedLatencyNs(inf)/1e6
		}
	}
	for _, e := range es {
		rep.IFs = append(rep.IFs, e.p)
	}
	slices.SortFunc(rep.IFs, func(x, y orchestrator.PlanIF) int { return strings.Compare(x.Name, y.Name) })
	return rep
}
