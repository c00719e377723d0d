package engine

import (
	"fmt"
	"math"
)

// GridSample (opset 16): one GRIDSAMPLE kernel (native/cpu/gridsample.c,
// native/cuda/gridsample.cu); the reference below is written from the
// operator's definition (PyTorch's grid_sample) in float64.

// gridSampleArgs reads GridSample's mode, padding and align_corners as
// the kernel's codes and checks X [N,C,H,W] and grid [N,OH,OW,2].
func gridSampleArgs(e *ev, xs, gs []int64) (mode, pad, align int64, err error) {
	if len(xs) != 4 || len(gs) != 4 || gs[3] != 2 || gs[0] != xs[0] {
		return 0, 0, 0, fmt.Errorf("X %v and grid %v: want [N,C,H,W] and [N,OH,OW,2] (2-D sampling)", xs, gs)
	}
	switch m := e.n.AttrString("mode", "bilinear"); m {
	case "bilinear", "linear":
		mode = 0
	case "nearest":
		mode = 1
	case "bicubic", "cubic":
		mode = 2
	default:
		return 0, 0, 0, fmt.Errorf("mode %q", m)
	}
	switch p := e.n.AttrString("padding_mode", "zeros"); p {
	case "zeros":
	case "border":
		pad = 1
	case "reflection":
		pad = 2
	default:
		return 0, 0, 0, fmt.Errorf("padding_mode %q", p)
	}
	return mode, pad, e.n.AttrInt("align_corners", 0), nil
}

func refGridSample(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	gt, err := e.need(1)
	if err != nil {
		return nil, err
	}
	mode, pad, align, err := gridSampleArgs(e, x.Shape, gt.Shape)
	if err != nil {
		return nil, err
	}
	N, C, H, W, OH, OW := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3], gt.Shape[1], gt.Shape[2]
	oshape := []int64{N, C, OH, OW}
	if !e.allKnown() {
		return one(shapeOnly(x.DType, oshape))
	}
	unnorm := func(g float64, n int64) float64 {
		if align != 0 {
			return (g + 1) / 2 * float64(n-1)
		}
		return ((g+1)*float64(n) - 1) / 2
	}
	reflect := func(v float64, lo2, hi2 int64) float64 {
		if lo2 == hi2 {
			return 0
		}
		lo, span := float64(lo2)/2, float64(hi2-lo2)/2
		v = math.Abs(v - lo)
		extra, flips := math.Mod(v, span), int64(math.Floor(v/span))
		if flips%2 == 0 {
			return extra + lo
		}
		return span - extra + lo
	}
	padc := func(v float64, n int64) float64 {
		switch pad {
		case 1:
			return math.Min(math.Max(v, 0), float64(n-1))
		case 2:
			if align != 0 {
				v = reflect(v, 0, 2*(n-1))
			} else {
				v = reflect(v, -1, 2*n-1)
			}
			return math.Min(math.Max(v, 0), float64(n-1))
		}
		return v
	}
	at := func(plane int64, ix, iy int64) float64 {
		if ix < 0 || ix >= W || iy < 0 || iy >= H {
			return 0
		}
		return float64(x.F[plane*H*W+iy*W+ix])
	}
	cubic := func(t float64) [4]float64 {
		const A = -0.75
		f1 := func(v float64) float64 { return ((A+2)*v-(A+3))*v*v + 1 }
		f2 := func(v float64) float64 { return ((A*v-5*A)*v+8*A)*v - 4*A }
		return [4]float64{f2(t + 1), f1(t), f1(1 - t), f2(2 - t)}
	}
	tap := func(i, n int64) int64 {
		if pad == 0 {
			if i < 0 || i >= n {
				return -1
			}
			return i
		}
		return int64(padc(float64(i), n))
	}
	y := NewFloat(oshape, nil)
	for n := int64(0); n < N; n++ {
		for oh := int64(0); oh < OH; oh++ {
			for ow := int64(0); ow < OW; ow++ {
				g := gt.F[((n*OH+oh)*OW+ow)*2:]
				fx, fy := unnorm(float64(g[0]), W), unnorm(float64(g[1]), H)
				for c := int64(0); c < C; c++ {
					plane := n*C + c
					var v float64
					switch mode {
					case 2:
						bx, by := math.Floor(fx), math.Floor(fy)
						wx, wy := cubic(fx-bx), cubic(fy-by)
						for j := int64(0); j < 4; j++ {
							iy := tap(int64(by)-1+j, H)
							for i := int64(0); i < 4; i++ {
								ix := tap(int64(bx)-1+i, W)
								if ix >= 0 && iy >= 0 {
									v += wy[j] * wx[i] * at(plane, ix, iy)
								}
							}
						}
					case 1:
						px, py := padc(fx, W), padc(fy, H)
						v = at(plane, int64(math.RoundToEven(px)), int64(math.RoundToEven(py)))
					default:
						px, py := padc(fx, W), padc(fy, H)
						bx, by := math.Floor(px), math.Floor(py)
						tx, ty := px-bx, py-by
						x0, y0 := int64(bx), int64(by)
						v = at(plane, x0, y0)*(1-tx)*(1-ty) + at(plane, x0+1, y0)*tx*(1-ty) +
							at(plane, x0, y0+1)*(1-tx)*ty + at(plane, x0+1, y0+1)*tx*ty
					}
					y.F[((n*C+c)*OH+oh)*OW+ow] = float32(v)
				}
			}
		}
	}
	return one(y)
}

func (c *compiler) lowerGridSample(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	gv, err := c.val(n.Inputs[1])
	if err != nil {
		return err
	}
	mode, pad, align, err := gridSampleArgs(c.evFor(n), x.t.Shape, gv.t.Shape)
	if err != nil {
		return err
	}
	d := c.draft(g, OpGridSample)
	xs, gs := x.t.Shape, gv.t.Shape
	d.k.P[0], d.k.P[1], d.k.P[2], d.k.P[3] = xs[0], xs[1], xs[2], xs[3]
	d.k.P[4], d.k.P[5], d.k.P[6], d.k.P[7], d.k.P[8] = gs[1], gs[2], mode, pad, align
	if d.in[0], err = c.operand(n.Inputs[0]); err != nil {
		return err
	}
	if d.in[1], err = c.operand(n.Inputs[1]); err != nil {
		return err
	}
	if d.out, _, err = c.output(n.Outputs[0]); err != nil {
		return err
	}
	if numel(xs) == 0 || numel(gs) == 0 {
		return nil
	}
	c.emit(d)
	return nil
}
