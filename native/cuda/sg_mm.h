/*
 * sg_mm.h: the shared-memory tiled matrix product under GEMM and the
 * implicit-GEMM convolution. A block computes a 64 x 64 tile of C from
 * 16-deep slices of A (64 x 16) and B (16 x 64) staged in shared memory;
 * each of the 256 threads accumulates a 4 x 4 sub-tile: rows ty + 16i and
 * columns tx + 16j (ty = tid / 16, tx = tid % 16), so shared-memory reads
 * are broadcasts (A) or consecutive (B) and stores to C are coalesced.
 *
 * Loaders fill the slices: la.load(e, k0, As) and lb.load(e, k0, Bs) for
 * e = tid + 256r, r < 4, each writing one element (zero outside the
 * matrix). The flag is polled once per slice at the loop's second barrier,
 * which is there anyway: the check costs one load by thread 0, issued at
 * the top of the iteration so its latency hides behind the arithmetic.
 */
#ifndef SG_MM_H
#define SG_MM_H

#include "sg.h"

#define SG_TM 64
#define SG_TN 64
#define SG_TK 16
#define SG_TPAD 4 /* row padding: fewer bank conflicts on the loader stores */

typedef float sg_atile[SG_TK][SG_TM + SG_TPAD];
typedef float sg_btile[SG_TK][SG_TN + SG_TPAD];

/* sg_mm_run accumulates the tile's product over k in [0, K) into acc.
 * Returns nonzero when the block was preempted (acc is then garbage). */
/* The staging tiles, one allocation per module whatever the loaders. */
struct sg_mm_smem {
	sg_atile a;
	sg_btile b;
};
SG_DEV sg_mm_smem &sg_mm_shared(void)
{
	SG_SHARED sg_mm_smem s;
	return s;
}

template <class LA, class LB>
SG_DEV int sg_mm_run(const LA &la, const LB &lb, int K, sg_state *st,
		     float acc[4][4])
{
	sg_atile &As = sg_mm_shared().a;
	sg_btile &Bs = sg_mm_shared().b;
	int t = (int)sg_tid();
	int ty = t >> 4, tx = t & 15;
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;
	for (int k0 = 0; k0 < K; k0 += SG_TK) {
		int pf = sg_flag0(st);
#pragma unroll
		for (int r = 0; r < 4; r++) {
			la.load(t + r * SG_THREADS, k0, As);
			lb.load(t + r * SG_THREADS, k0, Bs);
		}
		sg_sync();
#pragma unroll 4
		for (int kk = 0; kk < SG_TK; kk++) {
			float av[4], bv[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				av[i] = As[kk][ty + 16 * i];
#pragma unroll
			for (int j = 0; j < 4; j++)
				bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] += av[i] * bv[j];
		}
		if (sg_sync_or(pf))
			return 1;
	}
	return 0;
}

/* The A operand: element (m, k) at p[m*sm + k*sk]. Lanes run along k
 * when sk == 1 (row-major A), else along m, so the loads coalesce. */
struct sg_ld_a {
	const float *p;
	int rows, K;
	sg_i64 sm, sk;
	SG_DEVM void load(int e, int k0, sg_atile &s) const
	{
		int m = sk == 1 ? e >> 4 : e & 63;
		int k = sk == 1 ? e & 15 : e >> 6;
		int gk = k0 + k;
		s[k][m] = (m < rows && gk < K) ? p[m * sm + gk * sk] : 0.0f;
	}
};

/* The B operand: element (k, n) at p[k*sk + n*sn]; lanes run along n when
 * sn == 1, else along k. */
struct sg_ld_b {
	const float *p;
	int cols, K;
	sg_i64 sk, sn;
	SG_DEVM void load(int e, int k0, sg_btile &s) const
	{
		int n = sn == 1 ? e & 63 : e >> 4;
		int k = sn == 1 ? e >> 6 : e & 15;
		int gk = k0 + k;
		s[k][n] = (n < cols && gk < K) ? p[gk * sk + n * sn] : 0.0f;
	}
};

#endif /* SG_MM_H */
