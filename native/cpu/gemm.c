/*
 * gemm.c: batched GEMM with the fused epilogue. One block is one (batch,
 * M tile, N tile) computed by sk_gemm (sgemm.c), whose results do not depend
 * on the tiling: every version of the kernel gives the same bits.
 */
#include "sluice_cpu.h"
#include "sk512.h"

/* Work aimed at per block (flops), the least worth a block, the largest
 * output tile (floats, so the epilogue runs in cache) and the work of one
 * sgemm call between preemption checks inside a block. */
#define GEMM_BLOCK_MAX 3.2e7
#define GEMM_BLOCK_MIN 5e5
#define GEMM_TILE_MAX 32768
#define GEMM_CALL_MAX 8e6
#define GEMM_BYTES_MAX 4e6
/* rows-first tiling (sk_prep_gemm): reductions this short, outputs this
 * large (floats per batch item), tiles down to GEMM_MR rows (the largest
 * micro-kernel's row count) */
#define GEMM_ROWS_FIRST_K 64
#define GEMM_ROWS_FIRST_OUT 65536
#define GEMM_MR 12
/* the transposed product over a reduction this long takes one panel of
 * A's columns a block (sk_prep_gemm) */
#define GEMM_TPROD_PANEL_K 1024
/* columns first (sk_prep_gemm): B at least this many times wider than A
 * is tall, A at most this many bytes */
#define GEMM_COLS_FIRST_RATIO 4
#define GEMM_COLS_FIRST_A 2e6

static int64_t round_up(int64_t x, int64_t m) { return SK_MAX(SK_CDIV(x, m) * m, m); }

void sk_prep_gemm(sk_kernel *k, int units)
{
	int64_t M = k->p[0], N = k->p[1], K = k->p[2];
	int64_t nb = k->p[8] * k->p[9] * k->p[10];
	if (M < 1 || N < 1 || K < 0 || nb < 1) {
		k->grid = -1;
		return;
	}
	double work = 2.0 * (double)M * (double)N * (double)(K ? K : 1);
	double total = work * (double)nb;
	double want = total / GEMM_BLOCK_MAX;
	/* memory-bound shapes (a fully connected layer at batch 1) stream
	 * their operands: bound the bytes a block reads too */
	double bytes = 4.0 * ((double)M + (double)N) * (double)K * (double)nb;
	if (want < bytes / GEMM_BYTES_MAX)
		want = bytes / GEMM_BYTES_MAX;
	if (want < units * 4)
		want = units * 4;
	if (want > total / GEMM_BLOCK_MIN && bytes < GEMM_BYTES_MAX * units * 4)
		want = total / GEMM_BLOCK_MIN;
	if (want < 1)
		want = 1;
	int64_t per = (int64_t)(want / (double)nb + 0.999);
	if (per < 1)
		per = 1;
	/* halve the larger tile side (keeping both >= 64 while possible, so
	 * sgemm runs near its peak) until there are enough tiles and the
	 * output tile fits the cache */
	int64_t mt = M, nt = N;
	/* below the micro-kernel's width a tile computes zero padding; B in
	 * panels is cut at panel boundaries */
	int64_t nr = k->p[SKP_GEMM_PANELS] ? SK_PANEL : sk_gemm_nr();
	/* a memory-bound product with a large output (a 1x1 convolution
	 * expanding channels at high resolution: short reductions) cuts rows
	 * first, down to one micro-kernel row group: its tiles then leave
	 * the cache as a few long runs of each output row, which memory
	 * takes about twice as fast as the many short runs of a tall tile
	 * (MobileNetV2's expansions at batch 8 ran no faster on two units
	 * than on one; now 1.2-1.5x) */
	/* the transposed product cuts M (its panels' columns) at panels */
	int tprod = k->p[SKP_GEMM_TPROD] != 0;
	int64_t mr = tprod ? SK_PANEL : 8;
	int rows_first = !tprod && K <= GEMM_ROWS_FIRST_K && M >= 4 * GEMM_MR &&
			 M * N >= GEMM_ROWS_FIRST_OUT;
	/* a product whose B is far larger than A (a transformer's
	 * feed-forward weights against 128 tokens: B streams from memory, A
	 * stays in cache) keeps A's rows whole and cuts B's columns, down to
	 * one panel: each tile of B is then read once, where cutting rows
	 * read it once per row tile */
	int cols_first = !tprod && !rows_first && N >= GEMM_COLS_FIRST_RATIO * M &&
			 4.0 * (double)M * (double)K <= GEMM_COLS_FIRST_A;
	for (;;) {
		int64_t tiles = SK_CDIV(M, mt) * SK_CDIV(N, nt);
		if (tiles >= per && mt * nt <= GEMM_TILE_MAX)
			break;
		if (rows_first && mt > GEMM_MR)
			mt = SK_MAX(round_up(mt / 2, GEMM_MR), GEMM_MR);
		else if (cols_first && nt > nr)
			nt = round_up(nt / 2, nr);
		else if (nt >= mt && nt > 64)
			nt = round_up(nt / 2, nr);
		else if (mt > 64)
			mt = round_up(mt / 2, mr);
		else if (nt > nr)
			nt = round_up(nt / 2, nr);
		else if (mt > 16 && mt > mr)
			mt = round_up(mt / 2, mr);
		else
			break;
		mt = SK_MIN(mt, M);
		nt = SK_MIN(nt, N);
	}
	/* a transposed product over a long reduction (3x3 layers at 7x7 and
	 * 14x14, ResNet-50's wide 1x1 layers) takes one panel a block: each
	 * block then reads its weights as one run where two panels were two
	 * runs read in turn, and there are twice the blocks to share out
	 * (Zen 5 VM, ResNet-18 at batch 1, the 7x7 layers' products in 0.83
	 * to 0.89 of their time, paired; at 1024 > K >= 256, MobileNetV2's
	 * products did not gain) */
	if (tprod && K >= GEMM_TPROD_PANEL_K)
		mt = SK_MIN(mt, SK_PANEL);
	k->t[0] = mt;
	k->t[1] = nt;
	k->t[2] = SK_CDIV(M, mt);
	k->t[3] = SK_CDIV(N, nt);
	/* rows per sgemm call inside a block (the transposed product's rows
	 * are C's columns, computed into the unit's scratch) */
	int64_t cols = tprod ? mt : nt, rows = tprod ? nt : mt;
	int64_t sub = (int64_t)(GEMM_CALL_MAX / (2.0 * (double)cols * (double)SK_MAX(K, 1)));
	k->t[4] = SK_MIN(round_up(sub, 32), rows);
	/* rows first: consecutive blocks take the row groups of one column
	 * tile, so the tile's B (K x nt, short) is read from memory once and
	 * stays in cache for all of them, where walking the columns first
	 * read all of B again for every row group (MobileNetV2's 16 -> 96
	 * expansion at 112x112, batch 8, one unit: 8.5-9.0% of the model's
	 * time -> 7.3-7.9%) */
	k->t[5] = rows_first;
	k->scratch = tprod ? mt * nt : 0;
	k->grid = nb * k->t[2] * k->t[3];
}

/* epilogue in one pass over the tile for the common cases (bias, residual,
 * then none, ReLU or Clip as sk_act_apply computes them); the others go
 * to sk_epilogue */
SK_MV static void gemm_epi_1(float *y, int64_t rows, int64_t cols, int64_t ldy,
			     const float *brow, const float *bcol, const float *res,
			     int64_t ldr, int act, float lo, float hi)
{
	for (int64_t r = 0; r < rows; r++) {
		float *yr = y + r * ldy;
		const float *rr = res ? res + r * ldr : NULL;
		float bv = brow ? brow[r] : 0.0f;
		for (int64_t c = 0; c < cols; c++) {
			float v = yr[c] + bv;
			if (bcol)
				v += bcol[c];
			if (rr)
				v += rr[c];
			if (act == SK_ACT_RELU)
				v = v > 0 ? v : 0;
			else if (act == SK_ACT_CLIP)
				v = v < lo ? lo : (v > hi ? hi : v);
			yr[c] = v;
		}
	}
}

void sk_gemm_epilogue(float *y, int64_t rows, int64_t cols, int64_t ldy,
		      const float *brow, const float *bcol, const float *res,
		      int64_t ldr, int act, float lo, float hi);
void sk_gemm_epilogue(float *y, int64_t rows, int64_t cols, int64_t ldy,
		      const float *brow, const float *bcol, const float *res,
		      int64_t ldr, int act, float lo, float hi)
{
	if (sk_act_512_has(act))
		gemm_epi_1(y, rows, cols, ldy, brow, bcol, res, ldr, act, lo, hi);
	else
		sk_epilogue(y, rows, cols, ldy, brow, bcol, res, ldr, act, lo, hi);
}

/* transpose_tile writes T (cols x rows, row-major) into C (rows x cols,
 * ldc) in 8 x 8 squares, so both sides stay in a few cache lines. */
static void transpose_tile(const float *T, int64_t rows, int64_t cols, float *C, int64_t ldc)
{
	for (int64_t r0 = 0; r0 < rows; r0 += 8) {
		int64_t re = SK_MIN(r0 + 8, rows);
		for (int64_t c0 = 0; c0 < cols; c0 += 8) {
			int64_t ce = SK_MIN(c0 + 8, cols);
			for (int64_t r = r0; r < re; r++)
				for (int64_t c = c0; c < ce; c++)
					C[r * ldc + c] = T[c * rows + r];
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
/* transpose_epi_512 is transpose_tile in 16 x 16 squares transposed in
 * registers, with (epi set) gemm_epi_1's epilogue applied on the way to
 * the store: bias per row or column, residual (ldr), then none, ReLU or
 * Clip, in gemm_epi_1's order, so the same bits as the two passes. */
__attribute__((target("avx512f"))) static void
transpose_epi_512(const float *T, int64_t rows, int64_t cols, float *C, int64_t ldc, int epi,
		  const float *brow, const float *bcol, const float *res, int64_t ldr, int act,
		  float lo, float hi)
{
	const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
	for (int64_t i0 = 0; i0 < rows; i0 += 16) {
		int64_t ni = SK_MIN(16, rows - i0);
		__mmask16 mi = sk_lanes16(0, ni);
		for (int64_t j0 = 0; j0 < cols; j0 += 16) {
			int64_t nj = SK_MIN(16, cols - j0);
			__mmask16 mj = sk_lanes16(0, nj);
			/* v[q]: T's row j0 + q (C's column), rows i0.. of C */
			__m512 v[16];
			for (int64_t q = 0; q < 16; q++)
				v[q] = q < nj ? _mm512_maskz_loadu_ps(mi, T + (j0 + q) * rows + i0)
					      : _mm512_setzero_ps();
			sk_transpose16(v);
			__m512 bc = epi && bcol ? _mm512_maskz_loadu_ps(mj, bcol + j0) : _mm512_setzero_ps();
			for (int64_t r = 0; r < ni; r++) {
				__m512 x = v[r];
				if (epi) {
					x = _mm512_add_ps(x, _mm512_set1_ps(brow ? brow[i0 + r] : 0.0f));
					if (bcol)
						x = _mm512_add_ps(x, bc);
					if (res)
						x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mj, res + (i0 + r) * ldr + j0));
					x = sk_act_512(x, act, vlo, vhi);
				}
				_mm512_mask_storeu_ps(C + (i0 + r) * ldc + j0, mj, x);
			}
		}
	}
}
#endif

void sk_block_gemm(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t M = p[0], N = p[1], K = p[2];
	int ta = (int)p[3], tb = (int)p[4];
	int64_t lda = p[5], ldb = p[6], ldc = p[7];
	int64_t mt = k->t[0], nt = k->t[1], mtiles = k->t[2], ntiles = k->t[3];
	int64_t ni = blk % ntiles;
	int64_t mi = (blk / ntiles) % mtiles;
	if (k->t[5]) { /* rows first (sk_prep_gemm) */
		mi = blk % mtiles;
		ni = (blk / mtiles) % ntiles;
	}
	int64_t b = blk / (ntiles * mtiles);
	int64_t b2 = b % p[10], b1 = (b / p[10]) % p[9], b0 = b / (p[10] * p[9]);
	int64_t offa = b0 * p[11] + b1 * p[12] + b2 * p[13];
	int64_t offb = b0 * p[14] + b1 * p[15] + b2 * p[16];
	int64_t offc = b0 * p[17] + b1 * p[18] + b2 * p[19];
	int64_t offbias = b0 * p[20] + b1 * p[21] + b2 * p[22];
	int64_t m0 = mi * mt, n0 = ni * nt;
	int64_t ml = SK_MIN(mt, M - m0), nl = SK_MIN(nt, N - n0);
	int apanels = p[SKP_GEMM_APANELS] != 0, tprod = p[SKP_GEMM_TPROD] != 0;
	/* A in panels: lda is their distance, rows start at m0 */
	const float *A = k->in[0] + offa + (apanels ? 0 : ta ? m0 : m0 * lda);
	int panels = p[SKP_GEMM_PANELS] != 0;
	const float *B = k->in[1] + offb +
			 (panels ? (n0 / SK_PANEL) * ldb : tb ? n0 * ldb : n0);
	float *C = k->out + offc + m0 * ldc + n0;
	/* the epilogue's operands: bias per row or column, residual */
	const float *bias = k->in[2];
	const float *brow = bias && p[23] == 1 ? bias + offbias + m0 : NULL;
	const float *bcol = bias && p[23] == 2 ? bias + offbias + n0 : NULL;
	const float *res = k->in[3] ? k->in[3] + offc + m0 * ldc + n0 : NULL;
	int act = (int)p[SKP_ACT], epi = brow || bcol || res || act;
	SK_POLL(ctx);
	if (K > 0) {
		/* the transposed product computes C's tile transposed, T = B^T
		 * A^T (nl x ml), into the unit's scratch: its rows are C's
		 * columns, its columns A's panels */
		int64_t rows = tprod ? nl : ml, cols = tprod ? ml : nl;
		float *T = tprod ? sk_scratch(ctx, nl * ml) : NULL;
		if (tprod && !T)
			return;
		int64_t sub = k->t[4] > 0 ? k->t[4] : rows, ksub = K;
		int64_t checks = sk_work_checks(k, ml, nl, K);
		if (checks > 1)
			/* a preemptible copy: about k->checks calls, over rows (at
			 * least 8 a call), then over the reduction (at least 64 a
			 * call: sk_gemm continues each element's chain, so the
			 * bits are those of one call; a block cut halfway runs
			 * again from its start). Splitting K, not the columns,
			 * keeps each call's walk over B as wide as the block's:
			 * a skinny product (a fully connected layer at batch 1)
			 * cut into narrow column strips walks every row of B
			 * once per strip, and its calls outlast the plan. */
			sk_check_split(checks, rows, 8, &sub, K, 64, &ksub);
		for (int64_t r = 0; r < rows; r += sub) {
			int64_t rl = SK_MIN(sub, rows - r);
			for (int64_t kk = 0; kk < K; kk += ksub) {
				if (r > 0 || kk > 0)
					SK_POLL(ctx);
				int64_t kc = SK_MIN(ksub, K - kk);
				if (tprod)
					/* B^T(i, k) = B[k * ldb + i]: B read as a
					 * transposed A; A^T's panels as B */
					sk_gemm_panels(1, rl, cols, kc, B + kk * ldb + r, ldb,
						       A + (m0 / SK_PANEL) * lda + kk * SK_PANEL, lda,
						       T + r * cols, cols, kk > 0);
				else if (apanels)
					sk_gemm_apanels(rl, cols, kc, A + kk * SK_PANEL, lda, m0 + r,
							B + kk * ldb, ldb, C + r * ldc, ldc, kk > 0);
				else if (panels)
					sk_gemm_panels(ta, rl, cols, kc,
						       A + (ta ? r + kk * lda : r * lda + kk), lda,
						       B + kk * SK_PANEL, ldb, C + r * ldc, ldc, kk > 0);
				else
					sk_gemm(ta, tb, rl, cols, kc,
						A + (ta ? r + kk * lda : r * lda + kk), lda,
						B + (tb ? kk : kk * ldb), ldb, C + r * ldc, ldc, kk > 0);
			}
		}
		if (tprod) {
#if defined(__x86_64__) && defined(__GNUC__)
			if (sk_gemm_isa() == SK_ISA_AVX512) {
				/* the epilogue on the way where it is gemm_epi_1's
				 * and comes right after (no alpha) */
				int fused = k->f[0] == 1.0f && sk_act_512_has(act);
				transpose_epi_512(T, ml, nl, C, ldc, epi && fused, brow, bcol, res, ldc, act,
						  k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
				if (epi && fused)
					return;
			} else
#endif
				transpose_tile(T, ml, nl, C, ldc);
		}
		if (k->f[0] != 1.0f)
			for (int64_t r = 0; r < ml; r++)
				for (int64_t c = 0; c < nl; c++)
					C[r * ldc + c] *= k->f[0];
	} else {
		for (int64_t r = 0; r < ml; r++)
			for (int64_t c = 0; c < nl; c++)
				C[r * ldc + c] = 0;
	}
	SK_POLL(ctx);
	if (epi)
		sk_gemm_epilogue(C, ml, nl, ldc, brow, bcol, res, ldc, act, k->f[SKF_ACT_A],
				 k->f[SKF_ACT_B]);
}
