/*
 * quant.cu: the int8 kernels (ONNX quantisation operators), the CUDA twins
 * of native/cpu/quant.c. Integer tensors are stored as float32 holding
 * their values, as on the CPU; the integer sums are exact, so every result
 * is the CPU engine's, bit for bit.
 *
 *   QUANT  elementwise (modes 0 quantise, 1 dequantise, 4 requantise: one
 *          thread per element, SG_EPB per block) and the two whole-tensor
 *          reductions of DynamicQuantizeLinear (modes 2, 3: one block).
 *   QGEMM  one thread per output element: sum_k (A - za)(B - zb) in int32
 *          from A and B as stored (float values), packed (A rows of u8
 *          values + 128 * signed, p[26]; B panels of 16 columns x 4 steps of
 *          s8 values - 128 * unsigned, p[25]) or built from a
 *          convolution's input (the im2col of p[27], geometry in aux,
 *          padding f[1]). Then the QGEMM epilogue of quant.c.
 *
 * Parameters: native/cpu/sluice_cpu.h (QUANT, QGEMM).
 */
#include "sg.h"

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
		float s = sc[c], z = zp ? zp[c] : 0.0f, v;
		if (mode == 1)
			v = (x[i] - z) * s;
		else if (mode == 4)
			v = sg_qclamp(sg_rint(x[i] * s) + z, lo, hi);
		else if (s == 0.0f)
			v = sg_qclamp(z, lo, hi);
		else
			v = sg_qclamp(sg_rint(x[i] / s) + z, lo, hi);
		a.out[i] = v;
	}
}
SG_ENTRY(sg_quant, sg_body_quant)

/* sg_qgemm_b is B[k, n] of batch item (b1, b2) as an integer value. */
SG_DEV int sg_qgemm_b(const sg_args &a, sg_i64 b1, sg_i64 b2, sg_i64 k, sg_i64 n)
{
	const sg_i64 *p = a.p;
	if (p[25]) {
		sg_i64 k4n = p[28] / 4;
		const signed char *s = (const signed char *)a.in[1];
		int v = s[((n / 16) * k4n + k / 4) * 64 + (n % 16) * 4 + k % 4];
		return p[17] ? v : v + 128;
	}
	if (p[27]) {
		/* the im2col of image b1, group b2: row k = (c, kh, kw), column
		 * n = an output position */
		const sg_i64 *g = a.aux;
		sg_i64 Cg = g[1] / g[5], KH = g[6], KW = g[7], H = g[2], W = g[3];
		sg_i64 c = k / (KH * KW), r = k % (KH * KW);
		sg_i64 kh = r / KW, kw = r % KW;
		sg_i64 oh = n / g[15], ow = n % g[15];
		sg_i64 ih = oh * g[8] - g[10] + kh * g[12], iw = ow * g[9] - g[11] + kw * g[13];
		if (ih < 0 || ih >= H || iw < 0 || iw >= W)
			return (int)a.f[1];
		return (int)a.in[1][((b1 * g[1] + b2 * Cg + c) * H + ih) * W + iw];
	}
	return (int)a.in[1][b1 * p[10] + b2 * p[11] + k * p[4] + n];
}

SG_DEV void sg_body_qgemm(const sg_args &a, sg_i64 blk, sg_state *st)
{
	const sg_i64 *p = a.p;
	sg_i64 M = p[0], N = p[1], K = p[2];
	sg_i64 nb = p[6] * p[7];
	sg_i64 e = blk * SG_THREADS + (sg_i64)sg_tid();
	int live = e < nb * M * N;
	if (!live)
		e = 0;
	sg_i64 n = e % N, m = (e / N) % M, b = e / (M * N);
	sg_i64 b2 = b % p[7], b1 = b / p[7];
	sg_i64 roff = b1 * p[14] + b2 * p[15];
	sg_i64 kp = p[28];
	int za = a.in[2] ? (int)a.in[2][p[18] ? roff + m : 0] : 0;
	int zb = a.in[3] ? (int)a.in[3][p[19] ? n : 0] : 0;
	int acc = 0;
	for (sg_i64 k0 = 0; k0 < K; k0 += 256) {
		int flag = sg_flag0(st);
		sg_i64 k1 = k0 + 256 < K ? k0 + 256 : K;
		for (sg_i64 k = k0; k < k1; k++) {
			int av;
			if (p[26]) {
				const unsigned char *u = (const unsigned char *)a.in[0];
				av = (int)u[(b1 * p[8] + b2 * p[9] + m) * kp + k] - (p[16] ? 128 : 0);
			} else {
				av = (int)a.in[0][b1 * p[8] + b2 * p[9] + m * p[3] + k];
			}
			acc += (av - za) * (sg_qgemm_b(a, b1, b2, k, n) - zb);
		}
		if (sg_sync_or(flag))
			return;
	}
	if (!live)
		return;
	const int *bias = (const int *)a.in[5];
	if (p[21] == 1)
		acc += bias[roff + m];
	else if (p[21] == 2)
		acc += bias[n];
	float f = (float)acc;
	if (p[22]) {
		const float *mult = a.in[4];
		float mrow = p[20] == 1 ? mult[0] : (p[20] == 2 ? mult[roff + m] : 1.0f);
		float mcol = p[20] == 3 ? mult[n] : 1.0f;
		f = sg_qclamp(sg_rint(f * mrow * mcol) + a.f[0], (float)p[23], (float)p[24]);
	}
	a.out[b1 * p[12] + b2 * p[13] + m * p[5] + n] = f;
}
SG_ENTRY(sg_qgemm, sg_body_qgemm)
