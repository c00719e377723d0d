/*
 * sg_mm.h: the shared-memory tiled matrix product under GEMM and the
 * implicit-GEMM convolution. A block computes a TM x TN tile of C from
 * 16-deep slices of A (TM x 16) and B (16 x TN) staged in shared memory;
 * each of the 256 threads accumulates a TM/16 x TN/16 sub-tile: rows
 * ty + 16i and columns tx + 16j (ty = tid / 16, tx = tid % 16), so
 * shared-memory reads are broadcasts (A) or consecutive (B) and stores to
 * C are coalesced.
 *
 * Versions (REEF §5.3, multi-version kernels): the tile is a template
 * parameter, and t[SG_T_MMVER] picks the instance a launch runs:
 *   0  64 x 64 (the default: fewest blocks, shortest kernel time)
 *   1  32 x 32 (four times the blocks, each about a quarter as long: a
 *      BE kernel short enough to pad an RT kernel that a 64 x 64 block
 *      would outlive)
 * Every output element sums its K products in the same order in every
 * version, so the versions' results are bit-identical.
 *
 * Loaders fill the slices: la.load<TM>(e, k0, As) and lb.load<TN>(e, k0,
 * Bs) for e = tid + 256r, r < TM/16 (TN/16), each writing one element
 * (zero outside the matrix). The flag is polled once per slice at the loop's second barrier,
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
/* the t[] slot of the tile version (GEMM, CONV) */
#define SG_T_MMVER 2
#define SG_MM_VERSIONS 2

/* A slice of A (TK x TM, k-major) and of B (TK x TN) in shared memory, of
 * float (GEMM, CONV) or int (QGEMM: exact integer sums) elements. */
template <class T> using sg_atile_t = T[SG_TK][SG_TM + SG_TPAD];
template <class T> using sg_btile_t = T[SG_TK][SG_TN + SG_TPAD];
typedef sg_atile_t<float> sg_atile;
typedef sg_btile_t<float> sg_btile;

template <class T> struct sg_mm_tiles {
	sg_atile_t<T> a;
	sg_btile_t<T> b;
};
/* The staging tiles, one allocation per module whatever the loaders and
 * the element type (the float and int tiles share it). */
union sg_mm_smem {
	sg_mm_tiles<float> f;
	sg_mm_tiles<int> i;
};
SG_DEV sg_mm_smem &sg_mm_shared(void)
{
	SG_SHARED sg_mm_smem s;
	return s;
}
SG_DEV sg_mm_tiles<float> &sg_mm_staging(const float *) { return sg_mm_shared().f; }
SG_DEV sg_mm_tiles<int> &sg_mm_staging(const int *) { return sg_mm_shared().i; }

/* sg_mm_run accumulates the tile's product over k in [0, K) into acc, in
 * T (float, or int for exact integer sums). Returns nonzero when the
 * block was preempted (acc is then garbage). */
template <int TM, int TN, class T, class LA, class LB>
SG_DEV int sg_mm_run(const LA &la, const LB &lb, int K, sg_state *st,
		     T acc[TM / 16][TN / 16])
{
	sg_mm_tiles<T> &s = sg_mm_staging((const T *)0);
	sg_atile_t<T> &As = s.a;
	sg_btile_t<T> &Bs = s.b;
	int t = (int)sg_tid();
	int ty = t >> 4, tx = t & 15;
	const int RM = TM / 16, RN = TN / 16;
#pragma unroll
	for (int i = 0; i < RM; i++)
#pragma unroll
		for (int j = 0; j < RN; j++)
			acc[i][j] = 0;
	for (int k0 = 0; k0 < K; k0 += SG_TK) {
		int pf = sg_flag0(st);
#pragma unroll
		for (int r = 0; r < RM; r++)
			la.template load<TM>(t + r * SG_THREADS, k0, As);
#pragma unroll
		for (int r = 0; r < RN; r++)
			lb.template load<TN>(t + r * SG_THREADS, k0, Bs);
		sg_sync();
#pragma unroll 4
		for (int kk = 0; kk < SG_TK; kk++) {
			T av[RM], bv[RN];
#pragma unroll
			for (int i = 0; i < RM; i++)
				av[i] = As[kk][ty + 16 * i];
#pragma unroll
			for (int j = 0; j < RN; j++)
				bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
			for (int i = 0; i < RM; i++)
#pragma unroll
				for (int j = 0; j < RN; j++)
					acc[i][j] += av[i] * bv[j];
		}
		if (sg_sync_or(pf))
			return 1;
	}
	return 0;
}

/* The A operand: element (m, k) at p[m*sm + k*sk]. Lanes run along k
 * when sk == 1 (row-major A), else along m, so the loads coalesce. TM is
 * the tile's rows (e < TM * 16). */
struct sg_ld_a {
	const float *p;
	int rows, K;
	sg_i64 sm, sk;
	template <int TM>
	SG_DEVM void load(int e, int k0, sg_atile &s) const
	{
		int m = sk == 1 ? e >> 4 : e % TM;
		int k = sk == 1 ? e & 15 : e / TM;
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
	template <int TN>
	SG_DEVM void load(int e, int k0, sg_btile &s) const
	{
		int n = sn == 1 ? e % TN : e >> 4;
		int k = sn == 1 ? e / TN : e & 15;
		int gk = k0 + k;
		s[k][n] = (n < cols && gk < K) ? p[gk * sk + n * sn] : 0.0f;
	}
};

/* The B operand of an implicit-GEMM convolution (CONV, and QGEMM over a
 * quantised input): col[k][pos] of one image and group, gathered from x
 * (the group's first input channel) as the slices are staged; col is
 * never stored. Lanes run along pos; each thread's column pos is fixed
 * (e % TN == tid % TN, TN divides 256), so its (oh, ow) is decoded once
 * (ih0, iw0). Q (QGEMM): x holds integers; a value is x less the zero
 * point `shift`, and a window position in the padding is `pad` (the
 * padding value less the zero point). Without Q a value is x as it is,
 * and the padding 0. */
template <class T, bool Q> struct sg_ld_im2col_t {
	const float *x;
	int cols, K, KHW, KW, H, W, DH, DW;
	int ih0, iw0; /* this thread's column: oh*SH - PT, ow*SW - PL */
	T pad, shift; /* Q only */
	template <int TN>
	SG_DEVM void load(int e, int k0, sg_btile_t<T> &s) const
	{
		int n = e % TN, k = e / TN;
		int gk = k0 + k;
		T v = 0;
		if (n < cols && gk < K) {
			int c = gk / KHW, r = gk - c * KHW;
			int kh = r / KW, kw = r - kh * KW;
			int ih = ih0 + kh * DH, iw = iw0 + kw * DW;
			if (Q)
				v = pad;
			if ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W) {
				v = (T)x[((sg_i64)c * H + ih) * W + iw];
				if (Q)
					v -= shift;
			}
		}
		s[k][n] = v;
	}
};
typedef sg_ld_im2col_t<float, false> sg_ld_im2col;

#endif /* SG_MM_H */
