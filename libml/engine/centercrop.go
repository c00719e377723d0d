package engine

import (
	"fmt"
	"slices"
)

// CenterCropPad (opset 18): each of axes cropped to its target size
// around the centre (from floor((in - target)/2)) or padded with zeros on
// both sides (floor((target - in)/2) before, the rest after). The target
// shape must be known by compile time. It runs as one strided COPY of the
// kept region into the output, after a zero fill when it pads. The batch
// axis of a run-time input (axis 0) is never cropped or padded: a
// request's output must not depend on the batch it runs in.

// cropPad is a CenterCropPad node's plan: the output shape, and per axis
// where the kept region starts in the input and in the output, and its
// length.
type cropPad struct {
	out, inStart, outStart, keep []int64
	pads                         bool
}

// cropPadArgs reads CenterCropPad's shape and axes for input shape xs.
func cropPadArgs(e *ev, xs []int64) (*cropPad, error) {
	sh, err := e.constIn(1, "shape")
	if err != nil {
		return nil, err
	}
	if sh == nil || sh.I == nil {
		return nil, fmt.Errorf("shape must be integers")
	}
	r := int64(len(xs))
	var axes []int64
	if a := e.n.Attr("axes"); a != nil {
		for _, v := range a.Ints {
			ax, err := normAxis(v, r)
			if err != nil {
				return nil, err
			}
			if slices.Contains(axes, ax) {
				return nil, fmt.Errorf("axis %d repeated", v)
			}
			axes = append(axes, ax)
		}
	} else {
		for i := range r {
			axes = append(axes, i)
		}
	}
	if int64(len(axes)) != sh.Len() {
		return nil, fmt.Errorf("shape has %d values for %d axes", sh.Len(), len(axes))
	}
	p := &cropPad{out: slices.Clone(xs), inStart: make([]int64, r), outStart: make([]int64, r), keep: slices.Clone(xs)}
	for i, a := range axes {
		t, in := sh.I[i], xs[a]
		if t < 1 || t > 1<<31 {
			return nil, fmt.Errorf("target size %d on axis %d", t, a)
		}
		p.out[a] = t
		if t < in {
			p.inStart[a], p.keep[a] = (in-t)/2, t
		} else if t > in {
			p.outStart[a], p.pads = (t-in)/2, true
		}
	}
	return p, nil
}

// refCenterCropPad is CenterCropPad.
func refCenterCropPad(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	p, err := cropPadArgs(e, x.Shape)
	if err != nil {
		return nil, err
	}
	if err := checkValueShaped(p.out, x.known()); err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, p.out))
	}
	// the kept region, then (padding) placed into zeros
	is, os := stridesOf(x.Shape), stridesOf(p.out)
	kept := copyStrided(x, p.keep, is, dot(p.inStart, is))
	if !p.pads {
		return one(kept)
	}
	y := &Tensor{DType: x.DType, Shape: p.out}
	if x.IsFloat() {
		y.F = make([]float32, numel(p.out))
	} else {
		y.I = make([]int64, numel(p.out))
	}
	doff, idx := dot(p.outStart, os), make([]int64, len(p.keep))
	for i := range numel(p.keep) {
		unravel(i, p.keep, idx)
		if dst := doff + dot(idx, os); y.F != nil {
			y.F[dst] = kept.F[i]
		} else {
			y.I[dst] = kept.I[i]
		}
	}
	return one(y)
}

// lowerCenterCropPad emits CenterCropPad: a zero fill when it pads, then
// one COPY of the kept region.
func (c *compiler) lowerCenterCropPad(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	p, err := cropPadArgs(&ev{n: n, opset: c.m.opset, ins: c.tensors(n)}, x.t.Shape)
	if err != nil {
		return err
	}
	if p.out[0] != x.t.Shape[0] {
		return batchAxisUnsupported(n, "it crops or pads axis 0 of a run-time input")
	}
	src, err := c.operand(n.Inputs[0])
	if err != nil {
		return err
	}
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if p.pads {
		if err := c.zeroFill(g, dst, 0, p.out[0], numel(p.out[1:]), numel(p.out[1:])); err != nil {
			return err
		}
	}
	is, os := stridesOf(x.t.Shape), stridesOf(p.out)
	return c.copyKernel(g, "center crop/pad", src, dot(p.inStart, is), dst, dot(p.outStart, os), p.keep, is, os)
}
