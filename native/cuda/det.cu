/*
 * det.cu: ONNX Det, the arithmetic of native/cpu/det.c: the determinant
 * of each M x M matrix by LU factorisation with partial pivoting in
 * double precision (the first row of largest magnitude pivots; a zero
 * column gives 0), rounded to float32 once. One block per matrix, held in
 * shared memory: thread 0 picks the pivot, the block swaps the rows and
 * eliminates below it, a barrier (the preemption poll) between columns.
 *
 * Parameters: in X [count, M, M]. p: 0 count 1 M (1 .. SG_DET_MAX).
 */
#include "sg.h"

/* The largest matrix a block holds (8 KiB of shared memory). */
#define SG_DET_MAX 32

SG_DEV_COLD void sg_body_det(const sg_args &a, sg_i64 blk, sg_state *st)
{
	SG_SHARED double lu[SG_DET_MAX * SG_DET_MAX];
	SG_SHARED double det;
	SG_SHARED int piv;
	int count = (int)a.p[0], m = (int)a.p[1];
	int t = (int)sg_tid();
	if ((int)blk >= count)
		return;
	const float *x = a.in[0] + (sg_i64)blk * m * m;
	for (int e = t; e < m * m; e += SG_THREADS)
		lu[e] = (double)x[e];
	if (t == 0)
		det = 1.0;
	for (int c = 0; c < m; c++) {
		SG_POLL(st); /* also the barrier after the previous column */
		if (t == 0) {
			int p = c;
			double best = __builtin_fabs(lu[c * m + c]);
			for (int r = c + 1; r < m; r++) {
				double v = __builtin_fabs(lu[r * m + c]);
				if (v > best) {
					best = v;
					p = r;
				}
			}
			if (best == 0.0) {
				det = 0.0;
				p = -1;
			} else {
				if (p != c)
					det = -det;
				det *= lu[p * m + c];
			}
			piv = p;
		}
		sg_sync();
		int p = piv;
		if (p < 0)
			break;
		if (p != c) {
			for (int j = c + t; j < m; j += SG_THREADS) {
				double v = lu[c * m + j];
				lu[c * m + j] = lu[p * m + j];
				lu[p * m + j] = v;
			}
			sg_sync();
		}
		/* thread t updates column c + 1 + t % 32 of rows c + 1 + t / 32,
		 * + 8, ... (m <= 32: one column a thread) */
		int j = c + 1 + (t & 31);
		if (j < m) {
			double d = lu[c * m + c], top = lu[c * m + j];
			for (int r = c + 1 + (t >> 5); r < m; r += SG_THREADS / 32)
				lu[r * m + j] -= lu[r * m + c] / d * top;
		}
	}
	if (t == 0)
		a.out[blk] = (float)det;
}
SG_ENTRY(sg_det, sg_body_det)
