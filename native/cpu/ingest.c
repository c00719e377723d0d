/*
 * ingest.c: requests' payloads -> a batch's input tensor, in one pass
 * (sluice_cpu.h, "Request ingest"). The payload of a request is a list of
 * fragments in the dataplane's packet buffers; a fragment may end inside a
 * float or a pixel. f32 payloads are copied as they are (little-endian
 * hosts); u8 HWC images are converted and transposed to CHW as they are
 * read, so each payload byte is read once and each input float written
 * once: the request's one copy.
 */
#include "sluice_cpu.h"

#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ingest.c copies f32 payloads (little-endian) as they are: a big-endian host needs a byte swap here"
#endif

static void ingest_f32(float *dst, const sk_frag *f, int64_t nf)
{
	char *o = (char *)dst;
	for (int64_t i = 0; i < nf; i++) {
		memcpy(o, (const void *)f[i].p, (size_t)f[i].n);
		o += f[i].n;
	}
}

/* Whole pixels of a 3-channel image: np pixels from s into the three
 * planes at pixel offset 0. */
SK_MV static void u8_hwc3(float *restrict d0, float *restrict d1,
			  float *restrict d2, const uint8_t *restrict s,
			  int64_t np, const float *scale, const float *bias)
{
	const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
	const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
	for (int64_t p = 0; p < np; p++) {
		d0[p] = (float)s[3 * p] * s0 + b0;
		d1[p] = (float)s[3 * p + 1] * s1 + b1;
		d2[p] = (float)s[3 * p + 2] * s2 + b2;
	}
}

/* Whole pixels of a c-channel image. */
static void u8_hwc(float *d, int64_t hw, int64_t c, const uint8_t *s,
		   int64_t np, const float *scale, const float *bias)
{
	for (int64_t ch = 0; ch < c; ch++) {
		float *o = d + ch * hw;
		const float sc = scale[ch], bi = bias[ch];
		for (int64_t p = 0; p < np; p++)
			o[p] = (float)s[p * c + ch] * sc + bi;
	}
}

/* n bytes at s of an image, from pixel *pix and channel *ch on (where
 * the previous fragment left them), into its planes. */
static void u8_bytes(float *dst, int64_t hw, int64_t c, int64_t *pixp,
		     int64_t *chp, const uint8_t *s, int64_t n,
		     const float *scale, const float *bias)
{
	int64_t pix = *pixp, ch = *chp;
	/* the rest of a pixel the previous fragment began */
	while (n > 0 && ch != 0) {
		dst[ch * hw + pix] = (float)*s++ * scale[ch] + bias[ch];
		n--;
		if (++ch == c) {
			ch = 0;
			pix++;
		}
	}
	int64_t np = n / c;
	if (c == 3)
		u8_hwc3(dst + pix, dst + hw + pix, dst + 2 * hw + pix, s, np,
			scale, bias);
	else
		u8_hwc(dst + pix, hw, c, s, np, scale, bias);
	pix += np;
	s += np * c;
	n -= np * c;
	/* a pixel this fragment begins and the next one ends */
	for (; n > 0; n--) {
		dst[ch * hw + pix] = (float)*s++ * scale[ch] + bias[ch];
		if (++ch == c) {
			ch = 0;
			pix++;
		}
	}
	*pixp = pix;
	*chp = ch;
}

/* One request: its image's bytes from the fragments in order, then the
 * bytes after the image (the tail, float32) after the planes as they
 * are. The sizes were checked. */
static void ingest_u8(float *dst, const sk_frag *f, int64_t nf, int64_t hw,
		      int64_t c, const float *scale, const float *bias)
{
	int64_t pix = 0, ch = 0, left = hw * c;
	char *o = (char *)(dst + hw * c);
	for (int64_t i = 0; i < nf; i++) {
		const uint8_t *s = (const uint8_t *)f[i].p;
		int64_t n = f[i].n, img = n < left ? n : left;
		u8_bytes(dst, hw, c, &pix, &ch, s, img, scale, bias);
		left -= img;
		if (n > img) {
			memcpy(o, s + img, (size_t)(n - img));
			o += n - img;
		}
	}
}

int64_t sk_ingest(float *dst, int32_t fmt, int64_t elems, int64_t channels,
		  int64_t tail, const float *scale, const float *bias,
		  const sk_frag *frags, const int64_t *ends, int64_t nreq)
{
	if (dst == NULL || elems < 1 || nreq < 0 || (nreq > 0 && ends == NULL) ||
	    tail < 0 || tail >= elems)
		return SK_IN_EBAD;
	int64_t bytes;
	switch (fmt) {
	case SK_IN_F32:
		bytes = 4 * elems;
		break;
	case SK_IN_U8_HWC:
		if (channels < 1 || (elems - tail) % channels != 0 ||
		    scale == NULL || bias == NULL)
			return SK_IN_EBAD;
		bytes = elems - tail + 4 * tail;
		break;
	default:
		return SK_IN_EBAD;
	}
	/* every size first: nothing is written for a bad batch */
	int64_t start = 0;
	for (int64_t r = 0; r < nreq; r++) {
		if (ends[r] < start)
			return SK_IN_EBAD;
		int64_t sum = 0;
		for (int64_t i = start; i < ends[r]; i++) {
			if (frags[i].n < 0 || (frags[i].n > 0 && frags[i].p == 0))
				return SK_IN_EBAD;
			sum += frags[i].n;
		}
		if (sum != bytes)
			return -1 - r;
		start = ends[r];
	}
	start = 0;
	for (int64_t r = 0; r < nreq; r++) {
		float *d = dst + r * elems;
		if (fmt == SK_IN_F32)
			ingest_f32(d, frags + start, ends[r] - start);
		else
			ingest_u8(d, frags + start, ends[r] - start,
				  (elems - tail) / channels, channels, scale,
				  bias);
		start = ends[r];
	}
	return 0;
}
