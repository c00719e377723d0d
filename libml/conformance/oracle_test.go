package conformance

// ONNX Runtime as the oracle where the node tests of libonnx-testdata 1.12
// do not reach: operators without node tests there, attributes and
// opsets past 1.12, and references 1.12 rounds. Where ONNX Runtime 1.24
// itself departs from the operator's definition, the test says so and
// checks against the definition instead.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
)

// RoiAlign against ONNX Runtime: libonnx-testdata 1.12 gives its
// references rounded to 4 decimals (one of them not the rounding of the
// exact value), so ONNX Runtime is the oracle here, for both node tests'
// graphs (half_pixel and output_half_pixel) and variants of them: max
// mode, adaptive sampling with a spatial scale.
func TestRoiAlignORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	set := func(n *graph.Node, a graph.Attr) {
		for i := range n.Attrs {
			if n.Attrs[i].Name == a.Name {
				n.Attrs[i] = a
				return
			}
		}
		n.Attrs = append(n.Attrs, a)
	}
	for _, name := range []string{"test_roialign_aligned_false", "test_roialign_aligned_true"} {
		nt, err := LoadNodeTest(name)
		if err != nil {
			RequireDeps(t, "libonnx-testdata", err)
		}
		ds := nt.Sets[0]
		for _, v := range []struct {
			what  string
			attrs []graph.Attr
		}{
			{"as is", nil},
			{"max", []graph.Attr{aStr("mode", "max")}},
			{"adaptive sampling, scale 0.5", []graph.Attr{aInt("sampling_ratio", 0),
				aFloat("spatial_scale", 0.5)}},
		} {
			g := pruneOutputs(singleIO(nt, ds, 0, 0))
			g.Nodes = append([]graph.Node{}, g.Nodes...)
			n := &g.Nodes[0]
			n.Attrs = append([]graph.Attr{}, n.Attrs...)
			for _, a := range v.attrs {
				set(n, a)
			}
			if _, err := againstORT(ctx, ob, cb, name, g, ds.Inputs[0], ds.Outputs[0]); err != nil {
				t.Errorf("%s, %s: %v", name, v.what, err)
			}
		}
	}
}

// Operators libonnx-testdata 1.12 has no node tests for, run as function
// bodies (LpNormalization, Mish), against ONNX Runtime.
func TestBodiesORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{2, 3, 4}, F32: make([]float32, 24)}
	for i := range x.F32 {
		x.F32[i] = float32((i*7)%11)/3 - 1.7
	}
	for _, c := range []struct {
		name  string
		node  graph.Node
		opset int64
	}{
		{"lpnorm-l2-axis1", graph.Node{Op: "LpNormalization", Attrs: []graph.Attr{aInt("axis", 1), aInt("p", 2)}}, 13},
		{"lpnorm-l1-last", graph.Node{Op: "LpNormalization", Attrs: []graph.Attr{aInt("p", 1)}}, 13},
		{"mish", graph.Node{Op: "Mish"}, 18},
	} {
		n := c.node
		n.Name, n.Inputs, n.Outputs = c.name, []string{"x"}, []string{"y"}
		g, want := oneNodeGraph(c.name, c.opset, n, nil, x.Dims, x.Dims)
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestPool3DORT checks 3-D MaxPool and AveragePool (lowered as two 2-D
// POOL kernels, pool3dParams) against ONNX Runtime with padding, strides,
// dilations, ceil_mode and count_include_pad on every axis.
func TestPool3DORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	in := []int64{2, 3, 5, 7, 6}
	x := ramp("x", in, 37, 101, 17, 2.9)
	for _, c := range []struct {
		name              string
		op                string
		k, s, pads, dil   []int64
		ceil, includePads int64
	}{
		{"max-pads-strides", "MaxPool", []int64{2, 3, 3}, []int64{1, 2, 2}, []int64{1, 1, 0, 1, 0, 1}, nil, 0, 0},
		{"avg-pads", "AveragePool", []int64{3, 2, 2}, []int64{2, 1, 2}, []int64{1, 0, 1, 1, 1, 0}, nil, 0, 0},
		{"avg-pads-counted", "AveragePool", []int64{3, 2, 2}, []int64{2, 1, 2}, []int64{1, 0, 1, 1, 1, 0}, nil, 0, 1},
		{"avg-sym-counted", "AveragePool", []int64{3, 2, 2}, []int64{2, 1, 2}, []int64{1, 1, 1, 1, 1, 1}, nil, 0, 1},
		{"avg-d-counted", "AveragePool", []int64{3, 2, 2}, []int64{2, 1, 2}, []int64{1, 0, 0, 2, 0, 0}, nil, 0, 1},
		{"avg-hw-counted", "AveragePool", []int64{2, 3, 3}, []int64{1, 2, 2}, []int64{0, 1, 0, 0, 2, 2}, nil, 0, 1},
		{"max-ceil", "MaxPool", []int64{2, 2, 2}, []int64{2, 2, 2}, nil, nil, 1, 0},
		{"avg-ceil", "AveragePool", []int64{2, 3, 2}, []int64{2, 2, 2}, nil, nil, 1, 0},
		{"max-dilated", "MaxPool", []int64{2, 2, 2}, []int64{1, 2, 1}, []int64{0, 1, 1, 0, 1, 1}, []int64{2, 1, 2}, 0, 0},
	} {
		n := graph.Node{Op: c.op, Name: c.name, Inputs: []string{"x"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{aInts("kernel_shape", c.k...), aInts("strides", c.s...), aInt("ceil_mode", c.ceil)}}
		pads := c.pads
		if pads == nil {
			pads = make([]int64, 6)
		}
		n.Attrs = append(n.Attrs, aInts("pads", pads...))
		dil := c.dil
		if dil != nil {
			n.Attrs = append(n.Attrs, aInts("dilations", dil...))
		} else {
			dil = []int64{1, 1, 1}
		}
		if c.op == "AveragePool" {
			n.Attrs = append(n.Attrs, aInt("count_include_pad", c.includePads))
		}
		out := []int64{in[0], in[1]}
		for i := range 3 {
			span := in[2+i] + pads[i] + pads[3+i] - ((c.k[i]-1)*dil[i] + 1)
			o := span/c.s[i] + 1
			if c.ceil != 0 && span%c.s[i] != 0 {
				o++
			}
			out = append(out, o)
		}
		g, want := oneNodeGraph(c.name, 19, n, nil, in, out)
		symmetric := pads[0] == pads[3] && pads[1] == pads[4] && pads[2] == pads[5]
		if c.includePads == 0 || symmetric {
			if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		// ONNX Runtime 1.24 divides by the wrong padded extent with
		// asymmetric pads and count_include_pad (its pull request 27375);
		// here the spec's definition: the window within the padded input
		copy(want.F32, avgPool3DCounted(x.F32, in, out, c.k, c.s, pads))
		got, err := runOnBackend(ctx, cb, c.name, g, x, want)
		if err == nil {
			err = Compare(got, want)
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// 3-D convolutions (lowerConv3D: depth windows unfolded into the
// channels of one 2-D convolution) against ONNX Runtime: pads, strides
// and dilations on every axis, groups, a bias, auto_pad, a 1x1x1 kernel,
// a fused ReLU and a residual Add the 2-D convolution cannot take.
func TestConv3DORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		name                 string
		in, w                []int64
		group                int64
		s, pads, dil         []int64
		auto                 string
		bias, relu, residual bool
	}{
		{"plain", []int64{2, 3, 5, 6, 7}, []int64{4, 3, 3, 3, 3}, 1, nil, nil, nil, "", false, false, false},
		{"pads-strides-bias", []int64{1, 4, 7, 9, 8}, []int64{6, 4, 3, 3, 2}, 1, []int64{2, 1, 2}, []int64{1, 1, 0, 2, 1, 1}, nil, "", true, false, false},
		{"groups-dilations", []int64{2, 6, 6, 7, 7}, []int64{4, 3, 2, 3, 3}, 2, []int64{1, 2, 1}, []int64{1, 0, 1, 0, 1, 1}, []int64{2, 1, 2}, "", true, false, false},
		{"depthwise", []int64{1, 4, 5, 6, 6}, []int64{4, 1, 3, 3, 3}, 4, nil, []int64{1, 1, 1, 1, 1, 1}, nil, "", true, false, false},
		{"same-upper-relu", []int64{1, 3, 6, 5, 7}, []int64{5, 3, 3, 3, 3}, 1, []int64{2, 2, 1}, nil, nil, "SAME_UPPER", true, true, false},
		{"pointwise-residual", []int64{2, 8, 3, 4, 5}, []int64{8, 8, 1, 1, 1}, 1, nil, nil, nil, "", true, false, true},
		{"winograd-2d", []int64{1, 16, 3, 12, 12}, []int64{16, 16, 1, 3, 3}, 1, nil, []int64{0, 1, 1, 0, 1, 1}, nil, "", false, true, false},
		// 50 output depths of 393,216 unfolded values each: two chunks (42 + 8)
		{"chunked", []int64{1, 8, 52, 128, 128}, []int64{4, 8, 3, 3, 3}, 1, nil, nil, nil, "", true, false, false},
	} {
		x := ramp("x", c.in, 37, 101, 17, 2.9)
		var biasLen int64
		if c.bias {
			biasLen = c.w[0]
		}
		n, inits := convNode("Conv", c.name, c.w, c.group, biasLen)
		s, dil, pads := c.s, c.dil, c.pads
		if s == nil {
			s = []int64{1, 1, 1}
		}
		if dil == nil {
			dil = []int64{1, 1, 1}
		}
		if pads == nil {
			pads = make([]int64, 6)
		}
		n.Attrs = append(n.Attrs, aInts("strides", s...), aInts("dilations", dil...))
		out := []int64{c.in[0], c.w[0]}
		for i := range 3 {
			ek := (c.w[2+i]-1)*dil[i] + 1
			if c.auto != "" {
				out = append(out, (c.in[2+i]+s[i]-1)/s[i])
				continue
			}
			out = append(out, (c.in[2+i]+pads[i]+pads[3+i]-ek)/s[i]+1)
		}
		if c.auto != "" {
			n.Attrs = append(n.Attrs, aStr("auto_pad", c.auto))
		} else {
			n.Attrs = append(n.Attrs, aInts("pads", pads...))
		}
		g, want := oneNodeGraph(c.name, 17, n, inits, c.in, out)
		if c.relu || c.residual {
			g.Nodes[0].Outputs = []string{"c"}
			last := "c"
			if c.residual { // x and y have the same shape
				g.Nodes = append(g.Nodes, graph.Node{Op: "Add", Name: "res", Inputs: []string{"c", "x"}, Outputs: []string{"r"}})
				last = "r"
			}
			if c.relu {
				g.Nodes = append(g.Nodes, graph.Node{Op: "Relu", Name: "relu", Inputs: []string{last}, Outputs: []string{"a"}})
				last = "a"
			}
			g.Nodes = append(g.Nodes, graph.Node{Op: "Identity", Name: "out", Inputs: []string{last}, Outputs: []string{"y"}})
		}
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.name == "chunked" {
			m, err := engine.Load(g, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := m.Compile(map[string][]int64{"x": c.in})
			if err != nil {
				t.Fatal(err)
			}
			unfolds := 0
			for _, k := range p.Kernels {
				if k.Ops == "conv3d unfold" {
					unfolds++
				}
			}
			if unfolds != 2 {
				t.Errorf("chunked: %d unfold kernels, want 2 chunks", unfolds)
			}
		}
	}
}

// 3-D transposed convolutions (lowerConvTranspose3D: the input spread by
// the strides and padded, a stride-1 3-D convolution by the flipped
// weights) against ONNX Runtime: strides, pads (one past the kernel's
// reach: a crop), output_padding, dilations, groups, output_shape,
// auto_pad, a bias.
func TestConvTranspose3DORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		in, w []int64
		group int64
		attrs []graph.Attr
		out   []int64
		bias  bool
	}{
		{"plain", []int64{2, 3, 3, 4, 5}, []int64{3, 2, 3, 3, 3}, 1, nil, []int64{2, 2, 5, 6, 7}, false},
		{"strides-pads-bias", []int64{1, 4, 3, 4, 3}, []int64{4, 3, 3, 2, 3}, 1,
			[]graph.Attr{aInts("strides", 2, 3, 2), aInts("pads", 1, 0, 1, 0, 1, 1)}, []int64{1, 3, 6, 10, 5}, true},
		{"crop-output-padding", []int64{1, 2, 4, 3, 3}, []int64{2, 2, 2, 3, 2}, 1,
			[]graph.Attr{aInts("strides", 2, 2, 1), aInts("pads", 2, 1, 0, 1, 0, 0), aInts("output_padding", 1, 1, 0)}, []int64{1, 2, 6, 7, 4}, true},
		{"groups-dilations", []int64{2, 4, 3, 3, 4}, []int64{4, 3, 2, 2, 3}, 2,
			[]graph.Attr{aInts("dilations", 2, 1, 2), aInts("strides", 1, 2, 1)}, []int64{2, 6, 5, 6, 8}, true},
		{"output-shape", []int64{1, 2, 3, 3, 3}, []int64{2, 3, 3, 3, 3}, 1,
			[]graph.Attr{aInts("strides", 2, 2, 2), aInts("output_shape", 6, 7, 6)}, []int64{1, 3, 6, 7, 6}, false},
		{"same-upper", []int64{1, 2, 3, 4, 3}, []int64{2, 2, 3, 3, 2}, 1,
			[]graph.Attr{aInts("strides", 2, 1, 2), aStr("auto_pad", "SAME_UPPER")}, []int64{1, 2, 6, 4, 6}, true},
	} {
		x := ramp("x", c.in, 37, 101, 17, 2.9)
		var biasLen int64
		if c.bias {
			biasLen = c.w[1] * c.group
		}
		n, inits := convNode("ConvTranspose", c.name, c.w, c.group, biasLen, c.attrs...)
		g, want := oneNodeGraph(c.name, 17, n, inits, c.in, c.out)
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// Resize of three dimensions (a 5-D input resized in depth too: the
// (H, W) pass, then a (D, OH*OW) pass with scale 1 along its second axis)
// against ONNX Runtime: nearest and linear, coordinate modes, sizes,
// downsampling; tf_crop_and_resize with a crop in depth against the
// operator's definition.
func TestResize3DORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	in := []int64{2, 3, 4, 5, 6}
	x := ramp("x", in, 37, 101, 17, 2.9)
	for _, c := range []struct {
		name  string
		attrs []graph.Attr
		roi   []float32
		scale []float32
		sizes []int64
		out   []int64
	}{
		{"linear", []graph.Attr{aStr("mode", "linear")}, nil, []float32{1, 1, 2, 2, 2}, nil, []int64{2, 3, 8, 10, 12}},
		{"nearest", nil, nil, []float32{1, 1, 2, 1.5, 0.5}, nil, []int64{2, 3, 8, 7, 3}},
		{"linear-align-corners", []graph.Attr{aStr("mode", "linear"), aStr("coordinate_transformation_mode", "align_corners")},
			nil, nil, []int64{2, 3, 7, 9, 4}, []int64{2, 3, 7, 9, 4}},
		{"nearest-asymmetric-floor", []graph.Attr{aStr("coordinate_transformation_mode", "asymmetric"), aStr("nearest_mode", "floor")},
			nil, []float32{1, 1, 0.5, 2, 1}, nil, []int64{2, 3, 2, 10, 6}},
		{"linear-depth-only", []graph.Attr{aStr("mode", "linear"), aStr("coordinate_transformation_mode", "pytorch_half_pixel")},
			nil, []float32{1, 1, 1.75, 1, 1}, nil, []int64{2, 3, 7, 5, 6}},
	} {
		n := graph.Node{Op: "Resize", Name: c.name, Outputs: []string{"y"}, Attrs: c.attrs}
		var inits []*graph.Tensor
		roiName := ""
		if c.roi != nil {
			inits, roiName = append(inits, f32Vec("roi", c.roi...)), "roi"
		}
		switch {
		case c.scale != nil:
			inits = append(inits, f32Vec("scales", c.scale...))
			n.Inputs = []string{"x", roiName, "scales"}
		default:
			inits = append(inits, &graph.Tensor{Name: "sizes", DType: graph.Int64, Dims: []int64{5}, I64: c.sizes})
			n.Inputs = []string{"x", roiName, "", "sizes"}
		}
		g, want := oneNodeGraph(c.name, 19, n, inits, in, c.out)
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// tf_crop_and_resize with a crop in depth, H and W (partly outside
	// the input: extrapolated): ONNX Runtime 1.24's trilinear crop gives
	// other values everywhere, so here the operator's definition, trilinear
	// in float64
	roi := []float32{0, 0, 0.2, -0.1, 0.1, 1, 1, 0.9, 1.2, 0.8}
	out := []int64{2, 3, 6, 5, 4}
	n := graph.Node{Op: "Resize", Name: "crop3d", Outputs: []string{"y"}, Inputs: []string{"x", "roi", "", "sizes"},
		Attrs: []graph.Attr{aStr("mode", "linear"), aStr("coordinate_transformation_mode", "tf_crop_and_resize"),
			aFloat("extrapolation_value", -7)}}
	inits := []*graph.Tensor{f32Vec("roi", roi...), {Name: "sizes", DType: graph.Int64, Dims: []int64{5}, I64: out}}
	g, want := oneNodeGraph("crop3d", 19, n, inits, in, out)
	copy(want.F32, cropTrilinear(x.F32, in, out, roi[2:5], roi[7:10], -7))
	got, err := runOnBackend(ctx, cb, "crop3d", g, x, want)
	if err == nil {
		err = Compare(got, want)
	}
	if err != nil {
		t.Errorf("crop3d: %v", err)
	}
}

// cropTrilinear is Resize's tf_crop_and_resize, linear, over the last
// three axes of x [N, C, D, H, W] by its definition: each output's source
// coordinate start*(in-1) + o*(end-start)*(in-1)/(out-1) per axis,
// extrap where one lies outside the input, else trilinear interpolation.
func cropTrilinear(x []float32, in, out []int64, start, end []float32, extrap float32) []float32 {
	y := make([]float32, numelOf(out))
	coord := func(o, n, m int64, a, b float32) float64 {
		if m == 1 {
			return 0.5 * float64(a+b) * float64(n-1)
		}
		return float64(a)*float64(n-1) + float64(o)*float64(b-a)*float64(n-1)/float64(m-1)
	}
	i := 0
	for nc := int64(0); nc < in[0]*in[1]; nc++ {
		plane := x[nc*in[2]*in[3]*in[4]:]
		for od := int64(0); od < out[2]; od++ {
			for oh := int64(0); oh < out[3]; oh++ {
				for ow := int64(0); ow < out[4]; ow++ {
					c := [3]float64{coord(od, in[2], out[2], start[0], end[0]), coord(oh, in[3], out[3], start[1], end[1]),
						coord(ow, in[4], out[4], start[2], end[2])}
					var lo [3]int64
					var f [3]float64
					inside := true
					for a := range 3 {
						if c[a] < 0 || c[a] > float64(in[2+a]-1) {
							inside = false
						}
						lo[a] = int64(math.Floor(c[a]))
						f[a] = c[a] - float64(lo[a])
					}
					if !inside {
						y[i] = extrap
						i++
						continue
					}
					var v float64
					for corner := range 8 {
						w, idx := 1.0, int64(0)
						for a := range 3 {
							k := lo[a]
							if corner>>a&1 == 1 {
								k = min(k+1, in[2+a]-1)
								w *= f[a]
							} else {
								w *= 1 - f[a]
							}
							idx = idx*in[2+a] + k
						}
						v += w * float64(plane[idx])
					}
					y[i] = float32(v)
					i++
				}
			}
		}
	}
	return y
}

// aInt, aInts, aStr and aFloat are node attributes; f32Vec is a 1-D
// float32 tensor of v.
func aInt(name string, v int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInt, I: v} }
func aInts(name string, v ...int64) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v}
}
func aStr(name, v string) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrString, S: v} }
func aFloat(name string, v float32) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrFloat, F: v}
}
func f32Vec(name string, v ...float32) *graph.Tensor {
	return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{int64(len(v))}, F32: v}
}
func i64Tensor(name string, dims []int64, v ...int64) *graph.Tensor {
	return &graph.Tensor{Name: name, DType: graph.Int64, Dims: dims, I64: v}
}

// ramp is a float32 tensor of dims whose i-th value is (i*mul mod
// mod)/div - off: values that vary, the same in every run.
// convNode is a Conv or ConvTranspose node (op) from input "x" to "y"
// with ramp weights of shape w, group groups and, when biasLen > 0, a ramp
// bias of biasLen values: the node and its initialisers.
func convNode(op, name string, w []int64, group, biasLen int64, attrs ...graph.Attr) (graph.Node, []*graph.Tensor) {
	inits := []*graph.Tensor{ramp("w", w, 53, 89, 89, 0.45)}
	n := graph.Node{Op: op, Name: name, Inputs: []string{"x", "w"}, Outputs: []string{"y"},
		Attrs: append([]graph.Attr{aInt("group", group)}, attrs...)}
	if biasLen > 0 {
		inits = append(inits, ramp("b", []int64{biasLen}, 1, 5, 1, 2))
		n.Inputs = append(n.Inputs, "b")
	}
	return n, inits
}

func ramp(name string, dims []int64, mul, mod int, div, off float32) *graph.Tensor {
	t := &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: make([]float32, numelOf(dims))}
	for i := range t.F32 {
		t.F32[i] = float32((i*mul)%mod)/div - off
	}
	return t
}

// avgPool3DCounted is AveragePool with count_include_pad = 1 over x [N, C,
// D, H, W], directly: each window clipped to the padded input, divided by
// its size there.
func avgPool3DCounted(x []float32, in, out, k, s, pads []int64) []float32 {
	y := make([]float32, numelOf(out))
	i := 0
	for nc := int64(0); nc < in[0]*in[1]; nc++ {
		for od := int64(0); od < out[2]; od++ {
			for oh := int64(0); oh < out[3]; oh++ {
				for ow := int64(0); ow < out[4]; ow++ {
					o := []int64{od, oh, ow}
					var lo, hi [3]int64
					for a := range 3 {
						lo[a] = o[a]*s[a] - pads[a]
						hi[a] = min(lo[a]+k[a], in[2+a]+pads[3+a])
					}
					sum := 0.0
					for d := max(lo[0], 0); d < min(hi[0], in[2]); d++ {
						for h := max(lo[1], 0); h < min(hi[1], in[3]); h++ {
							for w := max(lo[2], 0); w < min(hi[2], in[4]); w++ {
								sum += float64(x[((nc*in[2]+d)*in[3]+h)*in[4]+w])
							}
						}
					}
					y[i] = float32(sum / float64((hi[0]-lo[0])*(hi[1]-lo[1])*(hi[2]-lo[2])))
					i++
				}
			}
		}
	}
	return y
}

// TestDFTORT checks DFT and STFT (one GEMM with the transform's matrix)
// against ONNX Runtime where the node tests do not reach: complex input
// with dimensions after the axis, lengths padded and cut, one-sided and
// inverse transforms, opset 20's axis input, two-sided STFT.
func TestDFTORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	ints := func(name string, v int64) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Int64, Dims: []int64{}, I64: []int64{v}}
	}
	for _, c := range []struct {
		name    string
		node    graph.Node
		opset   int64
		in, out []int64
		inits   []*graph.Tensor
	}{
		{"dft-complex-inner", graph.Node{Op: "DFT", Inputs: []string{"x"}, Attrs: []graph.Attr{aInt("axis", 1)}}, 17,
			[]int64{2, 5, 3, 2}, []int64{2, 5, 3, 2}, nil},
		{"dft-padded-onesided", graph.Node{Op: "DFT", Inputs: []string{"x", "L"}, Attrs: []graph.Attr{aInt("onesided", 1)}}, 17,
			[]int64{3, 6, 1}, []int64{3, 5, 2}, []*graph.Tensor{ints("L", 8)}},
		{"dft-cut-inverse", graph.Node{Op: "DFT", Inputs: []string{"x", "L"}, Attrs: []graph.Attr{aInt("inverse", 1)}}, 17,
			[]int64{2, 9, 2}, []int64{2, 5, 2}, []*graph.Tensor{ints("L", 5)}},
		{"dft-opset20-axis", graph.Node{Op: "DFT", Inputs: []string{"x", "", "a"}}, 20,
			[]int64{2, 4, 3, 1}, []int64{2, 4, 3, 2}, []*graph.Tensor{ints("a", -3)}},
		// (complex signals: ONNX Runtime 1.24 does not give the spec's
		// frames; TestRuntimeLoweringsMatchReference checks those)
		{"stft-twosided", graph.Node{Op: "STFT", Inputs: []string{"x", "s", "", "l"}, Attrs: []graph.Attr{aInt("onesided", 0)}}, 17,
			[]int64{2, 20, 1}, []int64{2, 5, 6, 2}, []*graph.Tensor{ints("s", 3), ints("l", 6)}},
	} {
		x := ramp("x", c.in, 37, 23, 4, 2.5)
		n := c.node
		n.Name, n.Outputs = c.name, []string{"y"}
		g, want := oneNodeGraph(c.name, c.opset, n, c.inits, c.in, c.out)
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestCropAndResizeORT checks Resize's tf_crop_and_resize against ONNX
// Runtime: linear, nearest and cubic, crops inside the image and past its
// borders (extrapolated), sizes and scales (the output sized from the
// input alone, as ONNX Runtime and ONNX's reference implementation do).
func TestCropAndResizeORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	in := []int64{2, 3, 7, 9}
	x := ramp("x", in, 37, 101, 17, 2.9)
	sizes := func(v ...int64) *graph.Tensor {
		return &graph.Tensor{Name: "sizes", DType: graph.Int64, Dims: []int64{int64(len(v))}, I64: v}
	}
	for _, c := range []struct {
		name  string
		mode  string
		roi   []float32
		sizes *graph.Tensor
		scale *graph.Tensor
		out   []int64
	}{
		{"linear-inside", "linear", []float32{0, 0, 0.2, 0.1, 1, 1, 0.8, 0.7}, sizes(2, 3, 5, 6), nil, []int64{2, 3, 5, 6}},
		{"linear-past-borders", "linear", []float32{0, 0, -0.3, 0.5, 1, 1, 0.6, 1.4}, sizes(2, 3, 4, 8), nil, []int64{2, 3, 4, 8}},
		{"nearest-past-borders", "nearest", []float32{0, 0, -0.2, -0.1, 1, 1, 1.1, 0.9}, sizes(2, 3, 6, 5), nil, []int64{2, 3, 6, 5}},
		{"cubic-inside", "cubic", []float32{0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8}, sizes(2, 3, 8, 7), nil, []int64{2, 3, 8, 7}},
		{"linear-scales", "linear", []float32{0, 0, 0.25, 0, 1, 1, 0.75, 1}, nil, f32Vec("scales", 1, 1, 2, 0.5), []int64{2, 3, 14, 4}},
		{"one-row", "linear", []float32{0, 0, 0.3, 0.1, 1, 1, 0.5, 0.9}, sizes(2, 3, 1, 4), nil, []int64{2, 3, 1, 4}},
	} {
		n := graph.Node{Op: "Resize", Name: c.name, Inputs: []string{"x", "roi", "", ""}, Outputs: []string{"y"},
			Attrs: []graph.Attr{aStr("mode", c.mode), aStr("coordinate_transformation_mode", "tf_crop_and_resize"),
				aFloat("extrapolation_value", -7.5)}}
		inits := []*graph.Tensor{f32Vec("roi", c.roi...)}
		if c.sizes != nil {
			n.Inputs[3] = "sizes"
			inits = append(inits, c.sizes)
		} else {
			n.Inputs[2] = "scales"
			inits = append(inits, c.scale)
		}
		g, want := oneNodeGraph(c.name, 13, n, inits, in, c.out)
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestResizeOpset18ORT checks Resize's opset-18 and 19 attributes against
// ONNX Runtime: scales, sizes and roi for the listed axes only,
// keep_aspect_ratio_policy's one scale for every resized axis, and the
// half_pixel_symmetric coordinates.
func TestResizeOpset18ORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	in := []int64{1, 2, 6, 10}
	x := ramp("x", in, 37, 101, 17, 2.9)
	for _, c := range []struct {
		name   string
		attrs  []graph.Attr
		inputs []string
		inits  []*graph.Tensor
		out    []int64
	}{
		{"scales-axes", []graph.Attr{aStr("mode", "linear"), aInts("axes", 3, 2)}, []string{"x", "", "scales"},
			[]*graph.Tensor{{Name: "scales", DType: graph.Float32, Dims: []int64{2}, F32: []float32{0.5, 1.5}}}, []int64{1, 2, 9, 5}},
		// (negative axes crash ONNX Runtime 1.24's Resize;
		// TestRuntimeLoweringsMatchReference checks them)
		{"sizes-axes", []graph.Attr{aStr("mode", "nearest"), aInts("axes", 2, 3)}, []string{"x", "", "", "sizes"},
			[]*graph.Tensor{{Name: "sizes", DType: graph.Int64, Dims: []int64{2}, I64: []int64{4, 13}}}, []int64{1, 2, 4, 13}},
		{"not-larger", []graph.Attr{aStr("mode", "linear"), aInts("axes", 2, 3), aStr("keep_aspect_ratio_policy", "not_larger")},
			[]string{"x", "", "", "sizes"},
			[]*graph.Tensor{{Name: "sizes", DType: graph.Int64, Dims: []int64{2}, I64: []int64{9, 12}}}, []int64{1, 2, 7, 12}},
		{"not-smaller", []graph.Attr{aStr("mode", "cubic"), aInts("axes", 2, 3), aStr("keep_aspect_ratio_policy", "not_smaller")},
			[]string{"x", "", "", "sizes"},
			[]*graph.Tensor{{Name: "sizes", DType: graph.Int64, Dims: []int64{2}, I64: []int64{9, 12}}}, []int64{1, 2, 9, 15}},
		{"crop-axes", []graph.Attr{aStr("mode", "linear"), aInts("axes", 2, 3), aStr("coordinate_transformation_mode", "tf_crop_and_resize")},
			[]string{"x", "roi", "", "sizes"},
			[]*graph.Tensor{{Name: "roi", DType: graph.Float32, Dims: []int64{4}, F32: []float32{0.1, -0.1, 0.9, 0.8}},
				{Name: "sizes", DType: graph.Int64, Dims: []int64{2}, I64: []int64{5, 7}}}, []int64{1, 2, 5, 7}},
		// opset 19's half_pixel_symmetric: scales whose outputs round down
		{"symmetric-linear", []graph.Attr{aStr("mode", "linear"), aStr("coordinate_transformation_mode", "half_pixel_symmetric")},
			[]string{"x", "", "scales"},
			[]*graph.Tensor{{Name: "scales", DType: graph.Float32, Dims: []int64{4}, F32: []float32{1, 1, 1.7, 0.65}}}, []int64{1, 2, 10, 6}},
		{"symmetric-nearest", []graph.Attr{aStr("mode", "nearest"), aStr("coordinate_transformation_mode", "half_pixel_symmetric")},
			[]string{"x", "", "", "sizes"},
			[]*graph.Tensor{{Name: "sizes", DType: graph.Int64, Dims: []int64{4}, I64: []int64{1, 2, 9, 7}}}, []int64{1, 2, 9, 7}},
		{"symmetric-cubic", []graph.Attr{aStr("mode", "cubic"), aStr("coordinate_transformation_mode", "half_pixel_symmetric")},
			[]string{"x", "", "scales"},
			[]*graph.Tensor{{Name: "scales", DType: graph.Float32, Dims: []int64{4}, F32: []float32{1, 1, 0.8, 1.37}}}, []int64{1, 2, 4, 13}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := graph.Node{Op: "Resize", Name: c.name, Inputs: c.inputs, Outputs: []string{"y"}, Attrs: c.attrs}
			g, want := oneNodeGraph(c.name, 19, n, c.inits, in, c.out)
			if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
				t.Error(err)
			}
		})
	}
}

// oneNodeGraph is a graph of node n alone (opset, constant inputs inits)
// from float input "x" of shape in to float output "y" of shape out, and
// an empty "y" of that shape (runOnBackend's expected output).
func oneNodeGraph(name string, opset int64, n graph.Node, inits []*graph.Tensor, in, out []int64) (*graph.Graph, *graph.Tensor) {
	g := &graph.Graph{Name: name, Opset: opset, Nodes: []graph.Node{n}, Initializers: inits,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: in}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: out}}}
	return g, &graph.Tensor{Name: "y", DType: graph.Float32, Dims: out, F32: make([]float32, numelOf(out))}
}

// TestSignalConstantsORT checks the windows and MelWeightMatrix, which the
// engine folds at load time, against ONNX Runtime, which computes them at
// run time: each multiplies a run-time input (x * window, x MatMul mel
// matrix) so that both sides serve the same graph. libonnx-testdata 1.12's
// window references were made with pi as 3.1415 (nodeSkips). A symmetric
// window of one point is [1] (ONNX Runtime: NaN, the formula's 0/0).
func TestSignalConstantsORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	i64 := func(name string, v int64) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Int64, Dims: []int64{}, I64: []int64{v}}
	}
	f32 := func(name string, v float32) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{}, F32: []float32{v}}
	}
	for _, op := range []string{"HannWindow", "HammingWindow", "BlackmanWindow"} {
		for _, c := range []struct {
			size, periodic int64
		}{{400, 1}, {400, 0}, {512, 1}, {7, 0}, {1, 1}} {
			name := fmt.Sprintf("%s-%d-periodic%d", op, c.size, c.periodic)
			g := &graph.Graph{Name: name, Opset: 17,
				Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, c.size}}},
				Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, c.size}}},
				Initializers: []*graph.Tensor{i64("size", c.size)},
				Nodes: []graph.Node{
					{Name: "w", Op: op, Inputs: []string{"size"}, Outputs: []string{"win"}, Attrs: []graph.Attr{aInt("periodic", c.periodic)}},
					{Name: "m", Op: "Mul", Inputs: []string{"x", "win"}, Outputs: []string{"y"}},
				}}
			x := ramp("x", []int64{1, c.size}, 13, 29, 7, 1.5)
			if _, err := againstORT(ctx, ob, cb, name, g, x, ramp("y", []int64{1, c.size}, 0, 1, 1, 0)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	for _, op := range []string{"HannWindow", "HammingWindow", "BlackmanWindow"} {
		n := graph.Node{Name: "w", Op: op, Inputs: []string{"size"}, Outputs: []string{"y"}, Attrs: []graph.Attr{aInt("periodic", 0)}}
		outs, err := engine.Eval(&n, 17, []*engine.Tensor{{DType: graph.Int64, Shape: []int64{}, I: []int64{1}}})
		if err != nil || len(outs[0].F) != 1 || outs[0].F[0] != 1 {
			t.Errorf("%s of one point, symmetric: %v (%v), want [1]", op, outs, err)
		}
	}
	for _, c := range []struct {
		mels, dft, rate int64
		lo, hi          float32
	}{{8, 16, 8192, 0, 4096}, {80, 400, 16000, 0, 8000}, {64, 512, 22050, 125, 7600}, {40, 1024, 44100, 20, 22050}} {
		name := fmt.Sprintf("mel-%d-%d-%d", c.mels, c.dft, c.rate)
		bins := c.dft/2 + 1
		g := &graph.Graph{Name: name, Opset: 17,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, bins}}},
			Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, c.mels}}},
			Initializers: []*graph.Tensor{i64("mels", c.mels), i64("dft", c.dft), i64("rate", c.rate),
				f32("lo", c.lo), f32("hi", c.hi)},
			Nodes: []graph.Node{
				{Name: "w", Op: "MelWeightMatrix", Inputs: []string{"mels", "dft", "rate", "lo", "hi"}, Outputs: []string{"mel"}},
				{Name: "m", Op: "MatMul", Inputs: []string{"x", "mel"}, Outputs: []string{"y"}},
			}}
		x := ramp("x", []int64{1, bins}, 11, 31, 5, 2)
		if _, err := againstORT(ctx, ob, cb, name, g, x, ramp("y", []int64{1, c.mels}, 0, 1, 1, 0)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestScanORT unrolls a Scan over a run-time input's time axis (axis 1 of
// [batch, time, features]) with a state computed from the input, a second
// scan input read in reverse, and scan outputs stacked along axis 1 and,
// in reverse, along the last axis, and compares each output with ONNX
// Runtime's. Scanning axis 0, the batch axis, is an UnsupportedError.
func TestScanORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	const B, T, F = 2, 5, 3
	vi := func(name string, dims ...int64) graph.ValueInfo {
		return graph.ValueInfo{Name: name, DType: graph.Float32, Dims: dims}
	}
	body := &graph.Graph{Name: "body",
		Inputs:       []graph.ValueInfo{vi("s", B, F), vi("e1", B, F), vi("e2", B, F)},
		Outputs:      []graph.ValueInfo{vi("s_out", B, F), vi("o1", B, F), vi("o2", B, F)},
		Initializers: []*graph.Tensor{{Name: "half", DType: graph.Float32, Dims: []int64{}, F32: []float32{0.5}}},
		Nodes: []graph.Node{
			{Name: "h", Op: "Mul", Inputs: []string{"s", "half"}, Outputs: []string{"h"}},
			{Name: "a", Op: "Add", Inputs: []string{"h", "e1"}, Outputs: []string{"s_out"}},
			{Name: "t", Op: "Tanh", Inputs: []string{"s_out"}, Outputs: []string{"o1"}},
			{Name: "m", Op: "Mul", Inputs: []string{"s_out", "e2"}, Outputs: []string{"o2"}},
		}}
	scanGraph := func(out string, dims []int64, inAxis int64) *graph.Graph {
		return &graph.Graph{Name: "scan-" + out, Opset: 13,
			Inputs:  []graph.ValueInfo{vi("x", B, T, F)},
			Outputs: []graph.ValueInfo{vi("y", dims...)},
			Initializers: []*graph.Tensor{{Name: "axes", DType: graph.Int64, Dims: []int64{1}, I64: []int64{1}},
				{Name: "two", DType: graph.Float32, Dims: []int64{}, F32: []float32{2}}},
			Nodes: []graph.Node{
				{Name: "init", Op: "ReduceSum", Inputs: []string{"x", "axes"}, Outputs: []string{"init"}, Attrs: []graph.Attr{aInt("keepdims", 0)}},
				{Name: "x2", Op: "Mul", Inputs: []string{"x", "two"}, Outputs: []string{"x2"}},
				{Name: "scan", Op: "Scan", Inputs: []string{"init", "x", "x2"}, Outputs: []string{"s_final", "y1", "y2"},
					Attrs: []graph.Attr{aInt("num_scan_inputs", 2), aInts("scan_input_axes", inAxis, inAxis),
						aInts("scan_input_directions", 0, 1), aInts("scan_output_axes", 1, -1),
						aInts("scan_output_directions", 0, 1), {Name: "body", Kind: graph.AttrGraph, G: body}}},
				{Name: "out", Op: "Identity", Inputs: []string{out}, Outputs: []string{"y"}},
			}}
	}
	x := ramp("x", []int64{B, T, F}, 7, 17, 9, 0.8)
	for _, c := range []struct {
		out  string
		dims []int64
	}{{"s_final", []int64{B, F}}, {"y1", []int64{B, T, F}}, {"y2", []int64{B, F, T}}} {
		g := scanGraph(c.out, c.dims, 1)
		if _, err := againstORT(ctx, ob, cb, "scan-"+c.out, g, x, ramp("y", c.dims, 0, 1, 1, 0)); err != nil {
			t.Errorf("%s: %v", c.out, err)
		}
	}
	_, err := engine.Load(scanGraph("y1", []int64{B, T, F}, 0), engine.Options{})
	wantUnsupported(t, "a Scan over the batch axis", err, "Scan", "batches requests")
}

// wantUnsupported checks that err is an UnsupportedError naming op whose
// message holds text.
func wantUnsupported(t *testing.T, what string, err error, op, text string) {
	t.Helper()
	var ue *engine.UnsupportedError
	if !errors.As(err, &ue) || ue.Op != op || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: err = %v, want an UnsupportedError naming %s (%q)", what, err, op, text)
	}
}

// TestGroupNormORT checks GroupNormalization (a body of Reshape, means,
// and scale and bias per group at opset 18 or per channel at opset 21)
// against ONNX Runtime on 3-D, 4-D and 5-D inputs, from one group (layer
// normalisation over all channels) to one group per channel; a channel
// count the groups do not divide is an error.
func TestGroupNormORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		dims   []int64
		groups int64
		opset  int64
	}{
		{[]int64{2, 6, 4, 5}, 3, 18}, {[]int64{2, 6, 4, 5}, 3, 21},
		{[]int64{2, 4, 3, 2, 2}, 2, 21}, {[]int64{3, 8, 7}, 4, 18},
		{[]int64{2, 8, 3, 3}, 1, 21}, {[]int64{2, 8, 3, 3}, 8, 21},
	} {
		name := fmt.Sprintf("groupnorm-%v-g%d-opset%d", c.dims, c.groups, c.opset)
		n := c.groups // scale and bias: per group (18) or per channel (21)
		if c.opset >= 21 {
			n = c.dims[1]
		}
		g := &graph.Graph{Name: name, Opset: c.opset,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: c.dims}},
			Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: c.dims}},
			Initializers: []*graph.Tensor{ramp("scale", []int64{n}, 5, 7, 4, -0.3),
				ramp("bias", []int64{n}, 3, 5, 10, 0.2)},
			Nodes: []graph.Node{{Name: "gn", Op: "GroupNormalization", Inputs: []string{"x", "scale", "bias"}, Outputs: []string{"y"},
				Attrs: []graph.Attr{aInt("num_groups", c.groups), aFloat("epsilon", 1e-4)}}}}
		x := ramp("x", c.dims, 37, 101, 17, 2.9)
		if _, err := againstORT(ctx, ob, cb, name, g, x, ramp("y", c.dims, 0, 1, 1, 0)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	g := &graph.Graph{Name: "groupnorm-indivisible", Opset: 18,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 6, 4, 4}}},
		Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, 6, 4, 4}}},
		Initializers: []*graph.Tensor{ramp("scale", []int64{4}, 1, 3, 1, 0), ramp("bias", []int64{4}, 1, 3, 1, 0)},
		Nodes: []graph.Node{{Name: "gn", Op: "GroupNormalization", Inputs: []string{"x", "scale", "bias"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{aInt("num_groups", 4)}}}}
	if _, err := runOnBackend(ctx, cb, g.Name, g, ramp("x", []int64{1, 6, 4, 4}, 1, 7, 1, 0), ramp("y", []int64{1, 6, 4, 4}, 0, 1, 1, 0)); err == nil {
		t.Error("6 channels in 4 groups: no error")
	}
}

// TestLpPoolORT checks LpPool (window sums as an average pool counting
// the padding, times the window size) against ONNX Runtime for p = 1, 2
// and 3, in 1-D, 2-D and 3-D, with strides, pads and auto_pad; ceil_mode
// is an UnsupportedError.
func TestLpPoolORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		in, out    []int64
		p          int64
		k, s, pads []int64
		autoPad    string
	}{
		{"2d-p2-pads", []int64{2, 3, 9, 8}, []int64{2, 3, 5, 4}, 2, []int64{3, 3}, []int64{2, 2}, []int64{1, 1, 1, 0}, ""},
		{"2d-p1", []int64{1, 4, 6, 6}, []int64{1, 4, 5, 5}, 1, []int64{2, 2}, []int64{1, 1}, nil, ""},
		{"2d-p3-same", []int64{1, 2, 7, 5}, []int64{1, 2, 4, 3}, 3, []int64{3, 2}, []int64{2, 2}, nil, "SAME_UPPER"},
		{"1d-p2", []int64{2, 3, 11}, []int64{2, 3, 5}, 2, []int64{3}, []int64{2}, nil, ""},
		{"3d-p2", []int64{1, 2, 4, 5, 6}, []int64{1, 2, 3, 4, 5}, 2, []int64{2, 2, 2}, []int64{1, 1, 1}, nil, ""},
	} {
		attrs := []graph.Attr{aInt("p", c.p), aInts("kernel_shape", c.k...), aInts("strides", c.s...)}
		if c.pads != nil {
			attrs = append(attrs, aInts("pads", c.pads...))
		}
		if c.autoPad != "" {
			attrs = append(attrs, aStr("auto_pad", c.autoPad))
		}
		n := graph.Node{Name: c.name, Op: "LpPool", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: attrs}
		g, want := oneNodeGraph(c.name, 18, n, nil, c.in, c.out)
		if _, err := againstORT(ctx, ob, cb, c.name, g, ramp("x", c.in, 29, 83, 13, 3.1), want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	n := graph.Node{Name: "ceil", Op: "LpPool", Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []graph.Attr{aInts("kernel_shape", 2, 2), aInts("strides", 2, 2), aInt("ceil_mode", 1)}}
	g, _ := oneNodeGraph("ceil", 18, n, nil, []int64{1, 1, 5, 5}, []int64{1, 1, 3, 3})
	_, err := engine.Load(g, engine.Options{})
	wantUnsupported(t, "ceil_mode", err, "LpPool", "ceil_mode")
}

// TestAffineGridORT checks AffineGrid against ONNX Runtime: a run-time
// theta (one GEMM by the constant base grid), 2-D and 3-D, with and
// without align_corners; and a spatial transformer, a constant theta's
// grid (folded at load) sampling a run-time image with GridSample.
func TestAffineGridORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		size  []int64
		align int64
	}{{[]int64{2, 3, 5, 7}, 0}, {[]int64{2, 3, 5, 7}, 1}, {[]int64{2, 1, 3, 4, 5}, 0}, {[]int64{2, 1, 3, 4, 5}, 1}} {
		r := int64(len(c.size) - 2)
		name := fmt.Sprintf("affinegrid-%v-align%d", c.size, c.align)
		td := []int64{2, r, r + 1}
		out := append(append([]int64{2}, c.size[2:]...), r)
		n := graph.Node{Name: name, Op: "AffineGrid", Inputs: []string{"x", "size"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{aInt("align_corners", c.align)}}
		g, want := oneNodeGraph(name, 20, n, []*graph.Tensor{{Name: "size", DType: graph.Int64, Dims: []int64{int64(len(c.size))}, I64: c.size}}, td, out)
		if _, err := againstORT(ctx, ob, cb, name, g, ramp("x", td, 7, 19, 9, 1.1), want); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	in := []int64{2, 3, 6, 8}
	theta := &graph.Tensor{Name: "theta", DType: graph.Float32, Dims: []int64{2, 2, 3},
		F32: []float32{0.9, -0.2, 0.1, 0.15, 1.1, -0.05, 0.7, 0.3, -0.2, -0.25, 0.8, 0.1}}
	g := &graph.Graph{Name: "stn", Opset: 20,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: in}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: in}},
		Initializers: []*graph.Tensor{theta,
			{Name: "size", DType: graph.Int64, Dims: []int64{4}, I64: in}},
		Nodes: []graph.Node{
			{Name: "grid", Op: "AffineGrid", Inputs: []string{"theta", "size"}, Outputs: []string{"grid"}},
			{Name: "y", Op: "GridSample", Inputs: []string{"x", "grid"}, Outputs: []string{"y"}},
		}}
	if _, err := againstORT(ctx, ob, cb, "stn", g, ramp("x", in, 11, 37, 7, 2), ramp("y", in, 0, 1, 1, 0)); err != nil {
		t.Errorf("spatial transformer: %v", err)
	}
}

// TestCenterCropPadORT checks CenterCropPad (a zero fill and one strided
// COPY) against ONNX Runtime: cropping and padding by even and odd
// amounts, negative axes, all axes; cropping the batch axis of a run-time
// input is an UnsupportedError.
func TestCenterCropPadORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		in, out []int64
		shape   []int64
		axes    []int64
	}{
		{"crop-h-pad-w", []int64{2, 3, 9, 8}, []int64{2, 3, 6, 11}, []int64{6, 11}, []int64{2, 3}},
		{"odd-pad-crop", []int64{2, 3, 4, 4}, []int64{2, 3, 7, 1}, []int64{7, 1}, []int64{-2, -1}},
		{"last-axis", []int64{2, 7, 5}, []int64{2, 7, 4}, []int64{4}, []int64{-1}},
		{"all-axes", []int64{2, 5, 6}, []int64{2, 3, 8}, []int64{2, 3, 8}, nil},
	} {
		n := graph.Node{Name: c.name, Op: "CenterCropPad", Inputs: []string{"x", "shape"}, Outputs: []string{"y"}}
		if c.axes != nil {
			n.Attrs = []graph.Attr{aInts("axes", c.axes...)}
		}
		sh := &graph.Tensor{Name: "shape", DType: graph.Int64, Dims: []int64{int64(len(c.shape))}, I64: c.shape}
		g, want := oneNodeGraph(c.name, 18, n, []*graph.Tensor{sh}, c.in, c.out)
		if _, err := againstORT(ctx, ob, cb, c.name, g, ramp("x", c.in, 13, 41, 5, 3), want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// after two kernels, so that the output may take a buffer they wrote:
	// the padding must be zeroed, not left as found
	in, out := []int64{2, 3, 9, 8}, []int64{2, 3, 6, 11}
	g := &graph.Graph{Name: "after-kernels", Opset: 18,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: in}},
		Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: out}},
		Initializers: []*graph.Tensor{{Name: "shape", DType: graph.Int64, Dims: []int64{2}, I64: []int64{6, 11}}},
		Nodes: []graph.Node{
			{Name: "sq", Op: "Mul", Inputs: []string{"x", "x"}, Outputs: []string{"sq"}},
			{Name: "sum", Op: "Add", Inputs: []string{"sq", "x"}, Outputs: []string{"sum"}},
			{Name: "y", Op: "CenterCropPad", Inputs: []string{"sum", "shape"}, Outputs: []string{"y"},
				Attrs: []graph.Attr{aInts("axes", 2, 3)}},
		}}
	if _, err := againstORT(ctx, ob, cb, g.Name, g, ramp("x", in, 13, 41, 5, 3), ramp("y", out, 0, 1, 1, 0)); err != nil {
		t.Errorf("after other kernels: %v", err)
	}
	n := graph.Node{Name: "batch", Op: "CenterCropPad", Inputs: []string{"x", "shape"}, Outputs: []string{"y"}}
	sh := &graph.Tensor{Name: "shape", DType: graph.Int64, Dims: []int64{3}, I64: []int64{1, 3, 8}}
	g, _ = oneNodeGraph("batch", 18, n, []*graph.Tensor{sh}, []int64{-1, 5, 6}, []int64{1, 3, 8})
	m, err := engine.Load(g, engine.Options{})
	if err == nil {
		_, err = m.CompileBatch(2)
	}
	wantUnsupported(t, "cropping the batch axis", err, "CenterCropPad", "batches requests")
}

// TestAveragePoolDilatedORT checks dilated AveragePool (opset 19) against
// ONNX Runtime: 1-D, 2-D and 3-D (two 2-D passes), padded, with and
// without count_include_pad and ceil_mode.
func TestAveragePoolDilatedORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		in, out, k, s, pads, dil []int64
		incl, ceil               int64
	}{
		{[]int64{2, 3, 11}, []int64{2, 3, 5}, []int64{3}, []int64{2}, []int64{1, 1}, []int64{2}, 0, 0},
		{[]int64{2, 3, 11}, []int64{2, 3, 5}, []int64{3}, []int64{2}, []int64{1, 1}, []int64{2}, 1, 0},
		{[]int64{1, 2, 9, 10}, []int64{1, 2, 4, 4}, []int64{2, 3}, []int64{2, 2}, []int64{1, 0, 1, 1}, []int64{3, 2}, 1, 0},
		{[]int64{1, 2, 9, 10}, []int64{1, 2, 4, 4}, []int64{2, 3}, []int64{2, 2}, []int64{1, 0, 1, 1}, []int64{3, 2}, 0, 0},
		{[]int64{1, 2, 9, 10}, []int64{1, 2, 5, 4}, []int64{2, 3}, []int64{2, 2}, []int64{1, 0, 1, 1}, []int64{3, 2}, 0, 1},
		{[]int64{1, 2, 9, 10}, []int64{1, 2, 5, 4}, []int64{2, 3}, []int64{2, 2}, []int64{1, 0, 1, 1}, []int64{3, 2}, 1, 1},
		{[]int64{1, 2, 7, 6, 8}, []int64{1, 2, 3, 4, 4}, []int64{2, 2, 2}, []int64{2, 1, 2}, []int64{0, 1, 0, 0, 0, 1}, []int64{2, 3, 2}, 0, 0},
	} {
		name := fmt.Sprintf("avg-dil%v-incl%d-ceil%d-%v", c.dil, c.incl, c.ceil, c.in)
		n := graph.Node{Name: name, Op: "AveragePool", Inputs: []string{"x"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{aInts("kernel_shape", c.k...), aInts("strides", c.s...), aInts("pads", c.pads...),
				aInts("dilations", c.dil...), aInt("count_include_pad", c.incl), aInt("ceil_mode", c.ceil)}}
		g, want := oneNodeGraph(name, 19, n, nil, c.in, c.out)
		if _, err := againstORT(ctx, ob, cb, name, g, ramp("x", c.in, 7, 23, 3, 2), want); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestHardSwishRewriteORT: HardSwish as exporters spell it, after a
// per-channel affine (paddle2onnx's BatchNormalization), becomes one
// kernel: the Add with a HardSwish epilogue. Spelled x * Clip(x + 3, 0, 6)
// / 6 (opset 13 bounds as inputs, opset 10 as attributes; Div by 6 or Mul
// by 1/6; the product either way round) and x * HardSigmoid(x) with
// alpha 1/6; each against ONNX Runtime. A variant that is not HardSwish
// (an Add of 2.5, a Clip to 5, a gate read twice) keeps its nodes.
func TestHardSwishRewriteORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	f32 := func(name string, dims []int64, v ...float32) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: v}
	}
	dims := []int64{1, 3, 5, 4}
	type variant struct {
		name        string
		opset       int64
		nodes       []graph.Node
		inits       []*graph.Tensor
		fused       bool
		extraOutput bool // the gate is also a graph output
	}
	affine := graph.Node{Name: "affine", Op: "Add", Inputs: []string{"x", "shift"}, Outputs: []string{"a"}}
	shift := f32("shift", []int64{1, 3, 1, 1}, 0.5, -1, 2)
	clip13 := func(lo, hi string) graph.Node {
		return graph.Node{Name: "clip", Op: "Clip", Inputs: []string{"s", lo, hi}, Outputs: []string{"c"}}
	}
	spelled := func(add float32, last graph.Node, clip graph.Node, swap bool, opset int64) variant {
		mul := graph.Node{Name: "mul", Op: "Mul", Inputs: []string{"a", "c"}, Outputs: []string{"p"}}
		if swap {
			mul.Inputs = []string{"c", "a"}
		}
		return variant{opset: opset, nodes: []graph.Node{affine,
			{Name: "add3", Op: "Add", Inputs: []string{"a", "three"}, Outputs: []string{"s"}}, clip, mul, last},
			inits: []*graph.Tensor{shift, f32("three", nil, add), f32("zero", nil, 0), f32("six", nil, 6),
				f32("five", nil, 5), f32("sixth", nil, 1.0/6)}}
	}
	div6 := graph.Node{Name: "div", Op: "Div", Inputs: []string{"p", "six"}, Outputs: []string{"y"}}
	mul6 := graph.Node{Name: "div", Op: "Mul", Inputs: []string{"sixth", "p"}, Outputs: []string{"y"}}
	clip6 := graph.Node{Name: "clip", Op: "Clip", Inputs: []string{"s"}, Outputs: []string{"c"},
		Attrs: []graph.Attr{aFloat("min", 0), aFloat("max", 6)}}
	var vs []variant
	v := spelled(3, div6, clip13("zero", "six"), false, 13)
	v.name, v.fused = "clip-div", true
	vs = append(vs, v)
	v = spelled(3, mul6, clip13("zero", "six"), true, 13)
	v.name, v.fused = "clip-mul-sixth-swapped", true
	vs = append(vs, v)
	v = spelled(3, div6, clip6, false, 10)
	v.name, v.fused = "clip-attrs-opset10", true
	vs = append(vs, v)
	vs = append(vs, variant{name: "hardsigmoid", opset: 13, fused: true, inits: []*graph.Tensor{shift},
		nodes: []graph.Node{affine,
			{Name: "hs", Op: "HardSigmoid", Inputs: []string{"a"}, Outputs: []string{"h"}, Attrs: []graph.Attr{aFloat("alpha", 1.0/6), aFloat("beta", 0.5)}},
			{Name: "mul", Op: "Mul", Inputs: []string{"a", "h"}, Outputs: []string{"y"}}}})
	v = spelled(2.5, div6, clip13("zero", "six"), false, 13)
	v.name = "add-2.5"
	vs = append(vs, v)
	v = spelled(3, div6, clip13("zero", "five"), false, 13)
	v.name = "clip-to-5"
	vs = append(vs, v)
	vs = append(vs, variant{name: "hardsigmoid-default-alpha", opset: 13, inits: []*graph.Tensor{shift},
		nodes: []graph.Node{affine,
			{Name: "hs", Op: "HardSigmoid", Inputs: []string{"a"}, Outputs: []string{"h"}},
			{Name: "mul", Op: "Mul", Inputs: []string{"a", "h"}, Outputs: []string{"y"}}}})
	v = spelled(3, div6, clip13("zero", "six"), false, 13)
	v.name, v.extraOutput = "gate-read-twice", true
	vs = append(vs, v)
	for _, c := range vs {
		g := &graph.Graph{Name: c.name, Opset: c.opset, Nodes: c.nodes, Initializers: c.inits,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: dims}},
			Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: dims}}}
		if c.extraOutput {
			g.Outputs = append(g.Outputs, graph.ValueInfo{Name: "c", DType: graph.Float32, Dims: dims})
		}
		m, err := engine.Load(g, engine.Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p, err := m.CompileBatch(1)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		fused := len(p.Kernels) == 1 && strings.HasSuffix(p.Kernels[0].Ops, "HardSwish")
		if fused != c.fused {
			t.Errorf("%s: fused %v, want %v\n%s", c.name, fused, c.fused, p)
		}
		if c.extraOutput {
			continue // one output is what the harness compares
		}
		want := &graph.Tensor{Name: "y", DType: graph.Float32, Dims: dims, F32: make([]float32, numelOf(dims))}
		if _, err := againstORT(ctx, ob, cb, c.name, g, ramp("x", dims, 7, 61, 5, 6), want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestConvAffineFoldORT: a per-channel Mul and Add by constants after a
// Conv (paddle2onnx's BatchNormalization) fold into the Conv's weights and
// bias: one kernel, against ONNX Runtime. A scalar scale folds too; a
// shift over the spatial dimensions, and a Conv output read twice, keep
// their nodes.
func TestConvAffineFoldORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	f32 := func(name string, dims []int64, v ...float32) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: v}
	}
	in, out := []int64{1, 2, 6, 5}, []int64{1, 3, 6, 5}
	w := f32("w", []int64{3, 2, 3, 3}, make([]float32, 54)...)
	for i := range w.F32 {
		w.F32[i] = float32(i%7)/3 - 1
	}
	conv := graph.Node{Name: "conv", Op: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"c"},
		Attrs: []graph.Attr{aInts("pads", 1, 1, 1, 1)}}
	b := f32("b", []int64{3}, 0.25, -0.5, 1)
	for _, c := range []struct {
		name    string
		nodes   []graph.Node
		inits   []*graph.Tensor
		outputs []string
		folded  bool
	}{
		{"mul-add", []graph.Node{conv,
			{Name: "scale", Op: "Mul", Inputs: []string{"c", "s"}, Outputs: []string{"m"}},
			{Name: "shift", Op: "Add", Inputs: []string{"t", "m"}, Outputs: []string{"y"}}},
			[]*graph.Tensor{w, b, f32("s", []int64{1, 3, 1, 1}, 1.5, -2, 0.75), f32("t", []int64{3, 1, 1}, 0.1, 0.2, -0.3)},
			[]string{"y"}, true},
		{"scalar-mul", []graph.Node{conv,
			{Name: "scale", Op: "Mul", Inputs: []string{"c", "s"}, Outputs: []string{"y"}}},
			[]*graph.Tensor{w, b, f32("s", []int64{}, 0.3)}, []string{"y"}, true},
		{"spatial-add", []graph.Node{conv,
			{Name: "shift", Op: "Add", Inputs: []string{"c", "t"}, Outputs: []string{"y"}}},
			[]*graph.Tensor{w, b, f32("t", []int64{1, 1, 1, 5}, 1, 2, 3, 4, 5)}, []string{"y"}, false},
		{"read-twice", []graph.Node{conv,
			{Name: "scale", Op: "Mul", Inputs: []string{"c", "s"}, Outputs: []string{"y"}}},
			[]*graph.Tensor{w, b, f32("s", []int64{1, 3, 1, 1}, 1.5, -2, 0.75)}, []string{"y", "c"}, false},
	} {
		g := &graph.Graph{Name: c.name, Opset: 13, Nodes: c.nodes, Initializers: c.inits,
			Inputs: []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: in}}}
		for _, o := range c.outputs {
			g.Outputs = append(g.Outputs, graph.ValueInfo{Name: o, DType: graph.Float32, Dims: out})
		}
		m, err := engine.Load(g, engine.Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p, err := m.CompileBatch(1)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		folded := true
		for _, k := range p.Kernels {
			folded = folded && k.Op != engine.OpBinary
		}
		if folded != c.folded {
			t.Errorf("%s: folded %v, want %v\n%s", c.name, folded, c.folded, p)
		}
		if len(c.outputs) > 1 {
			continue // one output is what the harness compares
		}
		want := &graph.Tensor{Name: "y", DType: graph.Float32, Dims: out, F32: make([]float32, numelOf(out))}
		if _, err := againstORT(ctx, ob, cb, c.name, g, ramp("x", in, 7, 41, 9, 2), want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
