/*
 * det.c: ONNX Det: the determinant of each M x M matrix of x [..., M, M],
 * by LU factorisation with partial pivoting in double precision (the
 * first row of largest magnitude pivots; a zero column gives 0), rounded
 * to float32 once. Blocks are chunks of matrices, each factorised in the
 * unit's scratch. The same arithmetic as native/cuda/det.cu.
 */
#include "sluice_cpu.h"

#include <math.h>

void sk_prep_det(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	if (p[0] < 1 || p[1] < 1 || p[1] > SK_DET_MAX) {
		k->grid = -1;
		return;
	}
	int64_t m = p[1];
	k->t[0] = sk_split_work(p[0], units, p[0] * m * m * m / 65536);
	k->grid = SK_CDIV(p[0], k->t[0]);
	k->scratch = 2 * m * m + 2; /* one matrix of doubles */
}

void sk_block_det(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t m = k->p[1];
	int64_t i0 = blk * k->t[0], i1 = SK_MIN(i0 + k->t[0], k->p[0]);
	float *s = sk_scratch(ctx, 2 * m * m + 2);
	if (!s)
		return;
	double *a = (double *)(((uintptr_t)s + 7) & ~(uintptr_t)7);
	for (int64_t i = i0; i < i1; i++) {
		const float *x = k->in[0] + i * m * m;
		for (int64_t e = 0; e < m * m; e++)
			a[e] = x[e];
		double det = 1.0;
		for (int64_t c = 0; c < m && det != 0.0; c++) {
			SK_POLL(ctx); /* at most m^2 multiply-adds between checks */
			int64_t piv = c;
			double best = fabs(a[c * m + c]);
			for (int64_t r = c + 1; r < m; r++) {
				if (fabs(a[r * m + c]) > best) {
					best = fabs(a[r * m + c]);
					piv = r;
				}
			}
			if (best == 0.0) {
				det = 0.0;
				break;
			}
			if (piv != c) {
				for (int64_t j = c; j < m; j++) {
					double t = a[c * m + j];
					a[c * m + j] = a[piv * m + j];
					a[piv * m + j] = t;
				}
				det = -det;
			}
			double d = a[c * m + c];
			det *= d;
			for (int64_t r = c + 1; r < m; r++) {
				double f = a[r * m + c] / d;
				for (int64_t j = c + 1; j < m; j++)
					a[r * m + j] -= f * a[c * m + j];
			}
		}
		k->out[i] = (float)det;
	}
}
