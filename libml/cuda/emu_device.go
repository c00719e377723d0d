//go:build linux && cgo

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"sluice/libml/cuda/internal/emu"
)

// The backend on the kernel emulator (Options.Emulate; the appliance's
// `cuda = "emu"`): emuDev implements the backend's device interface with
// internal/emu, which runs the real kernel sources (native/cuda/*.cu
// compiled as C++) block by block on the CPU. Streams are asynchronous,
// as on a GPU: each has a goroutine that runs its queue in order, so the
// host queue, the device window, preemption from another goroutine and
// the drain run for real. "Device memory" is host memory, and a
// registered host region is addressed by its host pointer. The emulator
// says nothing about a GPU's speed: it exists so that the whole CUDA
// path (plans, launches, preemption, padding, the batch gather) runs and
// is tested on machines without one.

// emuHooks is the state an emulated device and its partitions share:
// allocations (for leak checks), the launch log and the test hooks.
type emuHooks struct {
	mu    sync.Mutex
	live  map[uint64]int
	parts int
	regs  map[uintptr]int
	// preempt arms a preemption in the next launch of the kernel with
	// that execution index: the emulator sets the launch's flag before
	// block PreemptBlock starts or after it passed PreemptAfterSyncs
	// barriers (one-shot).
	preempt map[int64]emu.Options
	// before runs in the stream's goroutine before each kernel starts;
	// onLaunch too, told the stream (disb_script_test.go holds one
	// instance's kernel until another's event).
	before   func(kernel string, exec int64)
	onLaunch func(s *emuStream, kernel string, exec int64)
	log      []emuLaunch
	// record turns the launch log on (tests read it with launches).
	record bool
	// occ is every kernel's occupancy (blocks per SM; 0: 2), padReverse
	// runs sg_pad's blocks last to first (pad_emu_test.go).
	occ        int
	padReverse bool
	// holdFrom, when >= 0, holds the next kernel launched with an
	// execution index of at least holdFrom until its stream's preemption
	// flag is set or the test releases it (one-shot, Backend.HoldFrom,
	// ReleaseHolds); holds counts the holds, releases the releases.
	holdFrom int64
	holds    int64
	releases atomic.Int64
}

// emuLaunch is one kernel the emulator ran.
type emuLaunch struct {
	kernel string
	exec   int64
	grid   int
	sms    int
}

// emuDev is the emulated device, or a partition of it (green contexts).
type emuDev struct {
	h     *emuHooks
	sms   int
	green bool
	part  bool
}

// DefaultEmuSMs is the SM count of an emulated device (Options.EmuSMs).
const DefaultEmuSMs = 8

// errEmuSMs is the error of an emulated device of a bad SM count.
var errEmuSMs = errors.New("emulated SMs outside 1..1024")

// openEmulator is the kernel emulator as the backend's device: sms SMs
// (0: DefaultEmuSMs), partitionable into green contexts, no launch log.
func openEmulator(sms int) (gpuCtx, error) {
	if sms == 0 {
		sms = DefaultEmuSMs
	}
	if sms < 1 || sms > 1024 {
		return nil, fmt.Errorf("cuda: %d %w", sms, errEmuSMs)
	}
	d := newEmuDevice(sms, true, false)
	// The emulator runs a launch's blocks one after another. Run in
	// order, sg_pad's first blocks (the RT kernel's SMs) would finish
	// the RT kernel before a BE block ran, and padding would do nothing;
	// last to first, the BE blocks on the SMs the RT kernel leaves free
	// run while it still has work, as they run beside it on a GPU.
	d.h.padReverse = true
	return d, nil
}

// newEmuDevice is an emulated device of sms SMs that can be partitioned
// (green) or not; record turns its launch log on (tests).
func newEmuDevice(sms int, green, record bool) *emuDev {
	return &emuDev{h: &emuHooks{live: map[uint64]int{}, regs: map[uintptr]int{}, preempt: map[int64]emu.Options{}, record: record, holdFrom: -1},
		sms: sms, green: green}
}

func (d *emuDev) SMs() int    { return d.sms }
func (d *emuDev) Green() bool { return d.green && !d.part }

func (d *emuDev) Alloc(n int) (uint64, error) {
	if n < 0 || n > 1<<34 {
		return 0, fmt.Errorf("emu: alloc %d bytes", n)
	}
	p := emu.Alloc(n)
	d.h.mu.Lock()
	d.h.live[p] = n
	d.h.mu.Unlock()
	return p, nil
}

func (d *emuDev) Free(p uint64) error {
	d.h.mu.Lock()
	_, ok := d.h.live[p]
	delete(d.h.live, p)
	d.h.mu.Unlock()
	if !ok {
		return fmt.Errorf("emu: free of %#x: not allocated", p)
	}
	emu.Free(p)
	return nil
}

func (d *emuDev) check(p uint64, n int) error {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	for a, sz := range d.h.live {
		if p >= a && p+uint64(n) <= a+uint64(sz) {
			return nil
		}
	}
	return fmt.Errorf("emu: %d bytes at %#x outside every allocation", n, p)
}

func (d *emuDev) Write(dst uint64, b []byte) error {
	if err := d.check(dst, len(b)); err != nil {
		return err
	}
	emu.Write(dst, b)
	return nil
}

func (d *emuDev) Read(b []byte, src uint64) error {
	if err := d.check(src, len(b)); err != nil {
		return err
	}
	emu.Read(b, src)
	return nil
}

func (d *emuDev) HostAlloc(n int) (pinned, error) {
	p, err := d.Alloc(n)
	if err != nil {
		return nil, err
	}
	return &emuPinned{d: d, p: p, n: n}, nil
}

func (d *emuDev) NewStream(prio int) (gpuStream, error) {
	s := &emuStream{d: d, prio: prio, ops: make(chan func() error, 1<<12)}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s, nil
}

func (d *emuDev) NewEvent() (gpuEvent, error) {
	e := &emuEvent{}
	e.cond = sync.NewCond(&e.mu)
	return e, nil
}

// SMGroups: the emulator cuts its SMs in pairs, as the fake driver.
func (d *emuDev) SMGroups() (int, int, error) {
	if !d.Green() {
		return 0, 0, ErrNoGreen
	}
	return d.sms / 2, 2, nil
}

func (d *emuDev) Partition(first, sms int) (gpuCtx, error) {
	if !d.Green() {
		return nil, ErrNoGreen
	}
	if sms < 1 || first < 0 || first%2 != 0 || first+sms > d.sms {
		return nil, fmt.Errorf("emu: partition of SMs %d..%d of %d", first, first+sms-1, d.sms)
	}
	d.h.mu.Lock()
	d.h.parts++
	d.h.mu.Unlock()
	return &emuDev{h: d.h, sms: (sms + 1) / 2 * 2, part: true}, nil // rounded up to 2, like the fake driver
}

func (d *emuDev) RegisterHost(p unsafe.Pointer, n int) (uint64, error) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	d.h.regs[uintptr(p)] = n
	return uint64(uintptr(p)), nil
}

func (d *emuDev) UnregisterHost(p unsafe.Pointer) error {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	if _, ok := d.h.regs[uintptr(p)]; !ok {
		return errors.New("emu: unregister of an unregistered region")
	}
	delete(d.h.regs, uintptr(p))
	return nil
}

func (d *emuDev) Close() error {
	if d.part {
		d.h.mu.Lock()
		d.h.parts--
		d.h.mu.Unlock()
	}
	return nil
}

// emuStream runs its queue in a goroutine of its own.
type emuStream struct {
	d    *emuDev
	prio int // the priority it was made with (the emulator does not order streams by it)
	ops  chan func() error

	mu       sync.Mutex
	cond     *sync.Cond
	pending  int
	err      error
	inflight int // kernels queued or running
	maxIn    int
	syncs    int // Sync calls
}

func (s *emuStream) loop() {
	for op := range s.ops {
		err := op()
		s.mu.Lock()
		if err != nil && s.err == nil {
			s.err = err
		}
		s.pending--
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

func (s *emuStream) enqueue(op func() error) error {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.pending++
	s.mu.Unlock()
	s.ops <- op
	return nil
}

func (s *emuStream) Launch(kernel string, grid int, params []byte) error {
	if grid < 1 || len(params) < 16 {
		return fmt.Errorf("emu: launch %s: grid %d, %d parameter bytes", kernel, grid, len(params))
	}
	params = append([]byte(nil), params...)
	exec := int64(binary.LittleEndian.Uint64(params[8:]))
	s.mu.Lock()
	s.inflight++
	s.maxIn = max(s.maxIn, s.inflight)
	s.mu.Unlock()
	return s.enqueue(func() error {
		h := s.d.h
		opt := emu.Options{SMs: s.d.sms}
		h.mu.Lock()
		if o, ok := h.preempt[exec]; ok && kernel != KernelBatchGather {
			delete(h.preempt, exec)
			o.SMs = s.d.sms
			opt = o
		}
		if kernel == KernelPad && h.padReverse {
			opt.Reverse = true
		}
		before, on := h.before, h.onLaunch
		hold := h.holdFrom >= 0 && exec >= h.holdFrom && kernel != KernelBatchGather && kernel != KernelPad
		rel := h.releases.Load()
		if hold {
			h.holdFrom = -1
			h.holds++
		}
		if h.record {
			h.log = append(h.log, emuLaunch{kernel: kernel, exec: exec, grid: grid, sms: s.d.sms})
		}
		h.mu.Unlock()
		if before != nil {
			before(kernel, exec)
		}
		if on != nil {
			on(s, kernel, exec)
		}
		if hold {
			h.waitHeld(binary.LittleEndian.Uint64(params[0:]), rel)
		}
		err := emu.Launch(kernel, grid, Threads, params, opt)
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
		return err
	})
}

func (s *emuStream) WriteAsync(dst uint64, src pinned, off, n int) error {
	p := src.(*emuPinned)
	if off < 0 || n < 0 || off+n > p.n {
		return fmt.Errorf("emu: async write of [%d, %d) from a %d-byte buffer", off, off+n, p.n)
	}
	if err := s.d.check(dst, n); err != nil {
		return err
	}
	return s.enqueue(func() error {
		b := make([]byte, n)
		emu.Read(b, p.p+uint64(off))
		emu.Write(dst, b)
		return nil
	})
}

func (s *emuStream) ReadAsync(dst pinned, off int, src uint64, n int) error {
	p := dst.(*emuPinned)
	if off < 0 || n < 0 || off+n > p.n {
		return fmt.Errorf("emu: async read into [%d, %d) of a %d-byte buffer", off, off+n, p.n)
	}
	if err := s.d.check(src, n); err != nil {
		return err
	}
	return s.enqueue(func() error {
		b := make([]byte, n)
		emu.Read(b, src)
		emu.Write(p.p+uint64(off), b)
		return nil
	})
}

func (s *emuStream) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs++
	for s.pending > 0 {
		s.cond.Wait()
	}
	return s.err
}

func (s *emuStream) Close() error {
	err := s.Sync()
	close(s.ops)
	return err
}

type emuEvent struct {
	mu             sync.Mutex
	cond           *sync.Cond
	recorded, done uint64
}

func (e *emuEvent) Record(s gpuStream) error {
	e.mu.Lock()
	e.recorded++
	gen := e.recorded
	e.mu.Unlock()
	return s.(*emuStream).enqueue(func() error {
		e.mu.Lock()
		e.done = max(e.done, gen)
		e.cond.Broadcast()
		e.mu.Unlock()
		return nil
	})
}

func (e *emuEvent) Sync() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.done < e.recorded {
		e.cond.Wait()
	}
	return nil
}

func (e *emuEvent) Close() error { return nil }

type emuPinned struct {
	d *emuDev
	p uint64
	n int
}

func (p *emuPinned) Dev() uint64 { return p.p }
func (p *emuPinned) Put(off int, b []byte) {
	if off < 0 || off+len(b) > p.n {
		panic(fmt.Sprintf("emu: put [%d, %d) into %d bytes", off, off+len(b), p.n))
	}
	emu.Write(p.p+uint64(off), b)
}
func (p *emuPinned) Get(off int, b []byte) {
	if off < 0 || off+len(b) > p.n {
		panic(fmt.Sprintf("emu: get [%d, %d) of %d bytes", off, off+len(b), p.n))
	}
	emu.Read(b, p.p+uint64(off))
}
func (p *emuPinned) Free() error { return p.d.Free(p.p) }

// occupancy is the emulated device's occupancy, which its kernel
// profiles (ProfileKernels) record: a test's setting (emuHooks.occ), 2
// by default. The emulator has no occupancy of its own.
func (d *emuDev) occupancy(kernel string) (int, error) {
	if !slices.Contains(KernelNames(), kernel) {
		return 0, fmt.Errorf("emu: no kernel %s", kernel)
	}
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	if d.h.occ > 0 {
		return d.h.occ, nil
	}
	return 2, nil
}

// waitHeld waits until the preemption flag of the stream state at st is
// set, or the test has released held launches (ReleaseHolds) since the
// hold began (rel: the releases then): a held launch, Backend.HoldFrom.
func (h *emuHooks) waitHeld(st uint64, rel int64) {
	var f [4]byte
	for h.releases.Load() == rel {
		emu.Read(f[:], st+StateFlag)
		if binary.LittleEndian.Uint32(f[:]) != 0 {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// HoldFrom scripts a preemption on the kernel emulator (Options.Emulate;
// tests and demos): the next kernel launched with an execution index of
// at least exec, on any stream, is held before its blocks run until its
// stream's preemption flag is set (or ReleaseHolds), so the run it
// belongs to is certain to be preempted there. Holds counts the launches held so far. exec < 0
// disarms a hold not yet reached.
func (b *Backend) HoldFrom(exec int64) error {
	h, err := b.emuHooks()
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.holdFrom = exec
	h.mu.Unlock()
	return nil
}

// ReleaseHolds lets a launch HoldFrom holds run without a preemption (a
// test holds an RT job's kernel so that RT mode lasts until the case it
// checks has happened).
func (b *Backend) ReleaseHolds() error {
	h, err := b.emuHooks()
	if err != nil {
		return err
	}
	h.releases.Add(1)
	return nil
}

// Holds is the number of launches HoldFrom has held (0 off the emulator).
func (b *Backend) Holds() int64 {
	h, err := b.emuHooks()
	if err != nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holds
}

// emuHooks are the hooks of the emulated device the backend runs on.
func (b *Backend) emuHooks() (*emuHooks, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.dev.(*emuDev)
	if !ok {
		return nil, errors.New("cuda: not on the kernel emulator")
	}
	return d.h, nil
}
