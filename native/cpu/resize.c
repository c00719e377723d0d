/*
 * resize.c: 2-D resize of the last two dimensions, nearest, (bi)linear or
 * (bi)cubic,
 * with ONNX's coordinate transformation and nearest rounding modes. Blocks
 * are chunks of planes.
 */
#include "sluice_cpu.h"

#include <math.h>
#include <string.h>

void sk_prep_resize(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	if (p[0] < 1 || p[1] < 1 || p[2] < 1 || p[3] < 1 || p[4] < 1 ||
	    p[5] < 0 || p[5] > 2 || p[6] < 0 || p[6] > 6 || p[7] < 0 || p[7] > 3 ||
	    !(k->f[0] > 0) || !(k->f[1] > 0)) {
		k->grid = -1;
		return;
	}
	k->t[0] = sk_split_work(p[0], units, p[0] * p[3] * p[4] / 16384);
	k->grid = SK_CDIV(p[0], k->t[0]);
	/* per-column source indices and weights (cubic: 4 taps of each) */
	k->scratch = 13 * p[4] + 16;
}

/* src_coord is output position o's source coordinate; start and end: the
 * tf_crop_and_resize crop (coord 5). */
static float src_coord(int64_t o, float scale, int64_t in_len, int64_t out_len,
		       int coord, float start, float end)
{
	switch (coord) {
	case 5: /* tf_crop_and_resize */
		return out_len > 1 ? start * (float)(in_len - 1) +
					     (float)o * (end - start) * (float)(in_len - 1) /
						     (float)(out_len - 1)
				   : 0.5f * (start + end) * (float)(in_len - 1);
	case 1: /* asymmetric */
		return (float)o / scale;
	case 2: /* align_corners */
		return out_len == 1 ? 0.0f
				    : (float)o * (float)(in_len - 1) / (float)(out_len - 1);
	case 3: /* pytorch_half_pixel */
		return out_len > 1 ? ((float)o + 0.5f) / scale - 0.5f : 0.0f;
	case 4: /* tf_half_pixel_for_nn */
		return ((float)o + 0.5f) / scale;
	case 6: { /* half_pixel_symmetric: half_pixel shifted so that the
		   * output's whole pixels sit centred on the input */
		float adj = (float)out_len / (scale * (float)in_len);
		float off = (float)in_len / 2.0f * (1.0f - adj);
		return off + ((float)o + 0.5f) / scale - 0.5f;
	}
	default: /* half_pixel */
		return ((float)o + 0.5f) / scale - 0.5f;
	}
}

static int64_t nearest_idx(float x, int mode, int64_t len)
{
	int64_t i;
	switch (mode) {
	case 1: /* round_prefer_ceil */
		i = (int64_t)floorf(x + 0.5f);
		break;
	case 2:
		i = (int64_t)floorf(x);
		break;
	case 3:
		i = (int64_t)ceilf(x);
		break;
	default: { /* round_prefer_floor */
		float f = floorf(x);
		i = (x - f == 0.5f) ? (int64_t)f : (int64_t)floorf(x + 0.5f);
		break;
	}
	}
	return i < 0 ? 0 : (i >= len ? len - 1 : i);
}

/* cubic_taps fills the 4 source indices and weights of coordinate x in
 * [0, len): Keys' cubic with coefficient a, edge-replicated, or with
 * out-of-range taps dropped and the rest renormalized (exclude_outside). */
static void cubic_taps(float x, int64_t len, float a, int excl, int64_t *idx, float *w)
{
	float fx = floorf(x), t = x - fx;
	int64_t x0 = (int64_t)fx;
	float d[4] = {t + 1.0f, t, 1.0f - t, 2.0f - t};
	float sum = 0;
	for (int i = 0; i < 4; i++) {
		float z = d[i];
		float v = z <= 1.0f ? ((a + 2.0f) * z - (a + 3.0f)) * z * z + 1.0f
				    : ((a * z - 5.0f * a) * z + 8.0f * a) * z - 4.0f * a;
		int64_t j = x0 - 1 + i;
		if (excl && (j < 0 || j >= len))
			v = 0;
		w[i] = v;
		sum += v;
		idx[i] = j < 0 ? 0 : (j >= len ? len - 1 : j);
	}
	if (excl && sum != 0)
		for (int i = 0; i < 4; i++)
			w[i] /= sum;
}

static void resize_cubic(const sk_kernel *k, int64_t c0, int64_t c1, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t H = p[1], W = p[2], OH = p[3], OW = p[4];
	int coord = (int)p[6], excl = (int)p[8];
	float a = k->f[2];
	float *sc = sk_scratch(ctx, 13 * OW + 16);
	if (!sc)
		return;
	int64_t *xi = (int64_t *)sc; /* 4*OW int64 = 8*OW floats */
	float *wx = sc + 8 * OW;
	float *outx = wx + 4 * OW; /* 1: the column's source is outside (coord 5) */
	for (int64_t ow = 0; ow < OW; ow++) {
		float x = src_coord(ow, k->f[1], W, OW, coord, k->f[5], k->f[6]);
		outx[ow] = coord == 5 && (x < 0 || x > (float)(W - 1));
		cubic_taps(x, W, a, excl, xi + 4 * ow, wx + 4 * ow);
	}
	for (int64_t c = c0; c < c1; c++) {
		SK_POLL(ctx);
		const float *xp = k->in[0] + c * H * W;
		float *yp = k->out + c * OH * OW;
		for (int64_t oh = 0; oh < OH; oh++) {
			int64_t yi[4];
			float wy[4];
			float y = src_coord(oh, k->f[0], H, OH, coord, k->f[3], k->f[4]);
			cubic_taps(y, H, a, excl, yi, wy);
			float *yr = yp + oh * OW;
			if (coord == 5 && (y < 0 || y > (float)(H - 1))) {
				for (int64_t ow = 0; ow < OW; ow++)
					yr[ow] = k->f[7];
				continue;
			}
			for (int64_t ow = 0; ow < OW; ow++) {
				if (outx[ow] != 0) {
					yr[ow] = k->f[7];
					continue;
				}
				const int64_t *xj = xi + 4 * ow;
				const float *wj = wx + 4 * ow;
				float acc = 0;
				for (int i = 0; i < 4; i++) {
					const float *r = xp + yi[i] * W;
					float row = wj[0] * r[xj[0]] + wj[1] * r[xj[1]] +
						    wj[2] * r[xj[2]] + wj[3] * r[xj[3]];
					acc += wy[i] * row;
				}
				yr[ow] = acc;
			}
		}
	}
}

void sk_block_resize(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t H = p[1], W = p[2], OH = p[3], OW = p[4];
	int mode = (int)p[5], coord = (int)p[6], nm = (int)p[7];
	int64_t c0 = blk * k->t[0], c1 = SK_MIN(c0 + k->t[0], p[0]);
	if (mode == 2) {
		resize_cubic(k, c0, c1, ctx);
		return;
	}
	float *sc = sk_scratch(ctx, 4 * OW + 16);
	if (!sc)
		return;
	int64_t *xi0 = (int64_t *)sc; /* 2*OW floats worth of int64 pairs */
	float *wx = sc + 2 * OW;
	float *outx = wx + OW; /* 1: the column's source is outside (coord 5) */
	for (int64_t ow = 0; ow < OW; ow++) {
		float x = src_coord(ow, k->f[1], W, OW, coord, k->f[5], k->f[6]);
		outx[ow] = coord == 5 && (x < 0 || x > (float)(W - 1));
		if (mode == 0) {
			xi0[ow] = nearest_idx(x, nm, W);
			wx[ow] = 0;
		} else {
			if (x < 0)
				x = 0;
			if (x > (float)(W - 1))
				x = (float)(W - 1);
			int64_t x0 = (int64_t)floorf(x);
			xi0[ow] = x0;
			wx[ow] = x - (float)x0;
		}
	}
	for (int64_t c = c0; c < c1; c++) {
		SK_POLL(ctx);
		const float *xp = k->in[0] + c * H * W;
		float *yp = k->out + c * OH * OW;
		int64_t prev = -1; /* nearest: the source row of output row oh-1 */
		for (int64_t oh = 0; oh < OH; oh++) {
			float y = src_coord(oh, k->f[0], H, OH, coord, k->f[3], k->f[4]);
			float *yr = yp + oh * OW;
			if (coord == 5 && (y < 0 || y > (float)(H - 1))) {
				for (int64_t ow = 0; ow < OW; ow++)
					yr[ow] = k->f[7];
				prev = -1;
				continue;
			}
			if (mode == 0) {
				int64_t sy = nearest_idx(y, nm, H);
				if (sy == prev) {
					/* an upsampling's repeated row: a copy of the
					 * row just made */
					memcpy(yr, yr - OW, (size_t)OW * sizeof(float));
					continue;
				}
				prev = sy;
				const float *xr = xp + sy * W;
				for (int64_t ow = 0; ow < OW; ow++)
					yr[ow] = outx[ow] != 0 ? k->f[7] : xr[xi0[ow]];
				continue;
			}
			if (y < 0)
				y = 0;
			if (y > (float)(H - 1))
				y = (float)(H - 1);
			int64_t y0 = (int64_t)floorf(y);
			int64_t y1 = y0 + 1 < H ? y0 + 1 : H - 1;
			float wy = y - (float)y0;
			const float *r0 = xp + y0 * W, *r1 = xp + y1 * W;
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t x0 = xi0[ow];
				int64_t x1 = x0 + 1 < W ? x0 + 1 : W - 1;
				float a = r0[x0] + (r0[x1] - r0[x0]) * wx[ow];
				float b = r1[x0] + (r1[x1] - r1[x0]) * wx[ow];
				yr[ow] = outx[ow] != 0 ? k->f[7] : a + (b - a) * wy;
			}
		}
	}
}
