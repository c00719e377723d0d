// Package kprof is the kernel profile format every device and the
// scheduler share (REEF §3 "kernel profiler", §5.2-§5.3): for a model
// compiled at one batch size, per engine kernel, every version (tiling)
// with its grid, its block and kernel time, its memory traffic and, on a
// GPU, its occupancy. The cpu device writes it with tools/kprof, the cuda
// device with `gpubench kprof` and at run time (ProfileSegments); the
// scheduler reads it for SRPT's remaining time, SPLIT's cuts, reef's
// preemptible versions and padding, and the cuda device's padding
// selector reads it before every padded launch.
//
// Dominance (REEF §5.3, offline kernel pruning) is worked out here once:
// a version another version of the same kernel dominates is Pruned and is
// never a padding candidate.
package kprof

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Model is a model's kernel profile at one batch size on one device.
type Model struct {
	Model string `json:"model"`
	Batch int    `json:"batch"`
	// Device is the kind of device profiled ("cpu", "cuda"); empty in
	// profiles written before it was recorded (cpu).
	Device string `json:"device,omitempty"`
	// Units is the device's (or its share's) unit count: worker threads
	// on the cpu, SMs on a GPU.
	Units int `json:"units"`
	// Runs is the timed runs per kernel (reps).
	Runs int `json:"runs"`
	// Timing says how kernel times were taken on a GPU: "events" (GPU
	// events) or "host" (host clock; the emulator's times mean nothing
	// on a GPU).
	Timing string `json:"timing,omitempty"`
	// PadOccupancy is the padding kernel's blocks per SM (sg_pad; 0 on
	// the cpu, whose units pad block by block).
	PadOccupancy int `json:"pad_occupancy,omitempty"`
	// TotalNs is one job's time alone (the sum of version 0's kernel
	// times); WallNs the measured time of whole runs.
	TotalNs float64  `json:"total_ns"`
	WallNs  float64  `json:"wall_ns"`
	Kernels []Kernel `json:"kernels"`
}

// Kernel is one engine kernel (Kernels[i] is the program's kernel i) in
// every version: Versions[v] is version v; version 0, the default
// tiling, is always there. A kernel with nothing to launch has version 0
// with a grid of 0.
type Kernel struct {
	Index int    `json:"index"`
	Op    string `json:"op"`
	Ops   string `json:"ops"`
	Name  string `json:"name"`
	// Bytes is the activation memory the kernel reads and writes.
	Bytes    int64     `json:"bytes"`
	Versions []Version `json:"versions"`
}

// Version is one version (tiling) of a kernel.
type Version struct {
	// Entry is the device code the version launches (a PTX entry on a
	// GPU; empty on the cpu).
	Entry string `json:"entry,omitempty"`
	// TileUnits is the unit count the version is tiled for (cpu).
	TileUnits int   `json:"tile_units,omitempty"`
	Grid      int64 `json:"grid"`
	// ScratchBytes is the per-unit scratch a block needs (cpu).
	ScratchBytes int64 `json:"scratch_bytes,omitempty"`
	// Occupancy is a GPU kernel's blocks per SM (the driver's occupancy
	// calculator; 0 on the cpu), SMs the SMs it can fill:
	// min(ceil(Grid / Occupancy), Units).
	Occupancy int `json:"occupancy,omitempty"`
	SMs       int `json:"sms,omitempty"`
	// BlockNs is the block time, KernNs the kernel time on the whole
	// device (ns). On a GPU the block time is the 90th percentile of the
	// blocks the trace ring timed (RingBlocks; 0: the kernel time over
	// its waves).
	BlockNs    float64 `json:"block_ns"`
	KernNs     float64 `json:"kern_ns"`
	RingBlocks int     `json:"ring_blocks,omitempty"`
	// PadNs is the kernel's time as a padded launch with nothing to pad
	// beside it (a GPU's sg_pad, its control block's copies out and back
	// included), measured like KernNs; 0 where not measured (the cpu, a
	// kernel that fills the device, versions other than the first). A
	// kernel whose PadNs exceeds its KernNs by more than padding's cost
	// tolerance is launched unpadded: padding it would delay the RT
	// kernel more than the blocks it fills are worth.
	PadNs float64 `json:"pad_ns,omitempty"`
	// BlockBW is the bandwidth one block demands on its unit (MB/s),
	// KernBW the kernel's on the device.
	BlockBW int64 `json:"block_bw_mbs"`
	KernBW  int64 `json:"kern_bw_mbs"`
	// Pruned versions are dominated by another version of the kernel
	// (Prune) and never offered to padding.
	Pruned bool `json:"pruned,omitempty"`
}

// PadCostTol is how much slower than its plain launch an RT kernel may
// run as a padded launch (PadNs against KernNs) and still be padded.
// REEF measures about 1% for padding's code; a padded launch on the cuda
// device also copies its control block out and back, which for a kernel
// of a few µs costs more than the kernel.
const PadCostTol = 0.05

// PadCostly reports whether padding the kernel (as an RT kernel, in this
// version) would slow it by more than PadCostTol; unmeasured: no.
func (v *Version) PadCostly() bool {
	return v.PadNs > 0 && v.KernNs > 0 && v.PadNs > v.KernNs*(1+PadCostTol)
}

// Set is several model profiles, as `gpubench kprof` writes them.
type Set struct {
	Device  string  `json:"device,omitempty"`
	Command string  `json:"command,omitempty"`
	Models  []Model `json:"models"`
}

// Find returns the profile of model at batch, or nil.
func (s *Set) Find(model string, batch int) *Model {
	for k := range s.Models {
		if s.Models[k].Model == model && s.Models[k].Batch == batch {
			return &s.Models[k]
		}
	}
	return nil
}

// Check rejects a profile no reader can use: no batch or units, kernels
// out of order or without version 0, negative counts or times.
func (m *Model) Check() error {
	if m.Batch < 1 || m.Units < 1 {
		return fmt.Errorf("model %q: batch %d, %d units", m.Model, m.Batch, m.Units)
	}
	for i := range m.Kernels {
		k := &m.Kernels[i]
		if k.Index != i {
			return fmt.Errorf("model %q: kernel entry %d has index %d", m.Model, i, k.Index)
		}
		if len(k.Versions) == 0 {
			return fmt.Errorf("model %q: kernel %d has no versions", m.Model, i)
		}
		for v := range k.Versions {
			vp := &k.Versions[v]
			if vp.Grid < 0 || vp.Occupancy < 0 || vp.SMs < 0 || vp.BlockNs < 0 || vp.KernNs < 0 || vp.ScratchBytes < 0 {
				return fmt.Errorf("model %q: kernel %d version %d: %+v", m.Model, i, v, *vp)
			}
		}
	}
	return nil
}

// Prune marks the versions of each kernel that another version dominates
// (Dominates), or that an earlier version equals in every respect (of
// equal versions the first is kept), and clears the mark on the others.
// Version 0 is what jobs run; it is pruned for padding like any other.
func Prune(m *Model) {
	for i := range m.Kernels {
		vs := m.Kernels[i].Versions
		for a := range vs {
			vs[a].Pruned = false
			for b := range vs {
				if a != b && (Dominates(&vs[b], &vs[a]) || (b < a && sameCost(&vs[b], &vs[a]))) {
					vs[a].Pruned = true
					break
				}
			}
		}
	}
}

// Dominates reports whether version a of a kernel dominates version b
// (REEF §5.3): a has profiled times and is no worse than b in every
// respect the profile records (kernel time, block time, block count,
// scratch memory, a block's bandwidth, and occupancy, which on a GPU
// stands for register and shared memory use: more blocks per SM is less
// of both), and better in at least one. A version without profiled times
// dominates nothing and is dominated by any version with them.
func Dominates(a, b *Version) bool {
	if a.BlockNs <= 0 || a.KernNs <= 0 {
		return false
	}
	if b.BlockNs <= 0 || b.KernNs <= 0 {
		return true
	}
	le := a.KernNs <= b.KernNs && a.BlockNs <= b.BlockNs && a.Grid <= b.Grid &&
		a.ScratchBytes <= b.ScratchBytes && a.BlockBW <= b.BlockBW && a.Occupancy >= b.Occupancy
	lt := a.KernNs < b.KernNs || a.BlockNs < b.BlockNs || a.Grid < b.Grid ||
		a.ScratchBytes < b.ScratchBytes || a.BlockBW < b.BlockBW || a.Occupancy > b.Occupancy
	return le && lt
}

// sameCost reports whether two versions are equal in everything
// Dominates compares.
func sameCost(a, b *Version) bool {
	return a.KernNs == b.KernNs && a.BlockNs == b.BlockNs && a.Grid == b.Grid &&
		a.ScratchBytes == b.ScratchBytes && a.BlockBW == b.BlockBW && a.Occupancy == b.Occupancy
}

// Summary counts a profile's versions after pruning and the kernels that
// leave units idle.
type Summary struct {
	Kernels, Versions, Kept int
	// NarrowKernels have fewer blocks than units (padding opportunities)
	// and NarrowNs their total time.
	NarrowKernels int
	NarrowNs      float64
}

// Summarize summarizes a profile for a device of units units.
func Summarize(m *Model, units int) Summary {
	var s Summary
	for i := range m.Kernels {
		vs := m.Kernels[i].Versions
		s.Kernels++
		for _, v := range vs {
			s.Versions++
			if !v.Pruned {
				s.Kept++
			}
		}
		if len(vs) > 0 && vs[0].Grid < int64(units) && vs[0].KernNs > 0 {
			s.NarrowKernels++
			s.NarrowNs += vs[0].KernNs
		}
	}
	return s
}

// Load reads a model profile from a JSON file (Save's).
func Load(path string) (*Model, error) {
	var m Model
	if err := readJSON(path, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Save writes the profile to path as indented JSON.
func (m *Model) Save(path string) error {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return fmt.Errorf("kprof: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteJSON writes the set as indented JSON.
func (s *Set) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("kprof: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("kprof: %w", err)
	}
	return nil
}

// ReadSet reads a set written by WriteJSON and checks every profile.
func ReadSet(r io.Reader) (*Set, error) {
	var s Set
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("kprof: %w", err)
	}
	for k := range s.Models {
		if err := s.Models[k].Check(); err != nil {
			return nil, fmt.Errorf("kprof: %w", err)
		}
	}
	return &s, nil
}

// readJSON decodes the JSON file at path into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return fmt.Errorf("%s: %w", path, errors.New("empty profile"))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
