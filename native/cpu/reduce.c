/*
 * reduce.c: reductions over one (flattened) axis: x viewed as
 * [outer][r][inner] gives y[outer][inner]. Blocks are chunks of outer.
 */
#include "sluice_cpu.h"

#include <math.h>

void sk_prep_reduce(sk_kernel *k, int units)
{
	int64_t outer = k->p[0], r = k->p[1], inner = k->p[2];
	if (outer < 1 || r < 1 || inner < 1 || k->p[3] < 0 || k->p[3] >= SK_RED_COUNT) {
		k->grid = -1;
		return;
	}
	k->t[0] = sk_split_work(outer, units, outer * r * inner / 16384);
	k->grid = SK_CDIV(outer, k->t[0]);
}

SK_MV void sk_block_reduce(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t r = k->p[1], inner = k->p[2], mode = k->p[3], rt = k->t[0];
	int64_t o0 = blk * rt, o1 = SK_MIN(o0 + rt, k->p[0]);
	for (int64_t o = o0; o < o1; o++) {
		SK_POLL(ctx);
		const float *x = k->in[0] + o * r * inner;
		float *y = k->out + o * inner;
		for (int64_t i = 0; i < inner; i++) {
			float acc;
			switch (mode) {
			case SK_RED_MAX:
				acc = x[i];
				for (int64_t j = 1; j < r; j++)
					acc = x[j * inner + i] > acc ? x[j * inner + i] : acc;
				break;
			case SK_RED_MIN:
				acc = x[i];
				for (int64_t j = 1; j < r; j++)
					acc = x[j * inner + i] < acc ? x[j * inner + i] : acc;
				break;
			case SK_RED_PROD:
				acc = 1;
				for (int64_t j = 0; j < r; j++)
					acc *= x[j * inner + i];
				break;
			case SK_RED_SUMSQ:
			case SK_RED_L2:
				acc = 0;
				for (int64_t j = 0; j < r; j++)
					acc += x[j * inner + i] * x[j * inner + i];
				if (mode == SK_RED_L2)
					acc = sqrtf(acc);
				break;
			default:
				acc = 0;
				for (int64_t j = 0; j < r; j++)
					acc += x[j * inner + i];
				if (mode == SK_RED_MEAN)
					acc /= (float)r;
				break;
			}
			y[i] = acc;
		}
	}
}
