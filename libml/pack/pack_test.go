package pack

import (
	"strings"
	"testing"

	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/zoo"
)

// Pack never panics on a model and names from outside (a profile, a
// deploy command), and what it accepts is packed: one data input and one
// output, the packed ones, a layout whose slots fit the row.
func FuzzPack(f *testing.F) {
	kws, err := onnx.Encode(zoo.KWS(zoo.Options{Features: 4, Hidden: 3, Classes: 2}))
	if err != nil {
		f.Fatal(err)
	}
	mlp, err := onnx.Encode(zoo.MLP(zoo.Options{Features: 4, Layers: 1, Hidden: 3, Classes: 2}))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(kws, "", "", "h=h_out,c=c_out")
	f.Add(kws, "input", "logits", "h=h_out,c=c_out")
	f.Add(kws, "input,h", "logits", "c=c_out")
	f.Add(kws, "", "", "h=h_out,h=c_out")
	f.Add(mlp, "", "", "")
	f.Add(mlp, "input", "", "input=fc_2_out")
	f.Fuzz(func(t *testing.T, model []byte, inputs, outputs, state string) {
		g, err := onnx.Decode(model)
		if err != nil {
			return
		}
		var s Spec
		if inputs != "" {
			s.Inputs = strings.Split(inputs, ",")
		}
		if outputs != "" {
			s.Outputs = strings.Split(outputs, ",")
		}
		if state != "" {
			for _, b := range strings.Split(state, ",") {
				in, out, _ := strings.Cut(b, "=")
				s.State = append(s.State, Binding{Input: in, Output: out})
			}
		}
		l, err := Pack(g, s)
		if err != nil {
			return
		}
		var data []graph.ValueInfo
		for _, in := range g.Inputs {
			if g.Initializer(in.Name) == nil {
				data = append(data, in)
			}
		}
		if len(data) != 1 || data[0].Name != PackedInput || len(g.Outputs) != 1 || g.Outputs[0].Name != PackedOutput {
			t.Fatalf("packed model: inputs %v, outputs %v", data, g.Outputs)
		}
		if data[0].Dims[1] != int64(l.DataElems+l.StateElems) {
			t.Fatalf("packed input %v for %d data and %d state values", data[0].Dims, l.DataElems, l.StateElems)
		}
		end := 0
		for _, d := range l.Data {
			if d.Offset != end || d.Elems < 1 {
				t.Fatalf("data slots %+v", l.Data)
			}
			end += d.Elems
		}
		if end != l.DataElems {
			t.Fatalf("data slots %+v end at %d, not %d", l.Data, end, l.DataElems)
		}
	})
}
