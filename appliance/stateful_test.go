package appliance

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/pack"
	"sluice/libml/zoo"
	"sluice/orchestrator"
)

// statefulProfile serves the zoo's streaming keyword spotter (an LSTM
// whose state h, c the appliance keeps per flow) four ways: on the cpu
// device alone, under the reef scheduler, on the emulated cuda device, and
// from an ONNX file in ONNX Runtime.
const statefulProfile = `
[appliance]
log_level = "warn"
threads = 1
metrics = "off"
control = "ipc://%%s"
cuda = "emu"
[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "kws"
model_id = 1
model = "zoo:kws"
max_batch = 4
state = [{input = "h", output = "h_out"}, {input = "c", output = "c_out"}]
[[if]]
name = "kws-reef"
model_id = 2
model = "zoo:kws"
policy = "reef"
class = "rt"
state = [{input = "h", output = "h_out"}, {input = "c", output = "c_out"}]
[[if]]
name = "kws-cuda"
model_id = 3
model = "zoo:kws"
backend = "cuda"
state = [{input = "h", output = "h_out"}, {input = "c", output = "c_out"}]
[[if]]
name = "kws-ort"
model_id = 4
model = "onnx:%[1]s"
backend = "ort"
state_idle_ms = 60000
max_flows = 16
state = [{input = "h", output = "h_out"}, {input = "c", output = "c_out"}]
[[if]]
name = "kws-half"
model_id = 5
model = "zoo:kws"
state = [{input = "h", output = "h_out"}]
`

// Stateful streams end to end over UDP: three clients (three flows) each
// stream six frames to each of four IFs without waiting for answers; the
// third frame of one flow carries RESET. Every answer equals the model run
// frame by frame with the state carried by hand (bit for bit on the cpu
// device, with and without the scheduler; within 1e-5 on the emulated
// cuda device and in ONNX Runtime), and status counts three flows per IF.
// An IF whose bindings leave the model two data inputs fails to load and
// says why.
func TestStatefulStreams(t *testing.T) {
	requireORT(t)
	model := filepath.Join(t.TempDir(), "kws.onnx")
	writeModel(t, model, zoo.KWS(zoo.Options{}))
	a, stop, _, _ := startControlled(t, fmt.Sprintf(statefulProfile, model))
	defer stop()

	ctx := context.Background()
	ref := newKWSRef(t)

	addr, _ := a.PortAddr("udp0")
	const steps = 6
	clients := []*dptest.Client{newClient(t, 11), newClient(t, 12), newClient(t, 13)}
	type sent struct {
		model uint16
		id    uint64
		want  []float32
	}
	var all []sent
	for model := uint16(1); model <= 4; model++ {
		for ci, cl := range clients {
			state := make([]float32, ref.l.StateElems)
			for s := range steps {
				id := uint64(model)*1000 + uint64(ci)*100 + uint64(s)
				x := zoo.Input(id, ref.l.DataElems)
				flags := uint8(0)
				if ci == 1 && s == 2 {
					flags = wire.FlagReset
					clear(state)
				}
				all = append(all, sent{model, id, ref.step(x, state)})
				if err := cl.Send(addr, model, id, flags, f32bytes(x)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, s := range all {
		cl := clients[s.id%1000/100]
		got := okOutput(t, cl, s.id)
		if len(got) != 4*len(s.want) {
			t.Fatalf("IF %d, request %d: %d bytes, want %d", s.model, s.id, len(got), 4*len(s.want))
		}
		for i, w := range s.want {
			v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
			exact := s.model <= 2
			if exact && math.Float32bits(v) != math.Float32bits(w) || !exact && math.Abs(float64(v-w)) > 1e-5*(1+math.Abs(float64(w))) {
				t.Fatalf("IF %d, request %d (client %d, step %d): logit %d is %v, want %v", s.model, s.id, s.id%1000/100, s.id%100, i, v, w)
			}
		}
	}
	cl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx, orchestrator.StatusArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.IFs) != 5 {
		t.Fatalf("%d IFs in status, want 5", len(st.IFs))
	}
	for _, s := range st.IFs {
		if s.Name == "kws-half" {
			if s.State != "failed" || !strings.Contains(s.Error, "2 data inputs [c input] and 2 outputs [c_out logits] beside its states") {
				t.Errorf("IF %s with half its state bound: %s, %q", s.Name, s.State, s.Error)
			}
			continue
		}
		if s.Flows == nil || *s.Flows != 3 || s.Served != 3*steps || s.State != "serving" {
			t.Errorf("IF %s: flows %v, served %d, state %s; want 3 flows and %d served", s.Name, s.Flows, s.Served, s.State, 3*steps)
		}
	}
}

// The stateful profile of docs/profiles.md serves: its IF answers a
// flow's frames as the model run frame by frame with the state carried.
func TestDocumentedStatefulProfile(t *testing.T) {
	b, err := os.ReadFile("../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for _, block := range strings.Split(string(b), "```toml\n")[1:] {
		if body, _, _ := strings.Cut(block, "```"); strings.Contains(body, `model = "zoo:kws"`) && !strings.Contains(body, "next =") {
			text = body
		}
	}
	if text == "" {
		t.Fatal("docs/profiles.md has no zoo:kws example")
	}
	text = "[appliance]\nlog_level = \"warn\"\nthreads = 1\nmetrics = \"off\"\ncontrol = \"off\"\n" +
		strings.Replace(text, `listen = "0.0.0.0:9400"`, `listen = "127.0.0.1:0"`, 1)
	a, stop := startAppliance(t, "profiles.md", text)
	defer stop()
	addr, _ := a.PortAddr("udp0")
	ref := newKWSRef(t)
	cl := newClient(t, 21)
	state := make([]float32, ref.l.StateElems)
	for id := uint64(1); id <= 4; id++ {
		x := zoo.Input(id, ref.l.DataElems)
		want := f32bytes(ref.step(x, state))
		if err := cl.Send(addr, 12, id, 0, f32bytes(x)); err != nil {
			t.Fatal(err)
		}
		if got := okOutput(t, cl, id); !slices.Equal(got, want) {
			t.Fatalf("frame %d: answer differs from the model run frame by frame", id)
		}
	}
}

// kwsRef is the reference for the zoo's kws served as a stateful stream:
// the packed model on the cpu device, at batch 1.
type kwsRef struct {
	t    *testing.T
	be   *cpu.Backend
	inst libml.Instance
	l    *pack.Layout
}

func newKWSRef(t *testing.T) *kwsRef {
	t.Helper()
	g := zoo.KWS(zoo.Options{})
	l, err := pack.Pack(g, pack.Spec{State: []pack.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: 1}); err != nil {
		t.Fatal(err)
	}
	inst, err := be.LoadModel(ctx, "kws-ref", g)
	if err == nil {
		err = be.ConfigureBatch(inst, 1)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = inst.Close()
		_ = be.Deinit()
	})
	return &kwsRef{t: t, be: be, inst: inst, l: l}
}

// step runs frame x from state, moves state on, and returns the result.
func (r *kwsRef) step(x, state []float32) []float32 {
	out := make([]float32, r.inst.OutputSize())
	if err := r.be.InferBatch(context.Background(), r.inst, 1, append(slices.Clone(x), state...), out); err != nil {
		r.t.Fatal(err)
	}
	copy(state, out[len(out)-r.l.StateElems:])
	return out[:len(out)-r.l.StateElems]
}
