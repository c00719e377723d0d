package inss

import (
	"math"
	"math/rand/v2"
)

// mlp is a small fully connected network for InSS's learned scheduler:
// ReLU hidden layers, a linear output layer, its own backpropagation and
// Adam. float64 and one goroutine, so that training is deterministic for
// a seed.
type mlp struct {
	sizes []int
	w, b  [][]float64 // layer l: w[l] is out×in row-major
	// gradients, accumulated by backward until step
	gw, gb [][]float64
	// Adam's moments and step count
	mw, vw, mb, vb [][]float64
	t              int
}

// newMLP makes a network of the given layer sizes (input first), its
// weights drawn uniformly in ±sqrt(6/fan_in) (He) and the output layer's
// scaled down by outScale.
func newMLP(r *rand.Rand, outScale float64, sizes ...int) *mlp {
	n := &mlp{sizes: sizes}
	for l := 0; l+1 < len(sizes); l++ {
		in, out := sizes[l], sizes[l+1]
		lim := math.Sqrt(6 / float64(in))
		if l+2 == len(sizes) {
			lim *= outScale
		}
		w := make([]float64, in*out)
		for i := range w {
			w[i] = (2*r.Float64() - 1) * lim
		}
		n.w = append(n.w, w)
		n.b = append(n.b, make([]float64, out))
		for _, p := range []*[][]float64{&n.gw, &n.mw, &n.vw} {
			*p = append(*p, make([]float64, in*out))
		}
		for _, p := range []*[][]float64{&n.gb, &n.mb, &n.vb} {
			*p = append(*p, make([]float64, out))
		}
	}
	return n
}

// acts holds one forward pass's activations for backward: acts[0] is the
// input, acts[l+1] layer l's output (after ReLU but for the last).
type acts [][]float64

// forward runs x through the network; a is filled for backward when not
// nil.
func (n *mlp) forward(x []float64, a *acts) []float64 {
	cur := x
	if a != nil {
		*a = append((*a)[:0], x)
	}
	for l := range n.w {
		in, out := n.sizes[l], n.sizes[l+1]
		y := make([]float64, out)
		w := n.w[l]
		for o := 0; o < out; o++ {
			s := n.b[l][o]
			row := w[o*in : (o+1)*in]
			for i, v := range cur {
				s += row[i] * v
			}
			if l+1 < len(n.w) && s < 0 {
				s = 0
			}
			y[o] = s
		}
		cur = y
		if a != nil {
			*a = append(*a, y)
		}
	}
	return cur
}

// backward adds the gradient of a loss whose gradient at the output of
// the pass a recorded is dOut, and returns the gradient at the input.
func (n *mlp) backward(a acts, dOut []float64) []float64 {
	d := dOut
	for l := len(n.w) - 1; l >= 0; l-- {
		in, out := n.sizes[l], n.sizes[l+1]
		if l+1 < len(n.w) { // through the ReLU
			d = append([]float64(nil), d...)
			for o, v := range a[l+1] {
				if v <= 0 {
					d[o] = 0
				}
			}
		}
		x := a[l]
		dx := make([]float64, in)
		w, gw := n.w[l], n.gw[l]
		for o := 0; o < out; o++ {
			g := d[o]
			if g == 0 {
				continue
			}
			n.gb[l][o] += g
			row, grow := w[o*in:(o+1)*in], gw[o*in:(o+1)*in]
			for i := range in {
				grow[i] += g * x[i]
				dx[i] += g * row[i]
			}
		}
		d = dx
	}
	return d
}

// zeroGrad drops the accumulated gradients.
func (n *mlp) zeroGrad() {
	for l := range n.gw {
		clear(n.gw[l])
		clear(n.gb[l])
	}
}

// step applies Adam with learning rate lr to the accumulated gradients
// times scale (1/batch for a mean), clipped to a global norm of 10, and
// zeroes them.
func (n *mlp) step(lr, scale float64) {
	const b1, b2, eps, clipNorm = 0.9, 0.999, 1e-8, 10
	norm := 0.0
	for l := range n.gw {
		for _, g := range n.gw[l] {
			norm += g * g
		}
		for _, g := range n.gb[l] {
			norm += g * g
		}
	}
	if norm = math.Sqrt(norm) * scale; norm > clipNorm {
		scale *= clipNorm / norm
	}
	n.t++
	c1, c2 := 1-math.Pow(b1, float64(n.t)), 1-math.Pow(b2, float64(n.t))
	upd := func(p, g, m, v []float64) {
		for i := range p {
			gi := g[i] * scale
			m[i] = b1*m[i] + (1-b1)*gi
			v[i] = b2*v[i] + (1-b2)*gi*gi
			p[i] -= lr * (m[i] / c1) / (math.Sqrt(v[i]/c2) + eps)
		}
	}
	for l := range n.w {
		upd(n.w[l], n.gw[l], n.mw[l], n.vw[l])
		upd(n.b[l], n.gb[l], n.mb[l], n.vb[l])
	}
	n.zeroGrad()
}

// clone is a copy of n's parameters (a target network).
func (n *mlp) clone() *mlp {
	c := &mlp{sizes: n.sizes}
	cp := func(src [][]float64) [][]float64 {
		out := make([][]float64, len(src))
		for l := range src {
			out[l] = append([]float64(nil), src[l]...)
		}
		return out
	}
	c.w, c.b = cp(n.w), cp(n.b)
	c.gw, c.gb, c.mw, c.vw, c.mb, c.vb = cp(n.gw), cp(n.gb), cp(n.mw), cp(n.vw), cp(n.mb), cp(n.vb)
	return c
}

// softUpdate moves n towards o: n = k·o + (1−k)·n.
func (n *mlp) softUpdate(o *mlp, k float64) {
	for l := range n.w {
		for i := range n.w[l] {
			n.w[l][i] = k*o.w[l][i] + (1-k)*n.w[l][i]
		}
		for i := range n.b[l] {
			n.b[l][i] = k*o.b[l][i] + (1-k)*n.b[l][i]
		}
	}
}
