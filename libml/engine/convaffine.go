package engine

// foldConvAffine folds a per-channel scale (Mul by a constant) and shift
// (Add of a constant) into the Conv before it, when that Conv's output is
// read by the Mul or Add alone: W' = W*s and B' = B*s for a scale, B' = B+t
// for a shift; a chain (Mul, then Add: how paddle2onnx writes
// BatchNormalization) folds link by link. The constant must broadcast over
// the channels only (one value, or one per output channel with every other
// dimension 1). As folding BatchNormalization does, it rounds differently
// in the last place than the separate operators.
func (m *Model) foldConvAffine() {
	cons := m.consumers()
	prod := map[string]int{}
	for i := range m.nodes {
		for _, o := range m.nodes[i].Outputs {
			prod[o] = i
		}
	}
	drop := map[int]bool{}
	for i := range m.nodes {
		n := &m.nodes[i]
		if (n.Op != "Mul" && n.Op != "Add") || len(n.Inputs) != 2 || len(n.Outputs) != 1 ||
			(n.Domain != "" && n.Domain != "ai.onnx") {
			continue
		}
		for side := 0; side < 2; side++ {
			x, cname := n.Inputs[side], n.Inputs[1-side]
			pi, ok := prod[x]
			if !ok || drop[pi] || cons[x] != 1 || x == cname {
				continue
			}
			cv := &m.nodes[pi]
			if cv.Op != "Conv" || len(cv.Inputs) < 2 || len(cv.Outputs) != 1 {
				continue
			}
			w := m.consts[cv.Inputs[1]]
			if w == nil || !w.IsFloat() || len(w.Shape) < 3 {
				continue
			}
			M := w.Shape[0]
			per, ok := channelValues(m.consts[cname], M, len(w.Shape))
			if !ok {
				continue
			}
			var b *Tensor
			if len(cv.Inputs) > 2 && cv.Inputs[2] != "" {
				if b = m.consts[cv.Inputs[2]]; b == nil || !b.IsFloat() || b.Len() != M {
					continue
				}
			}
			nb := NewFloat([]int64{M}, nil)
			nw := w
			if n.Op == "Mul" {
				nw = NewFloat(w.Shape, nil)
				inner := numel(w.Shape[1:])
				for j := range nw.F {
					nw.F[j] = w.F[int64(j)] * per(int64(j)/inner)
				}
			}
			for c := int64(0); c < M; c++ {
				bv := float32(0)
				if b != nil {
					bv = b.F[c]
				}
				if n.Op == "Mul" {
					nb.F[c] = bv * per(c)
				} else {
					nb.F[c] = bv + per(c)
				}
			}
			wn, bn := cv.Name+"#W_affine", cv.Name+"#B_affine"
			for m.consts[wn] != nil || m.consts[bn] != nil {
				wn, bn = wn+"'", bn+"'"
			}
			m.consts[wn], m.consts[bn] = nw, nb
			cv.Inputs = []string{cv.Inputs[0], wn, bn}
			cv.Outputs = []string{n.Outputs[0]}
			prod[n.Outputs[0]] = pi // the next link finds the Conv
			drop[i] = true
			break
		}
	}
	if len(drop) == 0 {
		return
	}
	kept := m.nodes[:0]
	for i := range m.nodes {
		if !drop[i] {
			kept = append(kept, m.nodes[i])
		}
	}
	m.nodes = kept
}

// channelValues returns, for a constant t broadcast over a convolution's
// output of rank r with M channels (dimension 1), each channel's value:
// t must hold one value, or M values along the channel dimension with
// every other dimension 1.
func channelValues(t *Tensor, M int64, r int) (func(c int64) float32, bool) {
	if t == nil || !t.IsFloat() || !t.known() || len(t.Shape) > r {
		return nil, false
	}
	if t.Len() == 1 {
		v := t.F[0]
		return func(int64) float32 { return v }, true
	}
	ch := len(t.Shape) - r + 1 // t's dimension over the channels
	if ch < 0 || t.Len() != M || t.Shape[ch] != M {
		return nil, false
	}
	return func(c int64) float32 { return t.F[c] }, true
}
