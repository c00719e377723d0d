package inss

import (
	"slices"
)

// PlanOptions bound the planners' search.
type PlanOptions struct {
	// MaxBatch is the largest batch size considered (default 8); batch
	// sizes are the powers of two up to it.
	MaxBatch int
	// Headroom is the fraction of a placement's capacity the planner
	// counts on (default 0.85): queues grow without bound near 1.
	Headroom float64
	// Interference makes the planner predict batch times with the models
	// beside (InSS); without it, as if each ran alone.
	Interference bool
}

func (o PlanOptions) withDefaults() PlanOptions {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 8
	}
	if !(o.Headroom > 0) || o.Headroom > 1 {
		o.Headroom = 0.85
	}
	return o
}

// latencyOK is the planners' SLO test for a batch time: on average a
// task waits half a batch in progress, then runs in its own (eq. 3 with
// a full queue of one batch).
func latencyOK(infNs, sloNs float64) bool { return ExpectedLatencyNs(infNs) <= sloNs }

// Greedy is the non-learned two-stage optimiser beside InSS's learned
// one. Global stage: every demand, in order of its work (rate x time per
// task alone on a whole device of the first kind), gets one instance,
// then the demand with the most work left uncovered gets another, until
// every rate is covered or nothing fits; an instance goes where a
// (device, share, batch) serves the most of the demand's remaining rate
// per share unit with its batch time within the SLO, without pushing a
// placement already on the device out of its SLO. Local stage: each
// device's spare units go, one at a time, to its most loaded placement.
// Memory is a hard limit.
func Greedy(m *Model, devs []Device, wl []Demand, o PlanOptions) *Plan {
	o = o.withDefaults()
	used := make([]int, len(devs))
	mem := make([]int64, len(devs))
	load := []float64{} // assigned rate per placement
	plan := &Plan{}
	order, taskNs := demandOrder(m, devs, wl)
	remaining := make([]float64, len(wl))
	for d := range wl {
		remaining[d] = wl[d].Rate
	}
	// place adds demand d's best placement, if it has one
	place := func(d int) bool {
		best, bestServed, bestScore := Placement{}, 0.0, -1.0
		for k, dev := range devs {
			pr := m.Profile(wl[d].Model, dev.Kind)
			if pr == nil || (dev.MemBytes > 0 && mem[k]+pr.MemBytes > dev.MemBytes) {
				continue
			}
			for s := 1; s <= dev.Capacity-used[k]; s++ {
				for b := 1; b <= o.MaxBatch; b *= 2 {
					inf, ok := placeTime(m, devs, wl, plan, k, d, s, b, o.Interference, -1)
					if !ok || !latencyOK(inf, wl[d].SLONs) {
						continue
					}
					served := min(remaining[d], o.Headroom*float64(b)/inf*1e9)
					score := served / float64(s)
					if score > bestScore*(1+1e-9) {
						best, bestServed, bestScore = Placement{Demand: d, Device: k, Share: s, Batch: b}, served, score
					}
				}
			}
		}
		if bestScore < 0 {
			return false
		}
		plan.Places = append(plan.Places, best)
		load = append(load, bestServed)
		used[best.Device] += best.Share
		if pr := m.Profile(wl[d].Model, devs[best.Device].Kind); pr != nil {
			mem[best.Device] += pr.MemBytes
		}
		remaining[d] -= bestServed
		return true
	}
	// first every demand once, in order of work, so that a large one
	// does not take the units a later one needs for its first instance;
	// then more instances, each time for the demand with the most work
	// left uncovered
	for _, d := range order {
		place(d)
	}
	for {
		d, most := -1, 0.0
		for _, c := range order {
			if remaining[c] <= 1e-9 {
				continue
			}
			if w := remaining[c] * taskNs[c]; w > most {
				d, most = c, w
			}
		}
		if d < 0 || !place(d) {
			if d >= 0 {
				remaining[d] = 0 // nowhere left for it: the rest goes unserved
				continue
			}
			break
		}
	}
	// local stage: spare units to the most loaded placement of the device
	for k, dev := range devs {
		for used[k] < dev.Capacity {
			bi, bu := -1, 0.0
			for i, pl := range plan.Places {
				if pl.Device != k {
					continue
				}
				inf, ok := placeTime(m, devs, wl, plan, k, pl.Demand, pl.Share, pl.Batch, o.Interference, i)
				if !ok {
					continue
				}
				if u := load[i] / (float64(pl.Batch) / inf * 1e9); u > bu {
					bi, bu = i, u
				}
			}
			if bi < 0 {
				break
			}
			plan.Places[bi].Share++
			used[k]++
		}
	}
	return plan
}

// placeTime is the batch time of demand d at share s and batch b on
// device k beside what plan has there (self: the placement's own index
// in plan, -1 for one not placed yet), and, for a new one, whether
// adding it keeps every placement already there within its SLO.
func placeTime(m *Model, devs []Device, wl []Demand, plan *Plan, k, d, s, b int, interf bool, self int) (float64, bool) {
	var beside []Colocated
	if interf {
		for i, pl := range plan.Places {
			if pl.Device == k && i != self {
				beside = append(beside, Colocated{Model: wl[pl.Demand].Model})
			}
		}
	}
	inf, err := m.ExecNs(wl[d].Model, devs[k].Kind, b, float64(s), beside)
	if err != nil {
		return 0, false
	}
	if !interf || self >= 0 {
		return inf, true
	}
	for j, pl := range plan.Places {
		if pl.Device != k {
			continue
		}
		var bs []Colocated
		for i, o := range plan.Places {
			if i != j && o.Device == k {
				bs = append(bs, Colocated{Model: wl[o.Demand].Model})
			}
		}
		bs = append(bs, Colocated{Model: wl[d].Model})
		t, err := m.ExecNs(wl[pl.Demand].Model, devs[k].Kind, pl.Batch, float64(pl.Share), bs)
		if err != nil || !latencyOK(t, wl[pl.Demand].SLONs) {
			return 0, false
		}
	}
	return inf, true
}

// demandOrder is the demands by work (rate x a task's time alone, batch
// 1, on a whole device of the first kind), largest first, with those
// task times (0 where the demand's model has no profile there).
func demandOrder(m *Model, devs []Device, wl []Demand) (order []int, taskNs []float64) {
	order, taskNs = make([]int, len(wl)), make([]float64, len(wl))
	for d := range wl {
		order[d] = d
		if len(devs) > 0 {
			if t, err := m.ExecNs(wl[d].Model, devs[0].Kind, 1, float64(devs[0].Capacity), nil); err == nil {
				taskNs[d] = t
			}
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpF(wl[b].Rate*taskNs[b], wl[a].Rate*taskNs[a]) })
	return order, taskNs
}

// GSLICE is the baseline: no global placement (demands spread over the
// devices in turn: with fewer devices than demands each device takes
// every K-th demand, with more each demand every I-th device), and on
// each device GSLICE's split, the units shared evenly among its
// placements (its self-tuning moves shares by the residuals of latency
// and throughput; on devices of few units an even split is where it
// starts and where whole units leave it), each with the largest batch
// whose time fits the SLO at that share.
func GSLICE(m *Model, devs []Device, wl []Demand, o PlanOptions) *Plan {
	o = o.withDefaults()
	K, I := len(devs), len(wl)
	on := make([][]int, K)
	if K >= I {
		for k := 0; k < K; k++ {
			on[k] = []int{k % I}
		}
	} else {
		for d := 0; d < I; d++ {
			on[d%K] = append(on[d%K], d)
		}
	}
	plan := &Plan{}
	for k, ds := range on {
		// as many as get a unit each, memory permitting
		var mem int64
		var keep []int
		for _, d := range ds {
			pr := m.Profile(wl[d].Model, devs[k].Kind)
			if pr == nil || len(keep) == devs[k].Capacity || (devs[k].MemBytes > 0 && mem+pr.MemBytes > devs[k].MemBytes) {
				continue
			}
			mem += pr.MemBytes
			keep = append(keep, d)
		}
		if len(keep) == 0 {
			continue
		}
		share, extra := devs[k].Capacity/len(keep), devs[k].Capacity%len(keep)
		for n, d := range keep {
			s := share
			if n < extra {
				s++
			}
			b := 1
			for c := 2; c <= o.MaxBatch; c *= 2 {
				inf, err := m.ExecNs(wl[d].Model, devs[k].Kind, c, float64(s), nil)
				if err == nil && latencyOK(inf, wl[d].SLONs) {
					b = c
				}
			}
			plan.Places = append(plan.Places, Placement{Demand: d, Device: k, Share: s, Batch: b})
		}
	}
	return plan
}
