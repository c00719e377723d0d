/*
 * quant.cu: the int8 kernels (ONNX quantisation operators), the CUDA twins
 * of native/cpu/quant.c. Integer tensors are stored as float32 holding
 * their values, as on the CPU; the integer sums are exact, so every result
 * is the CPU engine's, bit for bit.
 *
 *   QUANT  elementwise (modes 0 quantise, 1 dequantise, 4 requantise, 5
 *          QLinearAdd: one thread per element, SG_EPB per block; mode 5's
 *          products and sum rounded one by one, never contracted into a
 *          fused multiply-add, as quant.c computes them) and the two whole-tensor
 *          reductions of DynamicQuantizeLinear (modes 2, 3: one block).
 *   QGEMM  one block per 64 x 64 tile of Y (sg_mm.h's shared-memory slices,
 *          int32 sums, 4 x 4 outputs a thread): sum_k (A - za)(B - zb) from
 *          A and B as stored (float values), packed (A rows of u8
 *          values + 128 * signed, p[26]; B panels of 16 columns x 4 steps of
 *          s8 values - 128 * unsigned, p[25]) or built from a
 *          convolution's input (the im2col of p[27], geometry in aux,
 *          padding f[1]). Then the QGEMM epilogue of quant.c.
 *
 * Parameters: native/cpu/sluice_cpu.h (QUANT, QGEMM).
 */
#include "sg_mm.h"

SG_DEV void sg_body_quant(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	sg_i64 n = a.p[0], C = a.p[1], inner = a.p[2];
	int mode = (int)a.p[3];
	float lo = (float)a.p[4], hi = (float)a.p[5];
	const float *x = a.in[0], *sc = a.in[1], *zp = a.in[2];
	if (mode == 2 || mode == 3) {
		SG_SHARED float red[SG_WARPS];
		float mn = 0.0f, mx = 0.0f;
		for (sg_i64 i = sg_tid(); i < n; i += SG_THREADS) {
			mn = x[i] < mn ? x[i] : mn;
			mx = x[i] > mx ? x[i] : mx;
		}
		mx = sg_block_max(mx, red);
		mn = -sg_block_max(-mn, red);
		if (sg_tid() == 0) {
			float scale = (mx - mn) / (hi - lo);
			if (mode == 2)
				a.out[0] = scale;
			else
				a.out[0] = scale == 0.0f ? lo : sg_qclamp(sg_rint(lo - mn / scale), lo, hi);
		}
		return;
	}
	sg_i64 i0 = blk * SG_EPB + (sg_i64)sg_tid();
#pragma unroll
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		sg_i64 i = i0 + k * SG_THREADS;
		if (i >= n)
			continue;
		sg_i64 c = C == 1 ? 0 : (i / inner) % C;
		float s = sc[c], z = zp ? zp[c] : 0.0f, xv = x[i], v;
		if (mode == 5) {
			/* QLinearAdd: the activated float sum, then mode 0 */
			float za = a.in[5] ? a.in[5][0] : 0.0f, zb = a.in[7] ? a.in[7][0] : 0.0f;
			xv = sg_add_rn(sg_mul_rn(xv - za, a.in[4][0]), sg_mul_rn(a.in[3][i] - zb, a.in[6][0]));
			xv = sg_act(xv, (int)a.p[SGP_ACT], a.f[6], a.f[7]);
		}
		if (mode == 1)
			v = (xv - z) * s;
		else if (mode == 4)
			v = sg_qclamp(sg_rint(xv * s) + z, lo, hi);
		else if (s == 0.0f)
			v = sg_qclamp(z, lo, hi);
		else
			v = sg_qclamp(sg_rint(xv / s) + z, lo, hi);
		a.out[i] = v;
	}
}
SG_ENTRY(sg_quant, sg_body_quant)

/* sg_qgemm_b is B[k, n] of batch item (b1, b2) as an integer value. */
SG_DEV int sg_qgemm_b(const sg_args &a, sg_i64 b1, sg_i64 b2, int k, int n)
{
	const sg_i64 *p = a.p;
	if (p[25]) {
		int k4n = (int)(p[28] / 4);
		const signed char *s = (const signed char *)a.in[1];
		int v = s[((sg_i64)(n / 16) * k4n + k / 4) * 64 + (n % 16) * 4 + k % 4];
		return p[17] ? v : v + 128;
	}
	if (p[27]) {
		/* the im2col of image b1, group b2: row k = (c, kh, kw), column
		 * n = an output position (32-bit: Plan keeps tensors below 2^31) */
		const sg_i64 *g = a.aux;
		int Cg = (int)(g[1] / g[5]), KH = (int)g[6], KW = (int)g[7], H = (int)g[2],
		    W = (int)g[3], OW = (int)g[15];
		int c = k / (KH * KW), r = k % (KH * KW);
		int kh = r / KW, kw = r % KW;
		int oh = n / OW, ow = n % OW;
		int ih = oh * (int)g[8] - (int)g[10] + kh * (int)g[12],
		    iw = ow * (int)g[9] - (int)g[11] + kw * (int)g[13];
		if (ih < 0 || ih >= H || iw < 0 || iw >= W)
			return (int)a.f[1];
		return (int)a.in[1][((b1 * g[1] + b2 * Cg + c) * H + ih) * W + iw];
	}
	return (int)a.in[1][b1 * p[10] + b2 * p[11] + (sg_i64)k * p[4] + n];
}

/* The QGEMM operands of one batch item (b1, b2), as int values less their
 * zero points (exact: |a - za|, |b - zb| <= 255), zero outside the matrix.
 * Each staged element is read once per block, not once per output. The
 * loaders hold 32-bit offsets and pointers to the tile's first row, not
 * the parameters (fewer registers across the K loop). */
struct sg_qld_a {
	const float *af;         /* A as stored (float values), the tile's row 0; or null */
	const unsigned char *au; /* A packed (u8 rows), the tile's row 0; or null */
	int lda, sub;            /* row stride; 128 when packed int8 */
	int rows, K;
	const float *zr; /* za per row (the tile's row 0), or null */
	int z;           /* za when not per row */
	/* lanes along k: 16 consecutive elements of a row (bytes when packed) */
	template <int TM>
	SG_DEVM void load(int e, int k0, sg_atile_t<int> &s) const
	{
		int m = e >> 4, k = e & 15, gk = k0 + k;
		int v = 0;
		if (m < rows && gk < K) {
			v = au ? (int)au[m * lda + gk] - sub : (int)af[m * lda + gk];
			v -= zr ? (int)zr[m] : z;
		}
		s[k][m] = v;
	}
};

/* sg_qld_a_of is the A loader of the tile at row m0 of batch item (b1, b2). */
SG_DEV sg_qld_a sg_qld_a_of(const sg_args &a, sg_i64 b1, sg_i64 b2, int m0)
{
	const sg_i64 *p = a.p;
	sg_i64 row0 = b1 * p[8] + b2 * p[9] + m0, roff = b1 * p[14] + b2 * p[15] + m0;
	sg_qld_a la;
	la.af = 0;
	la.au = 0;
	if (p[26]) {
		la.au = (const unsigned char *)a.in[0] + row0 * p[28];
		la.lda = (int)p[28];
		la.sub = p[16] ? 128 : 0;
	} else {
		la.af = a.in[0] + b1 * p[8] + b2 * p[9] + (sg_i64)m0 * p[3];
		la.lda = (int)p[3];
		la.sub = 0;
	}
	la.rows = SG_MIN(SG_TM, (int)p[0] - m0);
	la.K = (int)p[2];
	la.zr = a.in[2] && p[18] ? a.in[2] + roff : 0;
	la.z = a.in[2] && !p[18] ? (int)a.in[2][0] : 0;
	return la;
}

struct sg_qld_b {
	const sg_args *a;
	int cols, K;
	sg_i64 b1, b2;
	int n0;
	/* lanes along n: consecutive columns (output positions of an im2col) */
	template <int TN>
	SG_DEVM void load(int e, int k0, sg_btile_t<int> &s) const
	{
		int n = e % TN, k = e / TN, gk = k0 + k;
		int v = 0;
		if (n < cols && gk < K) {
			int gn = n0 + n;
			v = sg_qgemm_b(*a, b1, b2, gk, gn);
			if (a->in[3])
				v -= (int)a->in[3][a->p[19] ? gn : 0];
		}
		s[k][n] = v;
	}
};

/* One block = one SG_TM x SG_TN tile of Y of one batch item: the int32
 * sums of sg_mm_run (shared-memory slices, 4 x 4 outputs a thread) over
 * B's loader lb, then QGEMM's epilogue per element. */
template <class LB>
SG_DEV void sg_qgemm_tile(const sg_args &a, const LB &lb, sg_i64 b1, sg_i64 b2, int m0, int n0,
			  sg_state *st)
{
	const sg_i64 *p = a.p;
	int M = (int)p[0], N = (int)p[1], K = (int)p[2];
	sg_i64 roff = b1 * p[14] + b2 * p[15];
	sg_qld_a la = sg_qld_a_of(a, b1, b2, m0);
	int acc[SG_TM / 16][SG_TN / 16];
	if (sg_mm_run<SG_TM, SG_TN>(la, lb, K, st, acc))
		return;
	int t = (int)sg_tid();
	int ty = t >> 4, tx = t & 15;
	const int *bias = (const int *)a.in[5];
	const float *mult = a.in[4];
	float *Y = a.out + b1 * p[12] + b2 * p[13];
#pragma unroll
	for (int i = 0; i < SG_TM / 16; i++) {
		int m = m0 + ty + 16 * i;
		if (m >= M)
			continue;
		float mrow = 1.0f;
		if (p[22])
			mrow = p[20] == 1 ? mult[0] : (p[20] == 2 ? mult[roff + m] : 1.0f);
#pragma unroll
		for (int j = 0; j < SG_TN / 16; j++) {
			int n = n0 + tx + 16 * j;
			if (n >= N)
				continue;
			int v = acc[i][j];
			if (p[21] == 1)
				v += bias[roff + m];
			else if (p[21] == 2)
				v += bias[n];
			float f = (float)v;
			if (p[22]) {
				float mcol = p[20] == 3 ? mult[n] : 1.0f;
				f = sg_qclamp(sg_rint(f * mrow * mcol) + a.f[0], (float)p[23],
					      (float)p[24]);
			}
			Y[m * p[5] + n] = f;
		}
	}
}

SG_DEV void sg_body_qgemm(const sg_args &a, sg_i64 blk, sg_state *st)
{
	const sg_i64 *p = a.p;
	int N = (int)p[1], K = (int)p[2];
	int mt = (int)a.t[0], nt = (int)a.t[1];
	int ni = (int)(blk % nt), mi = (int)((blk / nt) % mt);
	sg_i64 b = blk / ((sg_i64)nt * mt);
	sg_i64 b2 = b % p[7], b1 = b / p[7];
	int m0 = mi * SG_TM, n0 = ni * SG_TN;
	if (p[27] && !p[19]) {
		/* a convolution's input with one zero point: the implicit GEMM's
		 * loader, this thread's output position decoded once */
		const sg_i64 *g = a.aux;
		int C = (int)g[1], H = (int)g[2], W = (int)g[3], Cg = C / (int)g[5];
		int KH = (int)g[6], KW = (int)g[7], OW = (int)g[15];
		int pos = n0 + (int)sg_tid() % SG_TN;
		int oh = pos / OW, ow = pos - oh * OW;
		int zb = a.in[3] ? (int)a.in[3][0] : 0;
		sg_ld_im2col_t<int, true> lb = {a.in[1] + (b1 * C + b2 * Cg) * H * W,
						SG_MIN(SG_TN, N - n0), K, KH * KW, KW, H, W,
						(int)g[12], (int)g[13],
						oh * (int)g[8] - (int)g[10], ow * (int)g[9] - (int)g[11],
						(int)a.f[1] - zb, zb};
		sg_qgemm_tile(a, lb, b1, b2, m0, n0, st);
		return;
	}
	sg_qld_b lb = {&a, SG_MIN(SG_TN, N - n0), K, b1, b2, n0};
	sg_qgemm_tile(a, lb, b1, b2, m0, n0, st);
}
SG_ENTRY(sg_qgemm, sg_body_qgemm)
