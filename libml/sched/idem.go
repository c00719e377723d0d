package sched

import "fmt"

// IdemMeta is the idempotence metadata of a compiled model (REEF §4.4),
// written by tools/idemcheck and loaded with the model (ModelOptions.Idem):
// for each kernel, whether it may be re-executed alone, and the first
// kernel of its minimal idempotent group, where a job interrupted in it
// restarts.
type IdemMeta struct {
	Model string `json:"model"`
	Batch int    `json:"batch"`
	// Ops are the kernels' fused operator names, to check the metadata
	// matches the program it is loaded with.
	Ops []string `json:"ops"`
	// Idempotent[i] reports whether kernel i alone is idempotent; Entry[i]
	// is the first kernel of its minimal idempotent group (i when it is
	// idempotent; 0 when only a restart from the first kernel, with the
	// input copied in again, is safe).
	Idempotent []bool `json:"idempotent"`
	Entry      []int  `json:"entry"`
	// Trace is what the groups were computed from (tools/idemcheck):
	// per kernel, the arena spans (in floats) it read before writing and
	// the spans it wrote.
	Trace []KernelTrace `json:"trace,omitempty"`
}

// KernelTrace is one kernel's traced accesses: half-open float ranges of
// the activation arena.
type KernelTrace struct {
	Reads  [][2]int64 `json:"reads"`
	Writes [][2]int64 `json:"writes"`
}

// LoadIdem reads metadata written by tools/idemcheck.
func LoadIdem(path string) (*IdemMeta, error) {
	var m IdemMeta
	if err := readJSON(path, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Save writes the metadata as JSON.
func (im *IdemMeta) Save(path string) error { return writeJSON(path, im) }

// check verifies the metadata belongs to m's program and is well formed.
func (im *IdemMeta) check(m *Model) error {
	n := len(m.prog.Kernels)
	if im.Model != "" && im.Model != m.name {
		return fmt.Errorf("idempotence metadata is for model %q", im.Model)
	}
	if im.Batch != 0 && im.Batch != m.batch {
		return fmt.Errorf("idempotence metadata is for batch %d, the model runs batch %d", im.Batch, m.batch)
	}
	if len(im.Entry) != n || len(im.Idempotent) != n || (im.Ops != nil && len(im.Ops) != n) {
		return fmt.Errorf("idempotence metadata has %d kernels, the program %d", len(im.Entry), n)
	}
	for i, e := range im.Entry {
		if e < 0 || e > i {
			return fmt.Errorf("idempotence metadata: kernel %d restarts at %d", i, e)
		}
		if im.Ops != nil && im.Ops[i] != m.prog.Kernels[i].Ops {
			return fmt.Errorf("idempotence metadata: kernel %d is %q, the program's is %q", i, im.Ops[i], m.prog.Kernels[i].Ops)
		}
		if im.Idempotent[i] && e != i {
			return fmt.Errorf("idempotence metadata: kernel %d is idempotent but restarts at %d", i, e)
		}
	}
	return nil
}
