/*
 * eltwise.c: elementwise kernels: unary (activation codes), broadcasting
 * binary (rank <= 6) and the per-channel affine that runs a standalone
 * BatchNormalization. Blocks are contiguous chunks of the output.
 */
#include "sluice_cpu.h"

#include <math.h>
#include <string.h>

#define ELT_CHUNK 32768 /* floats per block at least (when there are enough) */
#define ELT_SUB 4096    /* floats per inner step (stays in L1) */

static int64_t elt_grid(int64_t n, int units, int64_t *chunk)
{
	int64_t want = units * 4;
	if (want > n / ELT_CHUNK)
		want = n / ELT_CHUNK;
	if (want < 1)
		want = 1;
	*chunk = SK_CDIV(sk_split(n, want, 1), 16) * 16;
	return SK_CDIV(n, *chunk);
}

void sk_prep_unary(sk_kernel *k, int units)
{
	if (k->p[0] < 1 || k->p[SKP_ACT] < 0 || k->p[SKP_ACT] >= SK_ACT_COUNT) {
		k->grid = -1;
		return;
	}
	k->grid = elt_grid(k->p[0], units, &k->t[0]);
}

void sk_block_unary(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t n = k->p[0], ch = k->t[0];
	int64_t i0 = blk * ch, i1 = SK_MIN(i0 + ch, n);
	int act = (int)k->p[SKP_ACT];
	for (int64_t i = i0; i < i1; i += ELT_SUB) {
		SK_POLL(ctx);
		int64_t m = SK_MIN((int64_t)ELT_SUB, i1 - i);
		if (k->out != k->in[0])
			memcpy(k->out + i, k->in[0] + i, (size_t)m * 4);
		sk_act_apply(k->out + i, m, act, k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
	}
}

/* ---- BINARY -------------------------------------------------------------- */

void sk_prep_binary(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	int64_t r = p[1];
	if (p[0] < 0 || p[0] >= SK_BIN_COUNT || r < 1 || r > SK_MAX_RANK) {
		k->grid = -1;
		return;
	}
	int64_t n = 1;
	for (int i = 0; i < r; i++) {
		if (p[2 + i] < 1) {
			k->grid = -1;
			return;
		}
		n *= p[2 + i];
	}
	int64_t inner = p[2 + r - 1];
	int64_t rows = n / inner;
	int64_t want = units * 4;
	if (want > n / ELT_CHUNK)
		want = n / ELT_CHUNK;
	if (want < 1)
		want = 1;
	/* blocks are row chunks; when rows are few, columns are split too */
	int64_t ct = inner;
	if (rows < want)
		ct = SK_CDIV(sk_split(inner, SK_CDIV(want, rows), 1024), 16) * 16;
	if (ct > inner)
		ct = inner;
	int64_t rt = ct < inner ? 1 : sk_split(rows, want, 1);
	k->t[0] = rt;
	k->t[1] = ct;
	k->t[2] = SK_CDIV(inner, ct);
	k->grid = SK_CDIV(rows, rt) * k->t[2];
}

SK_MV static void bin_row(int op, float *y, const float *a, const float *b,
			  int64_t n, int64_t sa, int64_t sb)
{
	int64_t i;
#define BIN_LOOPS(EXPR)                                             \
	if (sa == 1 && sb == 1) {                                   \
		for (i = 0; i < n; i++) {                           \
			float x = a[i], z = b[i];                   \
			y[i] = EXPR;                                \
		}                                                   \
	} else if (sa == 1 && sb == 0) {                            \
		float z = b[0];                                     \
		for (i = 0; i < n; i++) {                           \
			float x = a[i];                             \
			y[i] = EXPR;                                \
		}                                                   \
	} else if (sa == 0 && sb == 1) {                            \
		float x = a[0];                                     \
		for (i = 0; i < n; i++) {                           \
			float z = b[i];                             \
			y[i] = EXPR;                                \
		}                                                   \
	} else {                                                    \
		for (i = 0; i < n; i++) {                           \
			float x = a[i * sa], z = b[i * sb];         \
			y[i] = EXPR;                                \
		}                                                   \
	}
	switch (op) {
	case SK_BIN_ADD:
		BIN_LOOPS(x + z);
		break;
	case SK_BIN_SUB:
		BIN_LOOPS(x - z);
		break;
	case SK_BIN_MUL:
		BIN_LOOPS(x * z);
		break;
	case SK_BIN_DIV:
		BIN_LOOPS(x / z);
		break;
	case SK_BIN_POW:
		BIN_LOOPS(powf(x, z));
		break;
	case SK_BIN_MAX:
		BIN_LOOPS(x > z ? x : z);
		break;
	case SK_BIN_MIN:
		BIN_LOOPS(x < z ? x : z);
		break;
	case SK_BIN_PRELU:
		BIN_LOOPS(x < 0 ? x * z : x);
		break;
	case SK_BIN_GREATER:
		BIN_LOOPS(x > z ? 1.0f : 0.0f);
		break;
	case SK_BIN_LESS:
		BIN_LOOPS(x < z ? 1.0f : 0.0f);
		break;
	case SK_BIN_EQUAL:
		BIN_LOOPS(x == z ? 1.0f : 0.0f);
		break;
	case SK_BIN_GREATER_EQ:
		BIN_LOOPS(x >= z ? 1.0f : 0.0f);
		break;
	case SK_BIN_LESS_EQ:
		BIN_LOOPS(x <= z ? 1.0f : 0.0f);
		break;
	case SK_BIN_MOD:
		BIN_LOOPS(fmodf(x, z));
		break;
	}
#undef BIN_LOOPS
}

void sk_block_binary(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int op = (int)p[0];
	int r = (int)p[1];
	const int64_t *dims = p + 2, *sa = p + 8, *sb = p + 14;
	int64_t inner = dims[r - 1];
	int64_t rt = k->t[0], ct = k->t[1], ctiles = k->t[2];
	int64_t rows = 1;
	for (int i = 0; i < r - 1; i++)
		rows *= dims[i];
	int64_t ci = blk % ctiles, ri = blk / ctiles;
	int64_t r0 = ri * rt, r1 = SK_MIN(r0 + rt, rows);
	int64_t j0 = ci * ct, jn = SK_MIN(ct, inner - j0);
	int64_t ia = sa[r - 1], ib = sb[r - 1];
	int act = (int)p[SKP_ACT];
	for (int64_t row = r0; row < r1; row++) {
		if (((row - r0) & 15) == 0)
			SK_POLL(ctx);
		/* offsets of this row in A and B */
		int64_t rem = row, oa = 0, ob = 0;
		for (int i = r - 2; i >= 0; i--) {
			int64_t idx = rem % dims[i];
			rem /= dims[i];
			oa += idx * sa[i];
			ob += idx * sb[i];
		}
		for (int64_t j = 0; j < jn; j += ELT_SUB) {
			int64_t m = SK_MIN((int64_t)ELT_SUB, jn - j);
			int64_t c = j0 + j;
			float *y = k->out + row * inner + c;
			bin_row(op, y, k->in[0] + oa + c * ia, k->in[1] + ob + c * ib, m, ia, ib);
			if (act)
				sk_act_apply(y, m, act, k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
		}
	}
}

/* ---- CHAFFINE (standalone BatchNormalization) -------------------------- */

void sk_prep_chaffine(sk_kernel *k, int units)
{
	int64_t N = k->p[0], C = k->p[1], inner = k->p[2];
	if (N < 1 || C < 1 || inner < 1) {
		k->grid = -1;
		return;
	}
	int64_t planes = N * C;
	int64_t want = units * 4;
	if (want > planes * inner / ELT_CHUNK)
		want = planes * inner / ELT_CHUNK;
	if (want < 1)
		want = 1;
	k->t[0] = sk_split(planes, want, 1);
	k->grid = SK_CDIV(planes, k->t[0]);
}

SK_MV void sk_block_chaffine(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t C = k->p[1], inner = k->p[2], N = k->p[0];
	int64_t c0 = blk * k->t[0], c1 = SK_MIN(c0 + k->t[0], N * C);
	int act = (int)k->p[SKP_ACT];
	(void)ctx;
	for (int64_t pl = c0; pl < c1; pl++) {
		int64_t c = pl % C;
		float s = k->in[1][c], b = k->in[2][c];
		const float *x = k->in[0] + pl * inner;
		float *y = k->out + pl * inner;
		for (int64_t i = 0; i < inner; i++)
			y[i] = x[i] * s + b;
		if (act)
			sk_act_apply(y, inner, act, k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
	}
}
