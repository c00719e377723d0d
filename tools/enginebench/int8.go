package main

import (
	"context"
	"fmt"
	"strings"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/quantize"
	"sluice/libml/zoo"
)

// int8Suffix names a zoo model's statically quantised form ("resnet18-int8").
const int8Suffix = "-int8"

// calibrationInputs is how many inputs calibrate a quantised model.
const calibrationInputs = 4

// buildModel builds zoo model name; a name ending in -int8 is the float
// model quantised statically (libml/quantize), calibrated on the cpu
// backend with seeded inputs, so every child builds the same graph.
func buildModel(ctx context.Context, name string) (*graph.Graph, error) {
	base, int8 := strings.CutSuffix(name, int8Suffix)
	g, err := zoo.Build(base, zoo.Options{})
	if err != nil || !int8 {
		return g, err
	}
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: 1}); err != nil {
		return nil, err
	}
	defer be.Deinit()
	sets, err := quantize.Samples(g, calibrationInputs, 100, zoo.Input)
	if err != nil {
		return nil, err
	}
	q, st, err := quantize.Model(ctx, g, be.RunGraph, sets)
	if err != nil {
		return nil, err
	}
	if st.Convs+st.MatMuls == 0 {
		return nil, fmt.Errorf("%s: nothing to quantise", base)
	}
	return q, nil
}
