package sched

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"sluice/libml"
	ncpu "sluice/native/cpu"
)

// laneStream is a lane's stream as the scheduler's core drives it, on
// any device (ARCHITECTURE.md §3): launch a segment, preempt it (host
// queue reset and flag), then, once the lane's drain notification came,
// read how it ended, its execution index and its times. Every method
// runs with the scheduler's lock held, except sync.
type laneStream interface {
	// push launches kernels [j.pos, to) of lane l's job j (the first
	// from its saved block and version) in launches of kind k; the lane's
	// notification is written when they have completed or drained.
	push(l *lane, to int, k launchKind)
	// preempt resets the host queue and sets the flag; it returns the
	// call's time (Now clock).
	preempt() int64
	// sync reports, after the drain notification, whether the segment
	// was preempted, or the device's error.
	sync() (preempted bool, err error)
	// markNs is when the segment's first kernel started (0: none did),
	// drainNs when the segment completed or drained, idleNs when no unit
	// worked for it any more (0: unknown).
	markNs() int64
	drainNs() int64
	idleNs() int64
	// execIndex is the execution index of the last kernel that started
	// (-1: none).
	execIndex() int64
	// evicted is the launch the flag evicted: its kernel (-1: none), the
	// first block it was launched from, its grid, how many of its blocks
	// from base ran to their end and the end of the rest: its blocks from
	// base+end on ran to their end too.
	evicted() (k, base, grid, finished, end int64)
	// restore clears the flag and the execution index.
	restore()
	close()
}

// cpuStream is a lane on the cpu device: a stream of the runtime's pool
// (native/cpu) with its virtual host queue and device window.
type cpuStream struct{ st *ncpu.Stream }

func (c cpuStream) push(l *lane, to int, kind launchKind) {
	j := l.job
	mark := j.KernelStart == 0 || j.idleAt != 0
	in := j.inst
	m := j.Model
	L := in.beL
	rt := kind == lkRT
	switch kind {
	case lkRT:
		L = in.rtL
	case lkPreempt:
		L = in.prL
	}
	c.restore()
	lo, hi := m.live[j.pos], m.live[to]
	var err error
	if lo < hi {
		if j.posBlk > 0 || j.posEnd > 0 || j.posVer > 0 {
			// the first kernel continues in its version from its block
			// (up to its end block)
			scratch := L.Len() - 1
			k := j.pos
			var est, blkNs, bw int64
			if rt {
				vp := &m.prof.Kernels[k].Versions[j.posVer]
				est, blkNs, bw = int64(vp.KernNs), int64(vp.BlockNs), vp.KernBW
			}
			ks := in.ver[j.posVer]
			if kind == lkPreempt && k < len(m.prVer) && j.posVer == m.prVer[k] {
				ks = in.pre // the preemptible copy, with its checks
			}
			L.Set(scratch, ncpu.Launch{Kernels: ks, K: k, Idx: int64(k), Blk0: j.posBlk, Blk1: j.posEnd, EstNs: est, BlkNs: blkNs, BW: bw})
			if _, err = c.st.Push(L, scratch, scratch+1, mark); err == nil {
				_, err = c.st.Push(L, lo+1, hi, false)
			}
		} else {
			_, err = c.st.Push(L, lo, hi, mark)
		}
	}
	if err != nil {
		// a bug: every launch is validated when the tables are built
		panic(fmt.Sprintf("sched: push %s kernels [%d, %d): %v", m.name, j.pos, to, err))
	}
	if lo >= hi {
		// nothing to launch: the segment is over at once
		l.wake()
	}
}

func (c cpuStream) preempt() int64 { return c.st.HQPreempt() }
func (c cpuStream) sync() (bool, error) {
	return c.st.Sync() == ncpu.Preempted, nil
}
func (c cpuStream) markNs() int64                                { return c.st.MarkNs() }
func (c cpuStream) drainNs() int64                               { return c.st.DrainNs() }
func (c cpuStream) idleNs() int64                                { return c.st.IdleNs() }
func (c cpuStream) execIndex() int64                             { return c.st.ExecIndex() }
func (c cpuStream) evicted() (int64, int64, int64, int64, int64) { return c.st.Evicted() }
func (c cpuStream) restore() {
	c.st.Restore()
	c.st.ResetIndex()
}
func (c cpuStream) close() {
	c.st.SetNotify(-1)
	c.st.Close()
}

// segStream is a lane on a segment device (Config.Segments): the lane's
// segments run, one at a time, on the stream of the instance its job is
// bound to, driven by a goroutine of the lane's (libml.SegmentInstance's
// RunSegment returns when the segment has completed or drained). A
// preemption arms nothing of its own: it reaches the instance, which
// Arm made preemptible before the segment was handed over.
type segStream struct {
	l    *lane
	work chan segWork
	// pad, when set (reef's RT lane), gives the suspended jobs its RT
	// segments are padded with
	pad func() []*libml.PadJob

	mu      sync.Mutex
	running libml.SegmentInstance // the instance of the segment handed over (nil: none)
	res     libml.SegmentResult
	err     error
	mark    int64
	drain   int64
	exec    int64
	quit    sync.WaitGroup
}

// segWork is one segment for the lane's goroutine.
type segWork struct {
	inst  libml.SegmentInstance
	batch int
	seg   libml.Segment
	pad   func() []*libml.PadJob
}

// newSegLane makes lane id of a segment device: its goroutine and an
// eventfd for its notifications, as a cpu stream has (the waiter parks
// in Go's poller on it).
func newSegLane(id int) (*lane, error) {
	fd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("sched: lane notification: eventfd: %w", errno)
	}
	l := &lane{id: id, efd: os.NewFile(fd, "sched-lane-notify")}
	ss := &segStream{l: l, work: make(chan segWork, 1), exec: -1}
	l.ds = ss
	ss.quit.Add(1)
	go ss.loop()
	return l, nil
}

// loop runs the lane's segments.
func (ss *segStream) loop() {
	defer ss.quit.Done()
	for w := range ss.work {
		t0 := Now()
		var (
			res libml.SegmentResult
			err error
		)
		if pi, ok := w.inst.(libml.PaddingSegmentInstance); ok && w.pad != nil {
			res, err = pi.RunSegmentPadded(w.batch, w.seg, w.pad)
		} else {
			res, err = w.inst.RunSegment(w.batch, w.seg)
		}
		t1 := Now()
		ss.mu.Lock()
		ss.running = nil
		ss.res, ss.err, ss.drain = res, err, t1
		ss.exec = int64(res.Exec)
		if err == nil && res.Exec >= w.seg.From.Kernel {
			ss.mark = t0
		}
		ss.mu.Unlock()
		ss.notify()
	}
}

// notify writes the lane's drain notification.
func (ss *segStream) notify() { ss.l.wake() }

func (ss *segStream) push(l *lane, to int, kind launchKind) {
	j := l.job
	in := j.inst
	seg := libml.Segment{From: libml.ResumePoint{Kernel: j.pos, Block: int(j.posBlk), Version: j.posVer}, To: to}
	if in.needIn {
		seg.In, seg.Input, in.needIn = j.In, j.Input, false
	}
	if to == len(j.Model.prog.Kernels) {
		seg.Out = j.Out
	}
	ss.mu.Lock()
	ss.res, ss.err, ss.mark, ss.drain, ss.exec = libml.SegmentResult{}, nil, 0, 0, -1
	if j.pos >= to && seg.In == nil && seg.Input == nil && seg.Out == nil {
		// nothing to run: the segment is over at once
		ss.drain = Now()
		ss.mu.Unlock()
		ss.notify()
		return
	}
	ss.running = in.run
	in.run.Arm() // from here a preempt reaches the segment
	ss.mu.Unlock()
	w := segWork{inst: in.run, batch: j.Model.batch, seg: seg}
	if kind == lkRT {
		w.pad = ss.pad
	}
	ss.work <- w
}

func (ss *segStream) preempt() int64 {
	t := Now()
	ss.mu.Lock()
	inst := ss.running
	ss.mu.Unlock()
	if inst != nil {
		if err := inst.Preempt(); err != nil {
			ss.mu.Lock()
			if ss.err == nil {
				ss.err = fmt.Errorf("sched: preempt: %w", err)
			}
			ss.mu.Unlock()
		}
	}
	return t
}

// preemptSegments preempts the segments of lanes ls in one call when
// they are all segment lanes, two or more, and the first running instance
// batches (libml.PreemptBatcher); a failure is each lane's error. It
// reports whether it did. others is scratch (returned for reuse).
func preemptSegments(ls []*lane, others []libml.SegmentInstance) (int64, bool, []libml.SegmentInstance) {
	others = others[:0]
	if len(ls) < 2 {
		return 0, false, others
	}
	var first libml.PreemptBatcher
	for _, l := range ls {
		ss, ok := l.ds.(*segStream)
		if !ok {
			return 0, false, others
		}
		ss.mu.Lock()
		inst := ss.running
		ss.mu.Unlock()
		if inst == nil {
			continue
		}
		if first == nil {
			if first, ok = inst.(libml.PreemptBatcher); !ok {
				return 0, false, others
			}
			continue
		}
		others = append(others, inst)
	}
	t := Now()
	if first == nil {
		return t, true, others // nothing runs: nothing to preempt
	}
	if err := first.PreemptWith(others); err != nil {
		for _, l := range ls {
			ss := l.ds.(*segStream)
			ss.mu.Lock()
			if ss.err == nil {
				ss.err = fmt.Errorf("sched: preempt: %w", err)
			}
			ss.mu.Unlock()
		}
	}
	clear(others) // no instance kept alive by the scratch
	return t, true, others
}

func (ss *segStream) sync() (bool, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.res.Preempted, ss.err
}

func (ss *segStream) markNs() int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mark
}

func (ss *segStream) drainNs() int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.drain
}

// idleNs: the device does not say when its last block ended apart from
// the drain.
func (ss *segStream) idleNs() int64 { return 0 }

func (ss *segStream) execIndex() int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.exec
}

// evicted: a segment device restores from kernels, not blocks.
func (ss *segStream) evicted() (int64, int64, int64, int64, int64) { return -1, 0, 0, 0, 0 }

func (ss *segStream) restore() {
	ss.mu.Lock()
	ss.exec = -1
	ss.mu.Unlock()
}

func (ss *segStream) close() {
	close(ss.work)
	ss.quit.Wait()
}
