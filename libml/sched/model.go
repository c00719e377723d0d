package sched

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"unsafe"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/kprof"
	ncpu "sluice/native/cpu"
	"sluice/native/padsel"
)

// ModelOptions configure Scheduler.Load.
type ModelOptions struct {
	// Batch is the batch size every job of the model runs at (default 1).
	Batch int
	// MemoryLimit caps the bytes the model takes (engine.Options.
	// MemoryLimit); 0: Config.ModelMemoryLimit.
	MemoryLimit int64
	// Versions are the tilings of the multi-version kernels (REEF §5.3):
	// each entry is the unit count a version's kernels are tiled for.
	// Version 0 is always the pool's unit count (the fastest kernels, the
	// ones jobs run); the others feed padding and reef's preemptible BE
	// runs (Config.PreemptSlack). Default: {units, 4*units, 16*units, 1}.
	// Dominated versions are pruned (for padding) after profiling.
	Versions []int
	// Profile gives measured kernel profiles (tools/kprof); nil profiles
	// the model at load time with ProfileRuns runs.
	Profile     *kprof.Model
	ProfileRuns int
	// Idem gives idempotent groups computed by tools/idemcheck; nil uses
	// the compiler's static analysis (engine.Program.IdemEntry).
	Idem *IdemMeta
	// Cuts are SPLIT's block boundaries (tools/splitter): kernel indices
	// where a new block starts. nil: SplitCuts are computed at load time
	// with the default genetic-algorithm settings when the policy is
	// "split".
	Cuts []int
	// NoInPlace compiles without in-place kernels.
	NoInPlace bool
}

// Model is a model compiled for the scheduler at one batch size: its
// kernel program, weights in C memory, per-kernel profiles in every
// version, idempotent groups and SPLIT cut points. Instances (activation
// arenas) are made on demand, one per job in flight.
type Model struct {
	name  string
	batch int
	units int
	eng   *engine.Model
	prog  *engine.Program
	// weights, constants and gather indices (C memory)
	wptr   unsafe.Pointer
	wbytes int
	// base owns the weights when the model is another batch size of it
	// (deriveModel); nil: the model owns them
	base   *Model
	cptr   unsafe.Pointer
	cbytes int
	aux    []unsafe.Pointer
	auxN   []int
	tiles  []int // version -> tile units
	prof   *kprof.Model
	idem   []int
	cuts   []int
	// remain[i] is the profiled time of kernels i.. (SRPT, SPLIT)
	remain []float64
	// launch index of each kernel (NOP kernels have none)
	live []int
	// prVer[k] is the version reef's BE streams run kernel k in
	// (choosePreempt), with prChecks[k] in-block checks per block (the
	// instances' preemptible copies, ncpu.Kernels.SetChecks)
	prVer    []int
	prChecks []int
	// checkFlops and checkBytes bound the work between two in-block
	// checks of the preemptible copies by construction
	// (Config.PreemptCheckFlops, PreemptCheckBytes; 0: none)
	checkFlops, checkBytes int64
	mu                     sync.Mutex
	free                   []*instance
	all                    []*instance
	// closed is set by Scheduler.Close
	closed bool
	// seg is the model on a segment device (nil on the cpu)
	seg *segModel
}

// Name is the name the model was loaded under.
func (m *Model) Name() string { return m.name }

// Batch is the batch size of the model's jobs.
func (m *Model) Batch() int { return m.batch }

// Kernels is the number of kernels of the program.
func (m *Model) Kernels() int { return len(m.prog.Kernels) }

// Program is the compiled program.
func (m *Model) Program() *engine.Program { return m.prog }

// Profile is the model's kernel profile.
func (m *Model) Profile() *kprof.Model { return m.prof }

// IdemEntries are the restart points of the kernels: a job preempted
// while kernel i ran restarts at IdemEntries()[i].
func (m *Model) IdemEntries() []int { return append([]int(nil), m.idem...) }

// Cuts are SPLIT's block boundaries (nil unless set or computed).
func (m *Model) Cuts() []int { return append([]int(nil), m.cuts...) }

// StandaloneNs is the profiled time of one job run alone.
func (m *Model) StandaloneNs() float64 { return m.remain[0] }

// InputSize and OutputSize are the element counts of a job's input and
// output (the whole batch).
func (m *Model) InputSize() int  { return int(m.prog.Inputs[0].Size()) }
func (m *Model) OutputSize() int { return int(m.prog.Outputs[0].Size()) }

func loadModel(name string, g *graph.Graph, units int, opt ModelOptions) (*Model, error) {
	if opt.Batch <= 0 {
		opt.Batch = 1
	}
	m := &Model{name: name, batch: opt.Batch, units: units}
	em, wptr, wbytes, err := cpu.LoadEngine(g, units, opt.NoInPlace, opt.MemoryLimit)
	if err != nil {
		return nil, err
	}
	m.wptr, m.wbytes = wptr, wbytes
	m.eng = em
	if err := m.compile(opt); err != nil {
		m.release()
		return nil, err
	}
	return m, nil
}

// deriveModel compiles base's model at another batch size over base's
// weights (batch buckets of one model share them). The derived model must
// be released together with, or before, base.
func deriveModel(base *Model, opt ModelOptions) (*Model, error) {
	if opt.Batch <= 0 {
		opt.Batch = 1
	}
	m := &Model{name: base.name, batch: opt.Batch, units: base.units, eng: base.eng,
		wptr: base.wptr, base: base}
	if err := m.compile(opt); err != nil {
		m.release()
		return nil, err
	}
	return m, nil
}

// compile builds the model's program for opt.Batch from its loaded
// engine model, with its constants, versions and metadata.
func (m *Model) compile(opt ModelOptions) error {
	em := m.eng
	var (
		ep  *engine.Program
		err error
	)
	if em.BatchDynamic() {
		ep, err = em.CompileBatch(opt.Batch)
	} else {
		if opt.Batch != 1 {
			return fmt.Errorf("model has a fixed batch size: Batch %d not allowed", opt.Batch)
		}
		shapes := map[string][]int64{}
		for _, in := range em.Inputs() {
			shapes[in.Name] = in.Dims
		}
		ep, err = em.Compile(shapes)
	}
	if err != nil {
		return err
	}
	if len(ep.Inputs) != 1 || len(ep.Outputs) != 1 {
		return fmt.Errorf("model has %d inputs and %d outputs; the scheduler runs models with one of each", len(ep.Inputs), len(ep.Outputs))
	}
	m.prog = ep
	if len(ep.Consts) > 0 {
		m.cbytes = len(ep.Consts) * 4
		if m.cptr, err = ncpu.Alloc(m.cbytes); err != nil {
			return err
		}
		copy(unsafe.Slice((*float32)(m.cptr), len(ep.Consts)), ep.Consts)
	}
	m.aux = make([]unsafe.Pointer, len(ep.Kernels))
	m.auxN = make([]int, len(ep.Kernels))
	for i := range ep.Kernels {
		if a := ep.Kernels[i].Aux; len(a) > 0 {
			m.auxN[i] = len(a) * 8
			if m.aux[i], err = ncpu.Alloc(m.auxN[i]); err != nil {
				return err
			}
			copy(unsafe.Slice((*int64)(m.aux[i]), len(a)), a)
		}
	}
	units := m.units
	m.tiles = []int{units}
	vers := opt.Versions
	if vers == nil {
		vers = []int{units, 4 * units, 16 * units, 1}
	}
	for _, v := range vers {
		if v < 1 || v > 64*ncpu.MaxUnits {
			return fmt.Errorf("version tiled for %d units", v)
		}
		dup := false
		for _, t := range m.tiles {
			dup = dup || t == v
		}
		if !dup {
			m.tiles = append(m.tiles, v)
		}
	}
	if len(m.tiles) > padsel.MaxVersions {
		return fmt.Errorf("%d kernel versions (tilings %v): padding chooses among at most %d", len(m.tiles), m.tiles, padsel.MaxVersions)
	}
	return m.setMeta(opt)
}

// setMeta derives what the scheduler knows of the program, on any
// device: launch indices, idempotent groups (opt.Idem's, or the
// compiler's) and SPLIT cuts.
func (m *Model) setMeta(opt ModelOptions) error {
	ep := m.prog
	m.live = make([]int, len(ep.Kernels)+1)
	n := 0
	for i := range ep.Kernels {
		m.live[i] = n
		if ep.Kernels[i].Op != engine.OpNop {
			n++
		}
	}
	m.live[len(ep.Kernels)] = n
	m.idem = append([]int(nil), ep.IdemEntry...)
	if opt.Idem != nil {
		if err := opt.Idem.check(m); err != nil {
			return err
		}
		m.idem = append([]int(nil), opt.Idem.Entry...)
	}
	if opt.Cuts != nil {
		if err := checkCuts(opt.Cuts, len(ep.Kernels)); err != nil {
			return err
		}
		m.cuts = append([]int(nil), opt.Cuts...)
	}
	return nil
}

// release frees the model's C memory; its instances must be freed.
func (m *Model) release() {
	for _, in := range m.all {
		in.freeMem()
	}
	m.all, m.free = nil, nil
	if m.seg != nil {
		if m.seg.owner && m.seg.base != nil {
			m.seg.base.Close()
		}
		m.seg.base = nil
		return
	}
	for i, a := range m.aux {
		ncpu.Free(a, m.auxN[i])
	}
	m.aux = nil
	ncpu.Free(m.cptr, m.cbytes)
	if m.base == nil {
		ncpu.Free(m.wptr, m.wbytes)
	}
	m.cptr, m.wptr = nil, nil
}

// setProfile installs a profile (checking it matches the program) and
// derives the remaining-time table.
func (m *Model) setProfile(p *kprof.Model) error {
	if p.Model != "" && p.Model != m.name {
		return fmt.Errorf("profile is for model %q", p.Model)
	}
	if len(p.Kernels) != len(m.prog.Kernels) {
		return fmt.Errorf("profile has %d kernels, the program %d", len(p.Kernels), len(m.prog.Kernels))
	}
	if p.Batch != 0 && p.Batch != m.batch {
		return fmt.Errorf("profile is for batch %d, the model runs batch %d", p.Batch, m.batch)
	}
	for i := range p.Kernels {
		kp := &p.Kernels[i]
		if len(kp.Versions) == 0 {
			return fmt.Errorf("profile: kernel %d has no versions", i)
		}
		if kp.Op != "" && kp.Op != m.prog.Kernels[i].Op.String() {
			return fmt.Errorf("profile: kernel %d is %s, the program's is %s", i, kp.Op, m.prog.Kernels[i].Op)
		}
	}
	m.prof = p
	m.remain = make([]float64, len(m.prog.Kernels)+1)
	for i := len(m.prog.Kernels) - 1; i >= 0; i-- {
		m.remain[i] = m.remain[i+1] + p.Kernels[i].Versions[0].KernNs
	}
	return nil
}

// PreemptVersions are the versions reef's BE streams run each kernel in
// (0 = the fastest tiling).
func (m *Model) PreemptVersions() []int { return append([]int(nil), m.prVer...) }

// choosePreempt picks each kernel's version for reef's BE streams: a
// running block stops only at its next in-loop check, so short blocks
// preempt sooner, while smaller tiles may cost kernel time. The pick is the
// fastest version whose blocks take at most blockNs; if none does, the one
// with the shortest blocks among those within slack of the fastest kernel
// time (slack < 0: the fastest version everywhere).
//
// A block picked this way may still run longer than checkNs between its
// in-loop checks: its copy in the instances' preemptible array asks for
// about BlockNs / checkNs checks per block (checkNs <= 0: none added).
func (m *Model) choosePreempt(blockNs, slack, checkNs float64) {
	m.prVer = make([]int, len(m.prog.Kernels))
	m.prChecks = make([]int, len(m.prog.Kernels))
	defer func() {
		for i, v := range m.prVer {
			if bn := m.prof.Kernels[i].Versions[v].BlockNs; checkNs > 0 && bn > checkNs {
				m.prChecks[i] = int(math.Ceil(bn / checkNs))
			}
		}
	}()
	for i := range m.prof.Kernels {
		vs := m.prof.Kernels[i].Versions
		n := min(len(vs), len(m.tiles))
		fast := 0
		for v := 1; v < n; v++ {
			if vs[v].KernNs > 0 && vs[v].KernNs < vs[fast].KernNs {
				fast = v
			}
		}
		if slack < 0 {
			m.prVer[i] = 0
			continue
		}
		pick := -1
		for v := 0; v < n; v++ {
			if vs[v].BlockNs > 0 && vs[v].BlockNs <= blockNs && (pick < 0 || vs[v].KernNs < vs[pick].KernNs) {
				pick = v
			}
		}
		if pick < 0 {
			pick = fast
			for v := 0; v < n; v++ {
				if vs[v].BlockNs > 0 && vs[v].KernNs <= vs[fast].KernNs*(1+slack) && vs[v].BlockNs < vs[pick].BlockNs {
					pick = v
				}
			}
		}
		m.prVer[i] = pick
	}
}

// kernNs is kernel i's profiled time (version 0).
func (m *Model) kernNs(i int) float64 { return m.prof.Kernels[i].Versions[0].KernNs }

// instance is one activation arena with the model's kernels materialized
// over it in every version, its host-queue launch arrays and padding
// tables.
type instance struct {
	m      *Model
	arena  unsafe.Pointer
	arenaN int
	ver    []*ncpu.Kernels // per version
	// pre: kernel k is a copy of ver[prVer[k]]'s with prChecks[k]
	// in-block checks (the kernels of prL)
	pre *ncpu.Kernels
	// launches of version 0 (beL), of version 0 with the estimates
	// padding reads (rtL) and of the preemptible versions (prL); the last
	// entry of each is scratch for a lane's first launch
	beL, rtL, prL *ncpu.Launches
	pad           *ncpu.PadTable
	// run is the instance on a segment device (nil on the cpu); needIn
	// says its input tensor waits for the job's input (the next segment
	// writes it)
	run    libml.SegmentInstance
	needIn bool
	// ing gathers a payload input (Job.Input) on the cpu
	ing cpu.Ingester
}

// setInput puts job j's input into the instance's input tensor: on the
// cpu at once (Job.In copied, or Job.Input's payload gathered and
// converted in one pass: its first Input.N() rows), on a segment device
// with the job's next segment.
func (in *instance) setInput(j *Job) error {
	if in.run != nil {
		in.needIn = true
		return nil
	}
	if j.In == nil && j.Input != nil {
		n := j.Input.N()
		per := len(in.input()) / j.Model.batch
		if err := in.ing.Ingest(in.input()[:n*per], j.Input, 0, n); err != nil {
			return fmt.Errorf("sched: gather the job's payload: %w", err)
		}
		j.Input.Load()
		return nil
	}
	copy(in.input(), j.In)
	return nil
}

// outputOnHost reports whether a finished job's output is in host memory
// the scheduler can copy (the cpu), or still on the device, where the
// job's last segment reads it (a segment device).
func (in *instance) outputOnHost() bool { return in.run == nil }

// acquire returns a free instance of the model, making one if needed.
func (m *Model) acquire() (*instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("model is closed")
	}
	if n := len(m.free); n > 0 {
		in := m.free[n-1]
		m.free = m.free[:n-1]
		return in, nil
	}
	in, err := m.newInstance()
	if err != nil {
		return nil, err
	}
	m.all = append(m.all, in)
	return in, nil
}

// hasFree reports whether an instance is free (acquire returns at once).
func (m *Model) hasFree() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.free) > 0
}

func (m *Model) releaseInstance(in *instance) {
	m.mu.Lock()
	m.free = append(m.free, in)
	m.mu.Unlock()
}

func (m *Model) newInstance() (*instance, error) {
	if m.seg != nil {
		return m.newSegInstance()
	}
	in := &instance{m: m}
	in.arenaN = int(m.prog.ArenaFloats) * 4
	var err error
	if in.arena, err = ncpu.Alloc(in.arenaN); err != nil {
		return nil, err
	}
	for _, tu := range m.tiles {
		ks, err := m.materialize(in.arena, tu)
		if err != nil {
			in.freeMem()
			return nil, err
		}
		in.ver = append(in.ver, ks)
	}
	if m.prof != nil {
		if err := in.buildTables(); err != nil {
			in.freeMem()
			return nil, err
		}
	}
	return in, nil
}

// buildTables fills the launch arrays and padding tables from the
// profile.
func (in *instance) buildTables() error {
	m := in.m
	nl := m.live[len(m.prog.Kernels)]
	var err error
	if in.beL, err = ncpu.NewLaunches(nl + 1); err != nil {
		return err
	}
	if in.rtL, err = ncpu.NewLaunches(nl + 1); err != nil {
		return err
	}
	if in.prL, err = ncpu.NewLaunches(nl + 1); err != nil {
		return err
	}
	nk, nv := len(m.prog.Kernels), len(m.tiles)
	if in.pad, err = ncpu.NewPadTable(nk, nv); err != nil {
		return err
	}
	if in.pre, err = ncpu.NewKernels(nk); err != nil {
		return err
	}
	k0 := in.ver[0]
	for i := range m.prog.Kernels {
		kp := &m.prof.Kernels[i]
		for v := 0; v < nv; v++ {
			var vp *kprof.Version
			if v < len(kp.Versions) {
				vp = &kp.Versions[v]
			}
			if vp == nil || vp.Pruned || vp.BlockNs <= 0 || m.prog.Kernels[i].Op == engine.OpNop {
				if v == 0 {
					in.pad.Set(i, 0, k0.KernelPtr(i), 0, 0, 0)
				} else {
					in.pad.Set(i, v, nil, 0, 0, 0)
				}
				continue
			}
			in.pad.Set(i, v, in.ver[v].KernelPtr(i), int64(vp.BlockNs), int64(vp.KernNs), vp.BlockBW)
		}
		if m.prog.Kernels[i].Op == engine.OpNop {
			continue
		}
		li := m.live[i]
		in.beL.Set(li, ncpu.Launch{Kernels: k0, K: i, Idx: int64(i)})
		pv, pc := 0, 0
		if i < len(m.prVer) {
			pv, pc = m.prVer[i], m.prChecks[i]
		}
		if err := in.pre.CopyKernel(i, in.ver[pv], i); err != nil {
			return err
		}
		in.pre.SetChecks(i, pc)
		in.pre.SetCheckWork(i, m.checkFlops, m.checkBytes)
		in.prL.Set(li, ncpu.Launch{Kernels: in.pre, K: i, Idx: int64(i)})
		// RT kernels run on any unit (a unit asleep must not hold one
		// up); a unit that finds every block of the running RT kernel
		// claimed may pad
		v0 := &kp.Versions[0]
		in.rtL.Set(li, ncpu.Launch{Kernels: k0, K: i, Idx: int64(i), EstNs: int64(v0.KernNs), BlkNs: int64(v0.BlockNs), BW: v0.KernBW})
	}
	return nil
}

func (in *instance) freeMem() {
	if in.run != nil {
		in.run.Close()
		in.run = nil
		return
	}
	for _, ks := range in.ver {
		ks.Free()
	}
	in.ver = nil
	if in.pre != nil {
		in.pre.Free()
		in.pre = nil
	}
	for _, l := range []**ncpu.Launches{&in.beL, &in.rtL, &in.prL} {
		if *l != nil {
			(*l).Free()
			*l = nil
		}
	}
	if in.pad != nil {
		in.pad.Free()
		in.pad = nil
	}
	ncpu.Free(in.arena, in.arenaN)
	in.arena = nil
}

// arenaSlice is n floats of the arena at offset off.
func (in *instance) arenaSlice(off, n int64) []float32 {
	return unsafe.Slice((*float32)(unsafe.Add(in.arena, off*4)), n)
}

func (in *instance) input() []float32 {
	b := in.m.prog.Inputs[0]
	return in.arenaSlice(b.Off, b.Size())
}

func (in *instance) output() []float32 {
	b := in.m.prog.Outputs[0]
	return in.arenaSlice(b.Off, b.Size())
}

// materialize fills C kernel descriptors over an arena, tiled for tu
// units.
func (m *Model) materialize(arena unsafe.Pointer, tu int) (*ncpu.Kernels, error) {
	return cpu.Materialize(m.prog, m.wptr, m.cptr, m.aux, arena, tu)
}

// kernelBytes is the activation memory kernel i reads and writes, in
// bytes (its bandwidth estimate; weights are not counted).
func (m *Model) kernelBytes(i int) int64 {
	k := &m.prog.Kernels[i]
	var n int64
	for _, r := range k.Reads {
		n += r.Len
	}
	for _, r := range k.Writes {
		n += r.Len
	}
	return n * 4
}

func checkCuts(cuts []int, n int) error {
	if !sort.IntsAreSorted(cuts) {
		return fmt.Errorf("cuts %v are not sorted", cuts)
	}
	for i, c := range cuts {
		if c <= 0 || c >= n || (i > 0 && c == cuts[i-1]) {
			return fmt.Errorf("cut %d outside 1..%d or repeated", c, n-1)
		}
	}
	return nil
}
