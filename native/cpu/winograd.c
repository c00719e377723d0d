/*
 * winograd.c: Winograd F(2x2, 3x3) for 3x3 stride-1 dilation-1 ungrouped
 * convolutions (an SK_OP_CONV kernel with p[16] = 1; the compiler passes the
 * weights already transformed, U = G g G^T, each point's C x Cout matrix in
 * panels of SK_PANEL output channels: [16][ceil(Cout/SK_PANEL)][C][SK_PANEL]).
 * One block is one image, a run of whole tile rows (2 output rows per tile
 * row) and a run of output channels (whole panels): input transform of its
 * tiles into the unit's scratch (V: [Cin][16][T], so the 16 values of a
 * tile land close together), 16 sgemm calls M[e] = V[e]^T U[e] with the
 * tiles as rows (M: [T][16][channels], so a tile's 16 values of a channel
 * are 16 rows apart; the micro-kernel's vectors run along the output
 * channels, whole panels, where along the tiles a tile row's count of
 * them left the last panel part empty) with a preemption check between
 * them, then the output transform straight into the output rows and the
 * fused epilogue. A block writes only its own output rows and channels:
 * idempotent.
 */
#include "sluice_cpu.h"
#include "sk512.h"

#include <string.h>

/* gemm.c: sk_epilogue in one pass for bias, residual and ReLU / Clip */
void sk_gemm_epilogue(float *y, int64_t rows, int64_t cols, int64_t ldy,
		      const float *brow, const float *bcol, const float *res,
		      int64_t ldr, int act, float lo, float hi);

#define WINO_SCRATCH_MAX (1 << 19) /* floats of V + M per block */
#define WINO_MIN_TILES 64         /* tiles per block where blocks are few */
/* V's rows (a channel's values at one of the 16 points, one per tile)
 * are WINO_PAD floats longer than the block's tiles: the vector input
 * transform stores whole vectors, the lanes past a tile row landing on
 * the next row's (stored later) or on the padding. */
#define WINO_PAD 16

void sk_prep_wino(sk_kernel *k, int units);
void sk_block_wino(const sk_kernel *k, int64_t blk, sk_ctx *ctx);

void sk_prep_wino(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	int64_t N = p[0], C = p[1], Cout = p[4], OH = p[14], OW = p[15];
	if (p[5] != 1 || p[6] != 3 || p[7] != 3 || p[8] != 1 || p[9] != 1 ||
	    p[12] != 1 || p[13] != 1) {
		k->grid = -1;
		return;
	}
	int64_t TH = SK_CDIV(OH, 2), TW = SK_CDIV(OW, 2);
	/* tile rows per block: at least 256 tiles per sgemm where the image
	 * has them, within the scratch's bound */
	int64_t cap = SK_MAX(WINO_SCRATCH_MAX / (16 * (C + Cout) * TW), 1);
	int64_t rows = SK_MIN(SK_MIN(TH, cap), SK_CDIV(256, TW));
	/* at least 4 blocks per unit: fewer tile rows per block, but not
	 * below 64 tiles (each of the 16 sgemms has one row per tile: few
	 * rows stream the weights for little work) ... */
	int64_t want = 4 * (int64_t)units;
	int64_t rmin = SK_MIN(rows, SK_CDIV(WINO_MIN_TILES, TW));
	while (rows > rmin && N * SK_CDIV(TH, rows) < want)
		rows--;
	int64_t rtiles = SK_CDIV(TH, rows);
	/* ... then split the output channels at panels, to 2 blocks per
	 * unit: every channel tile repeats the input transform (at 14x14,
	 * 4 blocks per unit ran 1.2x as long as 2) */
	int64_t mt = Cout;
	want = 2 * (int64_t)units;
	if (N * rtiles < want) {
		mt = SK_CDIV(Cout, SK_CDIV(want, N * rtiles));
		mt = SK_MIN(SK_CDIV(mt, SK_PANEL) * SK_PANEL, Cout);
	}
	k->t[0] = rows;
	k->t[1] = rtiles;
	k->t[2] = mt;
	k->t[3] = SK_CDIV(Cout, mt);
	k->grid = N * rtiles * k->t[3];
	k->scratch = 16 * (C * (rows * TW + WINO_PAD) + mt * rows * TW);
}

/* input transform of tile rows [th0, th0+tr) of one image: V[c][e][t],
 * a row of V ldv >= tr * TW floats */
SK_MV static void wino_in(const float *x, int64_t C, int64_t H, int64_t W,
			  int64_t PT, int64_t PL, int64_t th0, int64_t tr,
			  int64_t TW, float *V, int64_t ldv)
{
	for (int64_t c = 0; c < C; c++) {
		const float *xc = x + c * H * W;
		float *vc = V + c * 16 * ldv;
		for (int64_t r = 0; r < tr; r++) {
			int64_t ih0 = 2 * (th0 + r) - PT;
			int rin = ih0 >= 0 && ih0 + 3 < H;
			for (int64_t tw = 0; tw < TW; tw++) {
				int64_t iw0 = 2 * tw - PL;
				float d[4][4];
				if (rin && iw0 >= 0 && iw0 + 3 < W) {
					const float *s = xc + ih0 * W + iw0;
					for (int i = 0; i < 4; i++)
						for (int j = 0; j < 4; j++)
							d[i][j] = s[i * W + j];
				} else {
					for (int i = 0; i < 4; i++) {
						int64_t ih = ih0 + i;
						for (int j = 0; j < 4; j++) {
							int64_t iw = iw0 + j;
							d[i][j] = (ih >= 0 && ih < H && iw >= 0 && iw < W)
									  ? xc[ih * W + iw]
									  : 0.0f;
						}
					}
				}
				/* B^T d */
				float b[4][4];
				for (int j = 0; j < 4; j++) {
					b[0][j] = d[0][j] - d[2][j];
					b[1][j] = d[1][j] + d[2][j];
					b[2][j] = d[2][j] - d[1][j];
					b[3][j] = d[1][j] - d[3][j];
				}
				/* (B^T d) B */
				float *v = vc + r * TW + tw;
				for (int i = 0; i < 4; i++) {
					v[(i * 4 + 0) * ldv] = b[i][0] - b[i][2];
					v[(i * 4 + 1) * ldv] = b[i][1] + b[i][2];
					v[(i * 4 + 2) * ldv] = b[i][2] - b[i][1];
					v[(i * 4 + 3) * ldv] = b[i][1] - b[i][3];
				}
			}
		}
	}
}

/* output transform: Y = A^T m A of each tile (M[t][e][oc]) into output
 * rows oh0.. of channels 0..Cout of y */
SK_MV static void wino_out(const float *M, int64_t Cout, int64_t tr, int64_t TW, int64_t OH,
			   int64_t OW, int64_t oh0, float *y, int64_t OHW)
{
	for (int64_t oc = 0; oc < Cout; oc++) {
		float *yo = y + oc * OHW;
		for (int64_t r = 0; r < tr; r++) {
			int64_t oh = oh0 + 2 * r;
			float *y0 = yo + oh * OW;
			float *y1 = y0 + OW;
			int two = oh + 1 < OH;
			for (int64_t tw = 0; tw < TW; tw++) {
				const float *m = M + (r * TW + tw) * 16 * Cout + oc;
				float a[4][4];
				for (int e = 0; e < 16; e++)
					a[e >> 2][e & 3] = m[e * Cout];
				/* A^T m: two rows */
				float s0[4], s1[4];
				for (int j = 0; j < 4; j++) {
					s0[j] = a[0][j] + a[1][j] + a[2][j];
					s1[j] = a[1][j] - a[2][j] - a[3][j];
				}
				int64_t ow = 2 * tw;
				y0[ow] = s0[0] + s0[1] + s0[2];
				if (ow + 1 < OW)
					y0[ow + 1] = s0[1] - s0[2] - s0[3];
				if (two) {
					y1[ow] = s1[0] + s1[1] + s1[2];
					if (ow + 1 < OW)
						y1[ow + 1] = s1[1] - s1[2] - s1[3];
				}
			}
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#define WINO_512 __attribute__((target("avx512f")))

/* wino_in_512 is wino_in on 16 tiles of a tile row a vector: lane l is
 * tile tw0 + l, whose columns 2(tw0 + l) - PL + j, j = 0..3, are the
 * even and odd floats of two pairs of vectors (loaded masked to the
 * row, zero outside it); the same additions in the same order as
 * wino_in, so the same bits. */
WINO_512 static void wino_in_512(const float *x, int64_t C, int64_t H, int64_t W,
				 int64_t PT, int64_t PL, int64_t th0, int64_t tr,
				 int64_t TW, float *V, int64_t ldv)
{
	const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
	/* the input rows the block reads, a channel's run of them: the next
	 * channel's are prefetched while this one's are transformed (a run
	 * starts a plane away, past the hardware prefetchers' reach) */
	int64_t ih_lo = SK_MAX(2 * th0 - PT, 0), ih_hi = SK_MIN(2 * (th0 + tr) - PT + 2, H);
	int64_t run = ih_hi > ih_lo ? (ih_hi - ih_lo) * W : 0;
	for (int64_t c = 0; c < C; c++) {
		const float *xc = x + c * H * W;
		float *vc = V + c * 16 * ldv;
		if (c + 1 < C)
			for (int64_t o = 0; o < run; o += 16)
				_mm_prefetch((const char *)(xc + H * W + ih_lo * W + o), _MM_HINT_T0);
		/* groups of 16 tiles, the last (partial) one first: its
		 * lanes past the row land on the next tile row's first
		 * group, stored after them */
		for (int64_t tw0 = (TW - 1) / 16 * 16; tw0 >= 0; tw0 -= 16) {
			/* columns 2 tw - PL + j of the group's 16 tiles: two
			 * pairs of vectors, loaded masked to the row (a row
			 * outside the image: no lane) */
			int64_t base = 2 * tw0 - PL;
			__mmask16 m0 = sk_lanes16(base, W), m1 = sk_lanes16(base + 16, W);
			__mmask16 m2 = sk_lanes16(base + 2, W), m3 = sk_lanes16(base + 18, W);
			for (int64_t r = 0; r < tr; r++) {
				int64_t ih0 = 2 * (th0 + r) - PT;
				__m512 d[4][4];
#pragma GCC unroll 4
				for (int i = 0; i < 4; i++) {
					int64_t ih = ih0 + i;
					__mmask16 in = ih >= 0 && ih < H ? 0xffff : 0;
					const float *s = xc + ih * W + base;
					__m512 a0 = _mm512_maskz_loadu_ps(m0 & in, s);
					__m512 a1 = _mm512_maskz_loadu_ps(m1 & in, s + 16);
					__m512 a2 = _mm512_maskz_loadu_ps(m2 & in, s + 2);
					__m512 a3 = _mm512_maskz_loadu_ps(m3 & in, s + 18);
					d[i][0] = _mm512_permutex2var_ps(a0, even, a1);
					d[i][1] = _mm512_permutex2var_ps(a0, odd, a1);
					d[i][2] = _mm512_permutex2var_ps(a2, even, a3);
					d[i][3] = _mm512_permutex2var_ps(a2, odd, a3);
				}
				__m512 b[4][4];
#pragma GCC unroll 4
				for (int j = 0; j < 4; j++) {
					b[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
					b[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
					b[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
					b[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
				}
				/* whole vectors: lanes past the tile row land on the
				 * next row's first tiles (stored after these) or on
				 * the row's padding (WINO_PAD) */
				float *v = vc + r * TW + tw0;
#pragma GCC unroll 4
				for (int i = 0; i < 4; i++) {
					_mm512_storeu_ps(v + (i * 4 + 0) * ldv, _mm512_sub_ps(b[i][0], b[i][2]));
					_mm512_storeu_ps(v + (i * 4 + 1) * ldv, _mm512_add_ps(b[i][1], b[i][2]));
					_mm512_storeu_ps(v + (i * 4 + 2) * ldv, _mm512_sub_ps(b[i][2], b[i][1]));
					_mm512_storeu_ps(v + (i * 4 + 3) * ldv, _mm512_sub_ps(b[i][1], b[i][3]));
				}
			}
		}
	}
}

/* wino_out_512 is wino_out on 16 output channels a vector: 8 tiles of a
 * tile row at a time, each tile's 2x2 outputs computed across the
 * channels, then each output row's 16 values (8 tiles, 2 columns each)
 * transposed into one vector per channel; where epi is set the epilogue
 * (bias, residual res with the output's layout, then none, ReLU or Clip,
 * as gemm_epi_1) is applied on the way to the store. Same additions in
 * the same order as wino_out and gemm_epi_1, so the same bits. */
WINO_512 static void wino_out_512(const float *M, int64_t Cout, int64_t tr, int64_t TW,
				  int64_t OH, int64_t OW, int64_t oh0, float *y, int64_t OHW, int epi,
				  const float *bias, const float *res, int act, float lo, float hi)
{
	const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi), zero = _mm512_setzero_ps();
	for (int64_t g = 0; g < Cout; g += 16) {
		int64_t nv = SK_MIN(16, Cout - g);
		__mmask16 cm = sk_lanes16(0, nv);
		for (int64_t r = 0; r < tr; r++) {
			int64_t oh = oh0 + 2 * r;
			int rows = oh + 1 < OH ? 2 : 1;
			for (int64_t tw0 = 0; tw0 < TW; tw0 += 8) {
				int64_t nt = SK_MIN(8, TW - tw0);
				/* o[i][2t + j]: output (i, j) of tile tw0 + t */
				__m512 o[2][16];
				for (int64_t t = 0; t < 8; t++) {
					if (t >= nt) {
						o[0][2 * t] = o[0][2 * t + 1] = zero;
						o[1][2 * t] = o[1][2 * t + 1] = zero;
						continue;
					}
					const float *m = M + (r * TW + tw0 + t) * 16 * Cout + g;
					__m512 a[4][4];
					for (int e = 0; e < 16; e++)
						a[e >> 2][e & 3] = _mm512_maskz_loadu_ps(cm, m + e * Cout);
					__m512 s0[4], s1[4];
					for (int j = 0; j < 4; j++) {
						s0[j] = _mm512_add_ps(_mm512_add_ps(a[0][j], a[1][j]), a[2][j]);
						s1[j] = _mm512_sub_ps(_mm512_sub_ps(a[1][j], a[2][j]), a[3][j]);
					}
					o[0][2 * t] = _mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]);
					o[0][2 * t + 1] = _mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3]);
					o[1][2 * t] = _mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]);
					o[1][2 * t + 1] = _mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3]);
				}
				int64_t ow = 2 * tw0;
				__mmask16 km = sk_lanes16(ow, OW);
				for (int i = 0; i < rows; i++) {
					/* o[i][l]: channel g + l's 16 outputs from ow */
					sk_transpose16(o[i]);
					for (int64_t l = 0; l < nv; l++) {
						int64_t at = (g + l) * OHW + (oh + i) * OW + ow;
						__m512 v = o[i][l];
						if (epi) {
							v = _mm512_add_ps(v, _mm512_set1_ps(bias ? bias[g + l] : 0.0f));
							if (res)
								v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, res + at));
							v = sk_act_512(v, act, vlo, vhi);
						}
						_mm512_mask_storeu_ps(y + at, km, v);
					}
				}
			}
		}
	}
}
#endif

void sk_block_wino(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], Cout = p[4];
	int64_t OH = p[14], OW = p[15], OHW = OH * OW;
	int64_t TW = SK_CDIV(OW, 2), TH = SK_CDIV(OH, 2);
	int64_t rows = k->t[0], rtiles = k->t[1], mt = k->t[2], mtiles = k->t[3];
	int64_t mi = blk % mtiles, ri = (blk / mtiles) % rtiles;
	int64_t n = blk / (mtiles * rtiles), th0 = ri * rows;
	int64_t m0 = mi * mt, ml = SK_MIN(mt, Cout - m0);
	int64_t tr = SK_MIN(rows, TH - th0), T = tr * TW;
	int64_t ldv = T + WINO_PAD;
	float *V = sk_scratch(ctx, 16 * (C * ldv + ml * T));
	if (!V)
		return;
	float *M = V + 16 * C * ldv;
	int wide = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	wide = sk_gemm_isa() == SK_ISA_AVX512;
	if (wide)
		wino_in_512(k->in[0] + n * C * H * W, C, H, W, p[10], p[11], th0, tr, TW, V, ldv);
#endif
	if (!wide)
		wino_in(k->in[0] + n * C * H * W, C, H, W, p[10], p[11], th0, tr, TW, V, ldv);
	/* point e: M[t][e][oc] = sum over c of V[c][e][t] U[e](c, m0 + oc),
	 * U[e]'s panels C x SK_PANEL floats each */
	int64_t np = SK_CDIV(Cout, SK_PANEL);
	for (int e = 0; e < 16; e++) {
		SK_POLL(ctx);
		sk_gemm_panels(1, T, ml, C, V + e * ldv, 16 * ldv,
			       k->in[1] + (e * np + m0 / SK_PANEL) * C * SK_PANEL, C * SK_PANEL,
			       M + e * ml, 16 * ml, 0);
	}
	SK_POLL(ctx);
	int64_t oh0 = 2 * th0, oh1 = SK_MIN(OH, 2 * (th0 + tr));
	float *y = k->out + (n * Cout + m0) * OHW;
	const float *bias = k->in[2] ? k->in[2] + m0 : NULL;
	const float *res = k->in[3] ? k->in[3] + (n * Cout + m0) * OHW : NULL;
	int act = (int)p[SKP_ACT], epi = bias || res || act;
	/* the vector output transform applies the common epilogues on the
	 * way (gemm_epi_1's), others run after it as before */
	int fused = sk_act_512_has(act);
#if defined(__x86_64__) && defined(__GNUC__)
	if (wide)
		wino_out_512(M, ml, tr, TW, OH, OW, oh0, y, OHW, epi && fused, bias, res, act,
			     k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
#endif
	if (!wide)
		wino_out(M, ml, tr, TW, OH, OW, oh0, y, OHW);
	if (epi && !(wide && fused))
		sk_gemm_epilogue(y + oh0 * OW, ml, (oh1 - oh0) * OW, OHW, bias, NULL,
				 res ? res + oh0 * OW : NULL, OHW, act, k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
}
