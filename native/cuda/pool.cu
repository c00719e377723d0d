/*
 * pool.cu: max / average pooling (one thread per output element) and
 * global pooling (GlobalAveragePool, GlobalMaxPool: a plane per block, or
 * a plane per warp when planes are small).
 *
 * Parameters (native/cpu/sluice_cpu.h):
 *   POOL  p: 0 planes 1 H 2 W 3 OH 4 OW 5 KH 6 KW 7 SH 8 SW 9 PT 10 PL
 *         11 DH 12 DW 13 mode (0 max, 1 avg) 14 count_include_pad
 *         15 PB 16 PR. Grid: output elements / SG_EPB.
 *   GPOOL p: 0 planes 1 HW 2 mode (0 max, 1 avg). t[0]: 0 = a plane per
 *         block (grid = planes), 1 = a plane per warp (grid = planes / 8).
 */
#include "sg.h"

SG_DEV void sg_body_pool(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int planes = (int)a.p[0], H = (int)a.p[1], W = (int)a.p[2];
	int OH = (int)a.p[3], OW = (int)a.p[4], KH = (int)a.p[5], KW = (int)a.p[6];
	int SH = (int)a.p[7], SW = (int)a.p[8], PT = (int)a.p[9], PL = (int)a.p[10];
	int DH = (int)a.p[11], DW = (int)a.p[12], mode = (int)a.p[13];
	int incl = (int)a.p[14], PB = (int)a.p[15], PR = (int)a.p[16];
	int total = planes * OH * OW;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	for (int r = 0; r < SG_EPB / SG_THREADS; r++) {
		int i = i0 + r * SG_THREADS;
		if (i >= total)
			break;
		int ow = i % OW, q = i / OW;
		int oh = q % OH, pl = q / OH;
		const float *x = a.in[0] + (sg_i64)pl * H * W;
		int h0 = oh * SH - PT, w0 = ow * SW - PL;
		float y;
		if (mode == 0) {
			float m = -3.402823466e38f;
			int any = 0;
			for (int kh = 0; kh < KH; kh++) {
				int ih = h0 + kh * DH;
				if ((unsigned)ih >= (unsigned)H)
					continue;
				for (int kw = 0; kw < KW; kw++) {
					int iw = w0 + kw * DW;
					if ((unsigned)iw >= (unsigned)W)
						continue;
					float v = x[ih * W + iw];
					m = v > m ? v : m;
					any = 1;
				}
			}
			y = any ? m : 0.0f;
		} else {
			float s = 0.0f;
			int cnt = 0;
			for (int kh = 0; kh < KH; kh++) {
				int ih = h0 + kh * DH;
				if ((unsigned)ih >= (unsigned)H)
					continue;
				for (int kw = 0; kw < KW; kw++) {
					int iw = w0 + kw * DW;
					if ((unsigned)iw >= (unsigned)W)
						continue;
					s += x[ih * W + iw];
					cnt++;
				}
			}
			if (incl) {
				int he = SG_MIN(h0 + (KH - 1) * DH + 1, H + PB);
				int we = SG_MIN(w0 + (KW - 1) * DW + 1, W + PR);
				cnt = ((he - h0 + DH - 1) / DH) * ((we - w0 + DW - 1) / DW);
			}
			y = cnt ? s / (float)cnt : 0.0f;
		}
		a.out[i] = y;
	}
}
SG_ENTRY(sg_pool, sg_body_pool)

/* Polls once per SG_GPOOL_POLL strides of the block over a plane. */
#define SG_GPOOL_POLL 32

SG_DEV void sg_body_gpool(const sg_args &a, sg_i64 blk, sg_state *st)
{
	SG_SHARED float red[SG_WARPS];
	int planes = (int)a.p[0], HW = (int)a.p[1], mode = (int)a.p[2];
	int t = (int)sg_tid();
	if (a.t[0] == 1) {
		/* a plane per warp: short planes, no polls */
		int pl = (int)blk * SG_WARPS + (t >> 5), lane = t & 31;
		if (pl >= planes)
			return;
		const float *x = a.in[0] + (sg_i64)pl * HW;
		float v = mode == 0 ? -3.402823466e38f : 0.0f;
		for (int i = lane; i < HW; i += 32)
			v = mode == 0 ? (x[i] > v ? x[i] : v) : v + x[i];
		v = mode == 0 ? sg_warp_max(v) : sg_warp_sum(v);
		if (lane == 0)
			a.out[pl] = mode == 0 ? v : v / (float)HW;
		return;
	}
	int pl = (int)blk;
	if (pl >= planes)
		return;
	const float *x = a.in[0] + (sg_i64)pl * HW;
	float v = mode == 0 ? -3.402823466e38f : 0.0f;
	for (int b = 0, it = 0; b < HW; b += SG_THREADS, it++) {
		if (it % SG_GPOOL_POLL == SG_GPOOL_POLL - 1)
			SG_POLL(st);
		int i = b + t;
		if (i < HW)
			v = mode == 0 ? (x[i] > v ? x[i] : v) : v + x[i];
	}
	v = mode == 0 ? sg_block_max(v, red) : sg_block_sum(v, red);
	if (t == 0)
		a.out[pl] = mode == 0 ? v : v / (float)HW;
}
SG_ENTRY(sg_gpool, sg_body_gpool)
