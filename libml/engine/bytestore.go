package engine

// 8-bit integer tensors stored as bytes.
//
// Integer tensors live in the arena as float32 values, which every kernel
// reads. A quantised model's activations are 8-bit integers, though, and
// its kernels are bound by moving them: QGEMM's epilogue stores four
// bytes a value where one would do, and the next layer reads them back.
// byteIntegers stores such a tensor as bytes (element i at byte i of its
// buffer) when every kernel that writes it and every kernel that reads it
// takes bytes at that operand (native/cpu's sluice_cpu.h, SKP_STORE):
// QUANT's integer inputs and outputs, QGEMM's unpacked A and B (or its
// im2col) and requantised output, integer DWCONV's input and requantised
// output, max pooling's input and output (its output stored as its
// input is). The kernels compute the same bits either way.

// storeCode is how a tensor whose values lie in [lo, hi] can be stored as
// bytes: StoreU8, StoreS8, or 0 (it cannot).
func storeCode(lo, hi int64) int64 {
	switch {
	case lo >= 0 && hi <= 255:
		return StoreU8
	case lo >= -128 && hi <= 127:
		return StoreS8
	}
	return 0
}

// byteOutput is how kernel k's output could be stored as bytes (0: it
// writes float32 values only).
func byteOutput(k *Kernel) int64 {
	p := &k.P
	switch k.Op {
	case OpQuant:
		if p[3] == quantModeQuantize || p[3] == quantModeRequant || p[3] == quantModeAdd {
			return storeCode(p[4], p[5])
		}
	case OpQGemm:
		if p[22] == 1 {
			return storeCode(p[23], p[24])
		}
	case OpDWConv:
		if p[16] == 1 && p[17] == 1 && p[PDWPointwise] == 0 {
			return storeCode(p[18], p[19])
		}
	}
	return 0
}

// byteInput reports whether kernel k takes input j stored as bytes.
func byteInput(k *Kernel, j int) bool {
	p := &k.P
	switch k.Op {
	case OpQuant:
		return (j == 0 && (p[3] == quantModeDequantize || p[3] == quantModeAdd)) ||
			(j == 3 && p[3] == quantModeAdd)
	case OpQGemm:
		return (j == 0 && p[26] == 0) || (j == 1 && p[25] == 0)
	case OpDWConv:
		return j == 0 && p[16] == 1 && p[PDWPointwise] == 0
	case OpPool:
		return j == 0 && p[13] == 0
	}
	return false
}

// byteCopies reports whether kernel k's output holds values of its input
// 0 only (max pooling): stored as bytes where that input is, and in the
// same signedness.
func byteCopies(k *Kernel) bool {
	return k.Op == OpPool && k.P[13] == 0
}

// byteIntegers chooses the buffers stored as bytes (see above), sets the
// kernels' PStore and shrinks those buffers to a byte each value. A
// buffer qualifies when it is neither a graph input nor output, every
// operand on it is the whole buffer, every writer's values fit one byte
// of the same signedness and every reader takes bytes there.
func (c *compiler) byteIntegers() {
	if c.m.opts.NoByteIntegers {
		return
	}
	const never = -1
	code := make([]int64, len(c.bufs))
	for i := range c.drafts {
		d := &c.drafts[i]
		for j, o := range d.in {
			if o.sp == SpaceArena && (o.off != 0 || !byteInput(&d.k, j)) {
				code[o.buf] = never
			}
		}
		if d.out.sp != SpaceArena {
			continue
		}
		b, st := d.out.buf, byteOutput(&d.k)
		if byteCopies(&d.k) && d.out.off == 0 {
			continue // decided below, from its input
		}
		switch {
		case d.out.off != 0 || st == 0:
			code[b] = never
		case code[b] == 0:
			code[b] = st
		case code[b] != st:
			code[b] = never
		}
	}
	for b, cb := range c.bufs {
		if cb.input || cb.output || cb.zero || c.isGraphOutputBuf(b) {
			code[b] = never
		}
	}
	// a copying kernel's output takes its input's storage: in draft
	// order, so that a chain of them follows its first input
	for i := range c.drafts {
		d := &c.drafts[i]
		if !byteCopies(&d.k) || d.out.sp != SpaceArena || d.out.off != 0 {
			continue
		}
		in, out := d.in[0], d.out.buf
		st := int64(never)
		if in.sp == SpaceArena && code[in.buf] > 0 {
			st = code[in.buf]
		}
		if code[out] == 0 {
			code[out] = st
		} else if code[out] != st {
			code[out] = never
		}
	}
	for i := range c.drafts {
		d := &c.drafts[i]
		var st int64
		if d.out.sp == SpaceArena && code[d.out.buf] > 0 {
			st = code[d.out.buf]
		}
		for j, o := range d.in {
			if o.sp == SpaceArena && code[o.buf] > 0 {
				st |= code[o.buf] << (2 + 2*j)
			}
		}
		d.k.P[PStore] = st
	}
	for b, cb := range c.bufs {
		if code[b] > 0 {
			cb.size = (cb.size + 3) / 4
		}
	}
}
