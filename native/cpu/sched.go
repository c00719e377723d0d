package cpu

/*
#include <stdlib.h>
#include "sluice_cpu.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"sluice/native/padsel"
)

// This file is the Go face of the runtime's scheduler support (libml/sched,
// REEF §4-§5): block-range launches, virtual host queues with a device
// window, O(1) host-queue reset, timestamps and dynamic kernel padding.

// NowNs is the monotonic clock (CLOCK_MONOTONIC, ns) of the runtime's
// timestamps.
func NowNs() int64 { return int64(C.sk_now_ns()) }

// GCFreed counts host-queue launches freed by the pool's collector thread
// (queues reset by HQPreempt).
func (p *Pool) GCFreed() int64 { return int64(C.sk_pool_gc_freed(p.p)) }

// SetNice sets the nice value of the pool's unit threads (setpriority on
// each): a higher value than the process's lets the threads that steer
// the units (submission, completion handling) preempt them at once on a
// machine with as many units as cores.
func (p *Pool) SetNice(nice int) error {
	if C.sk_pool_set_nice(p.p, C.int(nice)) != C.SK_OK {
		return fmt.Errorf("cpu: setpriority(units, %d) refused", nice)
	}
	return nil
}

// LaunchRange appends blocks [blk0, blk1) of kernel i of ks (execution
// index idx) on the units in mask (0 = all).
func (s *Stream) LaunchRange(ks *Kernels, i int, idx int64, mask uint64, blk0, blk1 int64) error {
	if i < 0 || i >= ks.n {
		return fmt.Errorf("cpu: launch kernel %d of %d", i, ks.n)
	}
	if C.sk_launch_range(s.s, ks.at(i), C.int64_t(idx), C.uint64_t(mask), C.int64_t(blk0), C.int64_t(blk1)) != C.SK_OK {
		return fmt.Errorf("cpu: launch blocks [%d, %d) of kernel %d: queue full or bad range", blk0, blk1, i)
	}
	return nil
}

// EnableHQ gives the stream a virtual host queue: Push appends launches to
// an unbounded list, and at most window of them (1 <= window < the stream's
// capacity) are outstanding in the stream's ring at a time. Once enabled,
// the stream is driven by Push only (not Run or Launch).
func (s *Stream) EnableHQ(window int) error {
	if C.sk_hq_enable(s.s, C.int(window)) != C.SK_OK {
		return fmt.Errorf("cpu: host queue window %d: want 1..capacity-1", window)
	}
	return nil
}

// SetWindow changes the device window of a host-queue stream.
func (s *Stream) SetWindow(window int) error {
	if C.sk_hq_set_window(s.s, C.int(window)) != C.SK_OK {
		return fmt.Errorf("cpu: host queue window %d: want 1..capacity-1", window)
	}
	return nil
}

// Push appends launches l[from:to] to the stream's host queue and returns
// the sequence number the first one runs under. With mark set, the stream
// records when that first launch starts (MarkNs).
func (s *Stream) Push(l *Launches, from, to int, mark bool) (uint32, error) {
	if from < 0 || to > l.n || from > to {
		return 0, fmt.Errorf("cpu: push launches [%d, %d) of %d", from, to, l.n)
	}
	m := C.int(0)
	if mark {
		m = 1
	}
	r := C.sk_hq_push(s.s, l.at(from), C.int(to-from), m)
	if r < 0 {
		return 0, errors.New("cpu: push: no host queue, bad block range or out of memory")
	}
	return uint32(r), nil
}

// HQPreempt resets the host queue in O(1) (the detached launches are freed
// by the collector thread, off the critical path) and sets the preemption
// flag: queued blocks exit at their prologue, running blocks at their next
// check. It returns the call's time (NowNs). Sync, read ExecIndex, then
// Restore before pushing again.
func (s *Stream) HQPreempt() int64 { return int64(C.sk_hq_preempt(s.s)) }

// HQLen is the number of launches waiting in the host queue.
func (s *Stream) HQLen() int64 { return int64(C.sk_hq_len(s.s)) }

// Outstanding is the number of kernels in the stream's ring (the device
// window) not yet completed.
func (s *Stream) Outstanding() int { return int(C.sk_stream_outstanding(s.s)) }

// MarkNs is when the kernel marked by Push started: its first block was
// claimed (0 = not yet).
func (s *Stream) MarkNs() int64 { return int64(C.sk_stream_mark_ns(s.s)) }

// DrainNs is when the stream last became empty: its last running block
// ended (NowNs clock).
func (s *Stream) DrainNs() int64 { return int64(C.sk_stream_drain_ns(s.s)) }

// IdleNs is when, after HQPreempt, the last block running on the stream
// ended (NowNs clock): from then on no unit works for the stream; its
// queued kernels are dropped lazily, when a unit passes by.
func (s *Stream) IdleNs() int64 { return int64(C.sk_stream_idle_ns(s.s)) }

// Evicted tells where the stream stood when HQPreempt's flag evicted its
// ring: the execution index of the launch in progress (-1: nothing was
// evicted), its first block, its block count, first: the launch's blocks
// [0, first) ran to their end and block first did not (blocks are tracked
// up to 256; first = 256 when those all ran), and end: its blocks from end
// on ran to their end too (claims come from both ends of a kernel), block
// end-1 did not (0 when none is left; grid when the launch has untracked
// blocks). Blocks count from the launch's first.
func (s *Stream) Evicted() (idx, base, grid, first, end int64) {
	var b, g, f, e C.int64_t
	i := C.sk_stream_evicted(s.s, &b, &g, &f, &e)
	return int64(i), int64(b), int64(g), int64(f), int64(e)
}

// SetPriority puts the stream on (or off) the pool's short list of
// streams units serve first (at most 8 per pool).
func (s *Stream) SetPriority(on bool) error {
	v := C.int(0)
	if on {
		v = 1
	}
	if C.sk_stream_set_priority(s.s, v) != C.SK_OK {
		return errors.New("cpu: too many priority streams")
	}
	return nil
}

// SetNotify makes the unit that drains the stream write 1 to the eventfd
// fd (fd < 0: off): a waiter then sleeps in Go's network poller instead
// of a blocking call that holds a P (see NotifyFile).
func (s *Stream) SetNotify(fd int) { C.sk_stream_set_notify(s.s, C.int(fd)) }

// NotifyFile returns a non-blocking eventfd as an *os.File (reads park in
// Go's network poller) and sets it as the stream's drain notification.
// Each drain adds 1; a read returns the count and resets it. Close the
// file after the stream.
func (s *Stream) NotifyFile() (*os.File, error) {
	fd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("cpu: eventfd: %w", errno)
	}
	s.SetNotify(int(fd))
	return os.NewFile(fd, "sk-stream-notify"), nil
}

// CopyKernel makes kernel i of ks a copy of kernel j of src (same
// buffers, grid and tiling; statistics zeroed). The scheduler runs its
// preemptible streams on such copies with more in-loop checks
// (SetChecks).
func (ks *Kernels) CopyKernel(i int, src *Kernels, j int) error {
	if i < 0 || i >= ks.n || j < 0 || j >= src.n {
		return fmt.Errorf("cpu: copy kernel %d of %d to %d of %d", j, src.n, i, ks.n)
	}
	d := ks.at(i)
	*d = *src.at(j)
	d.stat_blocks, d.stat_block_ns, d.stat_runs, d.stat_wall_ns, d.stat_t0 = 0, 0, 0, 0, 0
	return nil
}

// SetChecks asks kernel i to poll its stream's preemption flag about n
// times per block (GEMM and CONV split each block's sgemm into about n
// calls; 0 or 1: the kernel's own spacing; at most 1024). More checks
// stop a preempted block sooner at some cost in kernel time.
func (ks *Kernels) SetChecks(i int, n int) {
	if i >= 0 && i < ks.n {
		C.sk_kernel_set_checks(ks.at(i), C.int64_t(n))
	}
}

// SetCheckWork bounds the work between two of kernel i's in-block checks,
// whatever its profiled times: GEMM and CONV split each block's sgemm so
// that no call does more than flops flops or reads more than bytes bytes
// of its operands, IM2COL writes its columns in pieces of at most bytes
// (<= 0: no bound). It adds to SetChecks' count, never lowers it.
func (ks *Kernels) SetCheckWork(i int, flops, bytes int64) {
	if i >= 0 && i < ks.n {
		C.sk_kernel_set_check_work(ks.at(i), C.int64_t(flops), C.int64_t(bytes))
	}
}

// WorkChecks is the in-block checks kernel i asks of a block computing an
// m x n product over a reduction of kd (SetChecks' count, or more where
// SetCheckWork's bound needs them): what GEMM and CONV split a block's
// sgemm into.
func (ks *Kernels) WorkChecks(i int, m, n, kd int64) int {
	if i < 0 || i >= ks.n {
		return 0
	}
	return int(C.sk_work_checks(ks.at(i), C.int64_t(m), C.int64_t(n), C.int64_t(kd)))
}

// Checks is kernel i's in-block check count (SetChecks).
func (ks *Kernels) Checks(i int) int {
	if i < 0 || i >= ks.n {
		return 0
	}
	return int(ks.at(i).checks)
}

// KernelPtr is the C address of kernel i (padding tables).
func (ks *Kernels) KernelPtr(i int) unsafe.Pointer { return unsafe.Pointer(ks.at(i)) }

// Launches is an array of host-queue launch descriptors in C memory.
type Launches struct {
	base *C.sk_launch_desc
	n    int
}

// NewLaunches allocates n zeroed descriptors.
func NewLaunches(n int) (*Launches, error) {
	if n < 1 {
		n = 1
	}
	p, err := Alloc(n * int(C.sizeof_sk_launch_desc))
	if err != nil {
		return nil, err
	}
	return &Launches{base: (*C.sk_launch_desc)(p), n: n}, nil
}

// Len is the number of descriptors.
func (l *Launches) Len() int { return l.n }

// Free releases the array.
func (l *Launches) Free() {
	if l.base != nil {
		Free(unsafe.Pointer(l.base), l.n*int(C.sizeof_sk_launch_desc))
		l.base = nil
	}
}

func (l *Launches) at(i int) *C.sk_launch_desc {
	return (*C.sk_launch_desc)(unsafe.Add(unsafe.Pointer(l.base), i*int(C.sizeof_sk_launch_desc)))
}

// Launch is one host-queue launch.
type Launch struct {
	// Kernel is kernel K of Kernels; Idx its execution index.
	Kernels *Kernels
	K       int
	Idx     int64
	// Blk0, Blk1 is the block range (Blk1 <= 0: to the end of the grid).
	Blk0, Blk1 int64
	// EstNs, BlkNs and BW are the kernel's estimated time, block time
	// and bandwidth demand (MB/s), read by padding units while it runs;
	// 0 = unknown.
	EstNs, BlkNs, BW int64
	// Mask selects units (0 = all).
	Mask uint64
}

// Set fills descriptor i.
func (l *Launches) Set(i int, d Launch) {
	c := l.at(i)
	c.k = d.Kernels.at(d.K)
	c.idx = C.int64_t(d.Idx)
	c.blk0 = C.int64_t(d.Blk0)
	c.blk1 = C.int64_t(d.Blk1)
	c.est_ns = C.int64_t(d.EstNs)
	c.blk_ns = C.int64_t(d.BlkNs)
	c.bw = C.int64_t(d.BW)
	c.mask = C.uint64_t(d.Mask)
}

// Pad is a dynamic-kernel-padding context (REEF §5): candidates (best-effort
// jobs) whose blocks fill the units an RT stream's kernels leave idle.
type Pad struct {
	p    *C.sk_pad
	cand *C.sk_pad_cand
	cap  int
}

// NewPad allocates a padding context for an RT stream with room for cap
// candidates; budgetMBs is rule 2's bandwidth budget (<= 0: none).
func NewPad(rt *Stream, capacity int, budgetMBs int64) (*Pad, error) {
	if capacity < 1 {
		capacity = 1
	}
	pp, err := Alloc(int(C.sizeof_sk_pad))
	if err != nil {
		return nil, err
	}
	cp, err := Alloc(capacity * int(C.sizeof_sk_pad_cand))
	if err != nil {
		Free(pp, int(C.sizeof_sk_pad))
		return nil, err
	}
	p := &Pad{p: (*C.sk_pad)(pp), cand: (*C.sk_pad_cand)(cp), cap: capacity}
	if rt != nil {
		p.p.rt = rt.s
	}
	p.p.cand = p.cand
	p.p.cap = C.int32_t(capacity)
	p.p.bw_budget = C.int64_t(budgetMBs)
	return p, nil
}

// SetRule1 sets rule 1's margin: a block qualifies when its profiled time
// is below pct percent of the RT kernel's remaining time (100 = REEF's
// rule; <= 0 resets to 100).
func (p *Pad) SetRule1(pct int) { p.p.rule1_pct = C.int64_t(pct) }

// Free releases the context; padding must be stopped.
func (p *Pad) Free() {
	if p.p != nil {
		Free(unsafe.Pointer(p.cand), p.cap*int(C.sizeof_sk_pad_cand))
		Free(unsafe.Pointer(p.p), int(C.sizeof_sk_pad))
		p.p = nil
	}
}

// PadTable is one job's kernels in every version with their profiles, in
// C memory: the tables a padding candidate points to.
type PadTable struct {
	NK, NVer int
	ver      unsafe.Pointer // [nk*nver]*sk_kernel
	blk      unsafe.Pointer // [nk*nver]int64
	kern     unsafe.Pointer
	bw       unsafe.Pointer
}

// NewPadTable allocates tables for nk kernels in nver versions.
func NewPadTable(nk, nver int) (*PadTable, error) {
	n := nk * nver
	if n < 1 || nver > padsel.MaxVersions {
		return nil, fmt.Errorf("cpu: pad table of %d kernels in %d versions (1 to %d versions)", nk, nver, padsel.MaxVersions)
	}
	t := &PadTable{NK: nk, NVer: nver}
	var err error
	for _, f := range []*unsafe.Pointer{&t.ver, &t.blk, &t.kern, &t.bw} {
		if *f, err = Alloc(n * 8); err != nil {
			t.Free()
			return nil, err
		}
	}
	return t, nil
}

// Free releases the tables.
func (t *PadTable) Free() {
	n := t.NK * t.NVer * 8
	for _, f := range []*unsafe.Pointer{&t.ver, &t.blk, &t.kern, &t.bw} {
		Free(*f, n)
		*f = nil
	}
}

// Set fills entry (k, v): the kernel (nil = no such version), its profiled
// block and kernel times (ns) and a block's bandwidth demand (MB/s).
func (t *PadTable) Set(k, v int, kernel unsafe.Pointer, blkNs, kernNs, bwMBs int64) {
	i := k*t.NVer + v
	*(*unsafe.Pointer)(unsafe.Add(t.ver, i*8)) = kernel
	*(*int64)(unsafe.Add(t.blk, i*8)) = blkNs
	*(*int64)(unsafe.Add(t.kern, i*8)) = kernNs
	*(*int64)(unsafe.Add(t.bw, i*8)) = bwMBs
}

// Cursor is where a padding candidate stands: kernel K in version V (-1 =
// not chosen), blocks [0, Next) claimed and [0, Done) completed of Grid.
type Cursor struct {
	K, V             int
	Next, Done, Grid int64
	// Blocks and BlockNs count padding blocks run and their time.
	Blocks, BlockNs int64
}

// SetCand fills candidate slot i with a job's tables (nil: an empty slot)
// and cursor and offers it to the units. A slot may be replaced only while
// no block of it runs: padding stopped, or its cursor past its last
// kernel.
func (p *Pad) SetCand(i int, t *PadTable, cur Cursor) error {
	if i < 0 || i >= p.cap {
		return fmt.Errorf("cpu: pad candidate %d of %d", i, p.cap)
	}
	var c C.sk_pad_cand
	if t != nil {
		c.ver = (**C.sk_kernel)(t.ver)
		c.blk_ns = (*C.int64_t)(t.blk)
		c.kern_ns = (*C.int64_t)(t.kern)
		c.bw = (*C.int64_t)(t.bw)
		c.nk = C.int32_t(t.NK)
		c.nver = C.int32_t(t.NVer)
	}
	c.k, c.v = C.int32_t(cur.K), C.int32_t(cur.V)
	c.next, c.done, c.grid = C.int64_t(cur.Next), C.int64_t(cur.Done), C.int64_t(cur.Grid)
	C.sk_pad_set(p.p, C.int(i), &c)
	return nil
}

// Reset withdraws every candidate; padding must be stopped.
func (p *Pad) Reset() { C.sk_pad_reset(p.p) }

// Cursor reads candidate i's cursor.
func (p *Pad) Cursor(i int) Cursor {
	var c C.sk_pad_cand
	C.sk_pad_get(p.p, C.int(i), &c)
	return Cursor{K: int(c.k), V: int(c.v), Next: int64(c.next), Done: int64(c.done),
		Grid: int64(c.grid), Blocks: int64(c.blocks), BlockNs: int64(c.block_ns)}
}

// PadStats are the selection statistics.
type PadStats struct {
	// Calls and Ns are selections and their total time; MaxNs the
	// longest, Over2us how many took over 2 us (a unit descheduled while
	// selecting counts too).
	Calls, Ns, MaxNs, Over2us int64
	// Rule1 and Rule2 count versions rejected by each rule.
	Rule1, Rule2 int64
}

// Stats reads the statistics.
func (p *Pad) Stats() PadStats {
	return PadStats{
		Calls:   atomic.LoadInt64((*int64)(unsafe.Pointer(&p.p.sel_calls))),
		Ns:      atomic.LoadInt64((*int64)(unsafe.Pointer(&p.p.sel_ns))),
		MaxNs:   atomic.LoadInt64((*int64)(unsafe.Pointer(&p.p.sel_max_ns))),
		Over2us: atomic.LoadInt64((*int64)(unsafe.Pointer(&p.p.sel_over_2us))),
		Rule1:   atomic.LoadInt64((*int64)(unsafe.Pointer(&p.p.rule1_rejects))),
		Rule2:   atomic.LoadInt64((*int64)(unsafe.Pointer(&p.p.rule2_rejects))),
	}
}

// Start makes the pool's units pad the RT stream's kernels.
func (p *Pad) Start(pool *Pool) { C.sk_pad_start(pool.p, p.p) }

// Stop stops padding; it returns once no padding block runs.
func (p *Pad) Stop(pool *Pool) { C.sk_pad_stop(pool.p) }

// Select runs the selection rule alone (tests): for an RT kernel with remNs
// left and rtBW MB/s it claims a block and returns its candidate, kernel,
// version and block, or cand = -1.
func (p *Pad) Select(remNs, rtBW int64) (cand, k, v int, blk int64) {
	var ck, cv C.int32_t
	var cb C.int64_t
	r := C.sk_pad_select(p.p, C.int64_t(remNs), C.int64_t(rtBW), &ck, &cv, &cb)
	return int(r), int(ck), int(cv), int64(cb)
}

// Complete records a block claimed by Select as done.
func (p *Pad) Complete(cand int, ns int64) { C.sk_pad_complete(p.p, C.int(cand), C.int64_t(ns)) }

// Holding a block is a test hook: it lets a test script an interleaving
// ("the RT job arrives while kernel k of the BE job runs") instead of
// hoping a timing produces it. The unit that claims the block a hold names
// takes the hold (it disarms: one block per arming) and waits past the
// block's prologue (the execution index is recorded, the block counts as
// running) and before its body, until the test releases it, the pool
// closes or, with untilFlag, the stream's preemption flag is set (the body
// then stops at its first in-loop check). Held units wait in a futex, off
// the CPU. Unarmed, a hook costs one load per block.

// HoldAt arms a hold on block blk of the stream's launch with execution
// index idx (idx < 0 disarms). The stream's Close lets a held unit go.
func (s *Stream) HoldAt(idx, blk int64, untilFlag bool) {
	if s.s != nil {
		C.sk_stream_hold_at(s.s, C.int64_t(idx), C.int64_t(blk), holdMode(untilFlag))
	}
}

// ReleaseHold lets every unit held on the stream go (a closed stream: a
// no-op).
func (s *Stream) ReleaseHold() {
	if s.s != nil {
		C.sk_stream_hold_release(s.s)
	}
}

// Holds counts the holds the stream's units have taken so far.
func (s *Stream) Holds() int64 { return int64(C.sk_stream_holds(s.s)) }

// Running is the number of the stream's blocks running now, held ones
// included (a block that ran to its end is marked done before it stops
// counting).
func (s *Stream) Running() int { return int(C.sk_stream_running(s.s)) }

// Claims is how many blocks of the stream's current kernel units have
// claimed from its front and from its back (claims come from both ends of a
// kernel of up to 65535 blocks; 0, 0 when no kernel is current).
func (s *Stream) Claims() (front, back int64) {
	var f, b C.int64_t
	C.sk_stream_claims(s.s, &f, &b)
	return int64(f), int64(b)
}

// Holding is the number of units held on the stream now.
func (s *Stream) Holding() int { return int(C.sk_stream_holding(s.s)) }

// StallClaim arms a hook that holds the next unit to read the stream's
// ticket (the next block to claim) before it reads the queue slot the
// ticket names, until StallRelease: a test makes that unit's ticket stale
// while the stream moves on. The stream's Close lets a held unit go.
func (s *Stream) StallClaim() { C.sk_stream_stall_claim(s.s) }

// StallRelease lets the unit StallClaim holds go (or disarms the hook when
// no unit took it yet).
func (s *Stream) StallRelease() { C.sk_stream_stall_release(s.s) }

// Stalled is the number of units StallClaim holds now (0 or 1).
func (s *Stream) Stalled() int { return int(C.sk_stream_stalled(s.s)) }

// StallsDone counts the claims of stalled units that ended after their
// release.
func (s *Stream) StallsDone() int64 { return int64(C.sk_stream_stalls_done(s.s)) }

// StallCount arms a hook that holds the next unit to count a finished
// block of a launch with execution index >= idx, right after the count is
// added and before the unit learns whether it completed the kernel, until
// StallCountRelease: a test lets the kernel complete on another unit and
// its queue slot be reused meanwhile. The stream's Close lets a held unit
// go.
func (s *Stream) StallCount(idx int64) { C.sk_stream_stall_count(s.s, C.int64_t(idx)) }

// StallCountRelease lets the unit StallCount holds go (or disarms the hook
// when no unit took it yet).
func (s *Stream) StallCountRelease() { C.sk_stream_stall_count_release(s.s) }

// CountStalled is the number of units StallCount holds now (0 or 1).
func (s *Stream) CountStalled() int { return int(C.sk_stream_count_stalled(s.s)) }

// CountStallsDone counts the units StallCount held whose count ended after
// their release.
func (s *Stream) CountStallsDone() int64 { return int64(C.sk_stream_count_stalls_done(s.s)) }

// HoldFrom arms a hold on the first block, with an execution index of at
// least idx, that a unit claims on any of the pool's streams not on the
// priority list (SetPriority): a test that cannot reach the stream (an
// appliance's scheduler) holds its best-effort work this way. idx < 0
// disarms.
func (p *Pool) HoldFrom(idx int64, untilFlag bool) {
	C.sk_pool_hold_from(p.p, C.int64_t(idx), holdMode(untilFlag))
}

// ReleaseHold lets every unit held by HoldFrom go.
func (p *Pool) ReleaseHold() { C.sk_pool_hold_release(p.p) }

// Holds counts the holds HoldFrom's arming have taken so far.
func (p *Pool) Holds() int64 { return int64(C.sk_pool_holds(p.p)) }

// Holding is the number of units held by HoldFrom now.
func (p *Pool) Holding() int { return int(C.sk_pool_holding(p.p)) }

func holdMode(untilFlag bool) C.int {
	if untilFlag {
		return 1
	}
	return 0
}
