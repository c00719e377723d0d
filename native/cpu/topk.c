/*
 * topk.c: ONNX TopK along one axis: the k largest (or smallest) values of
 * each row, best first, ties to the lower index. One kernel writes the
 * values, another (p[5] = 1) the indices (as float32), each computing the
 * selection itself: both are idempotent. Blocks are chunks of rows; a row
 * keeps its best k by insertion (k*n compares at worst). The same order
 * as native/cuda/topk.cu, which ranks each element instead.
 */
#include "sluice_cpu.h"

void sk_prep_topk(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	if (p[0] < 1 || p[1] < 1 || p[2] < 1 || p[3] < 1 || p[3] > p[1] ||
	    p[4] < 0 || p[4] > 1 || p[5] < 0 || p[5] > 1) {
		k->grid = -1;
		return;
	}
	int64_t rows = p[0] * p[2];
	k->t[0] = sk_split_work(rows, units, rows * p[1] * (p[3] < 16 ? p[3] : 16) / 65536);
	k->grid = SK_CDIV(rows, k->t[0]);
	k->scratch = 3 * p[3] + 4; /* the row's best values and indices so far */
}

/* topk_before reports whether element (a, ia) ranks before (b, ib). */
static inline int topk_before(float a, int64_t ia, float b, int64_t ib, int largest)
{
	if (a != b)
		return largest ? a > b : a < b;
	return ia < ib;
}

void sk_block_topk(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t n = p[1], inner = p[2], K = p[3];
	int largest = (int)p[4], indices = (int)p[5];
	int64_t r0 = blk * k->t[0], r1 = SK_MIN(r0 + k->t[0], p[0] * inner);
	float *best = sk_scratch(ctx, 3 * K + 4);
	if (!best)
		return;
	int64_t *bi = (int64_t *)(best + ((K + 1) & ~1)); /* 8-byte aligned */
	for (int64_t r = r0; r < r1; r++) {
		SK_POLL(ctx);
		int64_t o = r / inner, i = r % inner;
		const float *x = k->in[0] + o * n * inner + i;
		int64_t have = 0;
		for (int64_t j = 0; j < n; j++) {
			float v = x[j * inner];
			if (have == K && !topk_before(v, j, best[K - 1], bi[K - 1], largest))
				continue;
			int64_t at = have < K ? have++ : K - 1;
			while (at > 0 && topk_before(v, j, best[at - 1], bi[at - 1], largest)) {
				best[at] = best[at - 1];
				bi[at] = bi[at - 1];
				at--;
			}
			best[at] = v;
			bi[at] = j;
		}
		float *y = k->out + o * K * inner + i;
		for (int64_t t = 0; t < K; t++)
			y[t * inner] = indices ? (float)bi[t] : best[t];
	}
}
