package inss

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Device is one device of a cluster: its kind (the profiles' Device),
// its share units (cpu units, SMs) and its memory (0: unlimited).
type Device struct {
	Kind     string
	Capacity int
	MemBytes int64
}

// Demand is one served model's workload: its profile (Model), a name of
// its own (several tenants may serve one model with different SLOs), its
// latency SLO and its Poisson arrival rate.
type Demand struct {
	Name, Model string
	SLONs       float64
	Rate        float64 // tasks per second
}

// Placement is one instance of a demand's model on a device: its share
// (units) and batch size.
type Placement struct {
	Demand int // index into the workload
	Device int
	Share  int
	Batch  int
}

// Plan is where every demand runs. A demand may run on several devices;
// one without a placement is not served.
type Plan struct {
	Places []Placement
}

// Check reports whether the plan fits the cluster: shares sum to at most
// each device's capacity, memory within each device's, batch sizes and
// shares positive, demands and devices in range.
func (p *Plan) Check(m *Model, devs []Device, wl []Demand) error {
	used := make([]int, len(devs))
	mem := make([]int64, len(devs))
	for _, pl := range p.Places {
		if pl.Demand < 0 || pl.Demand >= len(wl) || pl.Device < 0 || pl.Device >= len(devs) || pl.Share < 1 || pl.Batch < 1 {
			return fmt.Errorf("inss: placement %+v out of range", pl)
		}
		used[pl.Device] += pl.Share
		if pr := m.Profile(wl[pl.Demand].Model, devs[pl.Device].Kind); pr != nil {
			mem[pl.Device] += pr.MemBytes
		} else {
			return fmt.Errorf("inss: %s has no profile on %s", wl[pl.Demand].Model, devs[pl.Device].Kind)
		}
	}
	for k, d := range devs {
		if used[k] > d.Capacity {
			return fmt.Errorf("inss: device %d: shares %d over its %d", k, used[k], d.Capacity)
		}
		if d.MemBytes > 0 && mem[k] > d.MemBytes {
			return fmt.Errorf("inss: device %d: %d bytes of models over its %d", k, mem[k], d.MemBytes)
		}
	}
	return nil
}

// Result is what a simulated run served.
type Result struct {
	// Arrived, Good (answered within the SLO) and Violated (late or
	// never served) tasks, per demand and in all.
	Arrived, Good, Violated []int
	// Goodput is good tasks per second, ViolationRate violated over
	// arrived.
	Goodput, ViolationRate float64
}

// Simulate runs the plan for horizonS seconds of Poisson arrivals
// (seeded; generated as the run goes, so its memory is the queues'): each
// placement serves its demand's tasks in FIFO batches of
// up to its batch size, starting a batch when it is idle and has a full
// batch or its oldest task can wait no longer (its SLO less the batch's
// execution); a task already past its SLO when its batch would start is
// dropped as violated. Batch times come from the latency model with the
// device's other placements beside it (InSS's interference terms; none
// when interference is false). A task goes to the placement of its
// demand with the least expected wait (queued and running tasks over
// its capacity).
func Simulate(m *Model, devs []Device, wl []Demand, plan *Plan, horizonS float64, seed uint64, interference bool) (*Result, error) {
	if err := plan.Check(m, devs, wl); err != nil {
		return nil, err
	}
	if !(horizonS > 0) {
		return nil, errors.New("inss: simulate: horizon must be positive")
	}
	srv, err := servers(m, devs, wl, plan, interference)
	if err != nil {
		return nil, err
	}
	byDemand := make([][]int, len(wl))
	for k, s := range srv {
		byDemand[s.demand] = append(byDemand[s.demand], k)
	}
	res := &Result{Arrived: make([]int, len(wl)), Good: make([]int, len(wl)), Violated: make([]int, len(wl))}
	// arrivals: one pending per demand at a time (memory stays bounded
	// by the queues, whatever the rates and the horizon), each demand's
	// from its own random stream
	var evs events
	horizon := horizonS * 1e9
	rs := make([]*rand.Rand, len(wl))
	next := func(d int, after float64) {
		if t := after + rs[d].ExpFloat64()/wl[d].Rate*1e9; t < horizon {
			heap.Push(&evs, event{t: t, kind: evArrive, who: d})
		}
	}
	for d, w := range wl {
		if w.Rate > 0 {
			rs[d] = rand.New(rand.NewPCG(seed, 0x1b55+uint64(d)))
			next(d, 0)
		}
	}
	for evs.Len() > 0 {
		e := heap.Pop(&evs).(event)
		switch e.kind {
		case evArrive:
			d := e.who
			next(d, e.t)
			res.Arrived[d]++
			cand := byDemand[d]
			if len(cand) == 0 {
				res.Violated[d]++
				continue
			}
			best := cand[0]
			for _, k := range cand[1:] {
				if srv[k].expectedWait(e.t) < srv[best].expectedWait(e.t) {
					best = k
				}
			}
			s := srv[best]
			if len(s.queue) >= MaxSimQueue {
				res.Violated[d]++ // refused, as a full IF queue refuses
				continue
			}
			s.queue = append(s.queue, e.t)
			if len(s.queue) == 1 && !s.busy {
				heap.Push(&evs, event{t: e.t + s.maxWait(), kind: evCheck, who: best})
			}
			s.try(e.t, best, &evs, res)
		case evDone:
			s := srv[e.who]
			s.busy = false
			for _, a := range s.running {
				if e.t-a <= s.slo {
					res.Good[s.demand]++
				} else {
					res.Violated[s.demand]++
				}
			}
			s.running = s.running[:0]
			s.try(e.t, e.who, &evs, res)
			if !s.busy && len(s.queue) > 0 {
				heap.Push(&evs, event{t: max(e.t, s.queue[0]+s.maxWait()), kind: evCheck, who: e.who})
			}
		case evCheck:
			s := srv[e.who]
			s.try(e.t, e.who, &evs, res)
		}
	}
	// what is still queued or running at the end was not served in time
	for _, s := range srv {
		res.Violated[s.demand] += len(s.queue) + len(s.running)
	}
	arrived, good, violated := 0, 0, 0
	for d := range wl {
		arrived, good, violated = arrived+res.Arrived[d], good+res.Good[d], violated+res.Violated[d]
	}
	res.Goodput = float64(good) / horizonS
	if arrived > 0 {
		res.ViolationRate = float64(violated) / float64(arrived)
	}
	return res, nil
}

// MaxSimQueue bounds a simulated placement's queue (an IF's queue_len
// does the same): a task that finds it full is refused, counted violated.
const MaxSimQueue = 1 << 16

// server is a placement while simulated.
type server struct {
	demand  int
	batch   int
	inf     []float64 // ns per batch of n tasks, n = 1..batch
	queue   []float64 // arrival times
	running []float64
	busy    bool
	doneAt  float64
	slo     float64
}

// servers builds a server per placement with its batch times.
func servers(m *Model, devs []Device, wl []Demand, plan *Plan, interference bool) ([]*server, error) {
	srv := make([]*server, len(plan.Places))
	for k, pl := range plan.Places {
		var beside []Colocated
		if interference {
			for j, o := range plan.Places {
				if j != k && o.Device == pl.Device {
					beside = append(beside, Colocated{Model: wl[o.Demand].Model})
				}
			}
		}
		s := &server{demand: pl.Demand, batch: pl.Batch, inf: make([]float64, pl.Batch+1), slo: wl[pl.Demand].SLONs}
		for n := 1; n <= pl.Batch; n++ {
			t, err := m.ExecNs(wl[pl.Demand].Model, devs[pl.Device].Kind, n, float64(pl.Share), beside)
			if err != nil {
				return nil, err
			}
			s.inf[n] = t
		}
		srv[k] = s
	}
	return srv, nil
}

// maxWait is how long the oldest task may wait for a full batch: its SLO
// less a full batch's execution (at least 0).
func (s *server) maxWait() float64 { return max(s.slo-s.inf[s.batch], 0) }

// expectedWait is a new task's expected wait at t: what runs, then the
// queue in batches.
func (s *server) expectedWait(t float64) float64 {
	w := 0.0
	if s.busy {
		w = s.doneAt - t
	}
	return w + math.Ceil(float64(len(s.queue)+1)/float64(s.batch))*s.inf[s.batch]
}

// try starts a batch at t if the server is idle and has a full batch or
// a task that can wait no longer; tasks already past their SLO are
// dropped first.
func (s *server) try(t float64, who int, evs *events, res *Result) {
	if s.busy {
		return
	}
	drop := 0
	for drop < len(s.queue) && t-s.queue[drop] > s.slo {
		drop++
	}
	if drop > 0 {
		res.Violated[s.demand] += drop
		s.queue = slices.Delete(s.queue, 0, drop)
	}
	if len(s.queue) == 0 || (len(s.queue) < s.batch && t < s.queue[0]+s.maxWait()) {
		return
	}
	n := min(len(s.queue), s.batch)
	s.running = append(s.running[:0], s.queue[:n]...)
	s.queue = slices.Delete(s.queue, 0, n)
	s.busy = true
	s.doneAt = t + s.inf[n]
	heap.Push(evs, event{t: s.doneAt, kind: evDone, who: who})
}

const (
	evArrive = iota
	evDone
	evCheck
)

type event struct {
	t    float64
	kind int
	who  int
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].t != e[j].t {
		return e[i].t < e[j].t
	}
	return e[i].kind > e[j].kind // completions before arrivals at one instant
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}
