package inss

import (
	"fmt"
	"math"
)

// maxSplits bounds the unit splits LocalShares tries one by one; beyond
// it (8 models on 64 units are 553 million splits) it allocates unit by
// unit.
const maxSplits = 100_000

// compositions is the number of ways to split units into n parts of at
// least one (C(units-1, n-1)), saturating above maxSplits.
func compositions(units, n int) int {
	c := 1
	for k := 1; k < n; k++ {
		c = c * (units - k) / k
		if c > maxSplits {
			return maxSplits + 1
		}
	}
	return c
}

// BestBatch is the batch size (a power of two up to o.MaxBatch) that
// serves model the most tasks per second at share s of a device of kind,
// beside the models co-located with it, within sloNs (the planners'
// test: half a batch in progress, then its own), with its batch time; ok
// is false when none fits.
func BestBatch(m *Model, model, kind string, s, sloNs float64, beside []Colocated, o PlanOptions) (batch int, infNs float64, ok bool) {
	o = o.withDefaults()
	bestCap := 0.0
	for b := 1; b <= o.MaxBatch; b *= 2 {
		inf, err := m.ExecNs(model, kind, b, s, beside)
		if err != nil || !latencyOK(inf, sloNs) {
			continue
		}
		if c := float64(b) / inf; c > bestCap {
			bestCap, batch, infNs, ok = c, b, inf, true
		}
	}
	return batch, infNs, ok
}

// ExpectedLatencyNs is the task latency the planners count on for a
// batch time: InSS eq. 3 with one batch in progress, half of it left on
// average, then the task's own batch.
func ExpectedLatencyNs(infNs float64) float64 { return 1.5 * infNs }

// LocalShares is InSS's local stage on one device of units share units
// whose models are placed already (demands: each IF's model, SLO and
// observed rate): it splits the units among them, every one at least
// one unit, to serve the most of the rates within the SLOs the latency
// model predicts, and returns each demand's share of the device (its
// units over units) and the batch size that serves it best, each
// model's batch times counting the others beside it (InSS's interference
// terms). A split's
// worth is the rate it serves within the SLOs (each demand's capacity at
// its best batch, counted up to its rate), then the least headroom among
// the demands (capacity over rate), larger first. Every split is tried
// where there are at most maxSplits; beyond, the units go one at a time
// to the demand each serves the most more tasks for. With more demands
// than units
// (or none, or a demand without a profile) the units are shared evenly
// and the batch sizes are 0 (the IFs keep their own).
func LocalShares(m *Model, kind string, units int, ds []Demand, o PlanOptions) (shares []float64, batches []int) {
	o = o.withDefaults()
	n := len(ds)
	shares, batches = make([]float64, n), make([]int, n)
	even := func() ([]float64, []int) {
		for i := range shares {
			shares[i], batches[i] = 1/float64(n), 0
		}
		return shares, batches
	}
	if n == 0 || units < n || units > 64 {
		return even()
	}
	for _, d := range ds {
		if m.Profile(d.Model, kind) == nil {
			return even()
		}
	}
	// capacity (tasks/s within the SLO) and batch of demand i at s units
	type opt struct {
		cap   float64
		batch int
	}
	best := make([][]opt, n)
	for i, d := range ds {
		// every other model on the device is beside it
		var beside []Colocated
		for j, e := range ds {
			if j != i {
				beside = append(beside, Colocated{Model: e.Model})
			}
		}
		best[i] = make([]opt, units+1)
		for s := 1; s <= units-(n-1); s++ {
			if b, inf, ok := BestBatch(m, d.Model, kind, float64(s), d.SLONs, beside, o); ok {
				best[i][s] = opt{o.Headroom * float64(b) / inf * 1e9, b}
			}
		}
	}
	if compositions(units, n) > maxSplits {
		// too many splits to try: one unit each, then each further unit
		// to the demand it serves the most more tasks for (the least
		// headroom on a tie)
		split := make([]int, n)
		for i := range split {
			split[i] = 1
		}
		for left := units - n; left > 0; left-- {
			bi, bg, bh := 0, -1.0, math.Inf(1)
			for i, s := range split {
				g := min(best[i][s+1].cap, ds[i].Rate) - min(best[i][s].cap, ds[i].Rate)
				h := math.Inf(1)
				if ds[i].Rate > 0 {
					h = best[i][s].cap / ds[i].Rate
				}
				if g > bg || (g == bg && h < bh) {
					bi, bg, bh = i, g, h
				}
			}
			split[bi]++
		}
		for i, s := range split {
			shares[i], batches[i] = float64(s)/float64(units), best[i][s].batch
		}
		return shares, batches
	}
	split := make([]int, n)
	var bestSplit []int
	bestServed, bestSlack := -1.0, -1.0
	var walk func(i, left int)
	walk = func(i, left int) {
		if i == n-1 {
			split[i] = left
			served, slack := 0.0, 1e300
			for k, s := range split {
				c := best[k][s].cap
				served += min(c, ds[k].Rate)
				if ds[k].Rate > 0 {
					slack = min(slack, c/ds[k].Rate)
				}
			}
			if served > bestServed*(1+1e-12) || (served >= bestServed*(1-1e-12) && slack > bestSlack) {
				bestServed, bestSlack, bestSplit = served, slack, append(bestSplit[:0], split...)
			}
			return
		}
		for s := 1; s <= left-(n-1-i); s++ {
			split[i] = s
			walk(i+1, left-s)
		}
	}
	walk(0, units)
	for i, s := range bestSplit {
		shares[i], batches[i] = float64(s)/float64(units), best[i][s].batch
	}
	return shares, batches
}

// PlaceOnce is InSS's two stages for demands that run as one instance
// each (an appliance's IFs on the unit groups of one node): the global
// stage puts each demand, largest work first (rate × its batch-1 time on
// a whole device), on the device with room (a unit and its memory) whose
// placed work is least, so the load spreads; the local stage then splits
// each device's units among its demands with LocalShares (the split that
// serves the most of their rates within their SLOs, the models beside
// each other on the device). Shares are whole units, every demand at
// least one. It fails when some demand fits on no device.
func PlaceOnce(m *Model, devs []Device, wl []Demand, o PlanOptions) (*Plan, error) {
	order, taskNs := demandOrder(m, devs, wl)
	work := make([]float64, len(devs))
	count := make([]int, len(devs))
	mem := make([]int64, len(devs))
	on := make([][]int, len(devs))
	for _, d := range order {
		pr := func(k int) *Profile { return m.Profile(wl[d].Model, devs[k].Kind) }
		best := -1
		for k, dev := range devs {
			p := pr(k)
			if p == nil || count[k] >= dev.Capacity || (dev.MemBytes > 0 && mem[k]+p.MemBytes > dev.MemBytes) {
				continue
			}
			if best < 0 || work[k] < work[best] {
				best = k
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("inss: demand %q fits on no device (units or memory)", wl[d].Name)
		}
		work[best] += wl[d].Rate * taskNs[d]
		count[best]++
		mem[best] += pr(best).MemBytes
		on[best] = append(on[best], d)
	}
	plan := &Plan{}
	for k, ds := range on {
		if len(ds) == 0 {
			continue
		}
		dws := make([]Demand, len(ds))
		for i, d := range ds {
			dws[i] = wl[d]
		}
		shares, batches := LocalShares(m, devs[k].Kind, devs[k].Capacity, dws, o)
		units := make([]int, len(ds))
		given := 0
		for i := range ds {
			units[i] = max(1, int(math.Round(shares[i]*float64(devs[k].Capacity))))
			given += units[i]
		}
		for i := 0; given > devs[k].Capacity; i = (i + 1) % len(ds) { // rounding of an even split
			if units[i] > 1 {
				units[i]--
				given--
			}
		}
		for i, d := range ds {
			plan.Places = append(plan.Places, Placement{Demand: d, Device: k, Share: units[i], Batch: max(batches[i], 1)})
		}
	}
	return plan, nil
}
