// Package zoomodel builds the benchmark tools' models by name: a zoo
// model (libml/zoo), one of the real trained models `make deps` unpacks
// (ONNXModels: PaddleOCR's classifier and detector, their input
// dimensions fixed and the batch dynamic), or, for a name ending in -int8,
// the float model quantised statically (libml/quantize) and calibrated on
// the cpu backend with seeded inputs, so that every tool and every process
// builds the same graph.
package zoomodel

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/quantize"
	"sluice/libml/zoo"
)

// Int8Suffix names a zoo model's statically quantised form ("resnet18-int8").
const Int8Suffix = "-int8"

// calibrationInputs is how many seeded inputs calibrate a quantised model.
const calibrationInputs = 4

// ONNXModel is a trained model file in onnx.ModelsDir, with the input
// dimensions (without the batch) a tool runs it at.
type ONNXModel struct {
	File  string
	Shape []int64
}

// ONNXModels are the real models the tools run by name, beside the zoo's.
var ONNXModels = map[string]ONNXModel{
	"ppocr-cls": {"ch_ppocr_mobile_v2.0_cls_infer.onnx", []int64{3, 48, 192}},
	"ppocr-det": {"ch_PP-OCRv4_det_infer.onnx", []int64{3, 320, 320}},
}

// Base is name without the -int8 suffix, and whether it had it.
func Base(name string) (string, bool) { return strings.CutSuffix(name, Int8Suffix) }

// Build builds model name with opt (see the package comment).
func Build(ctx context.Context, name string, opt zoo.Options) (*graph.Graph, error) {
	base, int8 := Base(name)
	var g *graph.Graph
	var err error
	if m, ok := ONNXModels[base]; ok {
		g, err = readONNX(m)
	} else {
		g, err = zoo.Build(base, opt)
	}
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

// readONNX decodes m's file with its input dimensions fixed and the batch
// dynamic.
func readONNX(m ONNXModel) (*graph.Graph, error) {
	dir, err := onnx.ModelsDir()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, m.File))
	if err != nil {
		return nil, fmt.Errorf("%w (run `make deps`)", err)
	}
	g, err := onnx.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.File, err)
	}
	if len(g.Inputs) != 1 {
		return nil, fmt.Errorf("%s: %d inputs, the tools feed one", m.File, len(g.Inputs))
	}
	g.Inputs[0].Dims = append([]int64{-1}, m.Shape...)
	g.Inputs[0].DimParams = nil
	return g, nil
}
