package inss

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// LearnedFormat names the file format of a saved learned scheduler.
const LearnedFormat = "sluice-inss-learned/1"

// MaxLearnedBytes bounds a learned scheduler's file: a network of InSS's
// size (hidden layers of 256) is a few MB of JSON.
const MaxLearnedBytes = 64 << 20

// learnedFile is a learned scheduler on disk: what Plan needs (the two
// actors and the configuration they were trained under), not the critics
// or the optimiser's state, so a saved scheduler plans but does not train
// on.
type learnedFile struct {
	Format      string      `json:"format"`
	Kind        string      `json:"kind"`
	Capacity    int         `json:"capacity"`
	MemBytes    int64       `json:"mem_bytes"`
	Slots       int         `json:"slots"`
	GroupSize   int         `json:"group_size"`
	MaxReplicas int         `json:"max_replicas"`
	Hidden      int         `json:"hidden"`
	Omega       float64     `json:"omega"`
	Plan        PlanOptions `json:"plan"`
	Validation  float64     `json:"validation"`
	Placement   netFile     `json:"placement"` // the SACD actor
	Shares      netFile     `json:"shares"`    // the TD3 actor
}

// netFile is a network's layer sizes (input first) and parameters.
type netFile struct {
	Sizes []int       `json:"sizes"`
	W     [][]float64 `json:"w"`
	B     [][]float64 `json:"b"`
}

// Kind is the kind of device the scheduler was trained for.
func (l *Learned) Kind() string { return l.kind }

// Capacity is the units of the device the scheduler was trained on.
func (l *Learned) Capacity() int { return l.capacity }

// Save writes the scheduler's actors and configuration as JSON
// (LearnedFormat); LoadLearned reads them back into a scheduler that
// plans exactly as this one does.
func (l *Learned) Save(w io.Writer) error {
	if l.pi == nil || l.mu == nil {
		return errors.New("inss: save: the scheduler has no actors")
	}
	f := learnedFile{Format: LearnedFormat, Kind: l.kind, Capacity: l.capacity, MemBytes: l.mem, Slots: l.slots,
		GroupSize: l.cfg.GroupSize, MaxReplicas: l.cfg.MaxReplicas, Hidden: l.cfg.Hidden, Omega: l.cfg.Omega,
		Plan: l.cfg.Plan, Validation: l.Validation,
		Placement: netFile{Sizes: l.pi.sizes, W: l.pi.w, B: l.pi.b},
		Shares:    netFile{Sizes: l.mu.sizes, W: l.mu.w, B: l.mu.b}}
	enc := json.NewEncoder(w)
	if err := enc.Encode(&f); err != nil {
		return fmt.Errorf("inss: save: %w", err)
	}
	return nil
}

// LoadLearned reads a scheduler Save wrote. It checks the format, the
// configuration and that each network has the shape Plan feeds it, so a
// damaged or foreign file is an error here, not a wrong plan later.
func LoadLearned(r io.Reader) (*Learned, error) {
	var f learnedFile
	dec := json.NewDecoder(io.LimitReader(r, MaxLearnedBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("inss: learned scheduler: %w", err)
	}
	if f.Format != LearnedFormat {
		return nil, fmt.Errorf("inss: learned scheduler: format %q, want %q", f.Format, LearnedFormat)
	}
	switch {
	case f.Kind == "":
		return nil, errors.New("inss: learned scheduler: no device kind")
	case f.Capacity < 1 || f.Capacity > 1<<16:
		return nil, fmt.Errorf("inss: learned scheduler: capacity %d", f.Capacity)
	case f.Slots < 1 || f.Slots > 64:
		return nil, fmt.Errorf("inss: learned scheduler: %d instance slots", f.Slots)
	case f.GroupSize < 1 || f.GroupSize > 64:
		return nil, fmt.Errorf("inss: learned scheduler: group size %d", f.GroupSize)
	case f.MaxReplicas < 1 || f.MaxReplicas > 64:
		return nil, fmt.Errorf("inss: learned scheduler: %d replicas", f.MaxReplicas)
	case f.Hidden < 1 || f.Hidden > 4096:
		return nil, fmt.Errorf("inss: learned scheduler: hidden width %d", f.Hidden)
	case !(f.Omega > 0) || math.IsInf(f.Omega, 0):
		return nil, fmt.Errorf("inss: learned scheduler: omega %v", f.Omega)
	case f.Plan.MaxBatch < 1 || f.Plan.MaxBatch > 1<<16 || !(f.Plan.Headroom > 0) || f.Plan.Headroom > 1:
		return nil, fmt.Errorf("inss: learned scheduler: plan options %+v", f.Plan)
	}
	G, h := f.GroupSize, f.Hidden
	pi, err := f.Placement.net("placement", demandFeats+deviceFeats*G, h, G+1)
	if err != nil {
		return nil, err
	}
	mu, err := f.Shares.net("shares", slotFeats*f.Slots+2, h, 2*f.Slots)
	if err != nil {
		return nil, err
	}
	cfg := LearnConfig{GroupSize: G, MaxReplicas: f.MaxReplicas, Hidden: h, Omega: f.Omega, Plan: f.Plan}
	return &Learned{cfg: cfg, kind: f.Kind, capacity: f.Capacity, mem: f.MemBytes, slots: f.Slots,
		pi: pi, mu: mu, Validation: f.Validation}, nil
}

// net checks a saved network against the shape Plan feeds it (in, two
// hidden layers of h, out) and rebuilds it for forward passes.
func (nf netFile) net(name string, in, h, out int) (*mlp, error) {
	want := []int{in, h, h, out}
	if len(nf.Sizes) != len(want) {
		return nil, fmt.Errorf("inss: learned scheduler: %s network has layer sizes %v, want %v", name, nf.Sizes, want)
	}
	for i := range want {
		if nf.Sizes[i] != want[i] {
			return nil, fmt.Errorf("inss: learned scheduler: %s network has layer sizes %v, want %v", name, nf.Sizes, want)
		}
	}
	if len(nf.W) != len(want)-1 || len(nf.B) != len(want)-1 {
		return nil, fmt.Errorf("inss: learned scheduler: %s network has %d weight and %d bias layers, want %d", name, len(nf.W), len(nf.B), len(want)-1)
	}
	n := &mlp{sizes: want}
	for l := range nf.W {
		if len(nf.W[l]) != want[l]*want[l+1] || len(nf.B[l]) != want[l+1] {
			return nil, fmt.Errorf("inss: learned scheduler: %s network layer %d has %d weights and %d biases, want %d and %d",
				name, l, len(nf.W[l]), len(nf.B[l]), want[l]*want[l+1], want[l+1])
		}
		for _, vs := range [][]float64{nf.W[l], nf.B[l]} {
			for _, v := range vs {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return nil, fmt.Errorf("inss: learned scheduler: %s network layer %d holds %v", name, l, v)
				}
			}
		}
		n.w = append(n.w, nf.W[l])
		n.b = append(n.b, nf.B[l])
	}
	return n, nil
}
