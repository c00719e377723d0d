// Command quantize turns a float32 ONNX model into a statically quantised
// one (libml/quantize: int8 weights per output channel, uint8 activations,
// QLinearConv / QLinearMatMul), which sluice's cpu and cuda engines and
// ONNX Runtime serve as they are.
//
//	quantize -in model.onnx -calib calib/ -out model-int8.onnx
//	quantize -zoo resnet18 -random 8 -out resnet18-int8.onnx
//
// Calibration runs the float model on the cpu engine over sample inputs
// and records each quantised activation's range. -calib names a directory
// of ONNX TensorProto files (*.pb, one input each, as in ONNX's
// test_data_set directories; subdirectories are searched); -random N uses
// N seeded normal inputs instead, which only suits inputs that really are
// normalised noise-like data. Representative inputs give better scales.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/quantize"
	"sluice/libml/zoo"
)

func main() {
	in := flag.String("in", "", "float32 ONNX model to quantise")
	zooName := flag.String("zoo", "", "a libml/zoo model instead of -in (seeded, untrained weights)")
	out := flag.String("out", "", "where to write the quantised ONNX model")
	calib := flag.String("calib", "", "directory of calibration inputs (ONNX TensorProto *.pb files)")
	random := flag.Int("random", 0, "calibrate with this many seeded normal inputs instead of -calib")
	units := flag.Int("units", 2, "cpu engine units for calibration")
	flag.Parse()
	if err := run(*in, *zooName, *out, *calib, *random, *units); err != nil {
		fmt.Fprintln(os.Stderr, "quantize:", err)
		os.Exit(1)
	}
}

func run(in, zooName, out, calib string, random, units int) error {
	if out == "" {
		return errors.New("-out is required")
	}
	if (in == "") == (zooName == "") {
		return errors.New("give one of -in and -zoo")
	}
	if (calib == "") == (random <= 0) {
		return errors.New("give one of -calib and -random")
	}
	var g *graph.Graph
	var err error
	if in != "" {
		g, err = onnx.ReadFile(in)
	} else {
		g, err = zoo.Build(zooName, zoo.Options{})
	}
	if err != nil {
		return err
	}
	if len(g.Inputs) != 1 {
		return fmt.Errorf("the model has %d inputs; quantize calibrates one-input models", len(g.Inputs))
	}
	var sets []map[string]*graph.Tensor
	if calib != "" {
		sets, err = readCalib(calib, g.Inputs[0])
	} else {
		sets, err = quantize.Samples(g, random, 1000, zoo.Input)
	}
	if err != nil {
		return err
	}
	ctx := context.Background()
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: units}); err != nil {
		return err
	}
	defer be.Deinit()
	q, st, err := quantize.Model(ctx, g, be.RunGraph, sets)
	if err != nil {
		return err
	}
	b, err := onnx.Encode(q)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d convolutions and %d MatMuls quantised (%d activations absorbed, %d uint8 MaxPools, %d uint8 Adds), %d QuantizeLinear, %d DequantizeLinear; calibrated on %d inputs; %d bytes\n",
		out, st.Convs, st.MatMuls, st.FusedActs, st.QPools, st.Adds, st.Quantize, st.Dequantize, len(sets), len(b))
	return nil
}

// readCalib reads every *.pb under dir as one value of input vi.
func readCalib(dir string, vi graph.ValueInfo) ([]map[string]*graph.Tensor, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".pb") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.pb calibration inputs", dir)
	}
	var sets []map[string]*graph.Tensor
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		t, err := onnx.DecodeTensor(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if t.DType != graph.Float32 || len(t.Dims) != len(vi.Dims) {
			return nil, fmt.Errorf("%s: %s%v does not fit input %q (float32, rank %d)", f, t.DType, t.Dims, vi.Name, len(vi.Dims))
		}
		t.Name = vi.Name
		sets = append(sets, map[string]*graph.Tensor{vi.Name: t})
	}
	return sets, nil
}
