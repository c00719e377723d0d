package engine

import (
	"fmt"

	"sluice/libml/graph"
)

// 3-D convolutions run as one 2-D convolution over depth windows.
//
// Y[n, co, od] = sum over kd of the 2-D convolution of the depth slice
// X[n, :, od*SD - PD + kd*DD] by W[:, :, kd]. Stacking each output depth's
// KD input slices along the channels turns that sum into the channel sum
// of one 2-D convolution: the input unfolded to X' [N*OD, G*Cg*KD, H, W]
// (channel (g, cg, kd) of image (n, od) is X[n, g*Cg + cg, od*SD - PD +
// kd*DD], zero in the depth padding) by the weights as they are, read as
// [Cout, Cg*KD, KH, KW], then Y' [N*OD, Cout, OH, OW] transposed to Y [N,
// Cout, OD, OH, OW]. Kernels: a fill and a copy when the depth is padded,
// one COPY that unfolds (a strided view), the 2-D convolution with the
// bias and activation fused (emitConv, so every 2-D algorithm applies; a
// quantised one: emitQConv, the padding its input's zero point), one COPY
// back. The unfolded input is KD/SD times
// the input. Depth is a plain spatial axis here, never the batch: a
// request's output does not depend on the batch it runs in.

// maxConv3DUnfold is the most values a 3-D convolution's unfolded input
// of one output depth (the batch's) or a transposed one's spread input
// may hold.
const maxConv3DUnfold = 1 << 28

// conv3DChunk is the most values one chunk of one image's unfolded input
// holds (64 MiB) unless a single output depth needs more.
const conv3DChunk = 1 << 24

// conv3DInputs are a 3-D (transposed) convolution's input and constant
// weights (convInputs) and their shapes, the weights of rank 5.
func (c *compiler) conv3DInputs(n *graph.Node) (x, w *cval, xs, ws []int64, err error) {
	if x, w, err = c.convInputs(n, 0, 1); err != nil {
		return
	}
	xs, ws = x.t.Shape, w.t.Shape
	if len(ws) != 5 {
		err = fmt.Errorf("3-D convolution weights of rank %d", len(ws))
	}
	return
}

func (c *compiler) lowerConv3D(g *group) error {
	n := c.node(g)
	_, w, xs, ws, err := c.conv3DInputs(n)
	if err != nil {
		return err
	}
	if g.res != "" {
		return fmt.Errorf("a residual fused into a 3-D convolution") // fuse keeps them apart
	}
	gm, err := convGeom(n, xs[2:], ws[2:], false)
	if err != nil {
		return err
	}
	xop, err := c.operand(n.Inputs[0])
	if err != nil {
		return err
	}
	bias, _, err := c.convBiasRes(g)
	if err != nil {
		return err
	}
	out, _, err := c.output(c.outName(g))
	if err != nil {
		return err
	}
	return c.emitConv3D(g, xop, xs, w.t.F, ws, n.AttrInt("group", 1), gm, bias, out)
}

// emitConv3D emits the 3-D convolution of xop (shape xs) by the weights
// wvals (shape ws: [Cout, C/G, KD, KH, KW]) in G groups, geometry gm, with
// bias and the group's activation, into out (see the comment above).
func (c *compiler) emitConv3D(g *group, xop operand, xs []int64, wvals []float32, ws []int64, G int64,
	gm geom, bias, out operand) error {
	wop := c.newConst(wvals)
	return c.unfoldConv3D(g, xop, xs, ws, G, gm, 0, out, func(p [16]int64, unf, y2 operand) error {
		return c.emitConv(g, p, unf, wop, false, "", wvals, bias, noOperand, y2)
	})
}

// unfoldConv3D emits the unfolded form of a 3-D convolution of xop (shape xs)
// by weights of shape ws ([Cout, C/G, KD, KH, KW]) in G groups, geometry
// gm, into out: the depth padding (pad: its value), then per chunk of
// output depths the unfold, conv2D (the 2-D convolution p of the unfolded
// images into y2, by the weights as they are: the unfolded channels are
// ordered (g, cg, kd), the weights' own order) and the copy into Y's
// layout.
func (c *compiler) unfoldConv3D(g *group, xop operand, xs, ws []int64, G int64, gm geom, pad float32, out operand,
	conv2D func(p [16]int64, unf, y2 operand) error) error {
	N, C, D, H, W := xs[0], xs[1], xs[2], xs[3], xs[4]
	Cout := ws[0]
	if G < 1 || C%G != 0 || Cout%G != 0 || ws[1] != C/G {
		return fmt.Errorf("%d input channels, weights %v, %d groups", C, ws, G)
	}
	Cg, KD := C/G, ws[2]
	OD, SD, DD, PD := gm.out[0], gm.s[0], gm.d[0], gm.pb[0]
	HW := H * W
	Dp := max(D+gm.pb[0]+gm.pe[0], (OD-1)*SD+(KD-1)*DD+1)
	if N*G*KD*Cg*HW > maxConv3DUnfold {
		return fmt.Errorf("a 3-D convolution whose unfolded input has %d values per output depth (at most %d)",
			N*G*KD*Cg*HW, maxConv3DUnfold)
	}
	// the depth padding: X copied into [N, C, Dp, H, W], pad in the
	// padding slices only: [0, PD) and [PD+D, Dp) of each channel
	src, sD := xop, D
	if Dp != D || PD != 0 {
		padded := operand{sp: SpaceArena, buf: c.newBuf(N * C * Dp * HW)}
		if err := c.valueFill(g, padded, 0, N*C, PD*HW, Dp*HW, pad); err != nil {
			return err
		}
		if err := c.valueFill(g, padded, (PD+D)*HW, N*C, (Dp-PD-D)*HW, Dp*HW, pad); err != nil {
			return err
		}
		if err := c.copyKernel(g, "conv3d pad", xop, 0, padded, PD*HW, []int64{N * C, D * HW},
			[]int64{D * HW, 1}, []int64{Dp * HW, 1}); err != nil {
			return err
		}
		src, sD = padded, Dp
	}
	OHW := gm.out[1] * gm.out[2]
	// output depths in chunks whose unfolded input stays under
	// conv3DChunk values per image (one chunk for most layers; the cut
	// looks at one image, never at the batch size): per chunk, the
	// unfold, the 2-D convolution, the copy into Y's layout, on buffers
	// every chunk reuses
	per := G * KD * Cg * HW // one image's unfolded input of one output depth
	odc := max(1, min(OD, conv3DChunk/per))
	unf := operand{sp: SpaceArena, buf: c.newBuf(N * odc * per)}
	y2 := operand{sp: SpaceArena, buf: c.newBuf(N * odc * Cout * OHW)}
	for od0 := int64(0); od0 < OD; od0 += odc {
		nd := min(odc, OD-od0)
		// unfold: (n, od, g, cg, kd, hw) <- src[n, g*Cg + cg, od*SD + kd*DD, hw]
		dims := []int64{N, nd, G, Cg, KD, HW}
		sin := []int64{C * sD * HW, SD * HW, Cg * sD * HW, sD * HW, DD * HW, 1}
		if err := c.copyKernel(g, "conv3d unfold", src, od0*SD*HW, unf, 0, dims, sin, stridesOf(dims)); err != nil {
			return err
		}
		// the 2-D convolution over (H, W) of N*nd images of G*Cg*KD channels
		var p [16]int64
		p[0], p[1], p[2], p[3], p[4], p[5] = N*nd, G*Cg*KD, H, W, Cout, G
		p[6], p[7], p[8], p[9], p[10], p[11] = ws[3], ws[4], gm.s[1], gm.s[2], gm.pb[1], gm.pb[2]
		p[12], p[13], p[14], p[15] = gm.d[1], gm.d[2], gm.out[1], gm.out[2]
		if err := conv2D(p, unf, y2); err != nil {
			return err
		}
		// Y [N, Cout, od0+od, OH*OW] <- Y' [N, nd, Cout, OH*OW]
		if err := c.copyKernel(g, "conv3d out", y2, 0, out, od0*OHW, []int64{N, Cout, nd, OHW},
			[]int64{nd * Cout * OHW, OHW, Cout * OHW, 1}, []int64{Cout * OD * OHW, OD * OHW, OHW, 1}); err != nil {
			return err
		}
	}
	return nil
}

// zeroFill emits a COPY that sets rows runs of n values of dst to 0, the
// first at off, each stride after the one before (rows spread the copy
// over the units). Nothing when there is nothing to set.
func (c *compiler) zeroFill(g *group, dst operand, off, rows, n, stride int64) error {
	return c.valueFill(g, dst, off, rows, n, stride, 0)
}

// valueFill is zeroFill with the value v.
func (c *compiler) valueFill(g *group, dst operand, off, rows, n, stride int64, v float32) error {
	if rows < 1 || n < 1 {
		return nil
	}
	return c.copyKernel(g, "fill", c.newConst([]float32{v}), 0, dst, off, []int64{rows, n},
		[]int64{0, 0}, []int64{stride, 1})
}

// lowerQConv3D runs a 3-D QLinearConv or ConvInteger as a float 3-D
// convolution runs (unfoldConv3D): the depth padding filled with the input's
// zero point, the 2-D convolution of the unfolded input an integer one
// (emitQConv) whose weights are the rows packed at load, unchanged.
func (c *compiler) lowerQConv3D(g *group, n *graph.Node, qlin bool, xi, wi, zxi, zwi int) error {
	x, w, err := c.convInputs(n, xi, wi)
	if err != nil {
		return err
	}
	xs, ws := x.t.Shape, w.t.Shape
	if len(ws) != 5 {
		return fmt.Errorf("3-D convolution weights of rank %d", len(ws))
	}
	gm, err := convGeom(n, xs[2:], ws[2:], false)
	if err != nil {
		return err
	}
	xop, err := c.operand(n.Inputs[xi])
	if err != nil {
		return err
	}
	out, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	zx, err := c.constZeroPoint(n, zxi)
	if err != nil {
		return err
	}
	a := qconvArgs{qlin: qlin, wi: wi, zxi: zxi, zwi: zwi,
		aSigned: w.t.DType == graph.Int8, bSigned: x.t.DType == graph.Int8}
	return c.unfoldConv3D(g, xop, xs, ws, n.AttrInt("group", 1), gm, zx, out, func(p [16]int64, unf, y2 operand) error {
		return c.emitQConv(g, n, a, p, unf, y2)
	})
}

// lowerConvTranspose3D runs a 3-D transposed convolution as the 3-D
// convolution it equals: the input spread out by the strides (zeros
// between its values) and padded by (k-1)*d - pads on each side (a
// negative amount crops), convolved at stride 1 with the weights flipped
// on every axis and their channel axes swapped per group.
func (c *compiler) lowerConvTranspose3D(g *group) error {
	n := c.node(g)
	_, w, xs, ws, err := c.conv3DInputs(n)
	if err != nil {
		return err
	}
	G := n.AttrInt("group", 1)
	N, C := xs[0], xs[1]
	if G < 1 || C%G != 0 || ws[0] != C {
		return fmt.Errorf("X %v, W %v, group %d do not agree", xs, ws, G)
	}
	gm, _, err := convTGeom(n, xs[2:], ws[2:])
	if err != nil {
		return err
	}
	Cg, Mg := C/G, ws[1]
	// the spread, padded input Z [N, C, L0, L1, L2]: X[j] at j*s + lo
	var L, lo, j0, cnt [3]int64
	for i := 0; i < 3; i++ {
		ek := (ws[2+i]-1)*gm.d[i] + 1
		lo[i] = ek - 1 - gm.pb[i]
		L[i] = gm.out[i] + ek - 1
		// the input positions that land inside Z
		for j0[i] = 0; j0[i] < xs[2+i] && j0[i]*gm.s[i]+lo[i] < 0; j0[i]++ {
		}
		for j := j0[i]; j < xs[2+i] && j*gm.s[i]+lo[i] < L[i]; j++ {
			cnt[i]++
		}
	}
	zn := N * C * L[0] * L[1] * L[2]
	if zn > maxConv3DUnfold {
		return fmt.Errorf("a 3-D transposed convolution whose spread input has %d values (at most %d)", zn, maxConv3DUnfold)
	}
	z := operand{sp: SpaceArena, buf: c.newBuf(zn)}
	if err := c.zeroFill(g, z, 0, N*C*L[0], L[1]*L[2], L[1]*L[2]); err != nil {
		return err
	}
	if cnt[0] > 0 && cnt[1] > 0 && cnt[2] > 0 {
		xop, err := c.operand(n.Inputs[0])
		if err != nil {
			return err
		}
		D, H, W := xs[2], xs[3], xs[4]
		soff := (j0[0]*H+j0[1])*W + j0[2]
		doff := ((j0[0]*gm.s[0]+lo[0])*L[1]+j0[1]*gm.s[1]+lo[1])*L[2] + j0[2]*gm.s[2] + lo[2]
		if err := c.copyKernel(g, "convtranspose3d spread", xop, soff, z, doff, []int64{N * C, cnt[0], cnt[1], cnt[2]},
			[]int64{D * H * W, H * W, W, 1},
			[]int64{L[0] * L[1] * L[2], gm.s[0] * L[1] * L[2], gm.s[1] * L[2], gm.s[2]}); err != nil {
			return err
		}
	}
	// W' [G*Mg, Cg, KD, KH, KW]: W'[g*Mg + m][c][k] = W[g*Cg + c][m][K-1-k]
	KD, KH, KW := ws[2], ws[3], ws[4]
	K := KD * KH * KW
	wp := make([]float32, len(w.t.F))
	for gi := int64(0); gi < G; gi++ {
		for m := int64(0); m < Mg; m++ {
			for ci := int64(0); ci < Cg; ci++ {
				src := w.t.F[((gi*Cg+ci)*Mg+m)*K:][:K]
				dst := wp[((gi*Mg+m)*Cg+ci)*K:][:K]
				for k := int64(0); k < K; k++ {
					dst[K-1-k] = src[k]
				}
			}
		}
	}
	cg := geom{k: ws[2:], s: []int64{1, 1, 1}, d: gm.d, pb: make([]int64, 3), pe: make([]int64, 3), out: gm.out}
	bias, err := c.optOperand(n, 2)
	if err != nil {
		return err
	}
	out, _, err := c.output(c.outName(g))
	if err != nil {
		return err
	}
	return c.emitConv3D(g, z, []int64{N, C, L[0], L[1], L[2]}, wp, []int64{G * Mg, Cg, KD, KH, KW}, G, cg, bias, out)
}
