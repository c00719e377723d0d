package sched

import (
	"sync"

	"sluice/libml"
	ncpu "sluice/native/cpu"
)

// padder is reef's dynamic kernel padding (REEF §5) on a device: the
// suspended BE jobs of RT mode are offered to it, it runs their blocks
// beside RT kernels on the units those leave idle, and reef reads back
// where each job got to (a cursor). Every method runs with the
// scheduler's lock held.
type padder interface {
	// reset withdraws every offer (RT mode starts).
	reset()
	// start and stop let padding run and stop it (on the cpu its units
	// pad between RT segments too).
	start()
	stop()
	// offer offers BE lane i's job j from its current position (false:
	// the job cannot pad now); withdraw takes lane i's offer back.
	offer(i int, j *Job) bool
	withdraw(i int)
	// cursor is where lane i's offered job got to, and what padding ran
	// of it since the offer. Read it while no RT segment runs.
	cursor(i int) ncpu.Cursor
	// stats are the selector's statistics (zero where not measured).
	stats() ncpu.PadStats
	free()
}

// cpuPadder is padding on the cpu device: the runtime's units pick BE
// blocks themselves when an RT kernel leaves them idle (native/cpu's
// Pad).
type cpuPadder struct {
	p    *ncpu.Pad
	pool *ncpu.Pool
	n    int // candidate slots (BE lanes)
}

func (c cpuPadder) reset() {
	c.p.Reset()
	for i := 0; i < c.n; i++ {
		c.withdraw(i)
	}
}
func (c cpuPadder) start() { c.p.Start(c.pool) }
func (c cpuPadder) stop()  { c.p.Stop(c.pool) }
func (c cpuPadder) offer(i int, j *Job) bool {
	cur := ncpu.Cursor{K: j.pos, V: -1}
	if j.posBlk > 0 {
		cur.V, cur.Next, cur.Done = j.posVer, j.posBlk, j.posBlk
		cur.Grid = j.Model.prof.Kernels[j.pos].Versions[j.posVer].Grid
	}
	c.p.SetCand(i, j.inst.pad, cur)
	return true
}
func (c cpuPadder) withdraw(i int)           { c.p.SetCand(i, nil, ncpu.Cursor{V: -1}) }
func (c cpuPadder) cursor(i int) ncpu.Cursor { return c.p.Cursor(i) }
func (c cpuPadder) stats() ncpu.PadStats     { return c.p.Stats() }
func (c cpuPadder) free()                    { c.p.Free() }

// segPadder is padding on a segment device: the RT lane's segments run
// padded (libml.PaddingSegmentInstance), and before each RT kernel the
// device asks for the offered jobs (candidates, on the RT lane's
// goroutine). The device advances each job's PadJob; reef reads it back
// once the RT segment has ended.
type segPadder struct {
	mu    sync.Mutex
	slots []libml.PadJob
	on    []bool
	// cands is candidates' result, reused: only the RT lane's goroutine
	// calls it, one segment at a time
	cands []*libml.PadJob
}

func newSegPadder(n int) *segPadder {
	return &segPadder{slots: make([]libml.PadJob, n), on: make([]bool, n)}
}

// candidates are the offered jobs, in lane order (the device's
// callback).
func (sp *segPadder) candidates() []*libml.PadJob {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.cands = sp.cands[:0]
	for i := range sp.slots {
		if sp.on[i] {
			sp.cands = append(sp.cands, &sp.slots[i])
		}
	}
	return sp.cands
}

func (sp *segPadder) reset() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i := range sp.on {
		sp.on[i] = false
	}
}
func (sp *segPadder) start() {}
func (sp *segPadder) stop()  {}

// offer: a job whose input is not on the device yet (it is written with
// the job's next segment of its own; reef runs an empty one first) cannot
// pad.
func (sp *segPadder) offer(i int, j *Job) bool {
	if j.inst.needIn {
		return false
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.slots[i] = libml.PadJob{Inst: j.inst.run, Batch: j.Model.batch,
		At: libml.ResumePoint{Kernel: j.pos, Block: int(j.posBlk), Version: j.posVer}}
	sp.on[i] = true
	return true
}

func (sp *segPadder) withdraw(i int) {
	sp.mu.Lock()
	sp.on[i] = false
	sp.mu.Unlock()
}

// cursor: the device has moved At past whole kernels already (a kernel
// whose blocks all ran is the next one's Block 0); Blocks counts since
// the offer.
func (sp *segPadder) cursor(i int) ncpu.Cursor {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	pj := &sp.slots[i]
	cur := ncpu.Cursor{K: pj.At.Kernel, V: -1, Blocks: pj.Blocks}
	if pj.At.Block > 0 {
		cur.V, cur.Done, cur.Next = pj.At.Version, int64(pj.At.Block), int64(pj.At.Block)
		cur.Grid = cur.Done + 1 // not done: the device moves a done kernel on
	}
	return cur
}

func (sp *segPadder) stats() ncpu.PadStats { return ncpu.PadStats{} }
func (sp *segPadder) free()                {}
