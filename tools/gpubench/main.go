// Command gpubench runs the CUDA backend's GPU measurements that are not
// go test benchmarks (libml/cuda/README.md, docs/benchmarks.md):
//
//	gpubench kprof   [-roles RNET,VGG,YOLO,BERT,GPT2] [-small] [-batch 1] [-reps 20]
//	                 [-json kprof.json] [-md kprof.md]
//	gpubench export  -dir DIR [-models resnet50,...] [-batch 1,8] [-backend cuda|cpu] [-small]
//	gpubench latency [-models resnet50,bert] [-batch 1,8] [-n 50] [-backend cuda|cpu] [-small] [-json f]
//
// REEF's DNN inference serving benchmark on the GPU is tools/disb
// -device cuda: the appliance's own scheduler on the cuda backend.
//
// kprof writes the offline kernel profile of the DISB models (per kernel
// and version: grid, occupancy, SMs it fills, kernel time by GPU events,
// block time by the trace ring, whether another version dominates it) as
// JSON, and a summary table.
//
// export writes, for tools/gpubench/torchref.py, each zoo model as ONNX
// (libml/onnx), seeded inputs and the backend's outputs for them as
// .npy files, and manifest.json.
//
// latency times InferBatch (copies included) per model and batch, as
// BenchmarkGPUBackendLatency does, and writes ms p50/p99 as JSON for
// torchref.py's comparison with PyTorch. A model named with the suffix
// -int8 ("resnet18-int8") is the zoo model quantised statically
// (tools/internal/zoomodel), so `-models resnet18,resnet18-int8` puts a
// model's int8 latency beside its float32 one.
//
// The cuda backend needs libcuda.so.1 (an NVIDIA driver); without one the
// command fails with an error saying so. -backend cpu runs export and
// latency on the cpu backend (what the tests here use).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/cuda"
	"sluice/libml/cuda/cudrv"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/zoo"
	"sluice/tools/internal/zoomodel"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}

const usage = "usage: gpubench kprof|export|latency [flags] (-h after the subcommand for its flags)"

// run is the command with its arguments (tests call it).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "kprof":
		return runKprof(ctx, args[1:], stdout, stderr)
	case "export":
		return runExport(ctx, args[1:], stdout, stderr)
	case "latency":
		return runLatency(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown subcommand %q; %s", args[0], usage)
}

// modelSpec is a model and its size.
type modelSpec struct {
	Zoo string // a zoo model, or its quantised form (zoomodel.Build)
	Opt zoo.Options
}

func (m modelSpec) size() string {
	o := m.Opt
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	switch base, _ := zoomodel.Base(m.Zoo); base {
	case "bert":
		return fmt.Sprintf("%d layers, seq %d, hidden %d, %d heads, FF %d",
			def(o.Layers, 12), def(o.SeqLen, 128), def(o.Hidden, 768), def(o.Heads, 12), def(o.FF, 3072))
	case "unet3d":
		return fmt.Sprintf("%dx%dx%d volumes, %d classes", def(o.Depth, 32), def(o.Height, 64), def(o.Width, 64), def(o.Classes, 2))
	}
	if o.Height == 0 {
		return "224x224, 1000 classes"
	}
	return fmt.Sprintf("%dx%d, %d classes", o.Height, o.Width, o.Classes)
}

// zooSpec is a zoo model at its standard size, or (small) at the CPU
// DISB's reduced size.
func zooSpec(name string, small bool) modelSpec {
	if !small {
		return modelSpec{Zoo: name, Opt: zoo.Options{Seed: 1}}
	}
	base, _ := zoomodel.Base(name)
	if base == "bert" {
		return modelSpec{Zoo: name, Opt: zoo.Options{Layers: 4, SeqLen: 32, Hidden: 128, Heads: 4, FF: 512, Seed: 1}}
	}
	side := 32
	if base == "mobilenetv2" {
		side = 48
	}
	return modelSpec{Zoo: name, Opt: zoo.Options{Height: side, Width: side, Classes: 10, Seed: 1}}
}

// disbRoles are REEF's DISB roles, in order.
var disbRoleOrder = []string{"RNET", "VGG", "YOLO", "BERT", "GPT2"}

// disbRoles maps REEF's DISB roles to zoo models (as tools/disb).
var disbRoles = map[string]string{"RNET": "resnet50", "VGG": "vgg16", "YOLO": "resnet18", "BERT": "bert", "GPT2": "mobilenetv2"}

// deviceName describes GPU ordinal (name, SMs, compute capability,
// memory), or says why it cannot.
func deviceName(ordinal int) string {
	drv, err := cudrv.Open()
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	dv, err := drv.Primary(ordinal)
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	defer dv.Close()
	return fmt.Sprintf("%s, %d SMs, compute capability %d.%d, %d GiB", dv.Name, dv.SMs, dv.CC[0], dv.CC[1], dv.Memory>>30)
}

// newBackend initializes the cuda or the cpu backend.
func newBackend(ctx context.Context, kind string, logf func(string, ...any)) (libml.Backend, error) {
	var b libml.Backend
	switch kind {
	case "cuda":
		b = cuda.NewBackend(cuda.Options{Logf: logf})
	case "cpu":
		b = cpu.New()
	default:
		return nil, fmt.Errorf("unknown backend %q (have cuda, cpu)", kind)
	}
	if err := b.Init(ctx, libml.BackendConfig{}); err != nil {
		return nil, err
	}
	return b, nil
}

// ExportEntry is one (model, batch) of an export: the ONNX file, the
// input and the backend's output, relative to the manifest.
type ExportEntry struct {
	Model    string  `json:"model"`
	Size     string  `json:"size"`
	ONNX     string  `json:"onnx"`
	Batch    int     `json:"batch"`
	Input    string  `json:"input"`
	Output   string  `json:"output"`
	InShape  []int64 `json:"in_shape"`
	OutShape []int64 `json:"out_shape"`
	// Ms is the backend's time for this batch (InferBatch, one run after
	// a warm-up), for information.
	Ms float64 `json:"ms"`
}

// Manifest is export's manifest.json.
type Manifest struct {
	Backend string        `json:"backend"`
	Entries []ExportEntry `json:"entries"`
}

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpubench export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "output directory (required)")
	models := fs.String("models", "resnet18,resnet50,mobilenetv2,squeezenet11,vgg16,bert", "zoo models")
	batches := fs.String("batch", "1,8", "batch sizes")
	backend := fs.String("backend", "cuda", "backend whose outputs are written: cuda or cpu")
	small := fs.Bool("small", false, "reduced model sizes (tests)")
	seed := fs.Uint64("seed", 1, "input seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("export: -dir is required")
	}
	bs, err := parseInts(*batches)
	if err != nil {
		return fmt.Errorf("export: -batch: %w", err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	logf := log.New(stderr, "", log.Ltime).Printf
	b, err := newBackend(ctx, *backend, logf)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer b.Deinit()
	man := Manifest{Backend: *backend}
	for _, name := range splitList(*models) {
		spec := zooSpec(name, *small)
		g, err := zoomodel.Build(ctx, spec.Zoo, spec.Opt)
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		enc, err := onnx.Encode(g)
		if err != nil {
			return fmt.Errorf("export %s: %w", name, err)
		}
		onnxName := name + ".onnx"
		if err := os.WriteFile(filepath.Join(*dir, onnxName), enc, 0o644); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		err = eachBatch(ctx, b, name, g, bs, func(inst libml.Instance, batch int) error {
			in := zoo.Input(*seed+uint64(batch), batch*inst.InputSize())
			out := make([]float32, batch*inst.OutputSize())
			if err := b.InferBatch(ctx, inst, batch, in, out); err != nil {
				return err
			}
			t0 := time.Now()
			if err := b.InferBatch(ctx, inst, batch, in, out); err != nil {
				return err
			}
			ms := float64(time.Since(t0).Microseconds()) / 1e3
			e := ExportEntry{Model: name, Size: spec.size(), ONNX: onnxName, Batch: batch, Ms: ms,
				Input:    fmt.Sprintf("%s_b%d_in.npy", name, batch),
				Output:   fmt.Sprintf("%s_b%d_out.npy", name, batch),
				InShape:  append([]int64{int64(batch)}, inst.InputShape()...),
				OutShape: append([]int64{int64(batch)}, inst.OutputShape()...)}
			if err := writeNpy(filepath.Join(*dir, e.Input), e.InShape, in); err != nil {
				return err
			}
			if err := writeNpy(filepath.Join(*dir, e.Output), e.OutShape, out); err != nil {
				return err
			}
			man.Entries = append(man.Entries, e)
			fmt.Fprintf(stdout, "%s batch %d: %s, %s (%s %.3f ms)\n", name, batch, e.Input, e.Output, *backend, ms)
			return nil
		})
		if err != nil {
			return fmt.Errorf("export %s: %w", name, err)
		}
	}
	if err := writeJSON(filepath.Join(*dir, "manifest.json"), &man); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// LatencyRow is one (model, batch) of latency's JSON.
type LatencyRow struct {
	Model   string  `json:"model"`
	Size    string  `json:"size"`
	Batch   int     `json:"batch"`
	Runs    int     `json:"runs"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MeanMs  float64 `json:"mean_ms"`
	Backend string  `json:"backend"`
}

func runLatency(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpubench latency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	models := fs.String("models", "resnet50,bert", "zoo models")
	batches := fs.String("batch", "1,8", "batch sizes")
	n := fs.Int("n", 50, "timed runs per model and batch")
	warm := fs.Int("warmup", 5, "untimed runs first")
	backend := fs.String("backend", "cuda", "cuda or cpu")
	small := fs.Bool("small", false, "reduced model sizes (tests)")
	jsonPath := fs.String("json", "", "write the rows as JSON here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return errors.New("latency: -n must be at least 1")
	}
	bs, err := parseInts(*batches)
	if err != nil {
		return fmt.Errorf("latency: -batch: %w", err)
	}
	logf := log.New(stderr, "", log.Ltime).Printf
	b, err := newBackend(ctx, *backend, logf)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	defer b.Deinit()
	var rows []LatencyRow
	fmt.Fprintf(stdout, "| model | batch | runs | p50 (ms) | p99 (ms) | mean (ms) |\n|---|--:|--:|--:|--:|--:|\n")
	for _, name := range splitList(*models) {
		spec := zooSpec(name, *small)
		g, err := zoomodel.Build(ctx, spec.Zoo, spec.Opt)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		err = eachBatch(ctx, b, name, g, bs, func(inst libml.Instance, batch int) error {
			in := zoo.Input(1, batch*inst.InputSize())
			out := make([]float32, batch*inst.OutputSize())
			for k := 0; k < *warm; k++ {
				if err := b.InferBatch(ctx, inst, batch, in, out); err != nil {
					return err
				}
			}
			lat := make([]float64, 0, *n)
			for k := 0; k < *n; k++ {
				t0 := time.Now()
				if err := b.InferBatch(ctx, inst, batch, in, out); err != nil {
					return err
				}
				lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e6)
			}
			r := LatencyRow{Model: name, Size: spec.size(), Batch: batch, Runs: *n, Backend: *backend}
			r.MeanMs = meanOf(lat)
			slices.Sort(lat)
			r.P50Ms, r.P99Ms = pct(lat, 50), pct(lat, 99)
			rows = append(rows, r)
			fmt.Fprintf(stdout, "| %s | %d | %d | %.3f | %.3f | %.3f |\n", name, batch, r.Runs, r.P50Ms, r.P99Ms, r.MeanMs)
			return nil
		})
		if err != nil {
			return fmt.Errorf("latency %s: %w", name, err)
		}
	}
	if *jsonPath != "" {
		if err := writeJSON(*jsonPath, rows); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	return nil
}

// eachBatch loads g on b as name, configures the instance for the
// largest of bs and calls f with it for each batch size in turn; the
// instance is closed after.
func eachBatch(ctx context.Context, b libml.Backend, name string, g *graph.Graph, bs []int, f func(inst libml.Instance, batch int) error) error {
	inst, err := b.LoadModel(ctx, name, g)
	if err != nil {
		return err
	}
	defer inst.Close()
	if err := b.ConfigureBatch(inst, slices.Max(bs)); err != nil {
		return err
	}
	for _, batch := range bs {
		if err := f(inst, batch); err != nil {
			return err
		}
	}
	return nil
}

func meanOf(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// pct is the p-th percentile of sorted v (nearest rank).
func pct(v []float64, p float64) float64 {
	k := int(float64(len(v))*p/100+0.999999) - 1
	return v[min(max(k, 0), len(v)-1)]
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad value %q", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
