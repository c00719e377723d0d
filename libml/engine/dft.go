package engine

import (
	"fmt"
	"math"
)

// DFT and STFT. A transform of length L is a product with a constant
// matrix of cosines and sines (a direct DFT, O(L^2) per signal, not an
// FFT): one GEMM on either device, deterministic like any other, and
// exact to float32 rounding for the lengths audio front-ends use (frames
// of 256 to 2048 samples). The matrix is capped at maxDFTMatrix floats.

// maxDFTMatrix bounds a transform's matrix, (input values per signal) x
// (output values per signal) floats: 32 MiB.
const maxDFTMatrix = 1 << 23

// dftSpec is one DFT node: signals of n values (c = 1 real, 2 complex) at
// axis, outer signals before it and inner ones after it (excluding the
// last, complex, dimension); a transform of length L (the input is cut or
// padded with zeros to it), m output frequencies.
type dftSpec struct {
	axis, outer, n, inner, c, L, m int64
	inverse                        bool
}

// dftArgs reads a DFT node's attributes and constant inputs (opset 17:
// axis attribute; 20: axis input) for input shape xs.
func dftArgs(e *ev, xs []int64) (dftSpec, error) {
	var s dftSpec
	r := int64(len(xs))
	if r < 2 || (xs[r-1] != 1 && xs[r-1] != 2) {
		return s, fmt.Errorf("input %v: the last dimension must be 1 (real) or 2 (complex)", xs)
	}
	axis := e.n.AttrInt("axis", 1)
	if e.opset >= 20 {
		axis = -2
		if at, err := e.constIn(2, "axis"); err != nil {
			return s, err
		} else if at != nil {
			if at.Len() != 1 {
				return s, fmt.Errorf("axis must be one value")
			}
			axis = int64(at.at(0))
		}
	}
	if axis < 0 {
		axis += r
	}
	if axis < 0 || axis >= r-1 {
		return s, fmt.Errorf("axis %d of input %v (the last dimension holds the complex parts)", axis, xs)
	}
	s.axis, s.n, s.c = axis, xs[axis], xs[r-1]
	s.outer, s.inner = numel(xs[:axis]), numel(xs[axis+1:r-1])
	s.L = s.n
	lt, err := e.constIn(1, "dft_length")
	if err != nil {
		return s, err
	}
	if lt != nil && lt.Len() > 0 {
		if lt.Len() != 1 || lt.at(0) < 1 {
			return s, fmt.Errorf("dft_length must be one positive value")
		}
		if lt.at(0) > maxDFTMatrix {
			return s, &UnsupportedError{Op: e.n.Op, Node: e.n.Name,
				Why: fmt.Sprintf("dft_length %v is longer than the %d values the engine transforms", lt.at(0), maxDFTMatrix)}
		}
		s.L = int64(lt.at(0))
	}
	s.inverse = e.n.AttrInt("inverse", 0) != 0
	s.m = s.L
	if e.n.AttrInt("onesided", 0) != 0 {
		if s.inverse {
			return s, fmt.Errorf("an inverse one-sided DFT is not defined")
		}
		s.m = s.L/2 + 1
	}
	if s.n > maxDFTMatrix || s.n*s.c*2*s.m > maxDFTMatrix {
		return s, &UnsupportedError{Op: e.n.Op, Node: e.n.Name,
			Why: fmt.Sprintf("a transform of %d values into %d frequencies is larger than the %d-float matrix the engine builds", s.n, s.m, maxDFTMatrix)}
	}
	return s, nil
}

// dftShape is the DFT's output shape.
func (s dftSpec) shape(xs []int64) []int64 {
	ys := append([]int64{}, xs...)
	ys[s.axis], ys[len(ys)-1] = s.m, 2
	return ys
}

// dftMatrix is the transform as a (n*c) x (2*m) matrix Mt: row (j, ci)
// (input sample j, real or imaginary part), column (k, co) (frequency k,
// real or imaginary part), each input sample weighted by w[j] (a window;
// nil: 1). Rows of samples at or past L are zero (the input is cut to L).
func dftMatrix(n, c, L, m int64, inverse bool, w []float32) []float32 {
	mt := make([]float32, n*c*2*m)
	sign, scale := -1.0, 1.0
	if inverse {
		sign, scale = 1, 1/float64(L)
	}
	for j := int64(0); j < min(n, L); j++ {
		wj := scale
		if w != nil {
			wj *= float64(w[j])
		}
		for k := int64(0); k < m; k++ {
			th := 2 * math.Pi * float64((j*k)%L) / float64(L)
			cs, sn := math.Cos(th)*wj, sign*math.Sin(th)*wj
			// (xr + i xi)(cos + i sn) = xr cos - xi sn + i (xr sn + xi cos)
			row := j * c * 2 * m
			mt[row+2*k], mt[row+2*k+1] = float32(cs), float32(sn)
			if c == 2 {
				row += 2 * m
				mt[row+2*k], mt[row+2*k+1] = float32(-sn), float32(cs)
			}
		}
	}
	return mt
}

// dftSignal is the transform of one signal (n values of c parts, stride
// step between samples), weighted by w, into y (m complex values), in
// float64.
func dftSignal(x []float32, step, n, c, L, m int64, inverse bool, w []float32, y []float32) {
	sign, scale := -1.0, 1.0
	if inverse {
		sign, scale = 1, 1/float64(L)
	}
	for k := int64(0); k < m; k++ {
		var re, im float64
		for j := int64(0); j < min(n, L); j++ {
			xr, xi := float64(x[j*step]), 0.0
			if c == 2 {
				xi = float64(x[j*step+1])
			}
			if w != nil {
				xr, xi = xr*float64(w[j]), xi*float64(w[j])
			}
			th := 2 * math.Pi * float64((j*k)%L) / float64(L)
			cs, sn := math.Cos(th), sign*math.Sin(th)
			re += xr*cs - xi*sn
			im += xr*sn + xi*cs
		}
		y[2*k], y[2*k+1] = float32(re*scale), float32(im*scale)
	}
}

func refDFT(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	s, err := dftArgs(e, x.Shape)
	if err != nil {
		return nil, err
	}
	ys := s.shape(x.Shape)
	if !x.known() {
		return one(shapeOnly(x.DType, ys))
	}
	xf, y := x.floats(), NewFloat(ys, nil)
	sig := make([]float32, 2*s.m)
	for o := int64(0); o < s.outer; o++ {
		for i := int64(0); i < s.inner; i++ {
			dftSignal(xf[(o*s.n*s.inner+i)*s.c:], s.inner*s.c, s.n, s.c, s.L, s.m, s.inverse, nil, sig)
			for k := int64(0); k < s.m; k++ {
				at := ((o*s.m+k)*s.inner + i) * 2
				y.F[at], y.F[at+1] = sig[2*k], sig[2*k+1]
			}
		}
	}
	return one(y)
}

// lowerDFT runs a DFT as one GEMM with its matrix, the signals moved next
// to each other first (and the result back) when dimensions lie between
// the axis and the complex parts.
func (c *compiler) lowerDFT(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	s, err := dftArgs(c.evFor(n), x.t.Shape)
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	rows := s.outer * s.inner
	if rows == 0 || s.m == 0 {
		return nil
	}
	a, out := src, dst
	if s.inner > 1 {
		// [outer, n, inner, c] -> [outer, inner, n, c]
		a = operand{sp: SpaceArena, buf: c.newBuf(rows * s.n * s.c)}
		if err := c.copyView(g, src, a, []int64{s.outer, s.inner, s.n, s.c},
			[]int64{s.n * s.inner * s.c, s.c, s.inner * s.c, 1}); err != nil {
			return err
		}
		out = operand{sp: SpaceArena, buf: c.newBuf(rows * s.m * 2)}
	}
	c.emitTransform(g, a, out, rows, s.n*s.c, 2*s.m, dftMatrix(s.n, s.c, s.L, s.m, s.inverse, nil))
	if s.inner > 1 {
		// [outer, inner, m, 2] -> [outer, m, inner, 2]
		return c.copyView(g, out, dst, []int64{s.outer, s.m, s.inner, 2},
			[]int64{s.inner * s.m * 2, 2, s.m * 2, 1})
	}
	return nil
}

// stftSpec is one STFT node: batch signals of len samples (c parts),
// frames of L samples every step, m frequencies each, a window (nil:
// rectangular).
type stftSpec struct {
	batch, len, c, step, L, frames, m int64
	window                            []float32
}

// stftArgs reads an STFT node's inputs: frame_step, the window and
// frame_length must be constants.
func stftArgs(e *ev, xs []int64) (stftSpec, error) {
	var s stftSpec
	if len(xs) != 3 || (xs[2] != 1 && xs[2] != 2) {
		return s, fmt.Errorf("signal %v: want [batch, length, 1 or 2]", xs)
	}
	s.batch, s.len, s.c = xs[0], xs[1], xs[2]
	st, err := e.constIn(1, "frame_step")
	if err != nil {
		return s, err
	}
	if st == nil || st.Len() != 1 || st.at(0) < 1 {
		return s, fmt.Errorf("frame_step must be one positive value")
	}
	s.step = int64(st.at(0))
	wt := e.in(2)
	if wt != nil && !wt.known() {
		return s, &UnsupportedError{Op: e.n.Op, Node: e.n.Name, Why: "a window computed at run time is not supported (a constant one is)"}
	}
	if wt != nil {
		if len(wt.Shape) != 1 {
			return s, fmt.Errorf("window %v: want one dimension", wt.Shape)
		}
		s.window, s.L = wt.floats(), wt.Shape[0]
	}
	lt, err := e.constIn(3, "frame_length")
	if err != nil {
		return s, err
	}
	if lt != nil && lt.Len() > 0 {
		if lt.Len() != 1 || lt.at(0) < 1 || (s.window != nil && int64(lt.at(0)) != s.L) {
			return s, fmt.Errorf("frame_length must be one positive value, the window's length")
		}
		s.L = int64(lt.at(0))
	}
	if s.L < 1 || s.L > s.len {
		return s, fmt.Errorf("frames of %d samples in a signal of %d (a window or frame_length is needed)", s.L, s.len)
	}
	s.frames = (s.len-s.L)/s.step + 1
	s.m = s.L
	if e.n.AttrInt("onesided", 1) != 0 {
		s.m = s.L/2 + 1
	}
	if s.L > maxDFTMatrix || s.L*s.c*2*s.m > maxDFTMatrix {
		return s, &UnsupportedError{Op: e.n.Op, Node: e.n.Name,
			Why: fmt.Sprintf("frames of %d values into %d frequencies need a matrix larger than %d floats", s.L, s.m, maxDFTMatrix)}
	}
	return s, nil
}

func refSTFT(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	s, err := stftArgs(e, x.Shape)
	if err != nil {
		return nil, err
	}
	ys := []int64{s.batch, s.frames, s.m, 2}
	if !x.known() {
		return one(shapeOnly(x.DType, ys))
	}
	xf, y := x.floats(), NewFloat(ys, nil)
	for b := int64(0); b < s.batch; b++ {
		for f := int64(0); f < s.frames; f++ {
			at := (b*s.frames + f) * s.m * 2
			dftSignal(xf[(b*s.len+f*s.step)*s.c:], s.c, s.L, s.c, s.L, s.m, false, s.window,
				y.F[at:at+2*s.m])
		}
	}
	return one(y)
}

// lowerSTFT copies the frames side by side (they overlap in the signal)
// and runs them as one GEMM with the windowed transform's matrix.
func (c *compiler) lowerSTFT(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	s, err := stftArgs(c.evFor(n), x.t.Shape)
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	rows := s.batch * s.frames
	if rows == 0 {
		return nil
	}
	k := s.L * s.c
	frames := operand{sp: SpaceArena, buf: c.newBuf(rows * k)}
	if err := c.copyView(g, src, frames, []int64{s.batch, s.frames, k},
		[]int64{s.len * s.c, s.step * s.c, 1}); err != nil {
		return err
	}
	c.emitTransform(g, frames, dst, rows, k, 2*s.m, dftMatrix(s.L, s.c, s.L, s.m, false, s.window))
	return nil
}

// emitTransform emits out [rows, cols] = a [rows, k] times the constant
// transform matrix mt [k, cols]: one GEMM.
func (c *compiler) emitTransform(g *group, a, out operand, rows, k, cols int64, mt []float32) {
	d := c.draft(g, OpGemm)
	gs := gemmSpec{M: rows, N: cols, K: k, lda: k, ldb: cols, ldc: cols, alpha: 1}
	gs.set(&d.k)
	d.in[0], d.in[1] = a, c.newConst(mt)
	d.out = out
	c.emit(d)
}
