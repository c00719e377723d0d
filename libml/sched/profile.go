package sched

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"sluice/libml/engine"
	ncpu "sluice/native/cpu"
)

// ModelProfile is a model's offline kernel profile (tools/kprof): for every
// kernel and every version (tiling), its grid, block time, kernel time and
// memory-bandwidth demand. It is what padding (REEF §5.2-§5.3), SRPT
// (Paella §6) and SPLIT's cut search read.
type ModelProfile struct {
	Model string `json:"model"`
	Batch int    `json:"batch"`
	Units int    `json:"units"`
	Runs  int    `json:"runs"`
	// TotalNs is one job's time alone (the sum of version 0's kernel
	// times); WallNs the measured time of whole runs.
	TotalNs float64         `json:"total_ns"`
	WallNs  float64         `json:"wall_ns"`
	Kernels []KernelProfile `json:"kernels"`
}

// KernelProfile is one kernel in every version.
type KernelProfile struct {
	Index int    `json:"index"`
	Op    string `json:"op"`
	Ops   string `json:"ops"`
	Name  string `json:"name"`
	// Bytes is the activation memory the kernel reads and writes.
	Bytes    int64            `json:"bytes"`
	Versions []VersionProfile `json:"versions"`
}

// VersionProfile is one version (tiling) of a kernel.
type VersionProfile struct {
	// TileUnits is the unit count the version is tiled for.
	TileUnits int   `json:"tile_units"`
	Grid      int64 `json:"grid"`
	// ScratchBytes is the per-unit scratch a block needs.
	ScratchBytes int64 `json:"scratch_bytes"`
	// BlockNs is the mean block time, KernNs the mean kernel time on the
	// whole pool.
	BlockNs float64 `json:"block_ns"`
	KernNs  float64 `json:"kern_ns"`
	// BlockBW is the bandwidth one block demands on its unit (MB/s),
	// KernBW the kernel's on the pool.
	BlockBW int64 `json:"block_bw_mbs"`
	KernBW  int64 `json:"kern_bw_mbs"`
	// Pruned versions are dominated by another version (REEF §5.3) and
	// never offered to padding.
	Pruned bool `json:"pruned,omitempty"`
}

// LoadProfile reads a profile written by tools/kprof.
func LoadProfile(path string) (*ModelProfile, error) {
	var p ModelProfile
	if err := readJSON(path, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Save writes the profile as JSON.
func (p *ModelProfile) Save(path string) error { return writeJSON(path, p) }

// readJSON decodes the JSON file at path into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON writes v to path as indented JSON.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// profileModel measures every kernel of every version: runs whole programs
// on a private stream with block timing on (inputs deterministic).
func profileModel(pool *ncpu.Pool, m *Model, runs int) (*ModelProfile, error) {
	if runs <= 0 {
		runs = 5
	}
	in, err := m.newInstance()
	if err != nil {
		return nil, err
	}
	defer in.freeMem()
	copy(in.input(), fillInput(len(in.input()), 1))
	st, err := pool.NewStream(1024)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	nk := len(m.prog.Kernels)
	p := &ModelProfile{Model: m.name, Batch: m.batch, Units: pool.Units(), Runs: runs, Kernels: make([]KernelProfile, nk)}
	for i := range m.prog.Kernels {
		k := &m.prog.Kernels[i]
		p.Kernels[i] = KernelProfile{Index: i, Op: k.Op.String(), Ops: k.Ops, Name: k.Name,
			Bytes: m.kernelBytes(i), Versions: make([]VersionProfile, len(m.tiles))}
	}
	for v, ks := range in.ver {
		// one warm-up run, then runs timed ones
		if s, err := st.Run(ks, 0, 0); err != nil || s != ncpu.Done {
			return nil, fmt.Errorf("profile run: %v %v", s, err)
		}
		ks.ResetStats()
		st.SetProfile(true)
		t0 := ncpu.NowNs()
		for r := 0; r < runs; r++ {
			if s, err := st.Run(ks, 0, 0); err != nil || s != ncpu.Done {
				st.SetProfile(false)
				return nil, fmt.Errorf("profile run: %v %v", s, err)
			}
		}
		wall := float64(ncpu.NowNs()-t0) / float64(runs)
		st.SetProfile(false)
		if v == 0 {
			p.WallNs = wall
		}
		for i := 0; i < nk; i++ {
			inf := ks.Info(i)
			vp := VersionProfile{TileUnits: m.tiles[v], Grid: inf.Grid, ScratchBytes: inf.Scratch * 4}
			if inf.Blocks > 0 {
				vp.BlockNs = float64(inf.BlockNs) / float64(inf.Blocks)
			}
			if inf.Runs > 0 {
				vp.KernNs = float64(inf.WallNs) / float64(inf.Runs)
			}
			by := p.Kernels[i].Bytes
			if vp.BlockNs > 0 {
				vp.BlockBW = int64(float64(by) / float64(max(inf.Grid, 1)) / vp.BlockNs * 1000)
			}
			if vp.KernNs > 0 {
				vp.KernBW = int64(float64(by) / vp.KernNs * 1000)
			}
			p.Kernels[i].Versions[v] = vp
		}
	}
	for i := range p.Kernels {
		if m.prog.Kernels[i].Op == engine.OpNop {
			continue
		}
		p.TotalNs += p.Kernels[i].Versions[0].KernNs
	}
	Prune(p)
	return p, nil
}

// Prune marks the versions of each kernel that another version dominates
// (REEF §5.3: no worse in kernel time, block time, scratch memory and
// block count, better in one). Version 0 is what jobs run; it is pruned
// for padding like any other.
func Prune(p *ModelProfile) {
	for i := range p.Kernels {
		vs := p.Kernels[i].Versions
		for a := range vs {
			vs[a].Pruned = false
		}
		for a := range vs {
			for b := range vs {
				if a != b && !vs[b].Pruned && dominates(&vs[b], &vs[a]) {
					vs[a].Pruned = true
					break
				}
			}
		}
	}
}

// dominates reports whether version a dominates version b.
func dominates(a, b *VersionProfile) bool {
	if a.BlockNs <= 0 || a.KernNs <= 0 {
		return false
	}
	if b.BlockNs <= 0 {
		return true
	}
	le := a.KernNs <= b.KernNs && a.BlockNs <= b.BlockNs &&
		a.ScratchBytes <= b.ScratchBytes && a.Grid <= b.Grid && a.BlockBW <= b.BlockBW
	lt := a.KernNs < b.KernNs || a.BlockNs < b.BlockNs ||
		a.ScratchBytes < b.ScratchBytes || a.Grid < b.Grid || a.BlockBW < b.BlockBW
	return le && lt
}

// Summary counts a profile's versions after pruning and the kernels that
// leave units idle on a pool of units.
type Summary struct {
	Kernels, Versions, Kept int
	// NarrowKernels have fewer blocks than units (padding opportunities)
	// and NarrowNs their total time.
	NarrowKernels int
	NarrowNs      float64
}

// Summarize summarizes a profile for a pool of units.
func Summarize(p *ModelProfile, units int) Summary {
	var s Summary
	for i := range p.Kernels {
		vs := p.Kernels[i].Versions
		s.Kernels++
		for _, v := range vs {
			s.Versions++
			if !v.Pruned {
				s.Kept++
			}
		}
		if vs[0].Grid < int64(units) && vs[0].KernNs > 0 {
			s.NarrowKernels++
			s.NarrowNs += vs[0].KernNs
		}
	}
	return s
}

// fillInput returns n deterministic values in [-1, 1).
func fillInput(n int, seed uint64) []float32 {
	out := make([]float32, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = float32(x>>40)/float32(1<<24)*2 - 1
	}
	return out
}

// sortedCopy returns a sorted copy of v.
func sortedCopy(v []float64) []float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s
}
