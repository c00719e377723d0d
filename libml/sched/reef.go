package sched

import (
	"fmt"

	ncpu "sluice/native/cpu"
)

// reef is REEF's policy (§3-§5): one RT queue served one job at a time on
// the RT stream, BE queues each on its own stream. Normal mode runs the BE
// streams concurrently. An RT arrival switches to RT mode: every running
// BE stream is preempted (host queue reset, flag), the RT job starts at
// once, and while its kernels leave units idle the units pad them with
// blocks of the suspended BE jobs. When the RT queue is empty the
// scheduler returns to normal mode and restores the BE jobs.
type reef struct {
	s      *Scheduler
	rt     *lane
	be     []*lane
	rtQ    fifo
	beQ    []fifo
	rtMode bool
	pad    padder // nil without padding
	padOn  bool
	offer  []bool // BE lane i's job is offered to padding
	rec    *preemptRec
	ls     []*lane // preemptBE's lanes (kept: no allocation per RT mode)
	// guard is padding's online back-off (nil without it); padWanted
	// says the guard let this RT mode pad, padUsed that BE work was
	// offered while the running RT job ran
	guard     *padGuard
	padWanted bool
	padUsed   bool
}

func newReef(s *Scheduler) (*reef, error) {
	r := &reef{s: s, rt: s.lanes[0], be: s.lanes[1:], beQ: make([]fifo, s.cfg.BEQueues)}
	// units take RT blocks before anything else (and before dropping the
	// queues of the BE streams they preempted)
	if r.rt.st != nil {
		if err := r.rt.st.SetPriority(true); err != nil {
			return nil, err
		}
	}
	r.offer = make([]bool, len(r.be))
	if !s.cfg.NoPadding && s.cfg.PadBackoffTol >= 0 {
		r.guard = newPadGuard(s.cfg.PadBackoffTol, s.cfg.PadBackoffJobs)
	}
	switch {
	case s.cfg.NoPadding:
	case s.cfg.Segments != nil:
		// the RT lane's segments run padded with the offered jobs
		sp := newSegPadder(len(r.be))
		r.rt.ds.(*segStream).pad = sp.candidates
		r.pad = sp
	default:
		// the units have one padding slot: one padding scheduler each
		if err := s.dev.ClaimPadding(s); err != nil {
			return nil, fmt.Errorf("sched: reef padding: %w", err)
		}
		p, err := ncpu.NewPad(r.rt.st, len(r.be), s.bw)
		if err != nil {
			return nil, err
		}
		p.SetRule1(int(s.cfg.PadMargin * 100))
		r.pad = cpuPadder{p: p, pool: s.pool, n: len(r.be)}
	}
	return r, nil
}

func (r *reef) submit(j *Job) {
	if j.Class == RT {
		r.rtQ.push(j)
		if r.rtMode {
			if !r.rt.busy && r.rt.job == nil {
				r.startRT()
			}
			return
		}
		// the RT job is bound (instance, input copy) before the BE streams
		// are preempted and launched right after: the preemption's
		// critical path holds only the preempt calls and the launch, and
		// padding is set up once the RT job runs (on a machine with as
		// many units as cores, the steering thread's time after the
		// preempt call is a unit's time). A job whose model has no free
		// instance (one is built: milliseconds) binds after the preempt.
		ready := !r.rt.busy && r.rt.job == nil && r.rtQ.len() == 1 && j.Model.hasFree() && r.bindRT()
		r.enterRT()
		if ready {
			r.padUsed = false
			r.s.run(r.rt, len(r.rt.job.Model.prog.Kernels), rtKind(r.pad != nil))
		} else if !r.rt.busy && r.rt.job == nil {
			r.startRT()
		}
		if !r.rt.busy {
			// no RT job could start (each failed to bind): back to
			// normal mode at once
			r.exitRT()
			return
		}
		r.startPad(r.rt.job.Model)
		return
	}
	r.beQ[j.Queue].push(j)
	l := r.be[j.Queue]
	if l.job == nil {
		r.next(l)
	}
}

// next binds the next job of BE lane l's queue and starts it (normal mode)
// or offers it to padding (RT mode).
func (r *reef) next(l *lane) {
	q := &r.beQ[l.id-1]
	for l.job == nil && q.len() > 0 {
		r.s.bind(l, q.pop())
	}
	if l.job == nil {
		return
	}
	if !r.rtMode {
		r.s.run(l, len(l.job.Model.prog.Kernels), lkPreempt)
	} else {
		r.offerPad(l)
	}
}

// enterRT switches to RT mode: every running BE stream is preempted.
func (r *reef) enterRT() {
	r.rtMode = true
	r.s.stats.ModeSwitches++
	r.rec = r.preemptBE()
}

// preemptBE preempts every running BE stream not preempted yet; the
// returned record (nil: none was running) waits for their drains.
func (r *reef) preemptBE() *preemptRec {
	r.ls = r.ls[:0]
	for _, l := range r.be {
		if l.busy && !l.preempted {
			r.ls = append(r.ls, l)
		}
	}
	if len(r.ls) == 0 {
		return nil
	}
	rec := &preemptRec{t0: r.s.preemptLanes(r.ls), waiting: len(r.ls)}
	for _, l := range r.ls {
		l.rec = rec
	}
	return rec
}

// startPad starts padding for an RT mode just entered (its first RT job
// of model m): the suspended BE jobs are offered, unless the guard has
// padding off for m.
func (r *reef) startPad(m *Model) {
	if r.pad == nil {
		r.padWanted = false
		return
	}
	// no offer of an earlier mode survives, padded or not: on a
	// segment device the RT lane's segments read the padder's slots
	r.pad.reset()
	for i := range r.be {
		r.offer[i] = false
	}
	r.padWanted = r.guard.allow(m)
	if r.padWanted {
		for _, l := range r.be {
			if l.job != nil && !l.busy {
				r.offerPad(l)
			}
		}
		r.pad.start()
		r.padOn = true
	}
	r.padUsed = r.anyOffer()
}

// startRT starts the next RT job on the RT stream.
func (r *reef) startRT() {
	if r.bindRT() {
		// BE jobs still offered pad this job's kernels too
		r.padUsed = r.anyOffer()
		r.s.run(r.rt, len(r.rt.job.Model.prog.Kernels), rtKind(r.pad != nil))
	}
}

// bindRT binds the next RT job to the RT stream without launching it;
// false when the queue has none (jobs that fail to bind finish with
// their error).
func (r *reef) bindRT() bool {
	for r.rtQ.len() > 0 {
		if r.s.bind(r.rt, r.rtQ.pop()) {
			return true
		}
	}
	return false
}

// exitRT returns to normal mode: padding stops, finished BE jobs complete
// and the others are restored.
func (r *reef) exitRT() {
	r.rtMode = false
	r.collectPad(true)
	r.padWanted = false
	for _, l := range r.be {
		if l.busy {
			continue // still draining: restored when its waiter reports
		}
		if l.job == nil {
			r.next(l)
		} else {
			r.s.run(l, len(l.job.Model.prog.Kernels), lkPreempt)
		}
	}
}

func (r *reef) segDone(l *lane, preempted bool) {
	s := r.s
	if l == r.rt {
		j := l.job
		l.job = nil
		if j.Err == nil && j.KernelStart > 0 && j.KernelEnd > j.KernelStart &&
			r.guard.observe(j.Model, r.padWanted && r.padUsed, float64(j.KernelEnd-j.KernelStart)) {
			s.stats.PadBackoffs++
		}
		s.finish(j)
		if rec := r.rec; rec != nil && !rec.rtDone {
			rec.rtStart = j.KernelStart
			rec.rtDone = true
			s.finalize(rec)
			r.rec = nil
		}
		if r.rtQ.len() > 0 {
			r.collectPad(false)
			r.startRT()
		} else {
			r.exitRT()
		}
		return
	}
	if l.upload {
		l.upload = false
		if !preempted || !l.preempted {
			// the job's input is on the device: now padding may run it
			if r.rtMode {
				r.offerPad(l)
			} else {
				s.run(l, len(l.job.Model.prog.Kernels), lkPreempt)
			}
			return
		}
		// preempted by an RT arrival while uploading: the input is
		// written all the same (a segment writes it before its first
		// kernel); restored below like any preempted segment
	}
	if preempted && l.preempted {
		s.restorePoint(l)
		if rec := l.rec; rec != nil {
			idle := l.ds.idleNs()
			if idle == 0 {
				idle = l.ds.drainNs()
			}
			rec.drain = max(rec.drain, idle)
			rec.waiting--
			l.rec = nil
			s.finalize(rec)
		}
		if !r.rtMode {
			s.run(l, len(l.job.Model.prog.Kernels), lkPreempt)
		} else {
			r.offerPad(l)
		}
		return
	}
	j := l.job
	l.job = nil
	s.finish(j)
	r.next(l)
}

// anyOffer reports whether some BE lane's job is offered to padding.
func (r *reef) anyOffer() bool {
	for _, on := range r.offer {
		if on {
			return true
		}
	}
	return false
}

// offerPad offers BE lane l's job to padding (l is idle), when this RT
// mode pads. On a segment
// device a job whose input is not on the device yet (it arrived in RT
// mode, so no segment of its own has run) first gets an empty segment
// that writes its input (a copy, or the device's gather of the payload:
// no kernel of the model runs), and is offered when that is done; else
// padding could not run it until RT mode ends.
func (r *reef) offerPad(l *lane) {
	if r.pad == nil || l.job == nil || !r.padWanted {
		return
	}
	if in := l.job.inst; in != nil && in.needIn {
		l.upload = true
		r.s.run(l, l.job.pos, lkPreempt)
		return
	}
	i := l.id - 1
	r.offer[i] = r.pad.offer(i, l.job)
	r.padUsed = r.padUsed || r.offer[i]
}

// collectPad reads the padding cursors back into the jobs: with stop,
// padding ends first; without, only jobs that padding finished are
// collected (their candidates are idle) and their lanes' next jobs
// offered.
func (r *reef) collectPad(stop bool) {
	if r.pad == nil || !r.padOn {
		return
	}
	if stop {
		r.pad.stop()
		r.padOn = false
		// every offer is read back below: none outlives the mode
		defer r.pad.reset()
	}
	for i, l := range r.be {
		if !r.offer[i] || l.job == nil {
			continue
		}
		cur := r.pad.cursor(i)
		j := l.job
		nk := len(j.Model.prog.Kernels)
		finished := cur.K >= nk
		if !finished && !stop {
			continue // still padding
		}
		r.offer[i] = false
		r.s.stats.PadBlocks += cur.Blocks
		r.s.stats.PadNs += cur.BlockNs
		j.PadBlocks += cur.Blocks
		if !finished {
			// padding stopped inside the job: it continues from there
			switch {
			case cur.V < 0:
				j.resumeAt(cur.K, 0, 0, 0)
			case cur.Done >= cur.Grid:
				j.resumeAt(cur.K+1, 0, 0, 0)
			case cur.Done == 0:
				j.resumeAt(cur.K, 0, 0, 0)
			default:
				j.resumeAt(cur.K, cur.V, cur.Done, 0)
			}
			if j.pos < nk {
				continue // restored by exitRT
			}
		}
		if j.inst != nil && !j.inst.outputOnHost() {
			// the output is still on the device: a last, empty segment
			// reads it (now, or when exitRT restores)
			j.resumeAt(nk, 0, 0, 0)
			r.offer[i] = false
			r.pad.withdraw(i)
			r.s.stats.PadJobs++
			if !stop {
				r.s.run(l, nk, lkPreempt)
			}
			continue
		}
		l.job = nil
		r.s.stats.PadJobs++
		r.s.finish(j)
		if !stop {
			r.pad.withdraw(i)
			r.next(l)
		}
	}
}

func (r *reef) drop() []*Job {
	out := drainQueues(&r.rtQ, r.beQ)
	if r.pad != nil && r.padOn {
		r.pad.stop()
		r.padOn = false
	}
	return out
}

func (r *reef) close() {
	if r.pad != nil {
		r.pad.free()
		r.pad = nil
	}
}

// PreemptRestore preempts every running BE job and restores each as soon
// as its stream has drained (policy reef, normal mode; other policies and
// RT mode: no-op). It is a probe of the preemption and restore mechanisms
// (tools/disb measures restore overhead with it; an operator can use it
// to check the mechanism on a live appliance). It returns the number of
// jobs preempted; their preemption latencies (preempt call to drained)
// land in Stats.PreemptNs.
func (s *Scheduler) PreemptRestore() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.pol.(*reef)
	if !ok || r.rtMode || s.closed {
		return 0
	}
	rec := r.preemptBE()
	if rec == nil {
		return 0
	}
	// no RT job: the latency ends with the drains
	rec.rtStart, rec.rtDone = rec.t0, true
	return rec.waiting
}

// rtKind is the RT stream's launch kind: with padding, RT kernels carry
// the estimates padding reads.
func rtKind(padding bool) launchKind {
	if padding {
		return lkRT
	}
	return lkFast
}
