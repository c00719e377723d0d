/*
 * gemm.cu: batched GEMM (Gemm, MatMul, 1x1 convolutions the engine lowers
 * to GEMM) with the fused epilogue: C = act(alpha*op(A)op(B) + bias + res).
 * One block = one TM x TN tile of one batch entry (sg_mm.h).
 *
 * Parameters (native/cpu/sluice_cpu.h): in A,B,bias,res. p: 0 M 1 N 2 K
 * 3 transA 4 transB 5 lda 6 ldb 7 ldc 8..10 batch dims 11..13 A batch
 * strides 14..16 B strides 17..19 C strides (res uses the C layout)
 * 20..22 bias strides 23 bias mode (0 none, 1 per row, 2 per column).
 * f: 0 alpha. act p[31].
 * Tiling: t[0] row tiles, t[1] column tiles, t[2] the version (tile
 * 0: 64 x 64, 1: 32 x 32, sg_mm.h); grid = batch * t[0] * t[1].
 */
#include "sg_mm.h"

template <int TM, int TN>
SG_DEV void sg_gemm_tile(const sg_args &a, sg_i64 blk, sg_state *st)
{
	int M = (int)a.p[0], N = (int)a.p[1], K = (int)a.p[2];
	int ta = (int)a.p[3], tb = (int)a.p[4];
	sg_i64 lda = a.p[5], ldb = a.p[6], ldc = a.p[7];
	int mt = (int)a.t[0], nt = (int)a.t[1];
	int ni = (int)(blk % nt);
	int mi = (int)((blk / nt) % mt);
	sg_i64 b = blk / ((sg_i64)nt * mt);
	sg_i64 b2 = b % a.p[10], b1 = (b / a.p[10]) % a.p[9], b0 = b / (a.p[10] * a.p[9]);
	sg_i64 offa = b0 * a.p[11] + b1 * a.p[12] + b2 * a.p[13];
	sg_i64 offb = b0 * a.p[14] + b1 * a.p[15] + b2 * a.p[16];
	sg_i64 offc = b0 * a.p[17] + b1 * a.p[18] + b2 * a.p[19];
	sg_i64 offbias = b0 * a.p[20] + b1 * a.p[21] + b2 * a.p[22];
	int m0 = mi * TM, n0 = ni * TN;
	/* op(A) is M x K: A[m*lda + k], or A[k*lda + m] when transposed */
	sg_ld_a la = {a.in[0] + offa + (ta ? m0 : m0 * lda), SG_MIN(TM, M - m0),
		      K, ta ? 1 : lda, ta ? lda : 1};
	/* op(B) is K x N: B[k*ldb + n], or B[n*ldb + k] when transposed */
	sg_ld_b lb = {a.in[1] + offb + (tb ? n0 * ldb : n0), SG_MIN(TN, N - n0),
		      K, tb ? 1 : ldb, tb ? ldb : 1};
	float acc[TM / 16][TN / 16];
	if (sg_mm_run<TM, TN>(la, lb, K, st, acc))
		return;
	int t = (int)sg_tid();
	int ty = t >> 4, tx = t & 15;
	float alpha = a.f[0];
	const float *bias = a.in[2], *res = a.in[3];
	int bmode = bias ? (int)a.p[23] : 0;
	int act = (int)a.p[SGP_ACT];
	float fa = a.f[SGF_ACT_A], fb = a.f[SGF_ACT_B];
	float *C = a.out + offc;
#pragma unroll
	for (int i = 0; i < TM / 16; i++) {
		int m = m0 + ty + 16 * i;
		if (m >= M)
			continue;
		float bm = bmode == 1 ? bias[offbias + m] : 0.0f;
#pragma unroll
		for (int j = 0; j < TN / 16; j++) {
			int n = n0 + tx + 16 * j;
			if (n >= N)
				continue;
			float v = alpha * acc[i][j] + bm;
			if (bmode == 2)
				v += bias[offbias + n];
			sg_i64 o = m * ldc + n;
			if (res)
				v += res[offc + o];
			C[o] = sg_act_fast(v, act, fa, fb);
		}
	}
}

SG_DEV void sg_body_gemm(const sg_args &a, sg_i64 blk, sg_state *st)
{
	if (a.t[SG_T_MMVER] == 1)
		sg_gemm_tile<32, 32>(a, blk, st);
	else
		sg_gemm_tile<64, 64>(a, blk, st);
}
SG_ENTRY(sg_gemm, sg_body_gemm)
