/*
 * roialign.cu: ONNX RoiAlign, the arithmetic of native/cpu/roialign.c:
 * each roi's OH x OW bins averaged (or maxed) over a grid of bilinear
 * samples, with ONNX Runtime's sample clamping. One thread per output
 * element.
 *
 * Parameters: in X [N,C,H,W], rois [R,4], batch indices [R] (as float32).
 * p: 0 N 1 C 2 H 3 W 4 R 5 OH 6 OW 7 sampling_ratio (0: adaptive) 8 mode
 * (0 avg, 1 max) 9 half_pixel. f: 0 spatial_scale.
 */
#include "sg.h"

SG_DEV float sg_roialign_bin(const float *x, int H, int W, float y0, float x0, float bh,
			     float bw, int gh, int gw, int ph, int pw, int maxmode)
{
	float acc = 0.0f;
	int first = 1;
	for (int iy = 0; iy < gh; iy++) {
		float y = y0 + (float)ph * bh + ((float)iy + 0.5f) * bh / (float)gh;
		for (int ix = 0; ix < gw; ix++) {
			float xx = x0 + (float)pw * bw + ((float)ix + 0.5f) * bw / (float)gw;
			float v;
			if (y < -1.0f || y > (float)H || xx < -1.0f || xx > (float)W) {
				v = 0.0f;
			} else {
				float yy = y <= 0.0f ? 0.0f : y, xc = xx <= 0.0f ? 0.0f : xx;
				int yl = (int)yy, xl = (int)xc, yh, xh;
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
		int count = gh * gw;
		acc /= (float)(count > 0 ? count : 1);
	}
	return acc;
}

SG_DEV void sg_body_roialign(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int N = (int)a.p[0], C = (int)a.p[1], H = (int)a.p[2], W = (int)a.p[3];
	int R = (int)a.p[4], OH = (int)a.p[5], OW = (int)a.p[6], sr = (int)a.p[7];
	int maxmode = (int)a.p[8], half = (int)a.p[9];
	float scale = a.f[0], off = half ? 0.5f : 0.0f;
	int total = R * C * OH * OW;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	for (int e = 0; e < SG_EPB / SG_THREADS; e++) {
		int i = i0 + e * SG_THREADS;
		if (i >= total)
			break;
		int pw = i % OW, q = i / OW;
		int ph = q % OH;
		q /= OH;
		int c = q % C, r = q / C;
		const float *roi = a.in[1] + (sg_i64)r * 4;
		int b = (int)a.in[2][r];
		if (b < 0 || b >= N) {
			a.out[i] = 0.0f;
			continue;
		}
		float x0 = roi[0] * scale - off, y0 = roi[1] * scale - off;
		float rw = roi[2] * scale - off - x0, rh = roi[3] * scale - off - y0;
		if (!half) {
			rw = rw > 1.0f ? rw : 1.0f;
			rh = rh > 1.0f ? rh : 1.0f;
		}
		float bh = rh / (float)OH, bw = rw / (float)OW;
		int gh = sr > 0 ? sr : (int)sg_ceil(rh / (float)OH);
		int gw = sr > 0 ? sr : (int)sg_ceil(rw / (float)OW);
		const float *x = a.in[0] + ((sg_i64)b * C + c) * H * W;
		a.out[i] = sg_roialign_bin(x, H, W, y0, x0, bh, bw, gh, gw, ph, pw, maxmode);
	}
}
SG_ENTRY(sg_roialign, sg_body_roialign)
