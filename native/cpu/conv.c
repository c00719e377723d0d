/*
 * conv.c: convolution kernels.
 *   CONV    im2col of one output tile into the unit's scratch, then one
 *           sgemm per block (the weights stay whole; tiles split the output
 *           positions, and output channels only when the positions are few);
 *   IM2COL  im2col into a workspace (for small outputs: one im2col feeds a
 *           GEMM kernel tiled over channels);
 *   DWCONV  depthwise (and channel-multiplier) convolution, direct;
 *   COL2IM  the gather form of col2im that finishes ConvTranspose.
 * Params: see sluice_cpu.h (0 N 1 C 2 H 3 W 4 Cout 5 G 6 KH 7 KW 8 SH 9 SW
 * 10 PT 11 PL 12 DH 13 DW 14 OH 15 OW).
 */
#include "sluice_cpu.h"

/* gemm.c: sk_epilogue in one pass for bias, residual and ReLU / Clip (also
 * the fused pointwise producer's, DWCONV p[SKP_DWP]) */
void sk_gemm_epilogue(float *y, int64_t rows, int64_t cols, int64_t ldy,
		      const float *brow, const float *bcol, const float *res,
		      int64_t ldr, int act, float lo, float hi);
#include <string.h>

#define CONV_BLOCK_MAX 8e6
#define CONV_SUB_MAX 3.2e7 /* flops per sgemm call inside a block */

/* winograd.c: p[16] = 1 selects Winograd F(2x2, 3x3) */
void sk_prep_wino(sk_kernel *k, int units);
void sk_block_wino(const sk_kernel *k, int64_t blk, sk_ctx *ctx);

static int conv_params_ok(const sk_kernel *k)
{
	const int64_t *p = k->p;
	for (int i = 0; i < 16; i++)
		if (p[i] < 0 && !(k->op == SK_OP_COL2IM && (i == 10 || i == 11)))
			return 0;
	return p[0] > 0 && p[1] > 0 && p[2] > 0 && p[3] > 0 && p[4] > 0 &&
	       p[5] > 0 && p[6] > 0 && p[7] > 0 && p[8] > 0 && p[9] > 0 &&
	       p[12] > 0 && p[13] > 0 && p[14] > 0 && p[15] > 0 &&
	       p[1] % p[5] == 0 && p[4] % p[5] == 0;
}

/* im2col of output positions [p0, p0+pl) of one group: col is
 * (Cg*KH*KW) x pl with leading dimension ldc. The valid output columns of
 * each kernel column kw form one range, so rows copy with plain loops
 * (short rows, 7 to 28 wide, are too short for memcpy calls). */
#pragma GCC push_options
#pragma GCC optimize("no-tree-loop-distribute-patterns")
SK_MV void sk_im2col_tile(const float *x, int64_t Cg, int64_t H, int64_t W,
			      int64_t KH, int64_t KW, int64_t SH, int64_t SW,
			      int64_t PT, int64_t PL, int64_t DH, int64_t DW,
			      int64_t OW, int64_t p0, int64_t pl, float *col,
			      int64_t ldc, float pad)
{
	/* the tile's first output position: rows then advance one by one
	 * (a division per row segment cost more than the copy on 7x7
	 * images) */
	int64_t oh_0 = p0 / OW, ow_0 = p0 % OW;
	for (int64_t kw = 0; kw < KW; kw++) {
		/* output columns ow with 0 <= ow*SW - PL + kw*DW < W */
		int64_t off = kw * DW - PL;
		int64_t lo = off >= 0 ? 0 : SK_CDIV(-off, SW);
		int64_t hi = (W - 1 - off) < 0 ? 0 : (W - 1 - off) / SW + 1;
		hi = SK_MIN(hi, OW);
		lo = SK_MIN(lo, hi);
		for (int64_t c = 0; c < Cg; c++) {
			const float *xc = x + c * H * W;
			for (int64_t kh = 0; kh < KH; kh++) {
				float *dst = col + ((c * KH + kh) * KW + kw) * ldc;
				int64_t p = p0, oh = oh_0, ow0 = ow_0;
				for (; p < p0 + pl; oh++, ow0 = 0) {
					int64_t ow1 = SK_MIN(OW, ow0 + (p0 + pl - p));
					int64_t ih = oh * SH - PT + kh * DH;
					float *d = dst + (p - p0) - ow0;
					if (ih < 0 || ih >= H) {
						for (int64_t ow = ow0; ow < ow1; ow++)
							d[ow] = pad;
					} else {
						const float *xr = xc + ih * W + off;
						int64_t a = SK_MAX(ow0, lo), b = SK_MIN(ow1, hi);
						for (int64_t ow = ow0; ow < SK_MIN(a, ow1); ow++)
							d[ow] = pad;
						if (SW == 1)
							for (int64_t ow = a; ow < b; ow++)
								d[ow] = xr[ow];
						else if (SW == 2)
							for (int64_t ow = a; ow < b; ow++)
								d[ow] = xr[2 * ow];
						else
							for (int64_t ow = a; ow < b; ow++)
								d[ow] = xr[ow * SW];
						for (int64_t ow = SK_MAX(b, ow0); ow < ow1; ow++)
							d[ow] = pad;
					}
					p += ow1 - ow0;
				}
			}
		}
	}
}
#pragma GCC pop_options

/* ---- CONV ------------------------------------------------------------ */

void sk_prep_conv(sk_kernel *k, int units)
{
	if (!conv_params_ok(k)) {
		k->grid = -1;
		return;
	}
	if (k->p[16] == 1) {
		sk_prep_wino(k, units);
		return;
	}
	const int64_t *p = k->p;
	int64_t N = p[0], C = p[1], G = p[5], Cout = p[4];
	int64_t Kd = C / G * p[6] * p[7], Mg = Cout / G, OHW = p[14] * p[15];
	double total = 2.0 * (double)Mg * (double)Kd * (double)OHW * (double)(N * G);
	double want = total / CONV_BLOCK_MAX;
	if (want < units * 4)
		want = units * 4;
	int64_t per = (int64_t)(want / (double)(N * G) + 0.999);
	if (per < 1)
		per = 1;
	int64_t ht = SK_CDIV(OHW, per);
	/* the im2col tile (Kd x ht) and the output tile (Mg x ht) stay in cache */
	int64_t cap = SK_MIN(65536 / SK_MAX(Kd, 1), 32768 / SK_MAX(Mg, 1));
	if (ht > cap)
		ht = cap;
	if (ht < 64)
		ht = 64;
	ht = SK_CDIV(ht, 16) * 16;
	if (ht > OHW)
		ht = OHW;
	int64_t htiles = SK_CDIV(OHW, ht);
	int64_t mt = Mg;
	/* split output channels only when the position tiles cannot keep the
	 * units busy: every channel tile repeats the im2col */
	if (N * G * htiles < 4 * (int64_t)units) {
		int64_t mtiles = SK_CDIV(4 * (int64_t)units, N * G * htiles);
		mt = SK_CDIV(Mg, mtiles);
		if (mt < 32)
			mt = 32;
		mt = SK_CDIV(mt, 8) * 8;
		if (mt > Mg)
			mt = Mg;
	}
	k->t[0] = ht;
	k->t[1] = htiles;
	k->t[2] = mt;
	k->t[3] = SK_CDIV(Mg, mt);
	k->grid = N * G * htiles * k->t[3];
	k->scratch = Kd * ht;
}

void sk_block_conv(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	if (k->p[16] == 1) {
		sk_block_wino(k, blk, ctx);
		return;
	}
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], Cout = p[4], G = p[5];
	int64_t KH = p[6], KW = p[7], OW = p[15], OHW = p[14] * p[15];
	int64_t Cg = C / G, Mg = Cout / G, Kd = Cg * KH * KW;
	int64_t ht = k->t[0], htiles = k->t[1], mt = k->t[2], mtiles = k->t[3];
	int64_t hi = blk % htiles;
	int64_t mi = (blk / htiles) % mtiles;
	int64_t g = (blk / (htiles * mtiles)) % G;
	int64_t n = blk / (htiles * mtiles * G);
	int64_t p0 = hi * ht, pl = SK_MIN(ht, OHW - p0);
	int64_t m0 = mi * mt, ml = SK_MIN(mt, Mg - m0);
	float *col = sk_scratch(ctx, Kd * pl);
	if (!col)
		return;
	sk_im2col_tile(k->in[0] + (n * C + g * Cg) * H * W, Cg, H, W, KH, KW, p[8],
		    p[9], p[10], p[11], p[12], p[13], OW, p0, pl, col, pl, 0.0f);
	SK_POLL(ctx);
	int64_t oc0 = g * Mg + m0;
	float *y = k->out + (n * Cout + oc0) * OHW + p0;
	/* heavy tiles run as several sgemm calls over output channels, so the
	 * preemption flag is polled at least every CONV_SUB_MAX flops */
	int64_t msub = (int64_t)(CONV_SUB_MAX / (2.0 * (double)pl * (double)Kd));
	msub = SK_MAX(SK_CDIV(msub, 16) * 16, 16);
	int64_t ksub = Kd;
	int64_t checks = sk_work_checks(k, ml, pl, Kd);
	if (checks > 1)
		/* a preemptible copy: about k->checks calls, over output
		 * channels (at least 16 a call), then over the reduction
		 * (sk_gemm continues each element's chain, so the bits are those
		 * of one call; a block cut halfway runs again from its start) */
		sk_check_split(checks, ml, 16, &msub, Kd, 64, &ksub);
	for (int64_t mm = 0; mm < ml; mm += msub) {
		int64_t mc = SK_MIN(msub, ml - mm);
		for (int64_t kk = 0; kk < Kd; kk += ksub) {
			if (mm > 0 || kk > 0)
				SK_POLL(ctx);
			int64_t kc = SK_MIN(ksub, Kd - kk);
			if (p[SKP_CONV_WPANELS])
				/* the weights stored transposed in panels */
				sk_gemm_apanels(mc, pl, kc, k->in[1] + kk * SK_PANEL, Kd * SK_PANEL,
						oc0 + mm, col + kk * pl, pl, y + mm * OHW, OHW, kk > 0);
			else
				sk_gemm(0, 0, mc, pl, kc, k->in[1] + (oc0 + mm) * Kd + kk, Kd,
					col + kk * pl, pl, y + mm * OHW, OHW, kk > 0);
		}
	}
	SK_POLL(ctx);
	const float *bias = k->in[2] ? k->in[2] + oc0 : NULL;
	const float *res = k->in[3] ? k->in[3] + (n * Cout + oc0) * OHW + p0 : NULL;
	if (bias || res || p[SKP_ACT])
		sk_gemm_epilogue(y, ml, pl, OHW, bias, NULL, res, OHW, (int)p[SKP_ACT],
				 k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
}

/* ---- IM2COL ------------------------------------------------------------ */

void sk_prep_im2col(sk_kernel *k, int units)
{
	if (!conv_params_ok(k)) {
		k->grid = -1;
		return;
	}
	const int64_t *p = k->p;
	int64_t rows = p[1] / p[5]; /* input channels per group */
	int64_t per = SK_CDIV(units * 4, p[0] * p[5]);
	int64_t ct = SK_CDIV(rows, per);
	if (ct < 1)
		ct = 1;
	k->t[0] = ct;
	k->t[1] = SK_CDIV(rows, ct);
	k->grid = p[0] * p[5] * k->t[1];
}

/* IM2COL_PLANE_MAX bounds the padded plane im2col_small copies a channel
 * into (floats, on the stack) */
#define IM2COL_PLANE_MAX 2048

/* im2col_small is sk_im2col_tile over whole images at stride S (1, or 2
 * both ways for windows of at least 2 x 2) without dilation where a
 * channel's plane, padded, is small (7x7 and 14x14 layers, and their
 * stride-2 producers): each channel is
 * first copied into S x S phase planes of its padded plane (phase (a, b)
 * holds the padded rows a, a + S, ... and columns b, b + S, ...; at
 * stride 1 the padded plane itself), so every row segment of col is one
 * run of a phase plane, copied 16 floats at a time. A run's last copy
 * spills past the segment's end onto the next segment (or the next row
 * of col, stored next); the segments near col's end are copied exactly,
 * so nothing past its rows is written. The same values as
 * sk_im2col_tile. Returns 0 where the shape does not fit. */
static int im2col_small(const float *x, int64_t Cg, int64_t H, int64_t W, int64_t KH, int64_t KW,
			int64_t S, int64_t PT, int64_t PL, int64_t OH, int64_t OW, float *col,
			float pad)
{
	int64_t Hq = OH + (KH - 1) / S, Wq = OW + (KW - 1) / S, Q = Hq * Wq, OHW = OH * OW;
	/* at stride 2 a window narrower than 2 reads one phase of the four
	 * (a 1x1 stride-2 layer: building all four took 2.2-2.8x the direct
	 * copy's time) */
	if (S < 1 || S > 2 || (S == 2 && (KH < 2 || KW < 2)) || S * S * Q + 16 > IM2COL_PLANE_MAX)
		return 0;
	float P[IM2COL_PLANE_MAX];
	for (int64_t i = S * S * Q; i < S * S * Q + 16; i++)
		P[i] = pad;
	/* segments whose 16-float copies would pass col's end: exact */
	float *exact = col + Cg * KH * KW * OHW - SK_CDIV(OW, 16) * 16;
	for (int64_t c = 0; c < Cg; c++) {
		const float *xc = x + c * H * W;
		for (int64_t a = 0; a < S; a++)
			for (int64_t b = 0; b < S; b++) {
				float *pq = P + (a * S + b) * Q;
				for (int64_t r = 0; r < Hq; r++) {
					int64_t ih = r * S + a - PT;
					float *pr = pq + r * Wq;
					for (int64_t q = 0; q < Wq; q++) {
						int64_t iw = q * S + b - PL;
						pr[q] = ih >= 0 && ih < H && iw >= 0 && iw < W ? xc[ih * W + iw] : pad;
					}
				}
			}
		for (int64_t kh = 0; kh < KH; kh++)
			for (int64_t kw = 0; kw < KW; kw++) {
				float *d = col + ((c * KH + kh) * KW + kw) * OHW;
				const float *pq = P + ((kh % S) * S + kw % S) * Q + kw / S;
				for (int64_t oh = 0; oh < OH; oh++, d += OW) {
					const float *sp = pq + (oh + kh / S) * Wq;
					if (d > exact) {
						memcpy(d, sp, (size_t)OW * sizeof(float));
						continue;
					}
					for (int64_t j = 0; j < OW; j += 16)
						memcpy(d + j, sp + j, 16 * sizeof(float));
				}
			}
	}
	return 1;
}

void sk_block_im2col(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], G = p[5], KH = p[6], KW = p[7];
	int64_t OHW = p[14] * p[15], Cg = C / G, Kd = Cg * KH * KW;
	int64_t ct = k->t[0], ctiles = k->t[1];
	int64_t ci = blk % ctiles, ng = blk / ctiles;
	int64_t n = ng / G, g = ng % G;
	int64_t c0 = ci * ct, cl = SK_MIN(ct, Cg - c0);
	float *col = k->out + ng * Kd * OHW + c0 * KH * KW * OHW;
	/* a preemptible copy (k->checks > 1, or a work bound): channels in
	 * about k->checks pieces, or pieces of at most check_bytes of
	 * columns, with a check between them */
	int64_t pieces = k->checks;
	if (k->check_bytes > 0)
		pieces = SK_MAX(pieces, SK_CDIV(cl * KH * KW * OHW * 4, k->check_bytes));
	int64_t cs = pieces > 1 ? SK_MAX(SK_CDIV(cl, pieces), 1) : cl;
	for (int64_t c = 0; c < cl; c += cs) {
		if (c > 0)
			SK_POLL(ctx);
		if (p[8] == p[9] && p[12] == 1 && p[13] == 1 &&
		    im2col_small(k->in[0] + (n * C + g * Cg + c0 + c) * H * W, SK_MIN(cs, cl - c), H, W,
				 KH, KW, p[8], p[10], p[11], p[14], p[15], col + c * KH * KW * OHW,
				 k->f[0]))
			continue;
		sk_im2col_tile(k->in[0] + (n * C + g * Cg + c0 + c) * H * W, SK_MIN(cs, cl - c),
			    H, W, KH, KW, p[8], p[9], p[10], p[11], p[12], p[13], p[15], 0,
			    OHW, col + c * KH * KW * OHW, OHW, k->f[0]);
	}
}

/* ---- DWCONV ------------------------------------------------------------ */

/* The fused pointwise producer (p[20] = 1): channels computed together
 * (one micro-kernel row group) and the scratch aimed at for their band of
 * rows (floats), so that the band stays in the unit's L2 beside the
 * pointwise input's band. */
#define DWP_CH 12
#define DWP_BAND_FLOATS 65536
#define DWP_BAND_MIN 16

/* dwp_span is how many input rows one output row reads. */
static inline int64_t dwp_span(const int64_t *p) { return (p[6] - 1) * p[12] + 1; }

/* dwp_band_of is the most output rows a band whose input rows fit in
 * rows computes (at least 1, at most the image's). */
static int64_t dwp_band_of(const int64_t *p, int64_t rows)
{
	return SK_MIN(SK_MAX((rows - dwp_span(p)) / p[8] + 1, 1), p[14]);
}

/* dwp_band is how many output rows one band of a fused kernel computes:
 * its input rows (the pointwise output, DWP_CH channels of them) fill
 * about DWP_BAND_FLOATS, and with a bound on the work between checks
 * (check_flops), the band's pointwise product stays within it. */
static int64_t dwp_band(const sk_kernel *k)
{
	const int64_t *p = k->p;
	int64_t W = p[3], C0 = p[SKP_DWP_C0], span = dwp_span(p);
	int64_t rows = SK_MAX(DWP_BAND_FLOATS / (DWP_CH * W), span);
	if (k->check_flops > 0)
		rows = SK_MIN(rows, SK_MAX(k->check_flops / (2 * DWP_CH * W * SK_MAX(C0, 1)), span));
	return dwp_band_of(p, rows);
}

/* dwp_rows is the range [*i0, *i1) of input rows that output rows
 * [o0, o1) read (clipped to the image). */
static void dwp_rows(const int64_t *p, int64_t o0, int64_t o1, int64_t *i0, int64_t *i1)
{
	int64_t H = p[2], S = p[8], PT = p[10];
	*i0 = SK_MAX(o0 * S - PT, 0);
	*i1 = SK_MIN((o1 - 1) * S - PT + dwp_span(p), H);
	if (*i1 < *i0)
		*i1 = *i0;
}

/* dw_zero_row is the floats a depthwise block's scratch starts with: a
 * zero row, rounded up so that what follows it (the shifted integer
 * plane, or the fused producer's band) is 64-byte aligned. */
static inline int64_t dw_zero_row(const int64_t *p) { return SK_CDIV(p[3] + 16, 16) * 16; }

/* DW_CVEC_MAX_W is the widest input row the channel-vector path
 * (dw3x3_cvec_512) takes, DW_CVEC_MAX_FLOATS the most scratch it uses
 * (a group of 16 channels' input and output planes). */
#define DW_CVEC_MAX_W 32
/* on integers at stride 1, rows up to 128 wide where a group's planes fit
 * DW_CVEC_MAX_FLOATS: the plane path's passes that shift each input plane
 * and requantise each output plane cost more there than the transposes
 * (BenchmarkDepthwise's 144x56x56_s1_int8, one thread, the two limits
 * alternated 8 times: 3.01-4.36 ms against 3.62-5.72, against a control
 * layer both limits take alike at 0.36-0.61 and 0.37-0.68; MobileNetV2-
 * int8's 112x112 layer does not fit and stays on the plane path; at
 * stride 2 the path lost, 6.6-6.8% of that model against 5.3-5.6 for its
 * 112x112 stride-2 layer) */
#define DW_CVEC_MAX_W_INT 128
#define DW_CVEC_MAX_FLOATS (1 << 18)

int sk_dw_vector_width(void)
{
	return sk_gemm_isa() == SK_ISA_AVX512 ? DW_CVEC_MAX_W : 0;
}

static int dw_fast(const int64_t *p)
{
	return p[6] == 3 && p[7] == 3 && p[12] == 1 && p[13] == 1 && p[8] == p[9] &&
	       (p[8] == 1 || p[8] == 2);
}

/* dw_cvec_rows is the rows above and below the input that the
 * channel-vector path reads as zeros. */
static inline void dw_cvec_rows(const int64_t *p, int64_t *top, int64_t *bottom)
{
	*top = p[10];
	*bottom = SK_MAX((p[14] - 1) * p[8] - p[10] + 3 - p[2], 0);
}

/* dw_cvec_floats is the scratch the channel-vector path needs after the
 * zero row (a group's input planes and the output stage), or 0 where it
 * does not apply: a 3x3 depthwise layer (one output channel per input
 * channel, float or integer, not fused) with small planes. Its shape
 * alone decides; the block takes it where sgemm uses AVX-512. */
static int64_t dw_cvec_floats(const int64_t *p)
{
	if (!dw_fast(p) || p[16] < 0 || p[16] > 1 || p[SKP_DWP] != 0 || p[4] != p[1] ||
	    p[3] > (p[16] == 1 && p[8] == 1 ? DW_CVEC_MAX_W_INT : DW_CVEC_MAX_W))
		return 0;
	int64_t top, bottom;
	dw_cvec_rows(p, &top, &bottom);
	/* an output stored as bytes is staged as float planes where the
	 * input planes were (not the zero rows around them) */
	if ((p[SKP_STORE] & 3) && p[14] * p[15] > p[2] * p[3])
		return 0;
	int64_t need = (p[2] + top + bottom) * p[3] * 16 + p[14] * p[15] * 16;
	return need <= DW_CVEC_MAX_FLOATS ? need : 0;
}

/* dwi_shape reports whether a depthwise kernel is one dw3x3_int_512
 * computes: a 3x3 layer (stride 1 or 2) on an input stored as bytes whose
 * zero point is one of its values (*zx), not fused. */
static int dwi_shape(const sk_kernel *k, int32_t *zx)
{
	const int64_t *p = k->p;
	int sx = sk_store_in(k, 0);
	float z = k->f[0];
	if (!dw_fast(p) || p[16] != 1 || !sx || p[SKP_DWP] != 0 || !(z >= -128.0f && z <= 255.0f) ||
	    z != (float)(int32_t)z)
		return 0;
	*zx = (int32_t)z;
	return sx == SK_STORE_U8 ? *zx >= 0 : *zx <= 127;
}

void sk_prep_dwconv(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	int quant = p[16] == 1, requant = quant && p[17] == 1;
	int fused = p[SKP_DWP] == 1;
	/* bytes: the integer input, the requantised output within 8 bits */
	int64_t st = p[SKP_STORE];
	unsigned ops = (requant && p[18] >= -128 && p[19] <= 255 ? 1u : 0) | (quant ? 1u << 1 : 0);
	if (!conv_params_ok(k) || !sk_store_ok(st, ops) || p[5] != p[1] || p[16] < 0 || p[16] > 1 ||
	    (quant && (p[17] < 0 || p[17] > 1 || k->in[3] || p[SKP_ACT])) ||
	    (requant && (!k->in[4] || p[18] > p[19])) || p[SKP_DWP] < 0 || p[SKP_DWP] > 1 ||
	    (fused && (quant || p[4] != p[1] || p[SKP_DWP_C0] < 1 || !k->in[SKI_DWP_W] ||
		       p[SKP_DWP_PANELS] < 0 || p[SKP_DWP_PANELS] > 1 ||
		       (p[SKP_DWP_PANELS] && p[SKP_DWP_LDA] < p[SKP_DWP_C0] * SK_PANEL)))) {
		k->grid = -1;
		return;
	}
	int64_t N = p[0], Cout = p[4];
	double per_ch = (double)p[14] * p[15] * p[6] * p[7];
	if (fused)
		per_ch += (double)p[2] * p[3] * p[SKP_DWP_C0];
	/* at least ~64k MACs per block, at least 4 blocks per unit if possible */
	int64_t want = units * 4;
	int64_t byWork = (int64_t)(per_ch * Cout * N / 65536.0);
	if (want > byWork)
		want = byWork > 0 ? byWork : 1;
	int64_t per = SK_CDIV(want, N);
	/* fused, an image's blocks are bands of its rows first (then
	 * channel tiles): a band reads only its rows of the pointwise input,
	 * and its 12-channel calls reuse them from cache (against channel
	 * tiles alone: no difference measured at batch 1 on two units). A
	 * band is at least DWP_BAND_MIN output rows at stride 1 (half at
	 * stride 2): each recomputes the few input rows it shares with the
	 * next. */
	int64_t bands = 1;
	if (fused && per > 1)
		bands = SK_MAX(SK_MIN(per, p[14] / SK_MAX(DWP_BAND_MIN / p[8], 1)), 1);
	per = SK_CDIV(per, bands);
	int64_t ct = SK_CDIV(Cout, per);
	if (ct < 1)
		ct = 1;
	int64_t cvec = dw_cvec_floats(p);
	if (cvec)
		ct = SK_CDIV(ct, 16) * 16; /* whole groups of 16 channels */
	k->t[0] = ct;
	k->t[1] = SK_CDIV(Cout, ct);
	k->t[2] = bands;
	k->t[3] = SK_CDIV(p[14], bands);
	k->grid = N * bands * k->t[1];
	/* a zero row for the 3x3 path; on integers also the shifted input
	 * plane, 64-byte aligned after it; fused, the band of the pointwise
	 * output after it */
	/* and, for an output stored as bytes, the float output plane */
	k->scratch = dw_zero_row(p) + SK_MAX(quant ? p[2] * p[3] + ((st & 3) ? p[14] * p[15] : 0) : 0, cvec);
	if (fused) {
		/* the widest band's rows (an interior band's; a bound on the
		 * work between checks set later only narrows the bands) */
		int64_t rows = SK_MIN((dwp_band(k) - 1) * p[8] + dwp_span(p), p[2]);
		k->scratch = dw_zero_row(p) + DWP_CH * rows * p[3];
	}
}

SK_MV static void dw_plane(const float *x, const float *w, float *y, float bias,
			   const float *res, int64_t H, int64_t W, int64_t KH,
			   int64_t KW, int64_t SH, int64_t SW, int64_t PT,
			   int64_t PL, int64_t DH, int64_t DW, int64_t OH,
			   int64_t OW)
{
	for (int64_t oh = 0; oh < OH; oh++) {
		float *yr = y + oh * OW;
		for (int64_t ow = 0; ow < OW; ow++)
			yr[ow] = bias;
		for (int64_t kh = 0; kh < KH; kh++) {
			int64_t ih = oh * SH - PT + kh * DH;
			if (ih < 0 || ih >= H)
				continue;
			const float *xr = x + ih * W;
			for (int64_t kw = 0; kw < KW; kw++) {
				float wv = w[kh * KW + kw];
				int64_t off = kw * DW - PL;
				int64_t lo = off >= 0 ? 0 : SK_CDIV(-off, SW);
				int64_t hi = (W - 1 - off) < 0 ? 0 : (W - 1 - off) / SW + 1;
				if (hi > OW)
					hi = OW;
				if (SW == 1) {
					const float *xs = xr + off;
					for (int64_t ow = lo; ow < hi; ow++)
						yr[ow] += wv * xs[ow];
				} else if (SW == 2) {
					const float *xs = xr + off;
					for (int64_t ow = lo; ow < hi; ow++)
						yr[ow] += wv * xs[2 * ow];
				} else {
					for (int64_t ow = lo; ow < hi; ow++)
						yr[ow] += wv * xr[ow * SW + off];
				}
			}
		}
		if (res) {
			const float *rr = res + oh * OW;
			for (int64_t ow = 0; ow < OW; ow++)
				yr[ow] += rr[ow];
		}
	}
}

/* dw3x3_interior gives the output columns [*lo, *hi) of a 3x3 depthwise
 * row (W input columns, stride S, left padding PL, OW outputs) whose three
 * taps all lie inside the input; the others are border columns. Every 3x3
 * routine splits a row there, so each column sums in the same order. */
static inline void dw3x3_interior(int64_t W, int64_t S, int64_t PL, int64_t OW, int64_t *lo,
				  int64_t *hi)
{
	*lo = SK_CDIV(PL, S);
	*hi = (W - 3 + PL) < 0 ? 0 : (W - 3 + PL) / S + 1;
	if (*hi > OW)
		*hi = OW;
	if (*lo > *hi)
		*lo = *hi;
}

/* dw3x3_plane: 3x3 depthwise, dilation 1, stride 1 or 2, any padding. Rows
 * outside the input read a zero row, so the interior loop has no branches
 * and vectorizes; the border columns take the bounds-checked path. */
SK_MV static void dw3x3_plane(const float *x, const float *w, float *y, float bias,
			      const float *res, int64_t H, int64_t W, int64_t S,
			      int64_t PT, int64_t PL, int64_t OH, int64_t OW,
			      const float *zero)
{
	float w00 = w[0], w01 = w[1], w02 = w[2], w10 = w[3], w11 = w[4], w12 = w[5];
	float w20 = w[6], w21 = w[7], w22 = w[8];
	int64_t lo, hi;
	dw3x3_interior(W, S, PL, OW, &lo, &hi);
	for (int64_t oh = 0; oh < OH; oh++) {
		const float *r[3];
		for (int k = 0; k < 3; k++) {
			int64_t ih = oh * S - PT + k;
			r[k] = (ih >= 0 && ih < H) ? x + ih * W : zero;
		}
		const float *r0 = r[0] - PL, *r1 = r[1] - PL, *r2 = r[2] - PL;
		float *yr = y + oh * OW;
		if (S == 1) {
			for (int64_t ow = lo; ow < hi; ow++)
				yr[ow] = bias + w00 * r0[ow] + w01 * r0[ow + 1] + w02 * r0[ow + 2] +
					 w10 * r1[ow] + w11 * r1[ow + 1] + w12 * r1[ow + 2] +
					 w20 * r2[ow] + w21 * r2[ow + 1] + w22 * r2[ow + 2];
		} else {
			for (int64_t ow = lo; ow < hi; ow++) {
				int64_t i = 2 * ow;
				yr[ow] = bias + w00 * r0[i] + w01 * r0[i + 1] + w02 * r0[i + 2] +
					 w10 * r1[i] + w11 * r1[i + 1] + w12 * r1[i + 2] +
					 w20 * r2[i] + w21 * r2[i + 1] + w22 * r2[i + 2];
			}
		}
		for (int64_t ow = 0; ow < OW; ow++) {
			if (ow == lo && hi > lo) {
				ow = hi - 1;
				continue;
			}
			float acc = bias;
			for (int kw = 0; kw < 3; kw++) {
				int64_t iw = ow * S - PL + kw;
				if (iw < 0 || iw >= W)
					continue;
				acc += w[kw] * r[0][iw] + w[3 + kw] * r[1][iw] + w[6 + kw] * r[2][iw];
			}
			yr[ow] = acc;
		}
		if (res) {
			const float *rr = res + oh * OW;
			for (int64_t ow = 0; ow < OW; ow++)
				yr[ow] += rr[ow];
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include "sk512.h"
#define DW_512 __attribute__((target("avx512f")))
#define DW_CHUNKS 8 /* the widest output row dw3x3_plane_512 takes, in vectors */

/* dw_lanes is the mask of lanes i with 0 <= start + i < W. */
static inline __mmask16 dw_lanes(int64_t start, int64_t W)
{
	int64_t lo = SK_MAX(-start, 0), hi = SK_MIN(W - start, 16);
	if (hi <= lo)
		return 0;
	return (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* dw3x3_plane_512 is dw3x3_plane 16 output columns a vector, bit for bit:
 * interior columns sum bias + w00*x00 + w01*x01 + ... + w22*x22, border
 * columns bias + the column sums (w0j*x0j + w1j*x1j) + w2j*x2j of their
 * columns inside the input, as dw3x3_plane does; a vector holding both
 * computes both from the same taps and blends them. Taps outside the input
 * load as 0 (masked loads), stride 2 splits 32 input columns into even and
 * odd with permutes, and the row's last columns are stored masked, so that
 * the small planes of MobileNet-style networks (7 to 28 columns) need no
 * scalar remainder. zero: a zero row (rows outside the input). */
DW_512 static void dw3x3_plane_512(const float *x, const float *w, float *y, float bias,
				   const float *res, int64_t H, int64_t W, int64_t S, int64_t PT,
				   int64_t PL, int64_t OH, int64_t OW, const float *zero)
{
	int64_t lo, hi;
	dw3x3_interior(W, S, PL, OW, &lo, &hi);
	int64_t nc = SK_CDIV(OW, 16);
	/* per chunk: interior lanes, stored lanes, the three loads' lanes
	 * inside the row, and (stride 2) each tap column's lanes inside it */
	__mmask16 mi[DW_CHUNKS], ms[DW_CHUNKS], ml[DW_CHUNKS][3], mk[DW_CHUNKS][3];
	for (int64_t c = 0; c < nc; c++) {
		int64_t ow = 16 * c;
		ms[c] = dw_lanes(ow, OW);
		mi[c] = dw_lanes(ow - lo, hi - lo);
		for (int j = 0; j < 3; j++) {
			ml[c][j] = S == 1 ? dw_lanes(ow - PL + j, W) : dw_lanes(2 * ow - PL + 16 * j, W);
			mk[c][j] = 0;
			if (S == 2)
				for (int i = 0; i < 16; i++) {
					int64_t iw = 2 * (ow + i) - PL + j;
					if (iw >= 0 && iw < W)
						mk[c][j] |= (__mmask16)(1u << i);
				}
			else
				mk[c][j] = ml[c][j];
		}
	}
	__m512 wv[9], b = _mm512_set1_ps(bias);
	for (int i = 0; i < 9; i++)
		wv[i] = _mm512_set1_ps(w[i]);
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
					       28, 30);
	const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,
					      29, 31);
	const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
					       16);
	for (int64_t oh = 0; oh < OH; oh++) {
		const float *r[3];
		for (int kh = 0; kh < 3; kh++) {
			int64_t ih = oh * S - PT + kh;
			r[kh] = (ih >= 0 && ih < H) ? x + ih * W : zero;
		}
		float *yr = y + oh * OW;
		const float *rr = res ? res + oh * OW : NULL;
		for (int64_t c = 0; c < nc; c++) {
			int64_t ow = 16 * c;
			int full = mi[c] == 0xffff;
			__m512 t[3][3];
			for (int kh = 0; kh < 3; kh++) {
				const float *src = r[kh] + (S == 1 ? ow : 2 * ow) - PL;
				if (S == 1) {
					for (int j = 0; j < 3; j++)
						t[kh][j] = full ? _mm512_loadu_ps(src + j)
								: _mm512_maskz_loadu_ps(ml[c][j], src + j);
				} else {
					__m512 v0 = full ? _mm512_loadu_ps(src)
							 : _mm512_maskz_loadu_ps(ml[c][0], src);
					__m512 v1 = full ? _mm512_loadu_ps(src + 16)
							 : _mm512_maskz_loadu_ps(ml[c][1], src + 16);
					__m512 v2 = _mm512_maskz_loadu_ps(ml[c][2], src + 32);
					t[kh][0] = _mm512_permutex2var_ps(v0, even, v1);
					t[kh][1] = _mm512_permutex2var_ps(v0, odd, v1);
					t[kh][2] = _mm512_permutex2var_ps(t[kh][0], next, v2);
				}
			}
			__m512 a = b;
			for (int kh = 0; kh < 3; kh++)
				for (int j = 0; j < 3; j++)
					a = _mm512_add_ps(a, _mm512_mul_ps(wv[3 * kh + j], t[kh][j]));
			if (!full) {
				__m512 e = b;
				for (int j = 0; j < 3; j++) {
					__m512 col = _mm512_add_ps(_mm512_mul_ps(wv[j], t[0][j]),
								   _mm512_mul_ps(wv[3 + j], t[1][j]));
					col = _mm512_add_ps(col, _mm512_mul_ps(wv[6 + j], t[2][j]));
					e = _mm512_mask_add_ps(e, mk[c][j], e, col);
				}
				a = _mm512_mask_blend_ps(mi[c], e, a);
			}
			if (rr)
				a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(ms[c], rr + ow));
			_mm512_mask_storeu_ps(yr + ow, ms[c], a);
		}
	}
}

#define DW_GEN_CHUNKS 4 /* the widest output row dw_plane_512 takes, in vectors */

/* dw_plane_512 is dw_plane at stride 1, bit for bit, with an output row of
 * up to DW_GEN_CHUNKS vectors held in registers while every tap adds to
 * it: dw_plane makes one pass over the row per tap, which on the small
 * planes of 5x5 layers (PaddleOCR's detector: 20 to 40 columns) is mostly
 * loop overhead and scalar remainders. Each tap is one product and one
 * addition per column, in dw_plane's (kh, kw) order, added only to the
 * columns whose input column lies inside the row (a masked addition: a
 * skipped tap is not an added zero, so -0 and a NaN weight come out as in
 * dw_plane); rows outside the input are skipped, as there. */
DW_512 static void dw_plane_512(const float *x, const float *w, float *y, float bias,
				const float *res, int64_t H, int64_t W, int64_t KH, int64_t KW,
				int64_t PT, int64_t PL, int64_t DH, int64_t DW, int64_t OH,
				int64_t OW)
{
	int64_t nc = SK_CDIV(OW, 16);
	__mmask16 ms[DW_GEN_CHUNKS];
	for (int64_t c = 0; c < nc; c++)
		ms[c] = dw_lanes(16 * c, OW);
	const __m512 b = _mm512_set1_ps(bias);
	for (int64_t oh = 0; oh < OH; oh++) {
		__m512 acc[DW_GEN_CHUNKS];
		for (int64_t c = 0; c < nc; c++)
			acc[c] = b;
		for (int64_t kh = 0; kh < KH; kh++) {
			int64_t ih = oh - PT + kh * DH;
			if (ih < 0 || ih >= H)
				continue;
			const float *xr = x + ih * W;
			for (int64_t kw = 0; kw < KW; kw++) {
				__m512 wv = _mm512_set1_ps(w[kh * KW + kw]);
				int64_t off = kw * DW - PL;
				for (int64_t c = 0; c < nc; c++) {
					int64_t ow = 16 * c;
					__mmask16 m = ms[c] & dw_lanes(ow + off, W);
					__m512 xv = _mm512_maskz_loadu_ps(m, xr + ow + off);
					acc[c] = _mm512_mask_add_ps(acc[c], m, acc[c], _mm512_mul_ps(wv, xv));
				}
			}
		}
		float *yr = y + oh * OW;
		const float *rr = res ? res + oh * OW : NULL;
		for (int64_t c = 0; c < nc; c++) {
			__m512 a = acc[c];
			if (rr)
				a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(ms[c], rr + 16 * c));
			_mm512_mask_storeu_ps(yr + 16 * c, ms[c], a);
		}
	}
}

/* dw_load_bytes is nq (up to 16) 8-bit integers stored as code, as
 * floats; the lanes past nq are 0, as a masked load gives. */
DW_512 static inline __m512 dw_load_bytes(const uint8_t *b, int code, int nq)
{
	__m128i v;
	if (nq == 16) {
		v = _mm_loadu_si128((const __m128i *)b);
	} else {
		uint8_t t[16] = {0};
		memcpy(t, b, (size_t)nq);
		v = _mm_loadu_si128((const __m128i *)t);
	}
	return _mm512_cvtepi32_ps(code == SK_STORE_U8 ? _mm512_cvtepu8_epi32(v) : _mm512_cvtepi8_epi32(v));
}

/* dw3x3_cvec_512 is dw3x3_plane over channels [c0, c1) of image n, 16
 * channels a vector (one lane a channel) instead of 16 columns: on the
 * small planes of MobileNet's later layers (14x14, 7x7) a row is one
 * vector or less, and most of the plane routine's work is its per-row
 * and per-plane overhead. A group of 16 channels is transposed into T
 * (its H*W pixels of 16 channels, between zero rows), each output pixel
 * into O is its interior sum (bias + w00*x00 + w01*x01 + ... + w22*x22)
 * or, on border columns, bias plus the column sums of its columns inside
 * the input, in dw3x3_plane's order (rows outside the input read zeros,
 * as there), and O is transposed back into the channels' planes 16
 * pixels at a time. Bit for bit dw3x3_plane's, residual and activation
 * after it as there; on integers (p[16] = 1) the input less its zero
 * point and the output requantised, as the plane path's QUANT passes
 * compute them. */
DW_512 static void dw3x3_cvec_512(const sk_kernel *k, int64_t n, int64_t c0, int64_t c1,
				  float *T, float *O, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], S = p[8], PT = p[10], PL = p[11];
	int64_t OH = p[14], OW = p[15], HW = H * W, OHW = OH * OW, top, bottom;
	int64_t lo, hi;
	dw3x3_interior(W, S, PL, OW, &lo, &hi);
	dw_cvec_rows(p, &top, &bottom);
	memset(T, 0, (size_t)(top * W * 16) * 4);
	memset(T + (top + H) * W * 16, 0, (size_t)(bottom * W * 16) * 4);
	float *X = T + top * W * 16; /* row 0 */
	const __m512 zero = _mm512_setzero_ps();
	const __m512 zp = _mm512_set1_ps(k->f[0]);
	int quant = p[16] == 1, requant = quant && p[17] == 1;
	int sx = sk_store_in(k, 0), sy = sk_store_out(k);
	const __m512i lane9 = _mm512_mullo_epi32(
		_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
		_mm512_set1_epi32(9));
	/* channels between checks: 16, fewer under a bound on the work
	 * between checks (each output 9 products and sums) */
	int64_t step = 16;
	if (k->check_flops > 0)
		step = SK_MAX(SK_MIN(k->check_flops / (18 * SK_MAX(OHW, 1)), 16), 1);
	for (int64_t g = c0; g < c1; g += step) {
		SK_POLL(ctx);
		int nc = (int)SK_MIN(step, c1 - g);
		__mmask16 cm = (__mmask16)((1u << nc) - 1);
		const float *x = k->in[0] + (n * C + g) * HW;
		const uint8_t *xb = (const uint8_t *)k->in[0] + (n * C + g) * HW;
		for (int64_t q = 0; q < HW; q += 16) {
			int nq = (int)SK_MIN(16, HW - q);
			__mmask16 qm = (__mmask16)((1u << nq) - 1);
			__m512 v[16];
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++) {
				if (i >= nc)
					v[i] = zero;
				else if (sx)
					v[i] = dw_load_bytes(xb + i * HW + q, sx, nq);
				else
					v[i] = _mm512_maskz_loadu_ps(qm, x + i * HW + q);
				if (quant) /* QUANT's mode 1 with scale 1: (x - zp) * 1 is x - zp */
					v[i] = _mm512_sub_ps(v[i], zp);
			}
			sk_transpose16(v);
			/* a constant trip count: v stays in registers */
#pragma GCC unroll 16
			for (int j = 0; j < 16; j++)
				if (j < nq)
					_mm512_store_ps(X + (q + j) * 16, v[j]);
		}
		/* tap t of the group's channels, one lane a channel */
		__m512 w[9];
#pragma GCC unroll 9
		for (int t = 0; t < 9; t++)
			w[t] = _mm512_mask_i32gather_ps(zero, cm, lane9, k->in[1] + g * 9 + t, 4);
		__m512 b = k->in[2] ? _mm512_maskz_loadu_ps(cm, k->in[2] + g) : zero;
		for (int64_t oh = 0; oh < OH; oh++) {
			const float *r0 = X + (oh * S - PT) * W * 16;
			const float *r1 = r0 + W * 16, *r2 = r1 + W * 16;
			float *o = O + oh * OW * 16;
			for (int64_t ow = lo; ow < hi; ow++) {
				int64_t c = (ow * S - PL) * 16;
				__m512 a = b;
				a = _mm512_add_ps(a, _mm512_mul_ps(w[0], _mm512_load_ps(r0 + c)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[1], _mm512_load_ps(r0 + c + 16)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[2], _mm512_load_ps(r0 + c + 32)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[3], _mm512_load_ps(r1 + c)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[4], _mm512_load_ps(r1 + c + 16)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[5], _mm512_load_ps(r1 + c + 32)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[6], _mm512_load_ps(r2 + c)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[7], _mm512_load_ps(r2 + c + 16)));
				a = _mm512_add_ps(a, _mm512_mul_ps(w[8], _mm512_load_ps(r2 + c + 32)));
				_mm512_store_ps(o + ow * 16, a);
			}
			for (int64_t ow = 0; ow < OW; ow++) {
				if (ow == lo && hi > lo) {
					ow = hi - 1;
					continue;
				}
				__m512 a = b;
#pragma GCC unroll 3
				for (int kw = 0; kw < 3; kw++) {
					int64_t iw = ow * S - PL + kw;
					if (iw < 0 || iw >= W)
						continue;
					__m512 col = _mm512_add_ps(
						_mm512_mul_ps(w[kw], _mm512_load_ps(r0 + iw * 16)),
						_mm512_mul_ps(w[3 + kw], _mm512_load_ps(r1 + iw * 16)));
					col = _mm512_add_ps(col,
							    _mm512_mul_ps(w[6 + kw], _mm512_load_ps(r2 + iw * 16)));
					a = _mm512_add_ps(a, col);
				}
				_mm512_store_ps(o + ow * 16, a);
			}
		}
		/* an output stored as bytes is staged in X (dw_cvec_floats) */
		float *y = sy ? X : k->out + (n * C + g) * OHW;
		for (int64_t q = 0; q < OHW; q += 16) {
			int nq = (int)SK_MIN(16, OHW - q);
			__mmask16 qm = (__mmask16)((1u << nq) - 1);
			__m512 v[16];
#pragma GCC unroll 16
			for (int j = 0; j < 16; j++)
				v[j] = j < nq ? _mm512_load_ps(O + (q + j) * 16) : zero;
			sk_transpose16(v);
			const float *rr = k->in[3] ? k->in[3] + (n * C + g) * OHW + q : NULL;
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++) {
				if (i >= nc)
					break;
				__m512 a = v[i];
				if (rr)
					a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(qm, rr + i * OHW));
				_mm512_mask_storeu_ps(y + i * OHW + q, qm, a);
			}
		}
		if (requant) {
			for (int i = 0; i < nc; i++)
				sk_store_requant(y + i * OHW, OHW, k->in[4][g + i], k->f[1], (float)p[18],
						 (float)p[19], sy,
						 (void *)sk_elem(k->out, sy, (n * C + g + i) * OHW));
		} else if (p[SKP_ACT])
			sk_act_apply(y, nc * OHW, (int)p[SKP_ACT], k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
	}
}

/* ---- 3x3 depthwise on bytes in integers (VNNI) ------------------------- */

#define DWI_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")))

/* dwi_weights packs channel oc's taps for dw3x3_int_512, where it can
 * give the float path's bits: each weight an integer in [-128, 127] (the
 * weights less their zero point), the bias an integer, and every partial
 * sum of the float path within 2^24 (|bias| + 255 * the weights'
 * magnitudes: a shifted input lies in [-255, 255]), so that the float
 * path's sums are exact, in any order, and equal the integer sum. Row r's
 * taps go to the low three bytes of wr[r]; b0 is the bias less zu times
 * the weights' sum (zu: the zero point as the unsigned bytes read). */
static int dwi_weights(const float *w, float bias, int32_t zu, int32_t wr[3], int32_t *b0)
{
	if (!(fabsf(bias) <= 16777216.0f) || bias != (float)(int32_t)bias)
		return 0;
	double bound = fabs((double)bias);
	int32_t sum = 0;
	for (int r = 0; r < 3; r++) {
		uint32_t packed = 0;
		for (int j = 0; j < 3; j++) {
			float v = w[3 * r + j];
			if (!(v >= -128.0f && v <= 127.0f) || v != (float)(int32_t)v)
				return 0;
			int32_t iv = (int32_t)v;
			sum += iv;
			bound += 255.0 * (iv < 0 ? -iv : iv);
			packed |= (uint32_t)(uint8_t)(int8_t)iv << (8 * j);
		}
		wr[r] = (int32_t)packed;
	}
	if (bound > 16777216.0)
		return 0;
	*b0 = (int32_t)bias - zu * sum;
	return 1;
}

/* dwi_index is the byte permutation that makes a lane group of 16
 * output columns from 64 bytes of a tap row at stride 1 and 2: byte 4i + q
 * is tap q of column i, byte S*i + q (the fourth repeats the third: its
 * weight is 0). */
#define DWI_LANE(S, i) (S) * (i), (S) * (i) + 1, (S) * (i) + 2, (S) * (i) + 2
#define DWI_ROW(S)                                                                          \
	{DWI_LANE(S, 0),  DWI_LANE(S, 1),  DWI_LANE(S, 2),  DWI_LANE(S, 3),  DWI_LANE(S, 4),  \
	 DWI_LANE(S, 5),  DWI_LANE(S, 6),  DWI_LANE(S, 7),  DWI_LANE(S, 8),  DWI_LANE(S, 9),  \
	 DWI_LANE(S, 10), DWI_LANE(S, 11), DWI_LANE(S, 12), DWI_LANE(S, 13), DWI_LANE(S, 14), \
	 DWI_LANE(S, 15)}
static const uint8_t dwi_index[2][64] __attribute__((aligned(64))) = {DWI_ROW(1), DWI_ROW(2)};

/* dw3x3_int_512 computes output channel oc of image n of a 3x3 depthwise
 * layer whose input is stored as bytes (p[16] = 1), with the plane
 * path's bits (dwi_weights says when it can; it returns 0 otherwise and
 * computes nothing): 16 output columns a vector, each the integer sum
 * bias + sum w * (x - zx) by three vpdpbusd, one a tap row, whose four
 * bytes a lane are its three taps (a byte permutation of 64 bytes of the
 * row) and a zero weight. The bytes read are unsigned (signed bytes with
 * their top bit flipped, x + 128), and a tap outside the input reads the
 * zero point, so that the bias less zu times the weights' sum
 * (dwi_weights) makes each sum the float path's. The sum as a float is
 * requantised in registers (sk_store_requant's steps) and stored. */
DWI_512 static int dw3x3_int_512(const sk_kernel *k, int64_t n, int64_t oc, int32_t zx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], Cout = p[4], S = p[8], PT = p[10], PL = p[11];
	int64_t OH = p[14], OW = p[15];
	int sx = sk_store_in(k, 0), sy = sk_store_out(k);
	int32_t flip = sx == SK_STORE_S8 ? 0x80 : 0, zu = zx + (flip ? 128 : 0);
	int32_t wr[3], b0;
	if (!dwi_weights(k->in[1] + oc * 9, k->in[2] ? k->in[2][oc] : 0.0f, zu, wr, &b0))
		return 0;
	int64_t lo, hi;
	dw3x3_interior(W, S, PL, OW, &lo, &hi);
	int requant = p[17] == 1;
	const __m512 rs = _mm512_set1_ps(requant ? k->in[4][oc] : 1.0f), rz = _mm512_set1_ps(k->f[1]);
	const __m512 rlo = _mm512_set1_ps((float)p[18]), rhi = _mm512_set1_ps((float)p[19]);
	const __m512i fl = _mm512_set1_epi8((char)flip);
	const __m512i zraw = _mm512_set1_epi8((char)(uint8_t)zx);
	const __m512i idx = _mm512_loadu_si512(dwi_index[S - 1]);
	const uint8_t *xb = (const uint8_t *)k->in[0] + (n * C + oc / (Cout / C)) * H * W;
	/* the input tensor's bytes */
	const uint8_t *first = (const uint8_t *)k->in[0], *last = first + p[0] * C * H * W;
	const __m512i wv[3] = {_mm512_set1_epi32(wr[0]), _mm512_set1_epi32(wr[1]),
			       _mm512_set1_epi32(wr[2])};
	/* a tap row outside the input reads the zero point: zu times the
	 * row's weights' sum, added to the bias */
	int32_t wsum[3];
	for (int kh = 0; kh < 3; kh++)
		wsum[kh] = zu * ((int8_t)wr[kh] + (int8_t)(wr[kh] >> 8) + (int8_t)(wr[kh] >> 16));
	/* whole vectors: the chunks [f0, f1) whose taps all lie inside the row */
	int64_t f0 = SK_CDIV(lo, 16), f1 = hi >= 16 ? (hi - 16) / 16 + 1 : 0;
	for (int64_t oh = 0; oh < OH; oh++) {
		const uint8_t *r[3];
		int32_t bo = b0;
		int all = 1;
		for (int kh = 0; kh < 3; kh++) {
			int64_t ih = oh * S - PT + kh;
			r[kh] = ih >= 0 && ih < H ? xb + ih * W : NULL;
			if (!r[kh]) {
				bo += wsum[kh];
				all = 0;
			}
		}
		const __m512i bias = _mm512_set1_epi32(bo);
		int64_t at = ((n * Cout + oc) * OH + oh) * OW;
		for (int64_t c = 0; c * 16 < OW; c++) {
			int64_t ow = 16 * c, a0 = S * ow - PL;
			/* a whole chunk: every lane's taps inside the row */
			int whole = c >= f0 && c < f1;
			__m512i acc = bias;
			if (whole && all && r[2] + a0 + 64 <= last) {
				for (int j = 0; j < 3; j++) {
					__m512i v = _mm512_loadu_si512(r[j] + a0);
					if (flip)
						v = _mm512_xor_si512(v, fl);
					acc = _mm512_dpbusd_epi32(acc, _mm512_permutexvar_epi8(idx, v), wv[j]);
				}
			} else {
				/* the bytes outside the row read the zero point; a
				 * load inside the tensor needs no mask (with masked
				 * loads the small planes' layers ran 3x as long), one
				 * past it loads the row's bytes only */
				__mmask64 m = sk_bytes64(a0, W);
				for (int j = 0; j < 3; j++) {
					if (!r[j])
						continue;
					const uint8_t *s = r[j] + a0;
					__m512i v = s >= first && s + 64 <= last
							    ? _mm512_mask_blend_epi8(m, zraw, _mm512_loadu_si512(s))
							    : _mm512_mask_loadu_epi8(zraw, m, s);
					if (flip)
						v = _mm512_xor_si512(v, fl);
					acc = _mm512_dpbusd_epi32(acc, _mm512_permutexvar_epi8(idx, v), wv[j]);
				}
			}
			__m512 y = _mm512_cvtepi32_ps(acc);
			if (requant)
				y = sk_requant_512(y, rs, rz, rlo, rhi);
			if (sy) {
				__m128i b = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(y));
				uint8_t *yb = (uint8_t *)k->out + at + ow;
				if (ow + 16 <= OW)
					_mm_storeu_si128((__m128i *)yb, b);
				else
					_mm_mask_storeu_epi8(yb, dw_lanes(ow, OW), b);
			} else {
				_mm512_mask_storeu_ps(k->out + at + ow, dw_lanes(ow, OW), y);
			}
		}
	}
	return 1;
}
#endif

/* dw_path is the plane routine a depthwise kernel uses, the same for all
 * its channels and bands (chosen from its columns, stride and taps only,
 * so a band computes what the whole plane would). */
typedef struct {
	int wide, fast, wide_gen;
} dw_path;

/* dw_channel computes output rows of channel oc: OH rows into y (res: the
 * residual's rows, or NULL) from x, H input rows of which output row 0's
 * first tap row is row -PT (rows outside [0, H) read as zero). A whole
 * plane is H = p[2], PT = p[10]; a band passes its own rows. */
static void dw_channel(const sk_kernel *k, dw_path path, int64_t oc, const float *x, int64_t H,
		       int64_t PT, float *y, const float *res, int64_t OH, const float *zero)
{
	const int64_t *p = k->p;
	int64_t W = p[3], KH = p[6], KW = p[7], OW = p[15];
	float bias = k->in[2] ? k->in[2][oc] : 0.0f;
	if (path.wide) {
#if defined(__x86_64__) && defined(__GNUC__)
		dw3x3_plane_512(x, k->in[1] + oc * 9, y, bias, res, H, W, p[8], PT, p[11], OH, OW,
				zero);
#endif
	} else if (path.fast) {
		dw3x3_plane(x, k->in[1] + oc * 9, y, bias, res, H, W, p[8], PT, p[11], OH, OW, zero);
	} else if (path.wide_gen) {
#if defined(__x86_64__) && defined(__GNUC__)
		dw_plane_512(x, k->in[1] + oc * KH * KW, y, bias, res, H, W, KH, KW, PT, p[11],
			     p[12], p[13], OH, OW);
#endif
	} else {
		dw_plane(x, k->in[1] + oc * KH * KW, y, bias, res, H, W, KH, KW, p[8], p[9], PT,
			 p[11], p[12], p[13], OH, OW);
	}
}

/* dwp_block is a fused block (p[SKP_DWP] = 1): output rows [b0, b1) of
 * channels [c0, c1) of image n, whose depthwise input is the pointwise convolution of in[0] (C0
 * channels, H x W) by in[SKI_DWP_W] plus in[SKI_DWP_B], with its own
 * activation, computed here a band of rows and DWP_CH channels at a time
 * into the unit's scratch instead of read from memory. Each value of it
 * is the chain sk_block_gemm computes (one sgemm call's, bias and
 * activation by sk_gemm_epilogue), and each output the depthwise plane
 * routine's over its rows: the bits of the two kernels run apart. */
static void dwp_block(const sk_kernel *k, int64_t n, int64_t c0, int64_t c1, int64_t b0,
		      int64_t b1, dw_path path, const float *zero, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], OH = p[14], OW = p[15], C0 = p[SKP_DWP_C0];
	int64_t band = dwp_band(k), lda = p[SKP_DWP_LDA];
	/* never more rows than the scratch prepared for holds */
	int64_t cap = (k->scratch - dw_zero_row(p)) / (DWP_CH * W);
	if (cap < H) {
		if (cap < dwp_span(p))
			return;
		band = SK_MIN(band, dwp_band_of(p, cap));
	}
	int apanels = p[SKP_DWP_PANELS] != 0;
	const float *X = k->in[0] + n * C0 * H * W, *Wp = k->in[SKI_DWP_W];
	const float *bp = k->in[SKI_DWP_B];
	float *E = (float *)zero + dw_zero_row(p);
	for (int64_t o0 = b0; o0 < b1; o0 += band) {
		int64_t o1 = SK_MIN(o0 + band, b1), i0, i1;
		dwp_rows(p, o0, o1, &i0, &i1);
		int64_t np = (i1 - i0) * W;
		for (int64_t cc = c0; cc < c1; cc += DWP_CH) {
			int64_t cs = SK_MIN(DWP_CH, c1 - cc);
			SK_POLL(ctx);
			if (np > 0) {
				if (apanels)
					sk_gemm_apanels(cs, np, C0, Wp, lda, cc, X + i0 * W, H * W, E, np, 0);
				else
					sk_gemm(0, 0, cs, np, C0, Wp + cc * C0, C0, X + i0 * W, H * W, E, np, 0);
				if (bp || p[SKP_DWP_ACT])
					sk_gemm_epilogue(E, cs, np, np, bp ? bp + cc : NULL, NULL, NULL, 0,
							 (int)p[SKP_DWP_ACT], k->f[SKF_DWP_A], k->f[SKF_DWP_B]);
			}
			for (int64_t c = cc; c < cc + cs; c++) {
				float *y = k->out + ((n * C + c) * OH + o0) * OW;
				const float *res = k->in[3] ? k->in[3] + ((n * C + c) * OH + o0) * OW : NULL;
				/* output row o0's first tap row is o0*S - PT, row
				 * o0*S - PT - i0 of the band */
				dw_channel(k, path, c, E + (c - cc) * np, i1 - i0, p[10] - o0 * p[8] + i0, y,
					   res, o1 - o0, zero);
				if (p[SKP_ACT])
					sk_act_apply(y, (o1 - o0) * OW, (int)p[SKP_ACT], k->f[SKF_ACT_A],
						     k->f[SKF_ACT_B]);
			}
		}
	}
}

void sk_block_dwconv(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], Cout = p[4];
	int64_t OH = p[14], OW = p[15], mult = Cout / C;
	int64_t ct = k->t[0], ctiles = k->t[1], bands = p[SKP_DWP] == 1 ? k->t[2] : 1;
	int64_t n = blk / (ctiles * bands), c0 = (blk % ctiles) * ct;
	int64_t c1 = SK_MIN(c0 + ct, Cout);
	int fast = dw_fast(p);
	int quant = p[16] == 1, requant = quant && p[17] == 1;
	float *z = sk_scratch(ctx, k->scratch);
	if (!z)
		return;
	const float *zero = z;
	memset(z, 0, (size_t)(W + 16) * 4);
	/* on integers: each input plane less its zero point, made once per
	 * input channel while it stays in cache (QUANT's mode 1 with scale 1,
	 * the same bits as that pass over the whole tensor) */
	float *xs = quant ? z + dw_zero_row(p) : NULL;
	int64_t shifted = -1;
	/* AVX-512 where sgemm uses it: the same bits, 16 columns a vector, on
	 * the narrow planes where the compiler's loops leave most columns to
	 * scalar remainders (BenchmarkDepthwise: 14x14 1.6x, 28x28 stride 2
	 * 1.4x), and on planes up to 128 output columns wide: at stride 2 the
	 * compiler's loops gather every other column (MobileNetV2's 112x112
	 * stride-2 layer inside the fused pointwise kernel at batch 8, one
	 * unit: 6.8-7.4 ms against 7.5-7.9), at stride 1 they lose to it too
	 * (its 32-channel 112x112 layer 1.50-1.57 ms against 1.84-1.91, its
	 * fused 144-channel 56x56 pair 4.32-4.54 against 4.65-4.68; three
	 * paired profiles) */
	int wide = 0, wide_gen = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	wide = fast && sk_gemm_isa() == SK_ISA_AVX512 && OW <= 16 * DW_CHUNKS;
	/* the general path (5x5, dilated) at stride 1: the row in registers */
	wide_gen = !fast && sk_gemm_isa() == SK_ISA_AVX512 && p[8] == 1 && p[9] == 1 &&
		   OW <= 16 * DW_GEN_CHUNKS;
#endif
	dw_path path = {wide, fast, wide_gen};
#if defined(__x86_64__) && defined(__GNUC__)
	/* on bytes, integers where the CPU has VNNI (and the integer
	 * kernels use it), channel by channel as dwi_weights allows, on the
	 * planes the channel-vector path does not take: MobileNetV2-int8 at
	 * batch 1, two units, builds alternated twice: its 112x112 layers
	 * 0.55-0.65 of the float path's time (123 -> 65-72 us at stride 1,
	 * 153 -> 86-103 us at stride 2); on the channel-vector path's small
	 * planes it lost 2-3x (a row of 7 to 28 columns fills a vector
	 * partly, and every vector is a border one) */
	int32_t zx = 0;
	int64_t cvec = dw_cvec_floats(p);
	int ints = !cvec && dwi_shape(k, &zx) && sk_gemm_isa() == SK_ISA_AVX512 && sk_qgemm_vnni() &&
		   sk_cpu_vbmi();
	if (!ints && cvec && sk_gemm_isa() == SK_ISA_AVX512 && k->scratch >= dw_zero_row(p) + cvec) {
		int64_t top, bottom;
		dw_cvec_rows(p, &top, &bottom);
		float *T = z + dw_zero_row(p);
		dw3x3_cvec_512(k, n, c0, c1, T, T + (H + top + bottom) * W * 16, ctx);
		return;
	}
#endif
	if (p[SKP_DWP] == 1) {
		int64_t b0 = ((blk / ctiles) % bands) * k->t[3];
		dwp_block(k, n, c0, c1, b0, SK_MIN(b0 + k->t[3], OH), path, zero, ctx);
		return;
	}
	int sx = sk_store_in(k, 0), sy = sk_store_out(k);
	for (int64_t oc = c0; oc < c1; oc++) {
		SK_POLL(ctx);
#if defined(__x86_64__) && defined(__GNUC__)
		if (ints && dw3x3_int_512(k, n, oc, zx))
			continue;
#endif
		int64_t ic = oc / mult;
		const float *x = k->in[0] + (n * C + ic) * H * W;
		if (quant) {
			if (shifted != ic)
				sk_store_shift(sk_elem(k->in[0], sx, (n * C + ic) * H * W), sx, H * W, k->f[0], xs);
			shifted = ic;
			x = xs;
		}
		/* an output stored as bytes: the float plane after the input's */
		float *y = sy ? xs + H * W : k->out + (n * Cout + oc) * OH * OW;
		const float *res = k->in[3] ? k->in[3] + (n * Cout + oc) * OH * OW : NULL;
		dw_channel(k, path, oc, x, H, p[10], y, res, OH, zero);
		if (requant) {
			sk_store_requant(y, OH * OW, k->in[4][oc], k->f[1], (float)p[18], (float)p[19], sy,
					 (void *)sk_elem(k->out, sy, (n * Cout + oc) * OH * OW));
		} else if (p[SKP_ACT])
			sk_act_apply(y, OH * OW, (int)p[SKP_ACT], k->f[SKF_ACT_A],
				     k->f[SKF_ACT_B]);
	}
}

/* ---- COL2IM (ConvTranspose) -------------------------------------------- */

void sk_prep_col2im(sk_kernel *k, int units)
{
	if (!conv_params_ok(k)) {
		k->grid = -1;
		return;
	}
	int64_t N = k->p[0], Cout = k->p[4];
	int64_t per = SK_CDIV(units * 4, N);
	int64_t ct = SK_CDIV(Cout, per);
	if (ct < 1)
		ct = 1;
	k->t[0] = ct;
	k->t[1] = SK_CDIV(Cout, ct);
	k->grid = N * k->t[1];
}

void sk_block_col2im(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t H = p[2], W = p[3], Cout = p[4], G = p[5], KH = p[6], KW = p[7];
	int64_t SH = p[8], SW = p[9], PT = p[10], PL = p[11], DH = p[12], DW = p[13];
	int64_t OH = p[14], OW = p[15], Mg = Cout / G, HW = H * W;
	int64_t ct = k->t[0], ctiles = k->t[1];
	int64_t n = blk / ctiles, c0 = (blk % ctiles) * ct;
	int64_t c1 = SK_MIN(c0 + ct, Cout);
	const float *bias = k->in[1];
	for (int64_t oc = c0; oc < c1; oc++) {
		SK_POLL(ctx);
		int64_t g = oc / Mg, c = oc % Mg;
		const float *col = k->in[0] + ((n * G + g) * Mg + c) * KH * KW * HW;
		float *y = k->out + (n * Cout + oc) * OH * OW;
		float b = bias ? bias[oc] : 0.0f;
		for (int64_t oh = 0; oh < OH; oh++) {
			float *yr = y + oh * OW;
			for (int64_t ow = 0; ow < OW; ow++)
				yr[ow] = b;
			for (int64_t kh = 0; kh < KH; kh++) {
				int64_t th = oh + PT - kh * DH;
				if (th < 0 || th % SH)
					continue;
				int64_t ih = th / SH;
				if (ih >= H)
					continue;
				for (int64_t kw = 0; kw < KW; kw++) {
					const float *cr = col + (kh * KW + kw) * HW + ih * W;
					/* the columns ow = iw * SW + base, iw in [0, W):
					 * the first at or right of column 0, then every
					 * SW-th (no division per element; each output
					 * still sums its taps in (kh, kw) order) */
					int64_t base = kw * DW - PL, iw = 0;
					if (base < 0)
						iw = SK_CDIV(-base, SW);
					for (int64_t ow = base + iw * SW; ow < OW && iw < W; ow += SW, iw++)
						yr[ow] += cr[iw];
				}
			}
		}
		if (p[SKP_ACT])
			sk_act_apply(y, OH * OW, (int)p[SKP_ACT], k->f[SKF_ACT_A],
				     k->f[SKF_ACT_B]);
	}
}
