package sched

import (
	"math/rand"
	"testing"
)

// synthModel is a model with one kernel per time (ns) for queue-order
// tests (no program: only the remaining-time table split reads).
func synthModel(name string, ts ...float64) *Model {
	m := &Model{name: name, prof: synthProfile(ts...)}
	m.remain = make([]float64, len(ts)+1)
	for i := len(ts) - 1; i >= 0; i-- {
		m.remain[i] = m.remain[i+1] + ts[i]
	}
	return m
}

// TestSplitRule checks split's queue rule: SPLIT's Algorithm 1 within a
// class, RT ahead of BE, and aging against starvation.
//
//   - Within a class, a new job moves ahead of a queued job of another
//     model exactly when that lowers the pair's summed response ratio
//     (eq. 3). A job's response ratio is linear in its own wait, and the
//     wait it has already done enters both sides of the comparison alike,
//     so it cancels: the swap happens iff rem(queued) x ext(queued) >
//     rem(new) x ext(new) (Smith's weighted-shortest-job rule with weights
//     1/(alpha x ext)). Alone, that lets a closed-loop stream of shorter
//     jobs starve a long one forever (DISB C: RT VGG-16 behind five
//     closed-loop BE clients finished 0 of 187 jobs).
//   - So a queued job that has waited past its latency target (alpha x
//     ext) is not passed any more, and RT jobs pass BE jobs, never the
//     other way round. A job never passes one of its own model (FIFO).
func TestSplitRule(t *testing.T) {
	const alpha = 4
	s := &Scheduler{cfg: Config{Alpha: alpha}}
	p := &split{s: s}
	long := synthModel("long", 4e6, 4e6, 2e6)        // 10 ms
	short := synthModel("short", 2e5, 3e5)           // 0.5 ms
	mid := synthModel("mid", 1e6, 1e6)               // 2 ms
	for _, waited := range []int64{1e3, 1e6, 39e6} { // within long's 40 ms target
		now := Now()
		l := &Job{Model: long, Class: BE, Arrival: now - waited}
		p.q = []*Job{l}
		if pos := p.insertAt(&Job{Model: short, Class: BE, Arrival: now}, now); pos != 0 {
			t.Fatalf("long job waited %.3f ms: a new short job goes to position %d, want 0 (ahead)", float64(waited)/1e6, pos)
		}
		// a second short job stays behind the first (same model: FIFO)
		// and ahead of the long one
		if pos := p.insertAt(&Job{Model: short, Class: BE, Arrival: now}, now); pos != 1 {
			t.Fatalf("second short job at %d, want 1", pos)
		}
		if p.q[2] != l {
			t.Fatalf("long job not last")
		}
	}
	// aging: past its target the long job is not passed
	for _, waited := range []int64{40e6, 1e9, 1e11} {
		now := Now()
		p.q = []*Job{{Model: long, Class: BE, Arrival: now - waited}}
		if pos := p.insertAt(&Job{Model: short, Class: BE, Arrival: now}, now); pos != 1 {
			t.Fatalf("long job waited %.0f ms (target 40): a new short job goes to %d, want 1 (behind)", float64(waited)/1e6, pos)
		}
	}
	// a new long job never passes a queued shorter one, however new
	now := Now()
	p.q = []*Job{{Model: short, Class: BE, Arrival: now - 1e3}}
	if pos := p.insertAt(&Job{Model: long, Class: BE, Arrival: now}, now); pos != 1 {
		t.Fatalf("long job at %d, want 1 (behind)", pos)
	}
	// classes: a long RT job passes short BE jobs (even overdue ones) but
	// not an RT job of its own model; a short BE job never passes RT
	p.q = []*Job{{Model: short, Class: BE, Arrival: now - 1e9}, {Model: mid, Class: BE, Arrival: now}}
	if pos := p.insertAt(&Job{Model: long, Class: RT, Arrival: now}, now); pos != 0 {
		t.Fatalf("RT job behind BE jobs: position %d, want 0", pos)
	}
	if pos := p.insertAt(&Job{Model: long, Class: RT, Arrival: now}, now); pos != 1 {
		t.Fatalf("second RT job of the same model at %d, want 1 (FIFO)", pos)
	}
	if pos := p.insertAt(&Job{Model: short, Class: BE, Arrival: now}, now); pos != 3 {
		t.Fatalf("short BE job at %d, want 3 (past mid, behind the BE job of its own model)", pos)
	}
	p.q = []*Job{{Model: long, Class: RT, Arrival: now}}
	if pos := p.insertAt(&Job{Model: short, Class: BE, Arrival: now}, now); pos != 1 {
		t.Fatalf("short BE job passed an RT job: position %d", pos)
	}
	// an RT job passes the BE jobs of its own model too (DISB C: the RT
	// client's model is also one of the BE clients'; FIFO holds within a
	// class)
	p.q = []*Job{{Model: mid, Class: BE, Arrival: now}, {Model: long, Class: BE, Arrival: now}, {Model: short, Class: BE, Arrival: now}}
	if pos := p.insertAt(&Job{Model: long, Class: RT, Arrival: now}, now); pos != 0 {
		t.Fatalf("RT job behind a BE job of its own model: position %d, want 0", pos)
	}
	// the closed form, on random queues of one class whose jobs are all
	// within their targets
	models := []*Model{long, short, mid}
	rng := rand.New(rand.NewSource(3))
	for it := 0; it < 200; it++ {
		now := Now()
		p.q = p.q[:0]
		for i := 0; i < 1+rng.Intn(5); i++ {
			m := models[rng.Intn(3)]
			p.q = append(p.q, &Job{Model: m, Class: BE, Arrival: now - rng.Int63n(int64(alpha*m.remain[0]))})
		}
		q0 := append([]*Job(nil), p.q...)
		j := &Job{Model: models[rng.Intn(3)], Class: BE, Arrival: now}
		pos := p.insertAt(j, now)
		want := len(q0)
		for want > 0 {
			o := q0[want-1]
			if o.Model == j.Model || remaining(o)*o.Model.remain[0] <= remaining(j)*j.Model.remain[0] {
				break
			}
			want--
		}
		if pos != want {
			t.Fatalf("queue %v + %s: inserted at %d, Smith's rule says %d", names(q0), j.Model.name, pos, want)
		}
	}
}

func names(js []*Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.Model.name)
	}
	return out
}
