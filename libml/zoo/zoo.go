// Package zoo builds libml's built-in models as graph.Graph values with
// deterministic, seeded weights (He-scaled normal convolutions and linear
// layers, near-identity batch normalization): ResNet-18, ResNet-50,
// MobileNetV2, VGG-16, SqueezeNet 1.1 and a BERT-base-shaped encoder.
// The weights are not trained: outputs are reproducible, not meaningful.
//
// Every model has one float32 input with a dynamic batch dimension and one
// output, except KWS, which has recurrent state inputs and outputs beside
// them.
package zoo

import (
	"fmt"
	"math"
	"sort"

	"sluice/libml/graph"
)

// Options size a model. Zero fields take the model's standard size.
type Options struct {
	// Seed selects the weights (0 is a valid seed).
	Seed uint64
	// Height and Width are the input image size (CNNs; default 224;
	// unet3d: 64). Depth is a volume's (unet3d; default 32).
	Height, Width, Depth int
	// Classes is the classifier width (CNNs; default 1000).
	Classes int
	// Layers, SeqLen, Hidden, Heads and FF size the encoder (defaults 12,
	// 128, 768, 12, 3072).
	Layers, SeqLen, Hidden, Heads, FF int
	// Features is the MLP's input width (default 1536); Layers, Hidden
	// and Classes size its hidden layers and output (defaults 2, 128, 1:
	// MLP's own).
	Features int
}

// orDefault is v, or d when v is not positive (an Options field left 0).
func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func (o Options) withDefaults() Options {
	o.Height, o.Width, o.Classes = orDefault(o.Height, 224), orDefault(o.Width, 224), orDefault(o.Classes, 1000)
	o.Layers, o.SeqLen, o.Hidden = orDefault(o.Layers, 12), orDefault(o.SeqLen, 128), orDefault(o.Hidden, 768)
	o.Heads, o.FF = orDefault(o.Heads, 12), orDefault(o.FF, 3072)
	return o
}

var builders = map[string]func(Options) *graph.Graph{
	"resnet18":     ResNet18,
	"resnet50":     ResNet50,
	"mobilenetv2":  MobileNetV2,
	"vgg16":        VGG16,
	"squeezenet11": SqueezeNet11,
	"bert":         BERT,
	"mlp":          MLP,
	"kws":          KWS,
	"unet3d":       UNet3D,
}

// Names lists the zoo's models.
func Names() []string {
	var n []string
	for k := range builders {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Build builds the named model.
func Build(name string, opt Options) (*graph.Graph, error) {
	f, ok := builders[name]
	if !ok {
		return nil, fmt.Errorf("zoo: unknown model %q (have %v)", name, Names())
	}
	return f(opt), nil
}

// rng is splitmix64: tiny, fast and fully deterministic.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform in [0, 1).
func (r *rng) uniform() float64 { return float64(r.next()>>11) / (1 << 53) }

// normal by Box-Muller.
func (r *rng) normal() float64 {
	u := r.uniform()
	for u == 0 {
		u = r.uniform()
	}
	return math.Sqrt(-2*math.Log(u)) * math.Cos(2*math.Pi*r.uniform())
}

// Input returns n deterministic N(0,1) values: a model input for tests and
// benchmarks.
func Input(seed uint64, n int) []float32 {
	r := &rng{s: seed ^ 0x5eed}
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.normal())
	}
	return out
}

// builder assembles a graph.
type builder struct {
	g   *graph.Graph
	r   *rng
	cnt map[string]int
}

func newBuilder(name string, seed uint64, opset int64) *builder {
	return &builder{g: &graph.Graph{Name: name, Opset: opset}, r: &rng{s: seed}, cnt: map[string]int{}}
}

func (b *builder) name(p string) string {
	b.cnt[p]++
	return fmt.Sprintf("%s_%d", p, b.cnt[p])
}

func (b *builder) init(name string, dims []int64, data []float32) string {
	b.g.Initializers = append(b.g.Initializers, &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: data})
	return name
}

func (b *builder) initInt(name string, data []int64) string {
	b.g.Initializers = append(b.g.Initializers, &graph.Tensor{Name: name, DType: graph.Int64,
		Dims: []int64{int64(len(data))}, I64: data})
	return name
}

// he returns n values N(0, 2/fanIn) scaled by gain.
func (b *builder) he(n int, fanIn int, gain float64) []float32 {
	std := gain * math.Sqrt(2/float64(fanIn))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(b.r.normal() * std)
	}
	return out
}

func (b *builder) small(n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32((b.r.uniform()*2 - 1) * scale)
	}
	return out
}

func (b *builder) node(op string, ins []string, attrs ...graph.Attr) string {
	nm := b.name(op)
	out := nm + "_out"
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: nm, Op: op, Inputs: ins, Outputs: []string{out}, Attrs: attrs})
	return out
}

func ints(name string, v ...int64) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v}
}

func intAttr(name string, v int64) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrInt, I: v}
}

func floatAttr(name string, v float32) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrFloat, F: v}
}

// conv adds a convolution (He init; bias when bias is set).
func (b *builder) conv(x string, cin, cout, k, stride, pad, group int, bias bool) string {
	nm := b.name("conv")
	fan := cin / group * k * k
	w := b.init(nm+"_w", []int64{int64(cout), int64(cin / group), int64(k), int64(k)},
		b.he(cout*cin/group*k*k, fan, 1))
	ins := []string{x, w}
	if bias {
		ins = append(ins, b.init(nm+"_b", []int64{int64(cout)}, b.small(cout, 0.05)))
	}
	out := nm + "_out"
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: nm, Op: "Conv", Inputs: ins, Outputs: []string{out},
		Attrs: []graph.Attr{ints("kernel_shape", int64(k), int64(k)), ints("strides", int64(stride), int64(stride)),
			ints("pads", int64(pad), int64(pad), int64(pad), int64(pad)), intAttr("group", int64(group))}})
	return out
}

// bn adds an inference-mode BatchNormalization; gain scales gamma (the last
// BN of a residual branch uses a small one so depth does not blow up).
func (b *builder) bn(x string, c int, gain float64) string {
	nm := b.name("bn")
	gamma := make([]float32, c)
	beta, mean := b.small(c, 0.1), b.small(c, 0.1)
	vr := make([]float32, c)
	for i := range gamma {
		gamma[i] = float32(gain * (1 + (b.r.uniform()*2-1)*0.1))
		vr[i] = float32(1 + b.r.uniform()*0.2)
	}
	ins := []string{x, b.init(nm+"_g", []int64{int64(c)}, gamma), b.init(nm+"_b", []int64{int64(c)}, beta),
		b.init(nm+"_m", []int64{int64(c)}, mean), b.init(nm+"_v", []int64{int64(c)}, vr)}
	out := nm + "_out"
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: nm, Op: "BatchNormalization", Inputs: ins,
		Outputs: []string{out}, Attrs: []graph.Attr{floatAttr("epsilon", 1e-5)}})
	return out
}

func (b *builder) relu(x string) string { return b.node("Relu", []string{x}) }

func (b *builder) relu6(x string) string {
	lo, hi := b.name("clip_min"), b.name("clip_max")
	b.g.Initializers = append(b.g.Initializers,
		&graph.Tensor{Name: lo, DType: graph.Float32, F32: []float32{0}},
		&graph.Tensor{Name: hi, DType: graph.Float32, F32: []float32{6}})
	return b.node("Clip", []string{x, lo, hi})
}

func (b *builder) add(x, y string) string { return b.node("Add", []string{x, y}) }

func (b *builder) maxpool(x string, k, s, p int, ceil bool) string {
	attrs := []graph.Attr{ints("kernel_shape", int64(k), int64(k)), ints("strides", int64(s), int64(s)),
		ints("pads", int64(p), int64(p), int64(p), int64(p))}
	if ceil {
		attrs = append(attrs, intAttr("ceil_mode", 1))
	}
	return b.node("MaxPool", []string{x}, attrs...)
}

// gemm adds a fully connected layer (y = x W^T + b, W stored [out, in]).
func (b *builder) gemm(x string, in, out int) string {
	nm := b.name("fc")
	w := b.init(nm+"_w", []int64{int64(out), int64(in)}, b.he(out*in, in, 1))
	bias := b.init(nm+"_b", []int64{int64(out)}, b.small(out, 0.05))
	o := nm + "_out"
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: nm, Op: "Gemm", Inputs: []string{x, w, bias}, Outputs: []string{o},
		Attrs: []graph.Attr{intAttr("transB", 1)}})
	return o
}

func (b *builder) finish(x string, in, out []int64) *graph.Graph {
	b.g.Inputs = []graph.ValueInfo{{Name: "input", DType: graph.Float32, Dims: in, DimParams: []string{"batch"}}}
	b.g.Outputs = []graph.ValueInfo{{Name: x, DType: graph.Float32, Dims: out, DimParams: []string{"batch"}}}
	return b.g
}

func imageInput(o Options) []int64 { return []int64{-1, 3, int64(o.Height), int64(o.Width)} }

func (b *builder) classifier(x string, c int, o Options) *graph.Graph {
	x = b.node("GlobalAveragePool", []string{x})
	x = b.node("Flatten", []string{x}, intAttr("axis", 1))
	x = b.gemm(x, c, o.Classes)
	return b.finish(x, imageInput(o), []int64{-1, int64(o.Classes)})
}

// ResNet18 builds ResNet-18 (basic blocks [2 2 2 2]).
func ResNet18(o Options) *graph.Graph {
	o = o.withDefaults()
	b := newBuilder("resnet18", o.Seed, 17)
	x := b.relu(b.bn(b.conv("input", 3, 64, 7, 2, 3, 1, false), 64, 1))
	x = b.maxpool(x, 3, 2, 1, false)
	cin := 64
	for stage, c := range []int{64, 128, 256, 512} {
		for blk := 0; blk < 2; blk++ {
			s := 1
			if stage > 0 && blk == 0 {
				s = 2
			}
			y := b.relu(b.bn(b.conv(x, cin, c, 3, s, 1, 1, false), c, 1))
			y = b.bn(b.conv(y, c, c, 3, 1, 1, 1, false), c, 0.3)
			sc := x
			if s != 1 || cin != c {
				sc = b.bn(b.conv(x, cin, c, 1, s, 0, 1, false), c, 1)
			}
			x = b.relu(b.add(y, sc))
			cin = c
		}
	}
	return b.classifier(x, 512, o)
}

// ResNet50 builds ResNet-50 v1.5 (bottlenecks [3 4 6 3], stride on the 3x3).
func ResNet50(o Options) *graph.Graph {
	o = o.withDefaults()
	b := newBuilder("resnet50", o.Seed, 17)
	x := b.relu(b.bn(b.conv("input", 3, 64, 7, 2, 3, 1, false), 64, 1))
	x = b.maxpool(x, 3, 2, 1, false)
	cin := 64
	for stage, n := range []int{3, 4, 6, 3} {
		w := 64 << stage
		for blk := 0; blk < n; blk++ {
			s := 1
			if stage > 0 && blk == 0 {
				s = 2
			}
			y := b.relu(b.bn(b.conv(x, cin, w, 1, 1, 0, 1, false), w, 1))
			y = b.relu(b.bn(b.conv(y, w, w, 3, s, 1, 1, false), w, 1))
			y = b.bn(b.conv(y, w, 4*w, 1, 1, 0, 1, false), 4*w, 0.3)
			sc := x
			if s != 1 || cin != 4*w {
				sc = b.bn(b.conv(x, cin, 4*w, 1, s, 0, 1, false), 4*w, 1)
			}
			x = b.relu(b.add(y, sc))
			cin = 4 * w
		}
	}
	return b.classifier(x, 2048, o)
}

// MobileNetV2 builds MobileNetV2 (width 1.0).
func MobileNetV2(o Options) *graph.Graph {
	o = o.withDefaults()
	b := newBuilder("mobilenetv2", o.Seed, 17)
	x := b.relu6(b.bn(b.conv("input", 3, 32, 3, 2, 1, 1, false), 32, 1))
	cin := 32
	for _, s := range [][4]int{{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}} {
		t, c, n, st := s[0], s[1], s[2], s[3]
		for i := 0; i < n; i++ {
			stride := 1
			if i == 0 {
				stride = st
			}
			hid := cin * t
			y := x
			if t != 1 {
				y = b.relu6(b.bn(b.conv(y, cin, hid, 1, 1, 0, 1, false), hid, 1))
			}
			y = b.relu6(b.bn(b.conv(y, hid, hid, 3, stride, 1, hid, false), hid, 1))
			gain := 1.0
			if stride == 1 && cin == c {
				gain = 0.3
			}
			y = b.bn(b.conv(y, hid, c, 1, 1, 0, 1, false), c, gain)
			if stride == 1 && cin == c {
				y = b.add(x, y)
			}
			x = y
			cin = c
		}
	}
	x = b.relu6(b.bn(b.conv(x, cin, 1280, 1, 1, 0, 1, false), 1280, 1))
	return b.classifier(x, 1280, o)
}

// VGG16 builds VGG-16 (convolutions with bias, no batch normalization).
func VGG16(o Options) *graph.Graph {
	o = o.withDefaults()
	b := newBuilder("vgg16", o.Seed, 17)
	x, cin := "input", 3
	h, w := o.Height, o.Width
	for _, v := range []int{64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0} {
		if v == 0 {
			x = b.maxpool(x, 2, 2, 0, false)
			h, w = h/2, w/2
			continue
		}
		x = b.relu(b.conv(x, cin, v, 3, 1, 1, 1, true))
		cin = v
	}
	x = b.node("Flatten", []string{x}, intAttr("axis", 1))
	x = b.relu(b.gemm(x, 512*h*w, 4096))
	x = b.relu(b.gemm(x, 4096, 4096))
	x = b.gemm(x, 4096, o.Classes)
	return b.finish(x, imageInput(o), []int64{-1, int64(o.Classes)})
}

// SqueezeNet11 builds SqueezeNet 1.1.
func SqueezeNet11(o Options) *graph.Graph {
	o = o.withDefaults()
	b := newBuilder("squeezenet11", o.Seed, 17)
	fire := func(x string, cin, sq, e1, e3 int) string {
		s := b.relu(b.conv(x, cin, sq, 1, 1, 0, 1, true))
		a := b.relu(b.conv(s, sq, e1, 1, 1, 0, 1, true))
		c := b.relu(b.conv(s, sq, e3, 3, 1, 1, 1, true))
		return b.node("Concat", []string{a, c}, intAttr("axis", 1))
	}
	x := b.relu(b.conv("input", 3, 64, 3, 2, 0, 1, true))
	x = b.maxpool(x, 3, 2, 0, true)
	x = fire(x, 64, 16, 64, 64)
	x = fire(x, 128, 16, 64, 64)
	x = b.maxpool(x, 3, 2, 0, true)
	x = fire(x, 128, 32, 128, 128)
	x = fire(x, 256, 32, 128, 128)
	x = b.maxpool(x, 3, 2, 0, true)
	x = fire(x, 256, 48, 192, 192)
	x = fire(x, 384, 48, 192, 192)
	x = fire(x, 384, 64, 256, 256)
	x = fire(x, 512, 64, 256, 256)
	x = b.relu(b.conv(x, 512, o.Classes, 1, 1, 0, 1, true))
	x = b.node("GlobalAveragePool", []string{x})
	x = b.node("Flatten", []string{x}, intAttr("axis", 1))
	return b.finish(x, imageInput(o), []int64{-1, int64(o.Classes)})
}

// BERT builds a BERT-base-shaped encoder: input [batch, SeqLen, Hidden]
// hidden states (after the embeddings), Layers post-LN transformer layers
// with Heads attention heads and an FF-wide GELU feed-forward, exported the
// way ONNX exporters write it (head split by Reshape + Transpose, scaled
// dot-product attention as batched MatMul, GELU through Erf).
func BERT(o Options) *graph.Graph {
	o = o.withDefaults()
	b := newBuilder("bert", o.Seed, 17)
	S, H, A, F := int64(o.SeqLen), int64(o.Hidden), int64(o.Heads), int64(o.FF)
	D := H / A
	split := b.initInt("shape_split", []int64{0, 0, A, D})
	merge := b.initInt("shape_merge", []int64{0, 0, H})
	scale := b.init("attn_scale", []int64{}, []float32{float32(1 / math.Sqrt(float64(D)))})
	sqrt2 := b.init("gelu_sqrt2", []int64{}, []float32{float32(math.Sqrt2)})
	oneC := b.init("gelu_one", []int64{}, []float32{1})
	half := b.init("gelu_half", []int64{}, []float32{0.5})
	linear := func(x string, in, out int64) string {
		nm := b.name("linear")
		w := b.init(nm+"_w", []int64{in, out}, b.he(int(in*out), int(in), 0.7))
		bias := b.init(nm+"_b", []int64{out}, b.small(int(out), 0.02))
		return b.node("Add", []string{b.node("MatMul", []string{x, w}), bias})
	}
	layerNorm := func(x string) string {
		nm := b.name("ln")
		g := make([]float32, H)
		for i := range g {
			g[i] = float32(1 + (b.r.uniform()*2-1)*0.05)
		}
		return b.node("LayerNormalization", []string{x, b.init(nm+"_g", []int64{H}, g),
			b.init(nm+"_b", []int64{H}, b.small(int(H), 0.02))}, intAttr("axis", -1), floatAttr("epsilon", 1e-12))
	}
	heads := func(x string, perm ...int64) string {
		return b.node("Transpose", []string{b.node("Reshape", []string{x, split})}, ints("perm", perm...))
	}
	x := "input"
	for l := 0; l < o.Layers; l++ {
		q := heads(linear(x, H, H), 0, 2, 1, 3)
		k := heads(linear(x, H, H), 0, 2, 3, 1)
		v := heads(linear(x, H, H), 0, 2, 1, 3)
		s := b.node("Mul", []string{b.node("MatMul", []string{q, k}), scale})
		p := b.node("Softmax", []string{s}, intAttr("axis", -1))
		ctx := b.node("MatMul", []string{p, v})
		ctx = b.node("Reshape", []string{b.node("Transpose", []string{ctx}, ints("perm", 0, 2, 1, 3)), merge})
		x = layerNorm(b.add(linear(ctx, H, H), x))
		h := linear(x, H, F)
		e := b.node("Erf", []string{b.node("Div", []string{h, sqrt2})})
		h = b.node("Mul", []string{b.node("Mul", []string{h, b.node("Add", []string{e, oneC})}), half})
		x = layerNorm(b.add(linear(h, F, H), x))
	}
	return b.finish(x, []int64{-1, S, H}, []int64{-1, S, H})
}

// MLP builds a multi-layer perceptron the size of a small tabular or
// embedding classifier (1536 -> 128 -> 128 -> 1 by default: about 0.2 M
// weights, 0.4 Mflop a request): o.Layers hidden layers of o.Hidden
// units with ReLU, then o.Classes outputs. Zero fields take the MLP's
// defaults, not the CNNs' and BERT's.
func MLP(o Options) *graph.Graph {
	in, layers, hidden, classes := orDefault(o.Features, 1536), orDefault(o.Layers, 2), orDefault(o.Hidden, 128), orDefault(o.Classes, 1)
	b := newBuilder("mlp", o.Seed, 17)
	x, w := "input", in
	for l := 0; l < layers; l++ {
		x = b.relu(b.gemm(x, w, hidden))
		w = hidden
	}
	x = b.gemm(x, w, classes)
	return b.finish(x, []int64{-1, int64(in)}, []int64{-1, int64(classes)})
}

// KWS builds a streaming keyword spotter, a model with recurrent state:
// each request is one frame of o.Features (default 40) audio features; an
// LSTM of o.Hidden (default 64) units carries its state h and c from a
// flow's frame to the next, and a linear layer scores o.Classes (default
// 12) keywords. Inputs: "input" [batch, features], "h" and "c" [1, batch,
// hidden] (ONNX's LSTM layout: directions, batch, hidden). Outputs:
// "logits" [batch, classes], "h_out" and "c_out" [1, batch, hidden]. An IF
// serves it with state bindings h ← h_out and c ← c_out
// (libml/pack).
func KWS(o Options) *graph.Graph {
	feat, hidden, classes := orDefault(o.Features, 40), orDefault(o.Hidden, 64), orDefault(o.Classes, 12)
	b := newBuilder("kws", o.Seed, 17)
	x := b.node("Unsqueeze", []string{"input", b.initInt("kws_axis0", []int64{0})}) // [1, N, F]: one time step
	f, h := int64(feat), int64(hidden)
	w := b.init("lstm_w", []int64{1, 4 * h, f}, b.he(4*hidden*feat, feat, 0.7))
	r := b.init("lstm_r", []int64{1, 4 * h, h}, b.he(4*hidden*hidden, hidden, 0.7))
	bias := b.init("lstm_b", []int64{1, 8 * h}, b.small(8*hidden, 0.1))
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: "lstm", Op: "LSTM", Inputs: []string{x, w, r, bias, "", "h", "c"},
		Outputs: []string{"lstm_y", "h_out", "c_out"}, Attrs: []graph.Attr{intAttr("hidden_size", h)}})
	y := b.node("Squeeze", []string{"h_out", "kws_axis0"}) // [N, hidden]
	logits := b.gemm(y, hidden, classes)
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: "logits", Op: "Identity", Inputs: []string{logits}, Outputs: []string{"logits"}})
	state := graph.ValueInfo{DType: graph.Float32, Dims: []int64{1, -1, h}, DimParams: []string{"", "batch", ""}}
	hin, cin, hout, cout := state, state, state, state
	hin.Name, cin.Name, hout.Name, cout.Name = "h", "c", "h_out", "c_out"
	b.g.Inputs = []graph.ValueInfo{{Name: "input", DType: graph.Float32, Dims: []int64{-1, f}, DimParams: []string{"batch"}}, hin, cin}
	b.g.Outputs = []graph.ValueInfo{{Name: "logits", DType: graph.Float32, Dims: []int64{-1, int64(classes)}, DimParams: []string{"batch"}}, hout, cout}
	return b.g
}
