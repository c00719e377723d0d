package zoo

import (
	"reflect"
	"testing"
)

func TestBuildAll(t *testing.T) {
	small := Options{Height: 32, Width: 32, Classes: 10, Layers: 1, SeqLen: 8, Hidden: 16, Heads: 2, FF: 32, Seed: 1}
	for _, name := range Names() {
		g, err := Build(name, small)
		if err != nil {
			t.Fatal(err)
		}
		ios := 1
		if name == "kws" { // data and two states
			ios = 3
		}
		if len(g.Inputs) != ios || len(g.Outputs) != ios || g.Inputs[0].Dims[0] != -1 {
			t.Fatalf("%s: inputs %v outputs %v", name, g.Inputs, g.Outputs)
		}
		seen := map[string]bool{}
		for _, in := range g.Initializers {
			if seen[in.Name] {
				t.Fatalf("%s: initializer %s twice", name, in.Name)
			}
			seen[in.Name] = true
		}
		for _, n := range g.Nodes {
			for _, o := range n.Outputs {
				if seen[o] {
					t.Fatalf("%s: value %s produced twice", name, o)
				}
				seen[o] = true
			}
		}
		again, _ := Build(name, small)
		if !reflect.DeepEqual(g, again) {
			t.Fatalf("%s: two builds differ", name)
		}
	}
	if _, err := Build("alexnet", Options{}); err == nil {
		t.Fatal("unknown model built")
	}
}

func TestStandardSizes(t *testing.T) {
	// parameter counts of the standard architectures (millions)
	for name, want := range map[string]float64{"resnet18": 11.69, "resnet50": 25.56, "mobilenetv2": 3.50, "squeezenet11": 1.235} {
		g, _ := Build(name, Options{})
		got := float64(g.WeightBytes()) / 4 / 1e6
		// BatchNormalization statistics count here; torchvision counts them
		// as buffers, not parameters
		if got < want || got > want*1.03 {
			t.Errorf("%s: %.2fM weights, want about %.2fM", name, got, want)
		}
	}
}

func TestInputDeterministic(t *testing.T) {
	a, b := Input(3, 100), Input(3, 100)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different input")
	}
	if reflect.DeepEqual(a, Input(4, 100)) {
		t.Fatal("different seeds, same input")
	}
}
