package ifmanager

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"sluice/dataplane/ioloop"
	"sluice/dataplane/wire"
)

// Deadlines. Every request an IF admits carries a deadline: the time by
// which its result must be computed, on the dataplane clock. It is the
// arrival of its first fragment (ioloop.Request.FirstNS) plus its header's
// deadline_us when the DEADLINE flag is set and deadline_us > 0, else plus
// the IF's SLO; an IF without an SLO (slo_ms = 0) gives such requests no
// deadline.
//
// With TimeoutReject (the default), a request that cannot finish by its
// deadline is answered deadline_exceeded, never served late:
//
//   - at admission (IF.Admit), when the predicted finish is past the
//     deadline. The prediction is now + the rest of the running batch +
//     ⌊p/L⌋·E(L) + E(p mod L + 1), where p is the number of requests ahead
//     of it (every queued request for a BE request; the queued RT requests
//     for an RT request, which are served first), L the batch limit, and
//     E(n) the estimated time of a batch of n (batchEstimate: the median
//     of the last 32 batches of that size);
//   - when a batch is formed, if it can no longer finish even alone
//     (now + E(1) > deadline), before it takes a place in the batch: the
//     batch's candidates, and the requests at the head of each queue
//     (so a BE request behind RT work is answered as soon as it cannot
//     finish, not when its turn comes); and a batch is only as large as
//     its members' deadlines allow (pickBatch): the candidates left out
//     wait for the next batch.
//
// With TimeoutServeLate nothing is refused for its deadline; requests
// served past it are counted (Counters.Late), as are those the estimate
// let through and their batch finished late under TimeoutReject.

// deadlineOf returns r's deadline on the dataplane clock, or 0 for none.
func deadlineOf(r *ioloop.Request, slo int64) int64 {
	if r.Flags&wire.FlagDeadline != 0 && r.DeadlineUS > 0 {
		return r.FirstNS + int64(r.DeadlineUS)*int64(time.Microsecond)
	}
	if slo > 0 {
		return r.FirstNS + slo
	}
	return 0
}

// predictFinish is when a request admitted at now would have its result:
// after the running batch (predicted to end at busyUntil; 0 or past when
// none runs or it overran its estimate), the ⌊ahead/limit⌋ full batches of
// the requests ahead of it, and its own batch of ahead%limit+1. est(n) is
// the estimated time of a batch of n; 0 when unknown.
func predictFinish(now, busyUntil int64, ahead, limit int, est func(n int) int64) int64 {
	limit = max(limit, 1)
	t := max(now, busyUntil)
	if full := ahead / limit; full > 0 {
		t += int64(full) * est(limit)
	}
	return t + est(ahead%limit+1)
}

// itemOrder is the order of a batch's candidates: RT requests before BE
// ones, then the earliest deadline first (none last), then the first
// admitted.
func itemOrder(a, b item) int {
	if a.rt != b.rt {
		if a.rt {
			return -1
		}
		return 1
	}
	da, db := a.deadline, b.deadline
	if da == 0 {
		da = math.MaxInt64
	}
	if db == 0 {
		db = math.MaxInt64
	}
	switch {
	case da < db:
		return -1
	case da > db:
		return 1
	case a.queued < b.queued:
		return -1
	case a.queued > b.queued:
		return 1
	}
	return 0
}

// meets reports whether it finishes in time when its result comes at
// finish.
func (it *item) meets(finish int64) bool { return it.deadline == 0 || finish <= it.deadline }

// pickBatch chooses the next batch among cand (sorted by itemOrder, none
// hopeless: each meets now + est(1)), at most limit requests. Two
// batches are considered:
//
//   - the prefix: the longest run of cand's first requests that all meet
//     now + est(p), p its length (at least 1);
//   - the fullest: the largest n for which n candidates meet
//     now + est(n), the first n of them in cand's order; a candidate
//     that can only finish in a smaller batch does not hold the others
//     back.
//
// The prefix (the most urgent requests first) is chosen when it is the
// fullest too, or when the fullest's members would still finish in time
// after it (by now + est(p) + est(n)); otherwise the fullest. It returns
// the size, and whether the batch is the prefix (take cand[:n]) or the
// first n candidates meeting fin.
func pickBatch(cand []item, limit int, now int64, est func(n int) int64) (n int, prefix bool, fin int64) {
	top := min(limit, len(cand))
	if top == 0 {
		return 0, true, now
	}
	p, due := 1, int64(math.MaxInt64)
	for k := 1; k <= top; k++ {
		if d := cand[k-1].deadline; d != 0 {
			due = min(due, d)
		}
		if now+est(k) <= due {
			p = k
		}
	}
	n = top
	for ; n > p; n-- {
		fin = now + est(n)
		q := 0
		for i := range cand {
			if cand[i].meets(fin) {
				if q++; q == n {
					break
				}
			}
		}
		if q >= n {
			break
		}
	}
	if n == p {
		return p, true, now + est(p)
	}
	// the fullest's members, after the prefix
	after, q := now+est(p)+est(n), 0
	for i := range cand {
		if !cand[i].meets(fin) {
			continue
		}
		if i >= p && !cand[i].meets(after) { // (those of the prefix run in it)
			return n, false, fin
		}
		if q++; q == n {
			break
		}
	}
	return p, true, now + est(p)
}

// batchEstimate learns how long a batch of each size takes, from its start
// to its results (gather + compute): per size, the median of the last
// estimateWindow batches of that size, so that a stall of the machine now
// and then does not move it, while a lasting change does within half the
// window. The median, not a high percentile: on a noisy machine a high
// percentile refuses requests that most likely finish in time (in
// make bench-overload, the 90th percentile gave 0.5-0.7x the goodput of
// the median at 2x and 4x the IF's capacity); the ones that do not are
// answered late, and counted (Counters.Late). A size not observed yet
// takes the estimate interpolated between the observed sizes
// around it; above the largest observed size m, E(m)·n/m; below the
// smallest, the smallest's. Nothing observed: 0 (unknown: admission then
// only refuses requests whose deadline has passed).
//
// An IF's first batch is not observed: it pages the model in, and can
// take many times what the next ones do. An estimate can only be
// corrected by running batches, and a too high one refuses every request:
// so the estimates are stale, and not used, while the IF is idle (no batch
// running) longer than max(1 s, 4·E(1)), at most 10 s, after its last
// batch. The next request is then admitted and run, and re-measures (an
// IF that cannot meet its deadlines at all serves about one request late
// per such interval, and refuses the rest).
//
// The worker observes and publishes; admission reads the published
// estimates (atomics), from the I/O loops.
type batchEstimate struct {
	rings [MaxBatchLimit + 1]*sampleRing // worker-owned; nil: not observed
	pub   [MaxBatchLimit + 1]atomic.Int64
	next  [MaxBatchLimit + 1]int16 // publish's scratch
	// lastEnd is when the last batch observed ended (the IF's clock).
	lastEnd atomic.Int64
	// max is the largest size published.
	max     int
	scratch [estimateWindow]int64
}

// estimateWindow is how many batches of a size the estimate looks at.
const estimateWindow = 32

// estimatePct is the percentile of those batches' times the estimate is.
const estimatePct = 50

// sampleRing holds the last estimateWindow times of one batch size.
type sampleRing struct {
	buf  [estimateWindow]int64
	n, i int
	p    int64 // the estimatePct percentile of buf[:n]
}

// add records v and recomputes the percentile (scratch: room for a copy
// of the samples).
func (r *sampleRing) add(v int64, scratch []int64) {
	r.buf[r.i] = v
	r.i = (r.i + 1) % estimateWindow
	r.n = min(r.n+1, estimateWindow)
	s := scratch[:r.n]
	copy(s, r.buf[:r.n])
	slices.Sort(s)
	r.p = s[(estimatePct*r.n+99)/100-1] // the ceil(pct n / 100)-th smallest
}

// get returns the estimate for a batch of n, in nanoseconds (0: unknown).
func (e *batchEstimate) get(n int) int64 {
	return e.pub[min(max(n, 1), MaxBatchLimit)].Load()
}

// noEstimate is the estimate while the published ones are stale.
func noEstimate(int) int64 { return 0 }

// stale reports whether the estimates are too old to use at now: no batch
// runs (running false) and none ended for max(1 s, 4·E(1)), at most 10 s.
func (e *batchEstimate) stale(now int64, running bool) bool {
	return !running && now-e.lastEnd.Load() > min(max(int64(time.Second), 4*e.get(1)), int64(10*time.Second))
}

// set makes the estimate of size n exactly d, as if measured at now
// (tests, and a caller who has measured it).
func (e *batchEstimate) set(n int, d time.Duration, now int64) {
	e.rings[n] = &sampleRing{}
	e.rings[n].add(max(int64(d), 1), e.scratch[:])
	e.lastEnd.Store(now)
	e.publish(max(e.max, n))
}

// observe records a batch of n that took d and ended at end.
func (e *batchEstimate) observe(n int, d time.Duration, end int64) {
	if n < 1 || n > MaxBatchLimit {
		return
	}
	r := e.rings[n]
	if r == nil {
		r = &sampleRing{}
		e.rings[n] = r
	}
	r.add(max(int64(d), 1), e.scratch[:])
	e.lastEnd.Store(end)
	e.publish(e.max)
}

// publish recomputes the published estimates of sizes 1..maxN.
func (e *batchEstimate) publish(maxN int) {
	e.max = min(max(maxN, 1), MaxBatchLimit)
	val := func(n int) float64 { return float64(e.rings[n].p) }
	// next[k]: the smallest observed size above k (0: none)
	hi := 0
	for k := e.max + 1; k <= MaxBatchLimit; k++ {
		if e.rings[k] != nil {
			hi = k
			break
		}
	}
	for k := e.max; k >= 1; k-- {
		e.next[k] = int16(hi)
		if e.rings[k] != nil {
			hi = k
		}
	}
	lo, vlo := 0, 0.0 // the largest observed size below k, and its value
	for k := 1; k <= e.max; k++ {
		if e.rings[k] != nil {
			lo, vlo = k, val(k)
			e.pub[k].Store(int64(vlo))
			continue
		}
		hi, vhi := int(e.next[k]), 0.0
		if hi != 0 {
			vhi = val(hi)
		}
		var v float64
		switch {
		case lo == 0 && hi == 0:
			v = 0
		case lo == 0:
			v = vhi
		case hi == 0:
			v = vlo * float64(k) / float64(lo)
		default:
			v = vlo + (vhi-vlo)*float64(k-lo)/float64(hi-lo)
		}
		e.pub[k].Store(int64(v))
	}
}
