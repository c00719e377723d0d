/*
 * roialign.c: ONNX RoiAlign: each region of interest (x1, y1, x2, y2 in
 * input pixels times spatial_scale) is cut into OH x OW bins, each bin
 * averaged (or maxed) over a grid of bilinear samples, as ONNX Runtime
 * does (its sample clamping and weights). Blocks are chunks of output
 * planes (roi, channel). The same arithmetic as native/cuda/roialign.cu.
 */
#include "sluice_cpu.h"

#include <math.h>

void sk_prep_roialign(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	if (p[0] < 1 || p[1] < 1 || p[2] < 1 || p[3] < 1 || p[4] < 1 || p[5] < 1 || p[6] < 1 ||
	    p[7] < 0 || p[8] < 0 || p[8] > 1 || p[9] < 0 || p[9] > 1) {
		k->grid = -1;
		return;
	}
	int64_t planes = p[4] * p[1];
	k->t[0] = sk_split_work(planes, units, planes * p[5] * p[6] * 16 / 16384);
	k->grid = SK_CDIV(planes, k->t[0]);
}

/* sk_roialign_bin is output bin (ph, pw) of one roi on plane x (H x W). */
static float roialign_bin(const float *x, int64_t H, int64_t W, float y0, float x0,
			  float bh, float bw, int64_t gh, int64_t gw, int64_t ph,
			  int64_t pw, int maxmode)
{
	float acc = 0.0f;
	int first = 1;
	for (int64_t iy = 0; iy < gh; iy++) {
		float y = y0 + (float)ph * bh + ((float)iy + 0.5f) * bh / (float)gh;
		for (int64_t ix = 0; ix < gw; ix++) {
			float xx = x0 + (float)pw * bw + ((float)ix + 0.5f) * bw / (float)gw;
			float v;
			if (y < -1.0f || y > (float)H || xx < -1.0f || xx > (float)W) {
				v = 0.0f;
			} else {
				float yy = y <= 0.0f ? 0.0f : y, xc = xx <= 0.0f ? 0.0f : xx;
				int64_t yl = (int64_t)yy, xl = (int64_t)xc, yh, xh;
				if (yl >= H - 1) {
					yh = yl = H - 1;
					yy = (float)yl;
				} else {
					yh = yl + 1;
				}
				if (xl >= W - 1) {
					xh = xl = W - 1;
					xc = (float)xl;
				} else {
					xh = xl + 1;
				}
				float ly = yy - (float)yl, lx = xc - (float)xl;
				float hy = 1.0f - ly, hx = 1.0f - lx;
				float a = hy * hx * x[yl * W + xl], b = hy * lx * x[yl * W + xh];
				float c = ly * hx * x[yh * W + xl], d = ly * lx * x[yh * W + xh];
				if (maxmode) {
					v = a > b ? a : b;
					v = v > c ? v : c;
					v = v > d ? v : d;
				} else {
					v = a + b + c + d;
				}
			}
			if (!maxmode)
				acc += v;
			else if (first || v > acc)
				acc = v;
			first = 0;
		}
	}
	if (!maxmode) {
		int64_t count = gh * gw;
		acc /= (float)(count > 0 ? count : 1);
	}
	return acc;
}

void sk_block_roialign(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t N = p[0], C = p[1], H = p[2], W = p[3], OH = p[5], OW = p[6];
	int64_t sr = p[7];
	int maxmode = (int)p[8], half = (int)p[9];
	float scale = k->f[0], off = half ? 0.5f : 0.0f;
	int64_t q0 = blk * k->t[0], q1 = SK_MIN(q0 + k->t[0], p[4] * C);
	for (int64_t q = q0; q < q1; q++) {
		SK_POLL(ctx);
		int64_t r = q / C, c = q % C;
		const float *roi = k->in[1] + r * 4;
		int64_t b = (int64_t)k->in[2][r];
		float *y = k->out + q * OH * OW;
		if (b < 0 || b >= N) {
			for (int64_t i = 0; i < OH * OW; i++)
				y[i] = 0.0f;
			continue;
		}
		float x0 = roi[0] * scale - off, y0 = roi[1] * scale - off;
		float rw = roi[2] * scale - off - x0, rh = roi[3] * scale - off - y0;
		if (!half) {
			rw = rw > 1.0f ? rw : 1.0f;
			rh = rh > 1.0f ? rh : 1.0f;
		}
		float bh = rh / (float)OH, bw = rw / (float)OW;
		int64_t gh = sr > 0 ? sr : (int64_t)ceilf(rh / (float)OH);
		int64_t gw = sr > 0 ? sr : (int64_t)ceilf(rw / (float)OW);
		const float *x = k->in[0] + (b * C + c) * H * W;
		for (int64_t ph = 0; ph < OH; ph++)
			for (int64_t pw = 0; pw < OW; pw++)
				y[ph * OW + pw] = roialign_bin(x, H, W, y0, x0, bh, bw, gh, gw, ph, pw, maxmode);
	}
}
