package sched

import (
	"encoding/json"
	"fmt"
	"os"

	"sluice/libml/engine"
	"sluice/libml/kprof"
	ncpu "sluice/native/cpu"
)

// The scheduler's profiles are kprof.Model (libml/kprof), the format
// every device shares: on the cpu profileModel measures them (tools/kprof
// writes them), on a segment device the device does (profileSegModel).

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
func profileModel(pool *ncpu.Pool, m *Model, runs int) (*kprof.Model, error) {
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
	p := &kprof.Model{Model: m.name, Batch: m.batch, Units: pool.Units(), Runs: runs, Kernels: make([]kprof.Kernel, nk)}
	for i := range m.prog.Kernels {
		k := &m.prog.Kernels[i]
		p.Kernels[i] = kprof.Kernel{Index: i, Op: k.Op.String(), Ops: k.Ops, Name: k.Name,
			Bytes: m.kernelBytes(i), Versions: make([]kprof.Version, len(m.tiles))}
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
			vp := kprof.Version{TileUnits: m.tiles[v], Grid: inf.Grid, ScratchBytes: inf.Scratch * 4}
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
	p.Device = "cpu"
	kprof.Prune(p)
	return p, nil
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
