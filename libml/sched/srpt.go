package sched

import "math"

// srpt is Paella's policy (§6) on one stream: at every decision the
// dispatcher runs the next kernels (about QuantumNs of profiled work) of
// the job with the shortest remaining time, remaining = the profiled time
// of its kernels not yet run. Deficit counters bound the unfairness: each
// dispatched kernel lowers its user's deficit by 1 - 1/users and raises
// every other user's by 1/users; when a user's deficit exceeds the
// threshold, the oldest job of the user with the largest deficit runs
// instead. Jobs are never preempted inside a chunk; classes are not
// looked at.
type srpt struct {
	s       *Scheduler
	l       *lane
	jobs    []*Job // unfinished, in arrival order
	deficit map[int]float64
}

func newSRPT(s *Scheduler) *srpt {
	return &srpt{s: s, l: s.lanes[0], deficit: map[int]float64{}}
}

func (p *srpt) submit(j *Job) {
	p.jobs = append(p.jobs, j)
	if !p.l.busy {
		p.dispatch()
	}
}

// remaining is a job's remaining profiled time.
func remaining(j *Job) float64 {
	r := j.Model.remain[j.pos]
	if j.posBlk > 0 {
		// part of the first kernel is done
		g := j.Model.prof.Kernels[j.pos].Versions[j.posVer].Grid
		r -= j.Model.kernNs(j.pos) * float64(j.posBlk) / float64(max(g, 1))
	}
	return r
}

// choose picks the next job: the user over the fairness threshold with the
// largest deficit (its oldest job), else the shortest remaining time.
func (p *srpt) choose() *Job {
	users := map[int]bool{}
	for _, j := range p.jobs {
		users[j.User] = true
	}
	for u := range p.deficit {
		if !users[u] {
			delete(p.deficit, u) // a user without jobs starts afresh
		}
	}
	if len(users) > 1 {
		bu, bd := 0, math.Inf(-1)
		for u := range users {
			if d := p.deficit[u]; d > bd || (d == bd && u < bu) {
				bu, bd = u, d
			}
		}
		if bd > p.s.cfg.FairThreshold {
			for _, j := range p.jobs {
				if j.User == bu {
					return j
				}
			}
		}
	}
	var best *Job
	var br float64
	for _, j := range p.jobs {
		if r := remaining(j); best == nil || r < br {
			best, br = j, r
		}
	}
	return best
}

func (p *srpt) dispatch() {
	for len(p.jobs) > 0 {
		j := p.choose()
		if !p.s.bind(p.l, j) {
			p.jobs = removeJob(p.jobs, j)
			continue
		}
		m := j.Model
		nk := len(m.prog.Kernels)
		to, acc, kernels := j.pos, 0.0, 0
		for to < nk && (kernels == 0 || acc < p.s.cfg.QuantumNs) {
			if m.prog.Kernels[to].Op != 0 {
				kernels++
				acc += m.kernNs(to)
			}
			to++
		}
		users := map[int]bool{}
		for _, o := range p.jobs {
			users[o.User] = true
		}
		if n := float64(len(users)); n > 1 {
			for u := range users {
				if u == j.User {
					p.deficit[u] -= float64(kernels) * (1 - 1/n)
				} else {
					p.deficit[u] += float64(kernels) / n
				}
			}
		}
		p.s.run(p.l, to, lkFast)
		return
	}
}

func (p *srpt) segDone(l *lane, _ bool) {
	j := l.job
	l.job = nil
	if j.pos >= len(j.Model.prog.Kernels) {
		p.jobs = removeJob(p.jobs, j)
		p.s.finish(j)
	}
	p.dispatch()
}

func (p *srpt) drop() []*Job {
	out := notRunning(p.jobs, p.l.job)
	p.jobs = nil
	return out
}

func (p *srpt) close() {}
