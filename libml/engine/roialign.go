package engine

import (
	"fmt"
	"math"
)

// RoiAlign: one ROIALIGN kernel (native/cpu/roialign.c,
// native/cuda/roialign.cu). The rois may be computed at run time; the
// batch indices are constants or a run-time int64 tensor (float32
// values). The reference below follows ONNX Runtime's sampling (its
// clamping at the borders, its weights) in float64.

// roiAlignArgs reads RoiAlign's attributes for X of shape xs and rois of
// shape rs: output size, sampling ratio, mode (0 avg, 1 max), half_pixel
// and spatial scale.
func roiAlignArgs(e *ev, xs, rs []int64) (oh, ow, sr, mode, half int64, scale float32, err error) {
	if len(xs) != 4 || len(rs) != 2 || rs[1] != 4 {
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("X %v and rois %v: want [N,C,H,W] and [R,4]", xs, rs)
	}
	oh, ow, sr = e.n.AttrInt("output_height", 1), e.n.AttrInt("output_width", 1), e.n.AttrInt("sampling_ratio", 0)
	if oh < 1 || ow < 1 || sr < 0 {
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("output %dx%d, sampling_ratio %d", oh, ow, sr)
	}
	switch m := e.n.AttrString("mode", "avg"); m {
	case "avg":
	case "max":
		mode = 1
	default:
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("mode %q", m)
	}
	ct := "output_half_pixel"
	if e.opset >= 16 {
		ct = "half_pixel"
	}
	switch ct = e.n.AttrString("coordinate_transformation_mode", ct); ct {
	case "half_pixel":
		half = 1
	case "output_half_pixel":
	default:
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("coordinate_transformation_mode %q", ct)
	}
	return oh, ow, sr, mode, half, e.n.AttrFloat("spatial_scale", 1), nil
}

func refRoiAlign(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	rt, err := e.need(1)
	if err != nil {
		return nil, err
	}
	bt, err := e.need(2)
	if err != nil {
		return nil, err
	}
	OH, OW, sr, mode, half, scale, err := roiAlignArgs(e, x.Shape, rt.Shape)
	if err != nil {
		return nil, err
	}
	R := rt.Shape[0]
	if bt.Len() != R {
		return nil, fmt.Errorf("%d batch indices for %d rois", bt.Len(), R)
	}
	N, C, H, W := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	oshape := []int64{R, C, OH, OW}
	if !e.allKnown() {
		return one(shapeOnly(x.DType, oshape))
	}
	off := 0.0
	if half != 0 {
		off = 0.5
	}
	y := NewFloat(oshape, nil)
	for r := int64(0); r < R; r++ {
		b := int64(bt.at(r))
		if b < 0 || b >= N {
			return nil, fmt.Errorf("roi %d: batch index %d of %d", r, b, N)
		}
		s := float64(scale)
		x0, y0 := rt.at(r*4)*s-off, rt.at(r*4+1)*s-off
		rw, rh := rt.at(r*4+2)*s-off-x0, rt.at(r*4+3)*s-off-y0
		if half == 0 {
			rw, rh = math.Max(rw, 1), math.Max(rh, 1)
		}
		bh, bw := rh/float64(OH), rw/float64(OW)
		gh, gw := sr, sr
		if sr == 0 {
			gh, gw = int64(math.Ceil(rh/float64(OH))), int64(math.Ceil(rw/float64(OW)))
		}
		for c := int64(0); c < C; c++ {
			plane := x.F[(b*C+c)*H*W:]
			for ph := int64(0); ph < OH; ph++ {
				for pw := int64(0); pw < OW; pw++ {
					var acc float64
					first := true
					for iy := int64(0); iy < gh; iy++ {
						sy := y0 + float64(ph)*bh + (float64(iy)+0.5)*bh/float64(gh)
						for ix := int64(0); ix < gw; ix++ {
							sx := x0 + float64(pw)*bw + (float64(ix)+0.5)*bw/float64(gw)
							var v float64
							if !(sy < -1 || sy > float64(H) || sx < -1 || sx > float64(W)) {
								yy, xx := math.Max(sy, 0), math.Max(sx, 0)
								yl, xl := int64(yy), int64(xx)
								yh, xh := yl+1, xl+1
								if yl >= H-1 {
									yl, yh, yy = H-1, H-1, float64(H-1)
								}
								if xl >= W-1 {
									xl, xh, xx = W-1, W-1, float64(W-1)
								}
								ly, lx := yy-float64(yl), xx-float64(xl)
								t := [4]float64{(1 - ly) * (1 - lx) * float64(plane[yl*W+xl]), (1 - ly) * lx * float64(plane[yl*W+xh]),
									ly * (1 - lx) * float64(plane[yh*W+xl]), ly * lx * float64(plane[yh*W+xh])}
								if mode == 1 {
									v = math.Max(math.Max(math.Max(t[0], t[1]), t[2]), t[3])
								} else {
									v = t[0] + t[1] + t[2] + t[3]
								}
							}
							if mode == 0 {
								acc += v
							} else if first || v > acc {
								acc = v
							}
							first = false
						}
					}
					if mode == 0 {
						acc /= float64(max(gh*gw, 1))
					}
					y.F[((r*C+c)*OH+ph)*OW+pw] = float32(acc)
				}
			}
		}
	}
	return one(y)
}

func (c *compiler) lowerRoiAlign(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	rv, err := c.val(n.Inputs[1])
	if err != nil {
		return err
	}
	bv, err := c.val(n.Inputs[2])
	if err != nil {
		return err
	}
	oh, ow, sr, mode, half, scale, err := roiAlignArgs(c.evFor(n), x.t.Shape, rv.t.Shape)
	if err != nil {
		return err
	}
	xs, R := x.t.Shape, rv.t.Shape[0]
	if bv.t.Len() != R {
		return fmt.Errorf("%d batch indices for %d rois", bv.t.Len(), R)
	}
	d := c.draft(g, OpRoiAlign)
	copy(d.k.P[:], []int64{xs[0], xs[1], xs[2], xs[3], R, oh, ow, sr, mode, half})
	d.k.F[0] = scale
	for i := 0; i < 3; i++ {
		if d.in[i], err = c.operand(n.Inputs[i]); err != nil {
			return err
		}
	}
	if d.out, _, err = c.output(n.Outputs[0]); err != nil {
		return err
	}
	if R == 0 || numel(xs) == 0 {
		return nil
	}
	c.emit(d)
	return nil
}
