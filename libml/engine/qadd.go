package engine

// A quantised residual addition in the QDQ form runs as four kernels: two
// DequantizeLinear, the float Add and a QuantizeLinear, each a pass over
// the tensor (MobileNetV2-int8 at batch 1: four kernels of 5-10 us for
// what ONNX Runtime's QLinearAdd does in one). fuseQLinearAdd merges four
// adjacent such drafts into one QUANT kernel of mode quantModeAdd, which
// computes each element as the same chain of float operations (the bits
// of the four apart): the two float tensors between them are no longer
// stored.

// quantModeAdd is QUANT's QLinearAdd mode (sluice_cpu.h SK_QUANT_ADD):
// In[0] and In[3] the two quantised tensors, In[4..7] their scales and
// zero points, In[1] and In[2] the output's.
const quantModeAdd = 5

// fuseQLinearAdd merges each run of DequantizeLinear, DequantizeLinear,
// Add, QuantizeLinear drafts (qlinearAdd) and recomputes the buffers'
// lifetimes.
func (c *compiler) fuseQLinearAdd() {
	if c.m.opts.NoFusion {
		return
	}
	readers := c.arenaReaders()
	out := make([]draft, 0, len(c.drafts))
	fused := false
	for i := 0; i < len(c.drafts); i++ {
		if i+3 < len(c.drafts) {
			if f, dead, ok := c.qlinearAdd(c.drafts[i:i+4], readers); ok {
				for _, b := range dead {
					c.bufs[b].size = 0
				}
				out = append(out, f)
				fused = true
				i += 3
				continue
			}
		}
		out = append(out, c.drafts[i])
	}
	if fused {
		c.reemit(out)
	}
}

// arenaReaders counts, per buffer, the operands of the drafts reading it.
func (c *compiler) arenaReaders() []int {
	readers := make([]int, len(c.bufs))
	for _, d := range c.drafts {
		for _, o := range d.in {
			if o.sp == SpaceArena {
				readers[o.buf]++
			}
		}
	}
	return readers
}

// reemit replaces the drafts by out and recomputes the buffers' lifetimes,
// as emit keeps them.
func (c *compiler) reemit(out []draft) {
	for _, b := range c.bufs {
		b.def, b.last = 1<<30, -1
	}
	c.drafts = c.drafts[:0]
	for _, d := range out {
		c.emit(d)
	}
}

// qlinearAdd returns the QUANT kernel of ds, two per-tensor
// DequantizeLinear drafts (in either order), the Add of their outputs
// (same shape, no broadcast, any activation, perhaps in place) and the
// per-tensor QuantizeLinear of its sum, where nothing else reads the float
// tensors; dead are the buffers no kernel uses any more.
func (c *compiler) qlinearAdd(ds []draft, readers []int) (f draft, dead []int, ok bool) {
	dq0, dq1, add, q := &ds[0], &ds[1], &ds[2], &ds[3]
	isQuant := func(d *draft, mode int64) bool {
		return d.k.Op == OpQuant && d.k.P[3] == mode && d.k.P[1] == 1 && d.out.sp == SpaceArena
	}
	if !isQuant(dq0, quantModeDequantize) || !isQuant(dq1, quantModeDequantize) || !isQuant(q, quantModeQuantize) {
		return draft{}, nil, false
	}
	ap := &add.k.P
	if add.k.Op != OpBinary || ap[0] != BinAdd || add.out.sp != SpaceArena {
		return draft{}, nil, false
	}
	// the Add's first operand comes first in the sum
	a, b := dq0, dq1
	if add.in[0] == dq1.out && add.in[1] == dq0.out {
		a, b = dq1, dq0
	}
	if add.in[0] != a.out || add.in[1] != b.out || a.out.buf == b.out.buf || q.in[0] != add.out {
		return draft{}, nil, false
	}
	n := q.k.P[0]
	if a.k.P[0] != n || b.k.P[0] != n || a.k.P[2] != n || b.k.P[2] != n || q.k.P[2] != n {
		return draft{}, nil, false
	}
	// no broadcast: both operands contiguous over the output's n values
	stride := int64(1)
	for i := int(ap[1]) - 1; i >= 0; i-- {
		if ap[8+i] != stride || ap[14+i] != stride {
			return draft{}, nil, false
		}
		stride *= ap[2+i]
	}
	if stride != n || a.out.off != 0 || b.out.off != 0 || add.out.off != 0 {
		return draft{}, nil, false
	}
	// each float tensor read by the next draft only (the sum may be
	// written over one of the operands: its buffer is then read twice)
	reads := map[int]int{a.out.buf: 1, b.out.buf: 1}
	reads[add.out.buf]++
	for buf, want := range reads {
		cb := c.bufs[buf]
		if readers[buf] != want || cb.input || cb.output || cb.zero {
			return draft{}, nil, false
		}
	}
	f = *q
	f.k.Name = a.k.Name + "+" + b.k.Name + "+" + add.k.Name + "+" + q.k.Name
	f.k.Ops = "QLinearAdd"
	f.k.P[3] = quantModeAdd
	// the Add's activation (ResNet's Relu after the residual sum)
	f.k.P[PAct], f.k.F[FActA], f.k.F[FActB] = ap[PAct], add.k.F[FActA], add.k.F[FActB]
	f.in = [MaxIn]operand{a.in[0], q.in[1], q.in[2], b.in[0], a.in[1], a.in[2], b.in[1], b.in[2]}
	for buf := range reads {
		if buf != f.out.buf {
			dead = append(dead, buf)
		}
	}
	return f, dead, true
}
