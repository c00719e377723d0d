/*
 * norm.c: softmax (and log-softmax) over one axis, layer normalization over
 * the trailing dimensions. Blocks are chunks of independent rows.
 */
#include "sluice_cpu.h"
#include "skmath.h"

#include <math.h>

static int64_t rows_grid(int64_t rows, int64_t cols, int units, int64_t *rt)
{
	*rt = sk_split_work(rows, units, rows * cols / 16384);
	return SK_CDIV(rows, *rt);
}

void sk_prep_softmax(sk_kernel *k, int units)
{
	int64_t outer = k->p[0], n = k->p[1], inner = k->p[2];
	if (outer < 1 || n < 1 || inner < 1) {
		k->grid = -1;
		return;
	}
	k->grid = rows_grid(outer, n * inner, units, &k->t[0]);
}

SK_MV static void softmax_row(const float *x, float *y, int64_t n, int64_t st,
			      int lg)
{
	if (st == 1) {
		/* a contiguous row: max and sum in lanes (skmath.h) */
		float m = sk_max(x, n);
		if (lg) {
			/* y may be x: the exponentials go to the lanes only */
			float a[SK_SUM_LANES] = {0};
			int64_t i = 0;
			for (; i + SK_SUM_LANES <= n; i += SK_SUM_LANES)
				for (int j = 0; j < SK_SUM_LANES; j++)
					a[j] += sk_expf(x[i + j] - m);
			for (int j = 0; i + j < n; j++)
				a[j] += sk_expf(x[i + j] - m);
			float ls = logf(sk_sum_fold(a));
			for (int64_t k = 0; k < n; k++)
				y[k] = x[k] - m - ls;
			return;
		}
		for (int64_t i = 0; i < n; i++)
			y[i] = sk_expf(x[i] - m);
		float r = 1.0f / sk_sum(y, n);
		for (int64_t i = 0; i < n; i++)
			y[i] *= r;
		return;
	}
	float m = x[0];
	for (int64_t i = 1; i < n; i++)
		m = x[i * st] > m ? x[i * st] : m;
	float s = 0;
	if (lg) {
		/* y may be x (in place): nothing is stored before the last pass */
		for (int64_t i = 0; i < n; i++)
			s += sk_expf(x[i * st] - m);
		float ls = logf(s);
		for (int64_t i = 0; i < n; i++)
			y[i * st] = x[i * st] - m - ls;
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		float e = sk_expf(x[i * st] - m);
		y[i * st] = e;
		s += e;
	}
	float r = 1.0f / s;
	for (int64_t i = 0; i < n; i++)
		y[i * st] *= r;
}

void sk_block_softmax(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t n = k->p[1], inner = k->p[2], rt = k->t[0];
	int64_t o0 = blk * rt, o1 = SK_MIN(o0 + rt, k->p[0]);
	int lg = (int)k->p[3];
	for (int64_t o = o0; o < o1; o++) {
		SK_POLL(ctx);
		for (int64_t i = 0; i < inner; i++)
			softmax_row(k->in[0] + o * n * inner + i,
				    k->out + o * n * inner + i, n, inner, lg);
	}
}

void sk_prep_layernorm(sk_kernel *k, int units)
{
	if (k->p[0] < 1 || k->p[1] < 1) {
		k->grid = -1;
		return;
	}
	k->grid = rows_grid(k->p[0], k->p[1], units, &k->t[0]);
}

SK_MV void sk_block_layernorm(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t cols = k->p[1], rt = k->t[0];
	int64_t r0 = blk * rt, r1 = SK_MIN(r0 + rt, k->p[0]);
	const float *sc = k->in[1], *bi = k->in[2];
	float eps = k->f[0];
	for (int64_t r = r0; r < r1; r++) {
		if (((r - r0) & 15) == 0)
			SK_POLL(ctx);
		const float *x = k->in[0] + r * cols;
		float *y = k->out + r * cols;
		/* sums in lanes (skmath.h) */
		float mean = sk_sum(x, cols) / (float)cols;
		float v = sk_sum_sqdev(x, cols, mean);
		float rstd = 1.0f / sqrtf(v / (float)cols + eps);
		for (int64_t i = 0; i < cols; i++) {
			float z = (x[i] - mean) * rstd;
			if (sc)
				z *= sc[i];
			if (bi)
				z += bi[i];
			y[i] = z;
		}
	}
}
