package zoomodel

import (
	"context"
	"slices"
	"testing"

	"sluice/libml/zoo"
)

// TestONNXModels: the PaddleOCR models build by name, their input
// dimensions fixed and the batch dynamic, their weights counted.
func TestONNXModels(t *testing.T) {
	for name, m := range ONNXModels {
		g, err := Build(context.Background(), name, zoo.Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := append([]int64{-1}, m.Shape...); !slices.Equal(g.Inputs[0].Dims, want) {
			t.Errorf("%s: input dims %v, want %v", name, g.Inputs[0].Dims, want)
		}
		if g.WeightBytes() < 100_000 {
			t.Errorf("%s: %d bytes of weights", name, g.WeightBytes())
		}
	}
	if _, err := Build(context.Background(), "no-such-model", zoo.Options{}); err == nil {
		t.Error("an unknown name built")
	}
}
