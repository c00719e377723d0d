package engine

// A pointwise (1x1) convolution whose output only a depthwise convolution
// reads, right after it (MobileNet's inverted residuals: the expansion
// and the depthwise layer), runs as one DWCONV kernel that computes its
// input a band of rows at a time in each unit's cache instead of writing
// the expanded tensor to memory and reading it back. The bits are those
// of the two kernels run apart (native/cpu conv.c, dwp_block).
//
// It fuses where a batch has at least two images per unit: MobileNetV2
// on the 2-vCPU Zen 5 VM, two units, paired against the kernels apart
// (tools/enginebench/ab.sh, 10-14 rounds): batch 8 0.86-0.94x the time,
// batch 4 0.96x, but batch 2 1.04x and batch 1 1.04-1.08x (one unit,
// batch 1: 1.00x); with fewer images than that the units share each
// image's blocks and the kernels apart are as fast or faster. Nor does
// it fuse a 3x3 depthwise layer whose rows the backend vectorises across
// channels (Options.DepthwiseVectorWidth: rows up to 32 wide on AVX-512):
// that kernel alone beats the fused one (MobileNetV2 batch 8 0.96-0.97x
// the time with its 28-, 14- and 7-wide pairs apart, two paired runs).

// DWCONV parameter slots of the fused pointwise producer (sluice_cpu.h).
const (
	// PDWPointwise is 1 when the kernel's input is computed: In[0] is
	// then the pointwise convolution's input (P[PDWPointwiseC] channels),
	// In[InDWPointwiseW] its weights and In[InDWPointwiseB] its bias.
	PDWPointwise = 20
	// PDWPointwiseC is the pointwise input's channel count.
	PDWPointwiseC = 21
	// PDWPointwisePanels says the pointwise weights are stored transposed
	// in panels (as PGemmAPanels' A), PDWPointwiseLda floats apart.
	PDWPointwisePanels = 22
	PDWPointwiseLda    = 23
	// PDWPointwiseAct is the pointwise activation, FDWPointwiseA and
	// FDWPointwiseB its parameters.
	PDWPointwiseAct = 24
	FDWPointwiseA   = 2
	FDWPointwiseB   = 3
	InDWPointwiseW  = 5
	InDWPointwiseB  = 6
)

// fusePointwiseDW merges each fusable pair of drafts (pointwiseDW) and
// recomputes the buffers' lifetimes; the tensor between the two is no
// longer stored.
func (c *compiler) fusePointwiseDW() {
	if c.m.opts.NoFusion || c.m.opts.NoPointwiseDW {
		return
	}
	readers := c.arenaReaders()
	out := make([]draft, 0, len(c.drafts))
	fused := false
	for i := 0; i < len(c.drafts); i++ {
		if i+1 < len(c.drafts) {
			if f, ok := c.pointwiseDW(&c.drafts[i], &c.drafts[i+1], readers); ok {
				c.bufs[c.drafts[i].out.buf].size = 0
				out = append(out, f)
				fused = true
				i++
				continue
			}
		}
		out = append(out, c.drafts[i])
	}
	if fused {
		c.reemit(out)
	}
}

// pointwiseDW returns the fused kernel of g, a GEMM computing a pointwise
// convolution (emitConv's: one product per image, no residual, alpha 1,
// the activations read where they lie), and d, the float depthwise
// convolution (one output channel per channel) that alone reads g's
// output.
func (c *compiler) pointwiseDW(g, d *draft, readers []int) (draft, bool) {
	gp, dp := &g.k.P, &d.k.P
	if g.k.Op != OpGemm || d.k.Op != OpDWConv || dp[16] != 0 || dp[PDWPointwise] != 0 {
		return draft{}, false
	}
	if g.out.sp != SpaceArena || d.in[0] != g.out || g.out.off != 0 {
		return draft{}, false
	}
	b := c.bufs[g.out.buf]
	if readers[g.out.buf] != 1 || b.input || b.output || b.zero {
		return draft{}, false
	}
	n, ch, hw := dp[0], dp[1], dp[2]*dp[3]
	// 3x3, dilation 1, stride 1 or 2 on rows the backend vectorises
	// across channels: apart (MobileNetV2 b8 on AVX-512, 0.97x the time)
	if dp[6] == 3 && dp[7] == 3 && dp[12] == 1 && dp[13] == 1 && dp[8] == dp[9] && dp[8] <= 2 &&
		dp[3] <= int64(c.m.opts.DepthwiseVectorWidth) {
		return draft{}, false
	}
	if n < 2*int64(max(c.m.opts.Units, 1)) {
		return draft{}, false
	}
	M, N, K := gp[0], gp[1], gp[2]
	if dp[4] != ch || dp[5] != ch || M != ch || N != hw || K < 1 || b.size != n*ch*hw {
		return draft{}, false
	}
	if gp[3] != 0 || gp[4] != 0 || gp[6] != N || gp[7] != N || gp[8] != n || gp[9] != 1 || gp[10] != 1 ||
		gp[11] != 0 || gp[14] != K*N || gp[17] != M*N || gp[20] != 0 || gp[23] < 0 || gp[23] > 1 ||
		gp[PGemmPanels] != 0 || gp[PGemmTProd] != 0 || g.in[3] != noOperand || g.k.F[0] != 1 {
		return draft{}, false
	}
	if gp[PGemmAPanels] == 0 && gp[5] != K {
		return draft{}, false
	}
	f := *d
	f.k.Name = g.k.Name + ">" + d.k.Name
	f.k.Ops = g.k.Ops + ">" + d.k.Ops
	f.in[0] = g.in[1]
	f.in[InDWPointwiseW] = g.in[0]
	if gp[23] == 1 {
		f.in[InDWPointwiseB] = g.in[2]
	}
	f.k.P[PDWPointwise] = 1
	f.k.P[PDWPointwiseC] = K
	f.k.P[PDWPointwisePanels] = gp[PGemmAPanels]
	f.k.P[PDWPointwiseLda] = gp[5]
	f.k.P[PDWPointwiseAct] = gp[PAct]
	f.k.F[FDWPointwiseA], f.k.F[FDWPointwiseB] = g.k.F[FActA], g.k.F[FActB]
	return f, true
}
