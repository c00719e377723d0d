/*
 * copy.c: data movement. COPY is a strided copy of rank <= 6 (Transpose,
 * Slice, Concat, Expand, Split are all one or more COPY kernels); GATHER
 * picks slices along an axis by constant indices. Blocks are chunks of the
 * output's rows (all dimensions but the last).
 */
#include "sluice_cpu.h"

#include <string.h>

void sk_prep_copy(sk_kernel *k, int units)
{
	int64_t r = k->p[0];
	if (r < 1 || r > SK_MAX_RANK || (k->p[19] && (!k->in[1] || !k->in[2]))) {
		k->grid = -1;
		return;
	}
	int64_t rows = 1;
	for (int i = 0; i < r; i++) {
		if (k->p[1 + i] < 1) {
			k->grid = -1;
			return;
		}
		if (i < r - 1)
			rows *= k->p[1 + i];
	}
	int64_t inner = k->p[r];
	int64_t n = rows * inner;
	int64_t want = units * 4;
	if (want > n / 32768)
		want = n / 32768;
	if (want < 1)
		want = 1;
	k->t[1] = 0;
	if (rows < want) {
		/* few long rows (a flat copy, a fill): blocks of one row take
		 * t[1]-element pieces of it (multiples of 16) */
		int64_t pieces = SK_CDIV(want, rows);
		int64_t chunk = SK_CDIV(SK_CDIV(inner, pieces), 16) * 16;
		k->t[0] = 1;
		k->t[1] = chunk;
		k->grid = rows * SK_CDIV(inner, chunk);
		return;
	}
	k->t[0] = sk_split(rows, want, 1);
	k->grid = SK_CDIV(rows, k->t[0]);
}

void sk_block_copy(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int r = (int)k->p[0];
	const int64_t *dims = k->p + 1, *si = k->p + 7, *so = k->p + 13;
	int64_t inner = dims[r - 1], sin = si[r - 1], sout = so[r - 1];
	int64_t rows = 1;
	for (int i = 0; i < r - 1; i++)
		rows *= dims[i];
	int64_t r0 = blk * k->t[0], r1 = SK_MIN(r0 + k->t[0], rows);
	int64_t j0 = 0;
	if (k->t[1] > 0) {
		/* one piece of one row */
		int64_t pieces = SK_CDIV(inner, k->t[1]);
		r0 = blk / pieces;
		r1 = r0 + 1;
		j0 = (blk % pieces) * k->t[1];
		inner = SK_MIN(j0 + k->t[1], inner) - j0;
	}
	for (int64_t row = r0; row < r1; row++) {
		if (((row - r0) & 63) == 0)
			SK_POLL(ctx);
		int64_t rem = row, oi = 0, oo = 0;
		for (int i = r - 2; i >= 0; i--) {
			int64_t idx = rem % dims[i];
			rem /= dims[i];
			oi += idx * si[i];
			oo += idx * so[i];
		}
		const float *x = (k->p[19] && k->in[2][0] == 0.0f ? k->in[1] : k->in[0]) + oi + j0 * sin;
		float *y = k->out + oo + j0 * sout;
		if (sin == 1 && sout == 1) {
			memcpy(y, x, (size_t)inner * 4);
		} else {
			for (int64_t j = 0; j < inner; j++)
				y[j * sout] = x[j * sin];
		}
	}
}

void sk_prep_gather(sk_kernel *k, int units)
{
	int64_t outer = k->p[0], axis = k->p[1], inner = k->p[2], nidx = k->p[3];
	if (outer < 1 || axis < 1 || inner < 1 || nidx < 1 || !k->aux) {
		k->grid = -1;
		return;
	}
	for (int64_t j = 0; j < nidx; j++) {
		int64_t v = k->aux[j];
		if (v < -axis || v >= axis) {
			k->grid = -1;
			return;
		}
	}
	int64_t rows = outer * nidx;
	int64_t want = units * 4;
	if (want > rows * inner / 32768)
		want = rows * inner / 32768;
	if (want < 1)
		want = 1;
	k->t[0] = sk_split(rows, want, 1);
	k->grid = SK_CDIV(rows, k->t[0]);
}

void sk_block_gather(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t axis = k->p[1], inner = k->p[2], nidx = k->p[3];
	int64_t rows = k->p[0] * nidx;
	int64_t r0 = blk * k->t[0], r1 = SK_MIN(r0 + k->t[0], rows);
	(void)ctx;
	for (int64_t row = r0; row < r1; row++) {
		int64_t o = row / nidx, j = row % nidx;
		int64_t v = k->aux[j];
		if (v < 0)
			v += axis;
		memcpy(k->out + row * inner, k->in[0] + (o * axis + v) * inner,
		       (size_t)inner * 4);
	}
}
