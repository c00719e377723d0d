package zoo

import "sluice/libml/graph"

// UNet3D builds a 3-D U-Net for volume segmentation (Çiçek et al. 2016,
// at a small width): input [batch, 1, Depth, Height, Width] (defaults 32,
// 64, 64; each divisible by 4), two 3x3x3 convolutions with batch
// normalisation and ReLU per level at 16, 32 and 64 channels, 2x2x2 max
// pooling down, 2x2x2 transposed convolutions up, skip connections by
// concatenation, and a 1x1x1 convolution to o.Classes (default 2)
// per-voxel scores: output [batch, Classes, Depth, Height, Width]. It
// exercises the 3-D operators: Conv, ConvTranspose, MaxPool, and
// BatchNormalization, Concat and Relu on 5-D tensors.
func UNet3D(o Options) *graph.Graph {
	D, H, W, classes := orDefault(o.Depth, 32), orDefault(o.Height, 64), orDefault(o.Width, 64), orDefault(o.Classes, 2)
	b := newBuilder("unet3d", o.Seed, 17)
	block := func(x string, cin, cout int) string {
		x = b.relu(b.bn(b.conv3(x, cin, cout, 3, 1, 1, false), cout, 1))
		return b.relu(b.bn(b.conv3(x, cout, cout, 3, 1, 1, false), cout, 1))
	}
	pool := func(x string) string {
		return b.node("MaxPool", []string{x}, ints("kernel_shape", 2, 2, 2), ints("strides", 2, 2, 2))
	}
	cat := func(x, y string) string { return b.node("Concat", []string{x, y}, intAttr("axis", 1)) }
	e1 := block("input", 1, 16)
	e2 := block(pool(e1), 16, 32)
	m := block(pool(e2), 32, 64)
	d2 := block(cat(b.up3(m, 64, 32), e2), 64, 32)
	d1 := block(cat(b.up3(d2, 32, 16), e1), 32, 16)
	y := b.conv3(d1, 16, classes, 1, 1, 0, true)
	return b.finish(y, []int64{-1, 1, int64(D), int64(H), int64(W)},
		[]int64{-1, int64(classes), int64(D), int64(H), int64(W)})
}

// conv3 adds a 3-D convolution of a k x k x k kernel (He init; bias when
// bias is set).
func (b *builder) conv3(x string, cin, cout, k, stride, pad int, bias bool) string {
	nm := b.name("conv3d")
	k3 := k * k * k
	w := b.init(nm+"_w", []int64{int64(cout), int64(cin), int64(k), int64(k), int64(k)},
		b.he(cout*cin*k3, cin*k3, 1))
	ins := []string{x, w}
	if bias {
		ins = append(ins, b.init(nm+"_b", []int64{int64(cout)}, b.small(cout, 0.05)))
	}
	s, p := int64(stride), int64(pad)
	out := nm + "_out"
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: nm, Op: "Conv", Inputs: ins, Outputs: []string{out},
		Attrs: []graph.Attr{ints("kernel_shape", int64(k), int64(k), int64(k)), ints("strides", s, s, s),
			ints("pads", p, p, p, p, p, p)}})
	return out
}

// up3 adds a 2x2x2 transposed convolution of stride 2 with a bias: the
// volume doubles on each axis.
func (b *builder) up3(x string, cin, cout int) string {
	nm := b.name("up3d")
	w := b.init(nm+"_w", []int64{int64(cin), int64(cout), 2, 2, 2}, b.he(cin*cout*8, cin, 1))
	bias := b.init(nm+"_b", []int64{int64(cout)}, b.small(cout, 0.05))
	out := nm + "_out"
	b.g.Nodes = append(b.g.Nodes, graph.Node{Name: nm, Op: "ConvTranspose", Inputs: []string{x, w, bias},
		Outputs: []string{out}, Attrs: []graph.Attr{ints("kernel_shape", 2, 2, 2), ints("strides", 2, 2, 2)}})
	return out
}
