package main

import (
	"os"
	"path/filepath"
	"testing"

	"sluice/libml/graph"
)

// TestORTTraceAttribution: a trace as ONNX Runtime's profiler writes it
// (per run, node events then the run's model_run event) gives each node's
// median over the runs after the warm-up, and its nodes are attributed to
// our kernels: by name, by the tensor a renamed node writes (_nchwc,
// _token_N), up through the operators fused into a kernel, and down from
// a pointwise convolution fused into the depthwise kernel after it.
func TestORTTraceAttribution(t *testing.T) {
	trace := `[
{"cat":"Session","name":"session_initialization","dur":900},
{"cat":"Node","name":"Clip_1_out_nchwc_kernel_time","dur":50,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_2_kernel_time","dur":7,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_3_quant_token_4_kernel_time","dur":5,"args":{"op_name":"QLinearConv"}},
{"cat":"Node","name":"Reorder_kernel_time","dur":1,"args":{"op_name":"ReorderOutput"}},
{"cat":"Session","name":"model_run","dur":100},
{"cat":"Node","name":"Clip_1_out_nchwc_kernel_time","dur":10,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_2_kernel_time","dur":3,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_3_quant_token_4_kernel_time","dur":4,"args":{"op_name":"QLinearConv"}},
{"cat":"Node","name":"Reorder_kernel_time","dur":1,"args":{"op_name":"ReorderOutput"}},
{"cat":"Session","name":"model_run","dur":30},
{"cat":"Node","name":"Clip_1_out_nchwc_kernel_time","dur":12,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_2_kernel_time","dur":2,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_3_quant_token_4_kernel_time","dur":6,"args":{"op_name":"QLinearConv"}},
{"cat":"Node","name":"Reorder_kernel_time","dur":1,"args":{"op_name":"ReorderOutput"}},
{"cat":"Session","name":"model_run","dur":30},
{"cat":"Node","name":"Clip_1_out_nchwc_kernel_time","dur":11,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_2_kernel_time","dur":4,"args":{"op_name":"Conv"}},
{"cat":"Node","name":"conv_3_quant_token_4_kernel_time","dur":5,"args":{"op_name":"QLinearConv"}},
{"cat":"Node","name":"Reorder_kernel_time","dur":1,"args":{"op_name":"ReorderOutput"}},
{"cat":"Session","name":"model_run","dur":30}
]`
	path := filepath.Join(t.TempDir(), "ort.json")
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes, total, err := parseORTTrace(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := nodes["Clip_1_out_nchwc"]; n.Us != 11 || n.Op != "Conv" {
		t.Errorf("Clip_1_out_nchwc: %+v, want the median of 10, 12, 11 (the warm-up run's 50 left out)", n)
	}
	if n := nodes["conv_2"]; n.Us != 3 {
		t.Errorf("conv_2: %+v, want 3", n)
	}
	if total != 11+3+5+1 {
		t.Errorf("total %v, want the median run's node time 20", total)
	}
	// conv_1 -> Clip_1 (fused into our conv_1); pw -> dw fused into one
	// kernel "pw>dw" of ours; conv_3_quant ours by name
	g := &graph.Graph{Nodes: []graph.Node{
		{Name: "conv_1", Op: "Conv", Inputs: []string{"x", "w1"}, Outputs: []string{"c1"}},
		{Name: "Clip_1", Op: "Clip", Inputs: []string{"c1"}, Outputs: []string{"Clip_1_out"}},
		{Name: "pw", Op: "Conv", Inputs: []string{"Clip_1_out", "w2"}, Outputs: []string{"e"}},
		{Name: "conv_2", Op: "Conv", Inputs: []string{"e", "w3"}, Outputs: []string{"d"}},
		{Name: "pwx", Op: "Conv", Inputs: []string{"d", "w4"}, Outputs: []string{"e2"}},
		{Name: "conv_3_quant", Op: "QLinearConv", Inputs: []string{"e2"}, Outputs: []string{"q"}},
	}}
	nodes["pw"] = ortNode{Op: "Conv", Us: 20}
	nodes["pwx_token_9"] = ortNode{Op: "Conv", Us: 2} // no kernel of ours: fused into its reader
	kernels := map[string]string{"conv_1": "conv_1", "pw": "pw>conv_2", "conv_2": "pw>conv_2", "conv_3_quant": "conv_3_quant"}
	by, rest := attributeORT(nodes, g, kernels)
	if k := by["conv_1"]; k.Us != 11 {
		t.Errorf("conv_1: %+v, want Clip_1_out_nchwc's 11", k)
	}
	if k := by["pw>conv_2"]; k.Us != 23 {
		t.Errorf("pw>conv_2: %+v, want pw's 20 + conv_2's 3", k)
	}
	if k := by["conv_3_quant"]; k.Us != 7 || k.Op != "QLinearConv+Conv" {
		t.Errorf("conv_3_quant: %+v, want conv_3_quant_token_4's 5 + pwx's 2", k)
	}
	if _, ok := rest["Reorder"]; !ok || len(rest) != 1 {
		t.Errorf("unattributed %v, want only Reorder", rest)
	}
}
