package sched

// seq runs one job at a time on one stream: the oldest RT job first, else
// the BE queues in turn; a running job is never preempted (Clockwork-like,
// REEF's SEQ baseline).
type seq struct {
	s    *Scheduler
	l    *lane
	rtQ  fifo
	beQ  []fifo
	turn int
}

func newSeq(s *Scheduler) *seq {
	return &seq{s: s, l: s.lanes[0], beQ: make([]fifo, s.cfg.BEQueues)}
}

func (p *seq) submit(j *Job) {
	if j.Class == RT {
		p.rtQ.push(j)
	} else {
		p.beQ[j.Queue].push(j)
	}
	if p.l.job == nil {
		p.next()
	}
}

func (p *seq) pick() *Job {
	if p.rtQ.len() > 0 {
		return p.rtQ.pop()
	}
	for i := range p.beQ {
		q := &p.beQ[(p.turn+i)%len(p.beQ)]
		if q.len() > 0 {
			p.turn = (p.turn + i + 1) % len(p.beQ)
			return q.pop()
		}
	}
	return nil
}

func (p *seq) next() {
	for p.l.job == nil {
		j := p.pick()
		if j == nil {
			return
		}
		if p.s.bind(p.l, j) {
			p.s.run(p.l, len(j.Model.prog.Kernels), lkFast)
		}
	}
}

func (p *seq) segDone(l *lane, _ bool) {
	j := l.job
	l.job = nil
	p.s.finish(j)
	p.next()
}

func (p *seq) drop() []*Job {
	return drainQueues(&p.rtQ, p.beQ)
}

func (p *seq) close() {}

// conc runs every queue on its own stream, all at once, with no priority:
// the RT queue's jobs one after another on the RT stream, each BE queue's
// on its stream (multi-stream, Triton-like; REEF's GPU-streams baseline).
type conc struct {
	s   *Scheduler
	rtQ fifo
	beQ []fifo
}

func newConc(s *Scheduler) *conc {
	return &conc{s: s, beQ: make([]fifo, s.cfg.BEQueues)}
}

func (p *conc) queue(l *lane) *fifo {
	if l.id == 0 {
		return &p.rtQ
	}
	return &p.beQ[l.id-1]
}

func (p *conc) submit(j *Job) {
	l := p.s.lanes[0]
	if j.Class == RT {
		p.rtQ.push(j)
	} else {
		p.beQ[j.Queue].push(j)
		l = p.s.lanes[1+j.Queue]
	}
	if l.job == nil {
		p.next(l)
	}
}

func (p *conc) next(l *lane) {
	q := p.queue(l)
	for l.job == nil && q.len() > 0 {
		j := q.pop()
		if p.s.bind(l, j) {
			p.s.run(l, len(j.Model.prog.Kernels), lkFast)
		}
	}
}

func (p *conc) segDone(l *lane, _ bool) {
	j := l.job
	l.job = nil
	p.s.finish(j)
	p.next(l)
}

func (p *conc) drop() []*Job {
	return drainQueues(&p.rtQ, p.beQ)
}

func (p *conc) close() {}
