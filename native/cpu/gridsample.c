/*
 * gridsample.c: ONNX GridSample (opset 16, PyTorch's grid_sample): each
 * output pixel samples its input plane at the grid's normalised (x, y),
 * bilinear, nearest or bicubic (A = -0.75), with zeros, border or
 * reflection padding. Blocks are chunks of output rows (n, oh); a pixel's
 * taps and weights are computed once and applied to every channel. The
 * same arithmetic as native/cuda/gridsample.cu.
 */
#include "sluice_cpu.h"

#include <math.h>

void sk_prep_gridsample(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	if (p[0] < 1 || p[1] < 1 || p[2] < 1 || p[3] < 1 || p[4] < 1 || p[5] < 1 ||
	    p[6] < 0 || p[6] > 2 || p[7] < 0 || p[7] > 2 || p[8] < 0 || p[8] > 1) {
		k->grid = -1;
		return;
	}
	int64_t rows = p[0] * p[4];
	k->t[0] = sk_split_work(rows, units, rows * p[5] * p[1] / 8192);
	k->grid = SK_CDIV(rows, k->t[0]);
}

/* gs_unnormalize maps a grid coordinate in [-1, 1] to the input's pixel
 * space of size n. */
static float gs_unnormalize(float g, int64_t n, int align)
{
	return align ? (g + 1.0f) / 2.0f * (float)(n - 1)
		     : ((g + 1.0f) * (float)n - 1.0f) / 2.0f;
}

/* gs_reflect reflects x into [lo2/2, hi2/2] (bounds given doubled). */
static float gs_reflect(float x, int64_t lo2, int64_t hi2)
{
	if (lo2 == hi2)
		return 0.0f;
	float lo = (float)lo2 / 2.0f, span = (float)(hi2 - lo2) / 2.0f;
	x = fabsf(x - lo);
	float extra = fmodf(x, span);
	int64_t flips = (int64_t)floorf(x / span);
	return (flips % 2 == 0) ? extra + lo : span - extra + lo;
}

/* gs_pad applies border or reflection padding to coordinate x over n. */
static float gs_pad(float x, int64_t n, int pad, int align)
{
	if (pad == 1)
		return fminf(fmaxf(x, 0.0f), (float)(n - 1));
	if (pad == 2) {
		x = align ? gs_reflect(x, 0, 2 * (n - 1)) : gs_reflect(x, -1, 2 * n - 1);
		return fminf(fmaxf(x, 0.0f), (float)(n - 1));
	}
	return x;
}

static void gs_cubic_coeffs(float t, float w[4])
{
	const float A = -0.75f;
	float x1 = t + 1.0f, x2 = t, x3 = 1.0f - t, x4 = 2.0f - t;
	w[0] = ((A * x1 - 5.0f * A) * x1 + 8.0f * A) * x1 - 4.0f * A;
	w[1] = ((A + 2.0f) * x2 - (A + 3.0f)) * x2 * x2 + 1.0f;
	w[2] = ((A + 2.0f) * x3 - (A + 3.0f)) * x3 * x3 + 1.0f;
	w[3] = ((A * x4 - 5.0f * A) * x4 + 8.0f * A) * x4 - 4.0f * A;
}

/* gs_tap is a bicubic tap's index: padded, or -1 (zeros) outside. */
static int64_t gs_tap(int64_t i, int64_t n, int pad, int align)
{
	if (pad == 0)
		return i >= 0 && i < n ? i : -1;
	return (int64_t)gs_pad((float)i, n, pad, align);
}

void sk_block_gridsample(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], H = p[2], W = p[3], OH = p[4], OW = p[5];
	int mode = (int)p[6], pad = (int)p[7], align = (int)p[8];
	int64_t r0 = blk * k->t[0], r1 = SK_MIN(r0 + k->t[0], p[0] * OH);
	int64_t plane = H * W, oplane = OH * OW;
	for (int64_t r = r0; r < r1; r++) {
		SK_POLL(ctx);
		int64_t n = r / OH, oh = r % OH;
		const float *xn = k->in[0] + n * C * plane;
		const float *g = k->in[1] + (n * OH + oh) * OW * 2;
		float *yn = k->out + n * C * oplane + oh * OW;
		for (int64_t ow = 0; ow < OW; ow++) {
			float x = gs_unnormalize(g[2 * ow], W, align);
			float y = gs_unnormalize(g[2 * ow + 1], H, align);
			int64_t idx[16];
			float w[16];
			int taps = 0;
			if (mode == 2) { /* bicubic: taps padded one by one */
				float fx = floorf(x), fy = floorf(y), wx[4], wy[4];
				gs_cubic_coeffs(x - fx, wx);
				gs_cubic_coeffs(y - fy, wy);
				for (int j = 0; j < 4; j++) {
					int64_t iy = gs_tap((int64_t)fy - 1 + j, H, pad, align);
					for (int i = 0; i < 4; i++) {
						int64_t ix = gs_tap((int64_t)fx - 1 + i, W, pad, align);
						idx[taps] = ix < 0 || iy < 0 ? -1 : iy * W + ix;
						w[taps++] = wy[j] * wx[i];
					}
				}
			} else {
				x = gs_pad(x, W, pad, align);
				y = gs_pad(y, H, pad, align);
				if (mode == 1) { /* nearest, ties to even */
					int64_t ix = (int64_t)rintf(x), iy = (int64_t)rintf(y);
					idx[0] = ix >= 0 && ix < W && iy >= 0 && iy < H ? iy * W + ix : -1;
					w[0] = 1.0f;
					taps = 1;
				} else { /* bilinear */
					float fx = floorf(x), fy = floorf(y);
					float tx = x - fx, ty = y - fy;
					int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;
					for (int j = 0; j < 2; j++)
						for (int i = 0; i < 2; i++) {
							int64_t ix = x0 + i, iy = y0 + j;
							idx[taps] = ix >= 0 && ix < W && iy >= 0 && iy < H ? iy * W + ix : -1;
							w[taps++] = (j ? ty : 1.0f - ty) * (i ? tx : 1.0f - tx);
						}
				}
			}
			for (int64_t c = 0; c < C; c++) {
				const float *xc = xn + c * plane;
				float s = 0.0f;
				for (int t = 0; t < taps; t++)
					if (idx[t] >= 0)
						s += w[t] * xc[idx[t]];
				yn[c * oplane + ow] = s;
			}
		}
	}
}
