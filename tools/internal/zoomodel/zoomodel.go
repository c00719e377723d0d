// Package zoomodel builds the benchmark tools' models by name: a zoo
// model (libml/zoo), or, for a name ending in -int8, the float model
// quantised statically (libml/quantize) and calibrated on the cpu
// backend with seeded inputs, so that every tool and every process
// builds the same graph.
package zoomodel

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

// Int8Suffix names a zoo model's statically quantised form ("resnet18-int8").
const Int8Suffix = "-int8"

// calibrationInputs is how many seeded inputs calibrate a quantised model.
const calibrationInputs = 4

// Base is name without the -int8 suffix, and whether it had it.
func Base(name string) (string, bool) { return strings.CutSuffix(name, Int8Suffix) }

// Build builds model name with opt (see the package comment).
func Build(ctx context.Context, name string, opt zoo.Options) (*graph.Graph, error) {
	base, int8 := Base(name)
	g, err := zoo.Build(base, opt)
	if err != nil || !int8 {
		return g, err
	}
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: 1}); err != nil {
		return nil, fmt.Errorf("%s: calibration backend: %w", name, err)
	}
	defer be.Deinit()
	sets, err := quantize.Samples(g, calibrationInputs, 100, zoo.Input)
	if err != nil {
		return nil, fmt.Errorf("%s: calibration inputs: %w", name, err)
	}
	q, st, err := quantize.Model(ctx, g, be.RunGraph, sets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if st.Convs+st.MatMuls == 0 {
		return nil, fmt.Errorf("%s: nothing to quantise in %s", name, base)
	}
	return q, nil
}
