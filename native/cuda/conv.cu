/*
 * conv.cu: convolution kernels, in the CPU engine's decomposition
 * (native/cpu/conv.c):
 *   CONV    implicit GEMM: per (image, group) Y[m][pos] = W[m][k] * col[k][pos]
 *           with col never stored: the B slices are gathered from X as
 *           they are staged (sg_mm.h). Grouped convolutions run one group
 *           per block; bias, residual and activation are fused.
 *   IM2COL  im2col into a workspace (the engine follows it with a GEMM);
 *   DWCONV  depthwise (and channel-multiplier) convolution, direct: one
 *           thread per output element;
 *   COL2IM  the gather form of col2im that finishes ConvTranspose (after
 *           the GEMM W^T x X): one thread per output element.
 *
 * Parameters: in X,W,bias,res (COL2IM: in col,bias). p: 0 N 1 C 2 H 3 W
 * 4 Cout 5 G 6 KH 7 KW 8 SH 9 SW 10 PT 11 PL 12 DH 13 DW 14 OH 15 OW.
 * act p[31]. IM2COL writes col[N][G][C/G*KH*KW][OH*OW], padding with
 * f[0]; COL2IM reads
 * col[N][G][Cout/G*KH*KW][H*W] and writes Y[N][Cout][OH][OW].
 * CONV tiling: t[0] tiles of TM output channels (per group), t[1] tiles of
 * TN output positions, t[2] the version (0: TM = TN = 64, 1: 32, sg_mm.h);
 * grid = N * G * t[0] * t[1]. The others: one
 * SG_EPB-element chunk of the output per block.
 */
#include "sg_mm.h"

/* Convolution geometry, read once from p[]. */
struct sg_conv_geom {
	int N, C, H, W, Cout, G, KH, KW, SH, SW, PT, PL, DH, DW, OH, OW;
};

SG_DEV sg_conv_geom sg_conv_read(const sg_args &a)
{
	sg_conv_geom g;
	g.N = (int)a.p[0];
	g.C = (int)a.p[1];
	g.H = (int)a.p[2];
	g.W = (int)a.p[3];
	g.Cout = (int)a.p[4];
	g.G = (int)a.p[5];
	g.KH = (int)a.p[6];
	g.KW = (int)a.p[7];
	g.SH = (int)a.p[8];
	g.SW = (int)a.p[9];
	g.PT = (int)a.p[10];
	g.PL = (int)a.p[11];
	g.DH = (int)a.p[12];
	g.DW = (int)a.p[13];
	g.OH = (int)a.p[14];
	g.OW = (int)a.p[15];
	return g;
}

template <int TM, int TN>
SG_DEV void sg_conv_tile(const sg_args &a, sg_i64 blk, sg_state *st)
{
	sg_conv_geom g = sg_conv_read(a);
	int Cg = g.C / g.G, Mg = g.Cout / g.G, KHW = g.KH * g.KW, Kd = Cg * KHW;
	int OHW = g.OH * g.OW;
	int mt = (int)a.t[0], pt = (int)a.t[1];
	int pi = (int)(blk % pt);
	int mi = (int)((blk / pt) % mt);
	int gi = (int)((blk / ((sg_i64)pt * mt)) % g.G);
	int n = (int)(blk / ((sg_i64)pt * mt * g.G));
	int m0 = mi * TM, p0 = pi * TN;
	int oc0 = gi * Mg + m0;
	sg_ld_a la = {a.in[1] + (sg_i64)oc0 * Kd, SG_MIN(TM, Mg - m0), Kd, Kd, 1};
	int t = (int)sg_tid();
	int pos = p0 + t % TN;
	int oh = pos / g.OW, ow = pos - oh * g.OW;
	sg_ld_im2col lb = {a.in[0] + ((sg_i64)n * g.C + gi * Cg) * g.H * g.W,
			   SG_MIN(TN, OHW - p0), Kd, KHW, g.KW, g.H, g.W,
			   g.DH, g.DW, oh * g.SH - g.PT, ow * g.SW - g.PL, 0.0f, 0.0f};
	float acc[TM / 16][TN / 16];
	if (sg_mm_run<TM, TN>(la, lb, Kd, st, acc))
		return;
	int ty = t >> 4, tx = t & 15;
	const float *bias = a.in[2], *res = a.in[3];
	int act = (int)a.p[SGP_ACT];
	float fa = a.f[SGF_ACT_A], fb = a.f[SGF_ACT_B];
	sg_i64 ybase = ((sg_i64)n * g.Cout + oc0) * OHW + p0;
#pragma unroll
	for (int i = 0; i < TM / 16; i++) {
		int m = ty + 16 * i;
		if (m0 + m >= Mg)
			continue;
		float bv = bias ? bias[oc0 + m] : 0.0f;
#pragma unroll
		for (int j = 0; j < TN / 16; j++) {
			int q = tx + 16 * j;
			if (p0 + q >= OHW)
				continue;
			sg_i64 o = ybase + (sg_i64)m * OHW + q;
			float v = acc[i][j] + bv;
			if (res)
				v += res[o];
			a.out[o] = sg_act_fast(v, act, fa, fb);
		}
	}
}

SG_DEV void sg_body_conv(const sg_args &a, sg_i64 blk, sg_state *st)
{
	if (a.t[SG_T_MMVER] == 1)
		sg_conv_tile<32, 32>(a, blk, st);
	else
		sg_conv_tile<64, 64>(a, blk, st);
}
SG_ENTRY(sg_conv, sg_body_conv)

SG_DEV void sg_body_im2col(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	sg_conv_geom g = sg_conv_read(a);
	int Cg = g.C / g.G, KHW = g.KH * g.KW, Kd = Cg * KHW;
	int OHW = g.OH * g.OW;
	int total = g.N * g.G * Kd * OHW;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
#pragma unroll
	for (int r = 0; r < SG_EPB / SG_THREADS; r++) {
		int i = i0 + r * SG_THREADS;
		if (i >= total)
			break;
		int pos = i % OHW, q = i / OHW;
		int k = q % Kd, ng = q / Kd;
		int gi = ng % g.G, n = ng / g.G;
		int c = k / KHW, rr = k - c * KHW;
		int kh = rr / g.KW, kw = rr - kh * g.KW;
		int oh = pos / g.OW, ow = pos - oh * g.OW;
		int ih = oh * g.SH - g.PT + kh * g.DH;
		int iw = ow * g.SW - g.PL + kw * g.DW;
		float v = a.f[0]; /* the padding value (0, or an integer input's zero point) */
		if ((unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W)
			v = a.in[0][(((sg_i64)n * g.C + gi * Cg + c) * g.H + ih) * g.W + iw];
		a.out[i] = v;
	}
}
SG_ENTRY(sg_im2col, sg_body_im2col)

SG_DEV void sg_body_dwconv(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	sg_conv_geom g = sg_conv_read(a);
	int mult = g.Cout / g.C;
	int OHW = g.OH * g.OW;
	int total = g.N * g.Cout * OHW;
	const float *bias = a.in[2], *res = a.in[3];
	int act = (int)a.p[SGP_ACT];
	float fa = a.f[SGF_ACT_A], fb = a.f[SGF_ACT_B];
	/* on integers (p[16]): the input less its zero point f[0], padding 0;
	 * requantised per channel (p[17]) as QUANT's mode 4 */
	float zx = a.p[16] == 1 ? a.f[0] : 0.0f;
	int requant = a.p[16] == 1 && a.p[17] == 1;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	for (int r = 0; r < SG_EPB / SG_THREADS; r++) {
		int i = i0 + r * SG_THREADS;
		if (i >= total)
			break;
		int pos = i % OHW, q = i / OHW;
		int oc = q % g.Cout, n = q / g.Cout;
		int oh = pos / g.OW, ow = pos - oh * g.OW;
		const float *x = a.in[0] + ((sg_i64)n * g.C + oc / mult) * g.H * g.W;
		const float *w = a.in[1] + (sg_i64)oc * g.KH * g.KW;
		float s = bias ? bias[oc] : 0.0f;
		int ih0 = oh * g.SH - g.PT, iw0 = ow * g.SW - g.PL;
		for (int kh = 0; kh < g.KH; kh++) {
			int ih = ih0 + kh * g.DH;
			if ((unsigned)ih >= (unsigned)g.H)
				continue;
			for (int kw = 0; kw < g.KW; kw++) {
				int iw = iw0 + kw * g.DW;
				if ((unsigned)iw < (unsigned)g.W)
					s += w[kh * g.KW + kw] * (x[ih * g.W + iw] - zx);
			}
		}
		if (requant) {
			a.out[i] = sg_qclamp(sg_rint(s * a.in[4][oc]) + a.f[1], (float)a.p[18],
					     (float)a.p[19]);
			continue;
		}
		if (res)
			s += res[i];
		a.out[i] = sg_act_fast(s, act, fa, fb);
	}
}
SG_ENTRY(sg_dwconv, sg_body_dwconv)

SG_DEV void sg_body_col2im(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	sg_conv_geom g = sg_conv_read(a);
	int Mg = g.Cout / g.G, HW = g.H * g.W, OHW = g.OH * g.OW;
	int total = g.N * g.Cout * OHW;
	const float *bias = a.in[1];
	int act = (int)a.p[SGP_ACT];
	float fa = a.f[SGF_ACT_A], fb = a.f[SGF_ACT_B];
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	for (int r = 0; r < SG_EPB / SG_THREADS; r++) {
		int i = i0 + r * SG_THREADS;
		if (i >= total)
			break;
		int pos = i % OHW, q = i / OHW;
		int oc = q % g.Cout, n = q / g.Cout;
		int oh = pos / g.OW, ow = pos - oh * g.OW;
		int gi = oc / Mg, c = oc - gi * Mg;
		const float *col = a.in[0] +
				   (((sg_i64)n * g.G + gi) * Mg + c) * g.KH * g.KW * HW;
		float s = bias ? bias[oc] : 0.0f;
		for (int kh = 0; kh < g.KH; kh++) {
			int th = oh + g.PT - kh * g.DH;
			if (th < 0 || th % g.SH)
				continue;
			int ih = th / g.SH;
			if (ih >= g.H)
				continue;
			for (int kw = 0; kw < g.KW; kw++) {
				int tw = ow + g.PL - kw * g.DW;
				if (tw < 0 || tw % g.SW)
					continue;
				int iw = tw / g.SW;
				if (iw < g.W)
					s += col[(sg_i64)(kh * g.KW + kw) * HW + ih * g.W + iw];
			}
		}
		a.out[i] = sg_act_fast(s, act, fa, fb);
	}
}
SG_ENTRY(sg_col2im, sg_body_col2im)
