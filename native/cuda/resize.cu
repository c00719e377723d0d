/*
 * resize.cu: 2-D resize of the last two dimensions (ONNX Resize,
 * Upsample), nearest or bilinear, with ONNX's coordinate transformations
 * and nearest rounding modes; the same arithmetic as native/cpu/resize.c.
 * One thread per output element.
 *
 * Parameters: p: 0 planes 1 H 2 W 3 OH 4 OW 5 mode (0 nearest, 1 linear)
 * 6 coord (0 half_pixel, 1 asymmetric, 2 align_corners,
 * 3 pytorch_half_pixel, 4 tf_half_pixel_for_nn, 5 tf_crop_and_resize,
 * 6 half_pixel_symmetric) 7 nearest (0 round_prefer_floor,
 * 1 round_prefer_ceil, 2 floor, 3 ceil). f: 0 scale_h 1 scale_w; coord 5:
 * 3 h start 4 h end 5 w start 6 w end 7 extrapolation value.
 */
#include "sg.h"

SG_DEV float sg_src_coord(int o, float scale, int in_len, int out_len, int coord, float start,
			  float end)
{
	switch (coord) {
	case 5: /* tf_crop_and_resize: a product and a sum rounded each on its
		 * own (never one fused multiply-add), as the cpu computes them:
		 * a nearest index is the floor or ceiling of this coordinate,
		 * which one rounding more or less moves across an integer */
		return out_len > 1 ? sg_add_rn(sg_mul_rn(start, (float)(in_len - 1)),
					       (float)o * (end - start) * (float)(in_len - 1) /
						       (float)(out_len - 1))
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
		float adj = (float)out_len / sg_mul_rn(scale, (float)in_len);
		float off = sg_mul_rn((float)in_len / 2.0f, 1.0f - adj);
		return sg_add_rn(off, ((float)o + 0.5f) / scale) - 0.5f;
	}
	default: /* half_pixel */
		return ((float)o + 0.5f) / scale - 0.5f;
	}
}

SG_DEV int sg_nearest(float x, int mode, int len)
{
	int i;
	switch (mode) {
	case 1: /* round_prefer_ceil */
		i = (int)sg_floor(x + 0.5f);
		break;
	case 2:
		i = (int)sg_floor(x);
		break;
	case 3:
		i = (int)sg_ceil(x);
		break;
	default: { /* round_prefer_floor */
		float f = sg_floor(x);
		i = (x - f == 0.5f) ? (int)f : (int)sg_floor(x + 0.5f);
		break;
	}
	}
	return i < 0 ? 0 : (i >= len ? len - 1 : i);
}

SG_DEV void sg_body_resize(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int planes = (int)a.p[0], H = (int)a.p[1], W = (int)a.p[2];
	int OH = (int)a.p[3], OW = (int)a.p[4];
	int mode = (int)a.p[5], coord = (int)a.p[6], nm = (int)a.p[7];
	float sh = a.f[0], sw = a.f[1];
	int total = planes * OH * OW;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		int i = i0 + k * SG_THREADS;
		if (i >= total)
			break;
		int ow = i % OW, q = i / OW;
		int oh = q % OH, pl = q / OH;
		const float *x = a.in[0] + (sg_i64)pl * H * W;
		float fy = sg_src_coord(oh, sh, H, OH, coord, a.f[3], a.f[4]);
		float fx = sg_src_coord(ow, sw, W, OW, coord, a.f[5], a.f[6]);
		if (coord == 5 && (fy < 0 || fy > (float)(H - 1) || fx < 0 || fx > (float)(W - 1))) {
			a.out[i] = a.f[7];
			continue;
		}
		if (mode == 0) {
			a.out[i] = x[sg_nearest(fy, nm, H) * W + sg_nearest(fx, nm, W)];
			continue;
		}
		fy = fy < 0 ? 0 : (fy > (float)(H - 1) ? (float)(H - 1) : fy);
		fx = fx < 0 ? 0 : (fx > (float)(W - 1) ? (float)(W - 1) : fx);
		int y0 = (int)sg_floor(fy), x0 = (int)sg_floor(fx);
		int y1 = y0 + 1 < H ? y0 + 1 : H - 1;
		int x1 = x0 + 1 < W ? x0 + 1 : W - 1;
		float wy = fy - (float)y0, wx = fx - (float)x0;
		const float *r0 = x + y0 * W, *r1 = x + y1 * W;
		float u = r0[x0] + (r0[x1] - r0[x0]) * wx;
		float v = r1[x0] + (r1[x1] - r1[x0]) * wx;
		a.out[i] = u + (v - u) * wy;
	}
}
SG_ENTRY(sg_resize, sg_body_resize)
