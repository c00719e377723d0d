/*
 * gather.cu: the batch gather (ARCHITECTURE.md §2 step 5, §4 "zero-copy
 * input"). Reassembly keeps pointers to request fragments in packet
 * buffers; the dataplane region is host-registered (cuMemHostRegister,
 * mapped), so the GPU reads the payloads straight from host memory and
 * writes them into the contiguous batch tensor. The descriptor array is
 * in pinned host memory too.
 *
 * Parameters: aux = device address of n sg_frag descriptors; out = the
 * batch tensor; p: 0 n. t[0]: descriptors per block (>= 1); grid = n /
 * t[0]. t[1] is the conversion:
 *
 *   0  none: dst is a byte offset into the tensor, and each descriptor is
 *      copied by one block, 16 bytes per thread and load when source,
 *      destination and length allow, else 4 bytes (with a funnel shift
 *      when only the source is misaligned), else byte by byte.
 *   1  an 8-bit HWC image to normalised float CHW, fused into the copy
 *      (libml's InputImageU8): dst is the fragment's offset in the
 *      batch's payload bytes (request r's image starts at r * p[3]); p: 1
 *      channels C (1..4), 2 pixels H*W, 3 bytes per request (C*H*W);
 *      f[c] and f[4+c] are channel c's scale and bias. Payload byte q of
 *      request r (pixel q / C, channel q % C) becomes tensor element
 *      r*C*H*W + c*H*W + q / C, rounded as the host rounds it:
 *      (float)x * scale, then + bias (never a fused multiply-add).
 */
#include "sg.h"

/* One fragment: len bytes from src (device address) to out + dst. */
typedef struct sg_frag {
	sg_u64 src;
	sg_u64 dst;
	sg_u64 len;
} sg_frag;

SG_DEV void sg_copy_frag(unsigned char *d, const unsigned char *s, sg_u64 len)
{
	sg_u32 t = sg_tid();
	sg_u64 sa = (sg_u64)s, da = (sg_u64)d;
	if (((sa | da | len) & 15) == 0) {
		const sg_u32x4 *s4 = (const sg_u32x4 *)s;
		sg_u32x4 *d4 = (sg_u32x4 *)d;
		for (sg_u64 i = t; i < len / 16; i += SG_THREADS)
			d4[i] = s4[i];
		return;
	}
	if (((da | len) & 3) == 0) {
		sg_u32 *d1 = (sg_u32 *)d;
		sg_u64 n = len / 4;
		if ((sa & 3) == 0) {
			const sg_u32 *s1 = (const sg_u32 *)s;
			for (sg_u64 i = t; i < n; i += SG_THREADS)
				d1[i] = s1[i];
			return;
		}
		/* aligned words of the source, shifted into place; the last
		 * word read still holds a byte of the fragment */
		const sg_u32 *sw = (const sg_u32 *)(sa & ~3ull);
		sg_u32 sh = (sg_u32)(sa & 3) * 8;
		for (sg_u64 i = t; i < n; i += SG_THREADS)
			d1[i] = (sw[i] >> sh) | (sw[i + 1] << (32 - sh));
		return;
	}
	for (sg_u64 i = t; i < len; i += SG_THREADS)
		d[i] = s[i];
}

/* Conversion 1: len payload bytes from s, starting at batch payload byte
 * q0, into the float tensor d. */
SG_DEV void sg_convert_u8(float *d, const unsigned char *s, sg_u64 q0, sg_u64 len,
			  const sg_args &a)
{
	sg_u64 c = (sg_u64)a.p[1], hw = (sg_u64)a.p[2], rb = (sg_u64)a.p[3];
	for (sg_u64 i = sg_tid(); i < len; i += SG_THREADS) {
		sg_u64 q = q0 + i, r = q / rb, b = q - r * rb;
		sg_u64 px = b / c, ch = b - px * c;
		float x = (float)s[i];
		d[r * rb + ch * hw + px] = sg_add_rn(sg_mul_rn(x, a.f[ch]), a.f[4 + ch]);
	}
}

SG_DEV void sg_body_batch_gather(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	SG_SHARED sg_frag f;
	int n = (int)a.p[0], per = (int)a.t[0];
	int conv = (int)a.t[1];
	const sg_frag *frags = (const sg_frag *)a.aux;
	if (per < 1)
		per = 1;
	for (int q = 0; q < per; q++) {
		int fi = (int)blk * per + q;
		if (fi >= n)
			break;
		sg_sync(); /* everyone is done with the previous f */
		if (sg_tid() == 0)
			f = frags[fi];
		sg_sync();
		if (conv == 1)
			sg_convert_u8(a.out, (const unsigned char *)f.src, f.dst, f.len, a);
		else
			sg_copy_frag((unsigned char *)a.out + f.dst,
				     (const unsigned char *)f.src, f.len);
	}
}
SG_ENTRY(sg_batch_gather, sg_body_batch_gather)
