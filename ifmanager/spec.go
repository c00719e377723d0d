package ifmanager

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"sluice/dataplane/wire"
	"sluice/libml/pack"
)

// Spec is one inference function as an operator writes it, in the one
// schema every entry point shares: a profile's [[if]] table decodes into it
// (toml tags), so does the deploy command's args object (json tags), and
// the IF manager's Config is made from it (Spec.Config). Validate is the
// one check of its fields.
//
// Zero values of the optional fields mean "not given": Resolve fills in
// the defaults. An empty Mean, Std or InputShape list means the same as an
// absent one; Validate turns it into nil, so a spec survives a round trip
// through JSON (whose omitempty drops empty lists) or TOML unchanged.
type Spec struct {
	// Name names the IF in logs, metrics and commands (required; 1..64
	// letters, digits, '-', '_', '.').
	Name string `toml:"name" json:"name"`
	// ModelID is the wire model id routed to the IF, unique per appliance.
	ModelID uint16 `toml:"model_id" json:"model_id"`
	// Model is "zoo:NAME" or "onnx:PATH" (required).
	Model string `toml:"model" json:"model"`
	// Backend is "cpu" (default), "cuda" or "ort".
	Backend string `toml:"backend" json:"backend,omitempty"`
	// Class is "rt" or "be" (default).
	Class string `toml:"class" json:"class,omitempty"`
	// SLOMS is the latency objective in milliseconds, 0..MaxSLOMS (0: no
	// objective; batches of MaxBatch whenever that many are queued). It is
	// also the deadline of the requests whose header sets none.
	SLOMS float64 `toml:"slo_ms" json:"slo_ms,omitempty"`
	// TimeoutAction is what the IF does with a request that cannot finish
	// by its deadline: TimeoutReject (default) answers it
	// deadline_exceeded at once, at admission or when its batch is
	// formed; TimeoutServeLate serves it anyway (Triton's
	// timeout_action).
	TimeoutAction string `toml:"timeout_action" json:"timeout_action,omitempty"`
	// MaxBatch bounds a batch, 1..MaxBatchLimit (default DefaultMaxBatch).
	MaxBatch int `toml:"max_batch" json:"max_batch,omitempty"`
	// MinBatch bounds SLAB's batch limit from below, 1..MaxBatch (default
	// 1).
	MinBatch int `toml:"min_batch" json:"min_batch,omitempty"`
	// Batching is "slab" (default), "aimd" or "fixed".
	Batching string `toml:"batching" json:"batching,omitempty"`
	// QueueLen bounds the IF's queue, 1..MaxQueueLen (default
	// DefaultQueueLen).
	QueueLen int `toml:"queue_len" json:"queue_len,omitempty"`
	// Input is the payload format, InputF32 (default) or InputImageU8.
	Input InputFormat `toml:"input" json:"input,omitempty"`
	// Mean and Std normalize InputImageU8 channels (default 0 and 1);
	// when both are given they have the same length.
	Mean []float32 `toml:"mean" json:"mean,omitempty"`
	Std  []float32 `toml:"std" json:"std,omitempty"`
	// InputShape fixes the per-request input shape of ONNX models whose
	// input dims are dynamic (at most MaxInputRank dims, each >= 1, at most
	// MaxInputElems elements in all).
	InputShape []int64 `toml:"input_shape" json:"input_shape,omitempty"`
	// Share is the IF's initial resource share in (0, 1], its knee point
	// when profiled; 0 lets Resolve choose (1, or DefaultAutoShare with
	// AutoShare; none under a scheduling policy).
	Share float64 `toml:"share" json:"share,omitempty"`
	// AutoShare turns on GSLICE's self-tuning share.
	AutoShare bool `toml:"auto_share" json:"auto_share,omitempty"`
	// Policy is the scheduling policy the IF runs under: PolicyNone (the
	// IF runs on its own share of the units) or a libml/sched policy on
	// the IF's device (cpu or cuda backend; no Share or AutoShare then).
	// Empty: the appliance's policy for cpu IFs, PolicyNone for the
	// others.
	Policy string `toml:"policy" json:"policy,omitempty"`
	// Fallback is what serves an onnx: model whose operators the engine
	// lacks (cpu and cuda backends, no policy): FallbackORT (default)
	// loads it into ONNX Runtime instead, FallbackNone makes it fail to
	// load.
	Fallback string `toml:"fallback" json:"fallback,omitempty"`
	// State makes the IF a stateful stream: each binding feeds the output
	// a flow's request gives into the input of the flow's next request
	// (an LSTM's h and c), and the IF keeps each flow's state
	// (libml/pack, flows.go).
	State []pack.Binding `toml:"state" json:"state,omitempty"`
	// StateIdleMS drops a flow's state after this many milliseconds
	// without a request, 1..MaxSLOMS (default DefaultStateIdle).
	StateIdleMS float64 `toml:"state_idle_ms" json:"state_idle_ms,omitempty"`
	// MaxFlows bounds the flows a stateful IF keeps state for,
	// 1..MaxFlowsLimit (default DefaultMaxFlows).
	MaxFlows int `toml:"max_flows" json:"max_flows,omitempty"`
	// Inputs names a model's data inputs, in the order their values
	// follow each other in a request's payload (f32; an integer input
	// takes its values as float32 and is cast in the model), for models
	// with several; Outputs names the outputs answered, in order. Empty:
	// the model's one data input and one output (beside its states).
	Inputs  []string `toml:"inputs" json:"inputs,omitempty"`
	Outputs []string `toml:"outputs" json:"outputs,omitempty"`
	// Next makes the IF the first stage of a pipeline, or a middle one:
	// the IF hands each request's result to the IF named Next as that
	// IF's request payload (f32), and the pipeline's last stage answers.
	// Each stage batches on its own.
	Next string `toml:"next" json:"next,omitempty"`
}

// MaxStages bounds the stages a request goes through in a pipeline.
const MaxStages = 8

// Fallbacks (Spec.Fallback).
const (
	FallbackORT  = "ort"
	FallbackNone = "none"
)

// Limits and defaults of a Spec's fields.
const (
	// MaxBatchLimit bounds MaxBatch and MinBatch.
	MaxBatchLimit = 1024
	// MaxQueueLen bounds QueueLen.
	MaxQueueLen = 1 << 20
	// MaxSLOMS bounds SLOMS (one day).
	MaxSLOMS = 24 * 3600 * 1000
	// MaxInputRank bounds the number of InputShape dims.
	MaxInputRank = 8
	// MaxInputElems bounds the product of the InputShape dims.
	MaxInputElems = 1 << 28
	// MaxNameLen bounds Name, in bytes.
	MaxNameLen = 64

	// DefaultMaxBatch is MaxBatch when not given.
	DefaultMaxBatch = 8
	// DefaultQueueLen is QueueLen when not given.
	DefaultQueueLen = 256
	// DefaultAutoShare is the starting Share of an AutoShare IF that
	// gives none.
	DefaultAutoShare = 0.3
)

// Timeout actions (Spec.TimeoutAction).
const (
	// TimeoutReject answers a request that cannot finish by its deadline
	// deadline_exceeded at once.
	TimeoutReject = "reject"
	// TimeoutServeLate serves every admitted request, late or not.
	TimeoutServeLate = "serve_late"
)

// PolicyNone is the policy of IFs that run on their own share of the
// units, without a scheduler.
const PolicyNone = "none"

// Policies lists the scheduling policies a Spec may name: PolicyNone,
// then libml/sched's (the appliance's tests keep the two lists equal;
// this package does not link the scheduler).
func Policies() []string {
	return []string{PolicyNone, "reef", "seq", "conc", "srpt", "split"}
}

// CheckPolicy checks a policy name; its error reads after the key
// (`policy "edf": want one of none, reef, ...`).
func CheckPolicy(p string) error {
	if !slices.Contains(Policies(), p) {
		return fmt.Errorf("%q: want one of %s", p, strings.Join(Policies(), ", "))
	}
	return nil
}

// FieldError is a Spec field that does not validate. Its text starts with
// the field's key as a profile and the deploy command write it, so that a
// caller can put its own path in front ("if[2]." + "max_batch 0: ...",
// "args." + "class \"vip\": ...").
type FieldError struct {
	// Key is the field's key: "max_batch", or "input_shape[1]" for an
	// element of a list.
	Key string
	// Detail follows the key: the offending value, if shown, then a
	// colon and what is wrong (` -3: out of range 1..1024`, `: required`).
	Detail string
}

func (e *FieldError) Error() string { return e.Key + e.Detail }

func fieldErr(key, format string, args ...any) error {
	return &FieldError{Key: key, Detail: fmt.Sprintf(format, args...)}
}

// Validate checks every field that is given and normalizes the spec (empty
// Mean, Std and InputShape lists become nil). It accepts a spec before
// Resolve (unset fields are fine, checks against them use their defaults)
// and after it. Errors are *FieldError.
func (s *Spec) Validate() error {
	if len(s.Mean) == 0 {
		s.Mean = nil
	}
	if len(s.Std) == 0 {
		s.Std = nil
	}
	if len(s.InputShape) == 0 {
		s.InputShape = nil
	}
	if len(s.State) == 0 {
		s.State = nil
	}
	if len(s.Inputs) == 0 {
		s.Inputs = nil
	}
	if len(s.Outputs) == 0 {
		s.Outputs = nil
	}
	if err := CheckName("name", s.Name); err != nil {
		return err
	}
	if kind, ref, _ := strings.Cut(s.Model, ":"); (kind != "zoo" && kind != "onnx") || ref == "" {
		return fieldErr("model", " %q: want \"zoo:NAME\" or \"onnx:PATH\"", s.Model)
	}
	switch s.Backend {
	case "", "cpu", "cuda", "ort":
	default:
		return fieldErr("backend", " %q: want \"cpu\", \"cuda\" or \"ort\"", s.Backend)
	}
	if s.Policy != "" {
		if err := CheckPolicy(s.Policy); err != nil {
			return fieldErr("policy", " %v", err)
		}
	}
	switch s.Fallback {
	case "", FallbackORT, FallbackNone:
	default:
		return fieldErr("fallback", " %q: want %q or %q", s.Fallback, FallbackORT, FallbackNone)
	}
	if s.Policy != "" && s.Policy != PolicyNone {
		if s.Backend != "" && s.Backend != "cpu" && s.Backend != "cuda" {
			return fieldErr("policy", " %q: scheduling policies run on the cpu and cuda backends, not %q (set policy = \"none\")", s.Policy, s.Backend)
		}
		// The scheduler hands units to jobs by class and policy: an IF
		// has no share of its own.
		if s.Share != 0 || s.AutoShare {
			return fieldErr("share", ": IFs under policy %q share the units through the scheduler; remove share and auto_share or set policy = \"none\"", s.Policy)
		}
	}
	switch s.Class {
	case "", "rt", "be":
	default:
		return fieldErr("class", " %q: want \"rt\" or \"be\"", s.Class)
	}
	if math.IsNaN(s.SLOMS) || s.SLOMS < 0 || s.SLOMS > MaxSLOMS {
		return fieldErr("slo_ms", " %v: want 0..%d", s.SLOMS, MaxSLOMS)
	}
	switch s.TimeoutAction {
	case "", TimeoutReject, TimeoutServeLate:
	default:
		return fieldErr("timeout_action", " %q: want %q or %q", s.TimeoutAction, TimeoutReject, TimeoutServeLate)
	}
	maxBatch := s.MaxBatch
	if maxBatch == 0 {
		maxBatch = DefaultMaxBatch
	} else if maxBatch < 1 || maxBatch > MaxBatchLimit {
		return fieldErr("max_batch", " %d: out of range 1..%d", s.MaxBatch, MaxBatchLimit)
	}
	if s.MinBatch != 0 && (s.MinBatch < 1 || s.MinBatch > maxBatch) {
		return fieldErr("min_batch", " %d: out of range 1..max_batch (%d)", s.MinBatch, maxBatch)
	}
	switch s.Batching {
	case "", "slab", "aimd", "fixed":
	default:
		return fieldErr("batching", " %q: want slab, aimd or fixed", s.Batching)
	}
	if math.IsNaN(s.Share) || s.Share < 0 || s.Share > 1 {
		return fieldErr("share", " %v: want 0 < share <= 1", s.Share)
	}
	if s.QueueLen < 0 || s.QueueLen > MaxQueueLen {
		return fieldErr("queue_len", " %d: out of range 1..%d", s.QueueLen, MaxQueueLen)
	}
	switch s.Input {
	case "", InputF32, InputImageU8:
	default:
		return fieldErr("input", " %q: want %q or %q", s.Input, InputF32, InputImageU8)
	}
	if s.Mean != nil && s.Std != nil && len(s.Mean) != len(s.Std) {
		return fieldErr("std", ": %d values, mean has %d: want the same count", len(s.Std), len(s.Mean))
	}
	for i, v := range s.Mean {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fieldErr(fmt.Sprintf("mean[%d]", i), " %v: want a finite number", v)
		}
	}
	for i, v := range s.Std {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fieldErr(fmt.Sprintf("std[%d]", i), " %v: want a finite number", v)
		}
	}
	if len(s.InputShape) > MaxInputRank {
		return fieldErr("input_shape", ": %d dims, at most %d", len(s.InputShape), MaxInputRank)
	}
	elems := int64(1)
	for i, d := range s.InputShape {
		if d < 1 {
			return fieldErr(fmt.Sprintf("input_shape[%d]", i), " %d: want >= 1", d)
		}
		if d > MaxInputElems/elems {
			return fieldErr("input_shape", " %v: more than %d elements", s.InputShape, MaxInputElems)
		}
		elems *= d
	}
	if s.Next != "" {
		if err := CheckName("next", s.Next); err != nil {
			return err
		}
		if s.Next == s.Name {
			return fieldErr("next", " %q: an IF cannot be its own next stage", s.Next)
		}
	}
	return s.validateState()
}

// validateState checks the stateful stream's fields and the data inputs
// and outputs named.
func (s *Spec) validateState() error {
	seen := map[string]bool{}
	for _, l := range []struct {
		key   string
		names []string
	}{{"inputs", s.Inputs}, {"outputs", s.Outputs}} {
		for i, n := range l.names {
			key := fmt.Sprintf("%s[%d]", l.key, i)
			if n == "" {
				return fieldErr(key, ": must not be empty")
			}
			if len(n) > 256 {
				return fieldErr(key, " %.16q...: longer than 256 bytes", n)
			}
			k := l.key[:len(l.key)-1] + ":" + n
			if seen[k] {
				return fieldErr(key, " %q: named twice", n)
			}
			seen[k] = true
		}
	}
	if len(s.Inputs) > 1 && s.Input != "" && s.Input != InputF32 {
		return fieldErr("input", " %q: a payload of several inputs is %q", s.Input, InputF32)
	}
	if s.State == nil {
		switch {
		case s.StateIdleMS != 0:
			return fieldErr("state_idle_ms", ": only for IFs with state bindings (state)")
		case s.MaxFlows != 0:
			return fieldErr("max_flows", ": only for IFs with state bindings (state)")
		}
		return nil
	}
	for i, b := range s.State {
		for _, v := range []struct{ key, name string }{{"input", b.Input}, {"output", b.Output}} {
			key := fmt.Sprintf("state[%d].%s", i, v.key)
			if v.name == "" {
				return fieldErr(key, ": required")
			}
			if len(v.name) > 256 {
				return fieldErr(key, " %.16q...: longer than 256 bytes", v.name)
			}
			if seen[v.key+":"+v.name] {
				return fieldErr(key, " %q: named twice", v.name)
			}
			seen[v.key+":"+v.name] = true
		}
	}
	if math.IsNaN(s.StateIdleMS) || s.StateIdleMS < 0 || s.StateIdleMS > MaxSLOMS {
		return fieldErr("state_idle_ms", " %v: want 1..%d", s.StateIdleMS, MaxSLOMS)
	}
	if s.MaxFlows < 0 || s.MaxFlows > MaxFlowsLimit {
		return fieldErr("max_flows", " %d: out of range 1..%d", s.MaxFlows, MaxFlowsLimit)
	}
	return nil
}

// CheckName checks an IF name (the field called key): 1..MaxNameLen
// bytes of letters, digits, '-', '_' and '.'.
func CheckName(key, name string) error {
	if name == "" {
		return fieldErr(key, ": must not be empty")
	}
	if len(name) > MaxNameLen {
		return fieldErr(key, " %.16q...: longer than %d bytes", name, MaxNameLen)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.'
		if !ok {
			return fieldErr(key, " %q: only letters, digits, '-', '_' and '.' are allowed", name)
		}
	}
	return nil
}

// Resolve makes a spec ready to run on an appliance whose policy (for cpu
// IFs that name none) is appliancePolicy ("" means PolicyNone): it gives
// the IF that policy, validates it, and fills in the defaults of the
// optional fields. A failed Resolve may have set Policy and normalized the
// lists.
func (s *Spec) Resolve(appliancePolicy string) error {
	if s.Policy == "" && (s.Backend == "" || s.Backend == "cpu") {
		s.Policy = appliancePolicy
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Backend == "" {
		s.Backend = "cpu"
	}
	if s.Policy == "" {
		s.Policy = PolicyNone
	}
	if s.Class == "" {
		s.Class = "be"
	}
	if s.TimeoutAction == "" {
		s.TimeoutAction = TimeoutReject
	}
	if s.MaxBatch == 0 {
		s.MaxBatch = DefaultMaxBatch
	}
	if s.MinBatch == 0 {
		s.MinBatch = 1
	}
	if s.Batching == "" {
		s.Batching = "slab"
	}
	if s.Share == 0 && s.Policy == PolicyNone {
		s.Share = 1
		if s.AutoShare {
			s.Share = DefaultAutoShare
		}
	}
	if s.QueueLen == 0 {
		s.QueueLen = DefaultQueueLen
	}
	if s.Input == "" {
		s.Input = InputF32
	}
	return nil
}

// SLO returns the latency objective as a duration.
func (s *Spec) SLO() time.Duration { return time.Duration(s.SLOMS * float64(time.Millisecond)) }

// Config returns the IF manager's configuration of a resolved spec (the
// unit mask is the appliance's to choose).
func (s *Spec) Config() Config {
	class := wire.ClassBE
	if s.Class == "rt" {
		class = wire.ClassRT
	}
	return Config{Name: s.Name, ModelID: s.ModelID, Class: class, MinBatch: s.MinBatch, MaxBatch: s.MaxBatch,
		QueueLen: s.QueueLen, Input: s.Input, Mean: s.Mean, Std: s.Std, SLO: s.SLO(), Batching: s.Batching,
		Share: s.Share, ServeLate: s.TimeoutAction == TimeoutServeLate,
		State: StateConfig{Idle: time.Duration(s.StateIdleMS * float64(time.Millisecond)), MaxFlows: s.MaxFlows}}
}
