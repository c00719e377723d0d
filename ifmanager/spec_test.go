package ifmanager

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/wire"
	"sluice/libml/pack"
)

// A profile's [[if]] table and the deploy command's args are one schema:
// every field has the same key in both.
func TestSpecTagsAgree(t *testing.T) {
	typ := reflect.TypeFor[Spec]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		tk := f.Tag.Get("toml")
		jk, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tk == "" || tk != jk {
			t.Errorf("field %s: toml key %q, json key %q", f.Name, tk, jk)
		}
	}
}

func TestSpecValidateNamesTheKey(t *testing.T) {
	ok := Spec{Name: "det", Model: "zoo:resnet18"}
	for _, tc := range []struct {
		edit func(*Spec)
		key  string
		want string
	}{
		{func(s *Spec) { s.Name = "" }, "name", "name: must not be empty"},
		{func(s *Spec) { s.Name = "a/b" }, "name", `name "a/b": only letters`},
		{func(s *Spec) { s.Name = strings.Repeat("n", 65) }, "name", "longer than 64 bytes"},
		{func(s *Spec) { s.Model = "resnet18" }, "model", `model "resnet18": want "zoo:NAME" or "onnx:PATH"`},
		{func(s *Spec) { s.Model = "zoo:" }, "model", `model "zoo:"`},
		{func(s *Spec) { s.Backend = "tpu" }, "backend", `backend "tpu"`},
		{func(s *Spec) { s.Policy = "edf" }, "policy", `policy "edf": want one of none, reef, seq, conc, srpt, split`},
		{func(s *Spec) { s.Policy, s.Backend = "reef", "ort" }, "policy", `scheduling policies run on the cpu and cuda backends, not "ort"`},
		{func(s *Spec) { s.Policy, s.Share = "reef", 0.5 }, "share", `share: IFs under policy "reef"`},
		{func(s *Spec) { s.Policy, s.AutoShare = "seq", true }, "share", `share: IFs under policy "seq"`},
		{func(s *Spec) { s.Class = "vip" }, "class", `class "vip"`},
		{func(s *Spec) { s.SLOMS = -1 }, "slo_ms", "slo_ms -1: want 0..86400000"},
		{func(s *Spec) { s.SLOMS = math.NaN() }, "slo_ms", "slo_ms NaN"},
		{func(s *Spec) { s.SLOMS = 1e300 }, "slo_ms", "slo_ms 1e+300"},
		{func(s *Spec) { s.MaxBatch = -3 }, "max_batch", "max_batch -3: out of range 1..1024"},
		{func(s *Spec) { s.MaxBatch = 2000 }, "max_batch", "max_batch 2000"},
		{func(s *Spec) { s.MinBatch = 9 }, "min_batch", "min_batch 9: out of range 1..max_batch (8)"},
		{func(s *Spec) { s.MinBatch, s.MaxBatch = 5, 4 }, "min_batch", "min_batch 5"},
		{func(s *Spec) { s.Batching = "greedy" }, "batching", `batching "greedy"`},
		{func(s *Spec) { s.TimeoutAction = "drop" }, "timeout_action", `timeout_action "drop": want "reject" or "serve_late"`},
		{func(s *Spec) { s.Share = 1.5 }, "share", "share 1.5: want 0 < share <= 1"},
		{func(s *Spec) { s.Share = math.NaN() }, "share", "share NaN"},
		{func(s *Spec) { s.QueueLen = -1 }, "queue_len", "queue_len -1"},
		{func(s *Spec) { s.QueueLen = MaxQueueLen + 1 }, "queue_len", "queue_len 1048577"},
		{func(s *Spec) { s.Input = "png" }, "input", `input "png"`},
		{func(s *Spec) { s.Mean, s.Std = []float32{1, 2}, []float32{1} }, "std", "std: 1 values, mean has 2"},
		{func(s *Spec) { s.Mean = []float32{float32(math.Inf(1))} }, "mean[0]", "mean[0] +Inf"},
		{func(s *Spec) { s.Std = []float32{1, float32(math.NaN())} }, "std[1]", "std[1] NaN"},
		{func(s *Spec) { s.InputShape = []int64{3, 0} }, "input_shape[1]", "input_shape[1] 0: want >= 1"},
		{func(s *Spec) { s.InputShape = make([]int64, 9) }, "input_shape", "input_shape: 9 dims, at most 8"},
		{func(s *Spec) { s.InputShape = []int64{1 << 20, 1 << 20} }, "input_shape", "more than 268435456 elements"},
		{func(s *Spec) { s.InputShape = []int64{1 << 62, 1 << 62} }, "input_shape", "more than 268435456 elements"},
		{func(s *Spec) { s.StateIdleMS = 5 }, "state_idle_ms", "state_idle_ms: only for IFs with state bindings"},
		{func(s *Spec) { s.MaxFlows = 5 }, "max_flows", "max_flows: only for IFs with state bindings"},
		{func(s *Spec) { s.State = []pack.Binding{{Input: "h"}} }, "state[0].output", "state[0].output: required"},
		{func(s *Spec) { s.State = []pack.Binding{{Input: "h", Output: "a"}, {Input: "h", Output: "b"}} }, "state[1].input", `state[1].input "h": named twice`},
		{func(s *Spec) { s.State, s.MaxFlows = []pack.Binding{{Input: "h", Output: "a"}}, -1 }, "max_flows", "max_flows -1: out of range 1..1048576"},
		{func(s *Spec) { s.Inputs = []string{"a", ""} }, "inputs[1]", "inputs[1]: must not be empty"},
		{func(s *Spec) { s.Outputs = []string{"y", "y"} }, "outputs[1]", `outputs[1] "y": named twice`},
		{func(s *Spec) { s.Inputs, s.State = []string{"h"}, []pack.Binding{{Input: "h", Output: "a"}} }, "state[0].input", `state[0].input "h": named twice`},
		{func(s *Spec) { s.Inputs, s.Input = []string{"a", "b"}, InputImageU8 }, "input", `input "u8-hwc": a payload of several inputs is "f32"`},
		{func(s *Spec) { s.State, s.StateIdleMS = []pack.Binding{{Input: "h", Output: "a"}}, math.NaN() }, "state_idle_ms", "state_idle_ms NaN"},
	} {
		s := ok
		tc.edit(&s)
		err := s.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != tc.key || !strings.HasPrefix(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want a FieldError for %s containing %q", s, err, tc.key, tc.want)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal spec: %v", err)
	}
}

// An empty list is an absent one: Validate makes it nil, so the spec
// survives JSON's omitempty (the fuzzer's finding in FuzzParseRequest).
func TestSpecEmptyListsAreAbsent(t *testing.T) {
	s := Spec{Name: "det", Model: "zoo:resnet18", Mean: []float32{}, Std: []float32{}, InputShape: []int64{}, State: []pack.Binding{}, Inputs: []string{}, Outputs: []string{}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Mean != nil || s.Std != nil || s.InputShape != nil || s.State != nil || s.Inputs != nil || s.Outputs != nil {
		t.Fatalf("empty lists kept: %#v", s)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err != nil || !reflect.DeepEqual(s, back) {
		t.Fatalf("round trip through %s: %#v (%v), want %#v", b, back, err, s)
	}
}

func TestSpecResolve(t *testing.T) {
	s := Spec{Name: "det", ModelID: 3, Model: "zoo:resnet18", Class: "rt", SLOMS: 25, Input: InputImageU8,
		Mean: []float32{0.5, 0.5, 0.5}}
	if err := s.Resolve(""); err != nil {
		t.Fatal(err)
	}
	want := Spec{Name: "det", ModelID: 3, Model: "zoo:resnet18", Backend: "cpu", Class: "rt", SLOMS: 25, TimeoutAction: TimeoutReject,
		MaxBatch: DefaultMaxBatch, MinBatch: 1, Batching: "slab", QueueLen: DefaultQueueLen, Input: InputImageU8,
		Mean: []float32{0.5, 0.5, 0.5}, Share: 1, Policy: PolicyNone}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("resolved %#v\nwant %#v", s, want)
	}
	again := s
	if err := again.Resolve("reef"); err != nil || !reflect.DeepEqual(again, s) {
		t.Fatalf("resolving twice: %v, %#v", err, again)
	}
	cfg := s.Config()
	if cfg.Class != wire.ClassRT || cfg.SLO != 25*time.Millisecond || cfg.ModelID != 3 || cfg.MaxBatch != 8 || cfg.Share != 1 {
		t.Fatalf("config %+v", cfg)
	}

	// A cpu IF takes the appliance's policy (and no share); an ort IF
	// keeps none.
	p := Spec{Name: "a", Model: "zoo:x"}
	if err := p.Resolve("reef"); err != nil || p.Policy != "reef" || p.Share != 0 {
		t.Fatalf("under reef: %v, policy %q share %v", err, p.Policy, p.Share)
	}
	o := Spec{Name: "b", Model: "onnx:/m.onnx", Backend: "ort"}
	if err := o.Resolve("reef"); err != nil || o.Policy != PolicyNone || o.Share != 1 {
		t.Fatalf("ort under reef: %v, policy %q share %v", err, o.Policy, o.Share)
	}
	a := Spec{Name: "c", Model: "zoo:x", AutoShare: true}
	if err := a.Resolve(""); err != nil || a.Share != DefaultAutoShare {
		t.Fatalf("auto_share: %v, share %v", err, a.Share)
	}
	// The appliance's policy makes a share an error, named by key.
	sh := Spec{Name: "d", Model: "zoo:x", Share: 0.5}
	if err := sh.Resolve("reef"); err == nil || !strings.HasPrefix(err.Error(), "share: IFs under policy \"reef\"") {
		t.Fatalf("share under reef: %v", err)
	}
}
