package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/ort"
	"sluice/libml/zoo"
	"sluice/tools/internal/zoomodel"
)

// ortNodeTimes runs model under ONNX Runtime with its profiler on (warm-up
// runs, then runs measured) and returns each node's median kernel time in
// microseconds by node name, with the op ONNX Runtime ran it as, and the
// median of the runs' total node time.
func ortNodeTimes(model string, batch, units, warm, runs int) (map[string]ortNode, float64, *graph.Graph, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "enginebench-ortprof")
	if err != nil {
		return nil, 0, nil, err
	}
	defer os.RemoveAll(dir)
	be := ort.New(ort.Options{IntraOpThreads: units, Quiet: true, ProfilePrefix: filepath.Join(dir, "ort")})
	if err := be.Init(ctx, libml.BackendConfig{Units: units}); err != nil {
		return nil, 0, nil, err
	}
	defer be.Deinit()
	g, err := zoomodel.Build(ctx, model, zoo.Options{})
	if err != nil {
		return nil, 0, nil, err
	}
	// the graph without its weights, to attribute ONNX Runtime's nodes
	shape := &graph.Graph{Nodes: g.Nodes}
	inst, err := be.LoadModel(ctx, model, g)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := be.ConfigureBatch(inst, batch); err != nil {
		inst.Close()
		return nil, 0, nil, err
	}
	in := zoo.Input(1, batch*inst.InputSize())
	out := make([]float32, batch*inst.OutputSize())
	for i := 0; i < warm+runs; i++ {
		if err := be.InferBatch(ctx, inst, batch, in, out); err != nil {
			inst.Close()
			return nil, 0, nil, err
		}
	}
	inst.Close() // writes the trace
	files, _ := filepath.Glob(filepath.Join(dir, "ort*.json"))
	if len(files) == 0 {
		return nil, 0, nil, fmt.Errorf("onnxruntime wrote no profile in %s", dir)
	}
	sort.Strings(files)
	nodes, total, err := parseORTTrace(files[len(files)-1], warm)
	return nodes, total, shape, err
}

// attributeORT sums ONNX Runtime's node times by the kernel of ours that
// does the same work. ONNX Runtime names a node it made by fusing or
// re-laying out after the tensor it writes ("Clip_3_out_nchwc"); the node
// of the graph that writes that tensor, or the first of its producers up
// the chain of first inputs that names a kernel of ours, is the one. A
// convolution or product on the way that is no kernel of ours was fused
// into the kernel that reads its output (a pointwise convolution into
// the depthwise one after it): its first consumer down the chain is the
// one. kernels maps each node a kernel of ours computes to the kernel's
// name. Nodes attributed to no kernel come back in rest.
func attributeORT(nodes map[string]ortNode, g *graph.Graph, kernels map[string]string) (byKernel map[string]ortNode, rest map[string]ortNode) {
	producer := map[string]*graph.Node{}
	consumer := map[string]*graph.Node{}
	byName := map[string]*graph.Node{}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		byName[n.Name] = n
		for _, o := range n.Outputs {
			producer[o] = n
		}
		for _, in := range n.Inputs {
			if consumer[in] == nil {
				consumer[in] = n
			}
		}
	}
	compute := map[string]bool{"Conv": true, "Gemm": true, "MatMul": true, "ConvTranspose": true}
	byKernel, rest = map[string]ortNode{}, map[string]ortNode{}
	names := make([]string, 0, len(nodes))
	for name := range nodes {
		names = append(names, name)
	}
	sort.Strings(names) // a kernel's ops listed in one order
	for _, name := range names {
		t := nodes[name]
		// its layout passes rename nodes "<node>_token_<n>"
		base := name
		if i := strings.LastIndex(base, "_token_"); i > 0 {
			base = base[:i]
		}
		n := byName[base]
		if n == nil {
			n = producer[strings.TrimSuffix(base, "_nchwc")]
		}
		down := false
		for depth := 0; n != nil && kernels[n.Name] == "" && depth < 8; depth++ {
			down = down || compute[n.Op]
			switch {
			case down && len(n.Outputs) > 0:
				n = consumer[n.Outputs[0]]
			case !down && len(n.Inputs) > 0:
				n = producer[n.Inputs[0]]
			default:
				n = nil
			}
		}
		if n == nil || kernels[n.Name] == "" {
			rest[name] = t
			continue
		}
		kn := kernels[n.Name]
		k := byKernel[kn]
		k.Us += t.Us
		if k.Op == "" {
			k.Op = t.Op
		} else if !slices.Contains(strings.Split(k.Op, "+"), t.Op) {
			k.Op += "+" + t.Op
		}
		byKernel[kn] = k
	}
	return byKernel, rest
}

// ortNode is one node's time under ONNX Runtime.
type ortNode struct {
	Op string
	Us float64
}

// parseORTTrace reads ONNX Runtime's profiler JSON: per run, a
// "model_run" event, and per node a "<name>_kernel_time" event.
func parseORTTrace(path string, warm int) (map[string]ortNode, float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var evs []struct {
		Cat  string         `json:"cat"`
		Name string         `json:"name"`
		Dur  float64        `json:"dur"`
		Args map[string]any `json:"args"`
	}
	if err := json.Unmarshal(b, &evs); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	run := -1
	times := map[string][]float64{}
	ops := map[string]string{}
	var totals []float64
	for _, e := range evs {
		if e.Cat == "Session" && e.Name == "model_run" {
			run++
			continue
		}
		if e.Cat != "Node" || !strings.HasSuffix(e.Name, "_kernel_time") {
			continue
		}
		// a node's event comes before its run's model_run event (which
		// closes the run), so the run it belongs to is run+1
		if run+1 < warm {
			continue
		}
		name := strings.TrimSuffix(e.Name, "_kernel_time")
		times[name] = append(times[name], e.Dur)
		if op, ok := e.Args["op_name"].(string); ok {
			ops[name] = op
		}
	}
	res := map[string]ortNode{}
	var nruns int
	for name, ts := range times {
		sort.Float64s(ts)
		res[name] = ortNode{Op: ops[name], Us: ts[len(ts)/2]}
		nruns = max(nruns, len(ts))
	}
	for r := 0; r < nruns; r++ {
		var sum float64
		for _, ts := range times {
			if r < len(ts) {
				sum += ts[r]
			}
		}
		totals = append(totals, sum)
	}
	sort.Float64s(totals)
	total := 0.0
	if len(totals) > 0 {
		total = totals[len(totals)/2]
	}
	return res, total, nil
}
