package inss

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// Linear is t = A·b + B (ns, b the batch size): the data upload and the
// result feedback of InSS §4.1.
type Linear struct {
	A float64 `json:"a_ns"`
	B float64 `json:"b_ns"`
}

// At is the line at batch b, never below 0.
func (l Linear) At(b int) float64 { return max(l.A*float64(b)+l.B, 0) }

// FitLinear fits t = A·b + B to (batch, ns) samples by least squares,
// with A at least 0: a copy does not get cheaper with more items, so a
// falling fit is noise, and the line is then the samples' mean.
func FitLinear(batch []int, ns []float64) (Linear, error) {
	if len(batch) != len(ns) || len(batch) < 2 {
		return Linear{}, errors.New("inss: a line needs two or more samples")
	}
	var sx, sy, sxx, sxy float64
	n := float64(len(batch))
	for k, b := range batch {
		x := float64(b)
		sx, sy, sxx, sxy = sx+x, sy+ns[k], sxx+x*x, sxy+x*ns[k]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return Linear{}, errors.New("inss: a line needs two batch sizes")
	}
	a := (n*sxy - sx*sy) / d
	if a < 0 {
		return Linear{B: sy / n}, nil
	}
	return Linear{A: a, B: (sy - a*sx) / n}, nil
}

// Profile is one DNN model's profile on one kind of device: the data the
// latency model predicts from.
type Profile struct {
	Model string `json:"model"`
	// Device is the device kind ("cpu", a GPU's name) and Capacity its
	// share units (cpu units, SMs).
	Device   string `json:"device"`
	Capacity int    `json:"capacity"`
	// Points are the computing times alone over batch sizes and shares.
	Points []Point `json:"points"`
	// Upload and Result are the data upload and the result feedback per
	// batch.
	Upload Linear `json:"upload"`
	Result Linear `json:"result"`
	// Pressure is what the model, running alone on its share, costs the
	// models beside it: the relative slowdown it causes to a
	// memory-streaming probe on the rest of the device (InSS: L2 and
	// DRAM utilisation). Sensitivity is α: the model's relative slowdown
	// per unit of pressure beside it.
	Pressure    float64 `json:"pressure"`
	Sensitivity float64 `json:"sensitivity"`
	// MemBytes is the device memory one instance needs (InSS's hard
	// constraint per device; 0: not measured).
	MemBytes int64 `json:"mem_bytes,omitempty"`
}

// Model is the latency model over a set of profiles.
type Model struct {
	profs map[string]*Profile
	lwr   map[string]*LWR
}

// NewModel checks the profiles and builds their regressions (span: LWR's,
// 0 for its default).
func NewModel(profs []Profile, span float64) (*Model, error) {
	m := &Model{profs: map[string]*Profile{}, lwr: map[string]*LWR{}}
	for k := range profs {
		p := &profs[k]
		key := p.Model + "@" + p.Device
		if _, dup := m.profs[key]; dup {
			return nil, fmt.Errorf("inss: two profiles of %s on %s", p.Model, p.Device)
		}
		l, err := NewLWR(p.Points, span)
		if err != nil {
			return nil, fmt.Errorf("inss: %s on %s: %w", p.Model, p.Device, err)
		}
		if p.Pressure < 0 || p.Sensitivity < 0 || math.IsNaN(p.Pressure+p.Sensitivity) {
			return nil, fmt.Errorf("inss: %s on %s: pressure %v, sensitivity %v", p.Model, p.Device, p.Pressure, p.Sensitivity)
		}
		m.profs[key], m.lwr[key] = p, l
	}
	return m, nil
}

// Profile returns model's profile on device, or nil.
func (m *Model) Profile(model, device string) *Profile { return m.profs[model+"@"+device] }

// Colocated is a model beside the one predicted, on the same device.
type Colocated struct {
	Model string
}

// RunNs is model's computing time alone for a batch of b at share s of
// device (InSS: o = LWR(b, ρ·C)).
func (m *Model) RunNs(model, device string, b int, s float64) (float64, error) {
	l := m.lwr[model+"@"+device]
	if l == nil {
		return 0, fmt.Errorf("inss: no profile of %s on %s", model, device)
	}
	return l.Predict(b, s), nil
}

// ComputeNs is model's computing time for a batch of b at share s with
// the models beside it: o·(1 + α·Σ pressure).
func (m *Model) ComputeNs(model, device string, b int, s float64, beside []Colocated) (float64, error) {
	o, err := m.RunNs(model, device, b, s)
	if err != nil {
		return 0, err
	}
	p := m.profs[model+"@"+device]
	sum := 0.0
	for _, c := range beside {
		q := m.profs[c.Model+"@"+device]
		if q == nil {
			return 0, fmt.Errorf("inss: no profile of %s on %s (beside %s)", c.Model, device, model)
		}
		sum += q.Pressure
	}
	return o * (1 + p.Sensitivity*sum), nil
}

// ExecNs is a batch's execution latency t_inf = upload + compute +
// result (InSS §4.1).
func (m *Model) ExecNs(model, device string, b int, s float64, beside []Colocated) (float64, error) {
	c, err := m.ComputeNs(model, device, b, s, beside)
	if err != nil {
		return 0, err
	}
	p := m.profs[model+"@"+device]
	return p.Upload.At(b) + c + p.Result.At(b), nil
}

// TaskLatency is InSS eq. 3: the latency of a task that finds w tasks of
// its model queued (itself included) with batch size b, execNs of the
// batch in progress left to run, infNs the execution latency of a batch
// and lambda tasks arriving per second. With a batch's worth queued, the
// task waits for the batch in progress and then for ceil(w/b) batches;
// with less, for the larger of the batch in progress and the arrivals
// that fill its batch, then for its batch.
func TaskLatency(w, b int, execNs, infNs, lambda float64) float64 {
	if b < 1 {
		b = 1
	}
	if w >= b {
		return execNs + math.Ceil(float64(w)/float64(b))*infNs
	}
	wait := math.Inf(1)
	if lambda > 0 {
		wait = float64(b-w) / lambda * 1e9
	}
	return max(execNs, wait) + infNs
}

// FitSensitivity fits α to co-located runs by least squares through the
// origin: slowdown[k] - 1 = α·pressure[k], where slowdown[k] is the
// model's computing time beside the k-th set of models over its time
// alone and pressure[k] that set's summed pressure. It is never negative.
func FitSensitivity(pressure, slowdown []float64) (float64, error) {
	if len(pressure) != len(slowdown) || len(pressure) == 0 {
		return 0, errors.New("inss: a sensitivity needs one or more co-located runs")
	}
	var pp, ps float64
	for k, p := range pressure {
		pp += p * p
		ps += p * (slowdown[k] - 1)
	}
	if pp == 0 {
		return 0, nil // nothing beside it pressed: no evidence
	}
	return max(ps/pp, 0), nil
}

// WriteProfiles writes profiles as JSON; ReadProfiles reads them back.
func WriteProfiles(w io.Writer, profs []Profile) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(struct {
		Profiles []Profile `json:"profiles"`
	}{profs})
}

// ReadProfiles reads what WriteProfiles wrote, rejecting unknown fields.
func ReadProfiles(r io.Reader) ([]Profile, error) {
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	var v struct {
		Profiles []Profile `json:"profiles"`
	}
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("inss: profiles: %w", err)
	}
	return v.Profiles, nil
}
