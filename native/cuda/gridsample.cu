/*
 * gridsample.cu: ONNX GridSample (opset 16, PyTorch's grid_sample):
 * bilinear, nearest or bicubic (A = -0.75) sampling of each input plane
 * at the grid's normalised (x, y), zeros, border or reflection padding;
 * the same arithmetic as native/cpu/gridsample.c. One thread per output
 * element.
 *
 * Parameters: in X [N,C,H,W], grid [N,OH,OW,2]. p: 0 N 1 C 2 H 3 W 4 OH
 * 5 OW 6 mode (0 bilinear, 1 nearest, 2 bicubic) 7 padding (0 zeros,
 * 1 border, 2 reflection) 8 align_corners.
 */
#include "sg.h"

SG_DEV float sg_gs_unnormalize(float g, int n, int align)
{
	return align ? (g + 1.0f) / 2.0f * (float)(n - 1) : ((g + 1.0f) * (float)n - 1.0f) / 2.0f;
}

SG_DEV float sg_gs_reflect(float x, int lo2, int hi2)
{
	if (lo2 == hi2)
		return 0.0f;
	float lo = (float)lo2 / 2.0f, span = (float)(hi2 - lo2) / 2.0f;
	x = sg_fabs(x - lo);
	float extra = sg_fmodf(x, span);
	int flips = (int)sg_floor(x / span);
	return (flips % 2 == 0) ? extra + lo : span - extra + lo;
}

SG_DEV float sg_gs_pad(float x, int n, int pad, int align)
{
	if (pad == 2)
		x = align ? sg_gs_reflect(x, 0, 2 * (n - 1)) : sg_gs_reflect(x, -1, 2 * n - 1);
	if (pad != 0) {
		x = x < 0.0f ? 0.0f : x;
		x = x > (float)(n - 1) ? (float)(n - 1) : x;
	}
	return x;
}

SG_DEV float sg_gs_cubic(float t, int j)
{
	const float A = -0.75f;
	float x;
	switch (j) {
	case 0:
		x = t + 1.0f;
		return ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A;
	case 1:
		x = t;
		return ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f;
	case 2:
		x = 1.0f - t;
		return ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f;
	default:
		x = 2.0f - t;
		return ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A;
	}
}

/* sg_gs_tap is a bicubic tap's index: padded, or -1 (zeros) outside. */
SG_DEV int sg_gs_tap(int i, int n, int pad, int align)
{
	if (pad == 0)
		return i >= 0 && i < n ? i : -1;
	return (int)sg_gs_pad((float)i, n, pad, align);
}

SG_DEV float sg_gs_at(const float *x, int ix, int iy, int W, int H)
{
	return ix >= 0 && ix < W && iy >= 0 && iy < H ? x[iy * W + ix] : 0.0f;
}

SG_DEV void sg_body_gridsample(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int N = (int)a.p[0], C = (int)a.p[1], H = (int)a.p[2], W = (int)a.p[3];
	int OH = (int)a.p[4], OW = (int)a.p[5];
	int mode = (int)a.p[6], pad = (int)a.p[7], align = (int)a.p[8];
	int total = N * C * OH * OW;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		int i = i0 + k * SG_THREADS;
		if (i >= total)
			break;
		int ow = i % OW, q = i / OW;
		int oh = q % OH;
		q /= OH;
		int c = q % C, n = q / C;
		const float *x = a.in[0] + ((sg_i64)n * C + c) * H * W;
		const float *g = a.in[1] + (((sg_i64)n * OH + oh) * OW + ow) * 2;
		float fx = sg_gs_unnormalize(g[0], W, align);
		float fy = sg_gs_unnormalize(g[1], H, align);
		float s = 0.0f;
		if (mode == 2) {
			float bx = sg_floor(fx), by = sg_floor(fy);
			float tx = fx - bx, ty = fy - by;
			for (int j = 0; j < 4; j++) {
				int iy = sg_gs_tap((int)by - 1 + j, H, pad, align);
				float wy = sg_gs_cubic(ty, j);
				for (int t = 0; t < 4; t++) {
					int ix = sg_gs_tap((int)bx - 1 + t, W, pad, align);
					float w = wy * sg_gs_cubic(tx, t);
					if (ix >= 0 && iy >= 0)
						s += w * x[iy * W + ix];
				}
			}
		} else {
			fx = sg_gs_pad(fx, W, pad, align);
			fy = sg_gs_pad(fy, H, pad, align);
			if (mode == 1) {
				s = sg_gs_at(x, (int)sg_rint(fx), (int)sg_rint(fy), W, H);
			} else {
				float bx = sg_floor(fx), by = sg_floor(fy);
				float tx = fx - bx, ty = fy - by;
				int x0 = (int)bx, y0 = (int)by;
				for (int j = 0; j < 2; j++)
					for (int t = 0; t < 2; t++) {
						float w = (j ? ty : 1.0f - ty) * (t ? tx : 1.0f - tx);
						int ix = x0 + t, iy = y0 + j;
						if (ix >= 0 && ix < W && iy >= 0 && iy < H)
							s += w * x[iy * W + ix];
					}
			}
		}
		a.out[i] = s;
	}
}
SG_ENTRY(sg_gridsample, sg_body_gridsample)
