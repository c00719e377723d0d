/*
 * fakecuda.c: a fake libcuda.so.1 for libml/cuda's driver tests
 * (TestFakeDriver, TestBackendFakeDriver), loaded through
 * cudrv.OpenLib. It implements the entry points the binding resolves
 * with host memory and checks what it is given: the current context, the
 * CU_LAUNCH_PARAM_* array, NUL-terminated PTX, the green-context stream
 * flags. A launch "runs" by doing what a kernel's prologue does with the
 * packed parameters: it stores the execution index (offset 8) into the
 * state (offset 0 points to it) and copies the 432-byte argument record
 * (offset 16) to the argument's output pointer, so the test can read both
 * back. Errors are injected by size: allocations of 1 TiB or more fail
 * with CUresult 2.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
#define CTX1 ((void *)0x1234)
#define CTX2 ((void *)0x5678)
static void *cur;

#define OK 0
static CUresult need_ctx(void) { return (cur == CTX1 || cur == CTX2) ? OK : 201; }

CUresult cuInit(unsigned f) { return f == 0 ? OK : 1; }
CUresult cuDriverGetVersion(int *v) { *v = 12040; return OK; }
CUresult cuGetErrorName(CUresult r, const char **s)
{
	static char buf[64];
	strcpy(buf, "CUDA_ERROR_FAKE_");
	buf[16] = (char)('0' + r % 10);
	buf[17] = 0;
	*s = buf;
	return OK;
}
CUresult cuGetErrorString(CUresult r, const char **s) { (void)r; *s = "fake error"; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return o == 0 ? OK : 101; }
CUresult cuDeviceGetName(char *b, int n, int d) { (void)d; strncpy(b, "Fake GPU", (size_t)n); return OK; }
CUresult cuDeviceGetAttribute(int *v, int a, int d)
{
	(void)d;
	*v = a == 16 ? 4 : a == 75 ? 9 : a == 76 ? 0 : -1;
	return *v < 0 ? 1 : OK;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)1 << 30; return OK; }
CUresult cuCtxCreate_v2(void **c, unsigned f, int d) { (void)f; (void)d; *c = cur = CTX1; return OK; }
CUresult cuCtxDestroy_v2(void *c) { return c == CTX1 ? OK : 201; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = CTX1; return d == 0 ? OK : 101; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return d == 0 ? OK : 101; }
CUresult cuCtxSetCurrent(void *c) { cur = c; return need_ctx(); }
CUresult cuCtxSynchronize(void) { return need_ctx(); }

CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *opts, void **vals)
{
	const char *s = img;
	if (need_ctx() || strncmp(s, "//", 2) != 0 || !strstr(s, ".entry"))
		return 218; /* CUDA_ERROR_INVALID_PTX */
	if (n == 2 && opts[0] == 5 && opts[1] == 6 && (uintptr_t)vals[1] > 8)
		strcpy(vals[0], "fake jit");
	*m = (void *)0x4d4f44;
	return OK;
}
CUresult cuModuleUnload(void *m) { return m == (void *)0x4d4f44 ? need_ctx() : 400; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
	(void)m;
	if (strncmp(name, "sg_", 3) != 0)
		return 500;
	*f = strdup(name);
	return need_ctx();
}
CUresult cuFuncGetAttribute(int *v, int a, void *f)
{
	(void)f;
	*v = a == 0 ? 1024 : a == 4 ? 32 : 0;
	return need_ctx();
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int b, size_t s)
{
	(void)f;
	(void)s;
	*n = b == 256 ? 4 : 0;
	return need_ctx();
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			unsigned by, unsigned bz, unsigned smem, void *s, void **params,
			void **extra)
{
	(void)f;
	(void)s;
	if (need_ctx() || params || !extra || gx < 1 || gy != 1 || gz != 1 || bx != 256 ||
	    by != 1 || bz != 1 || smem != 0)
		return 1;
	if (extra[0] != (void *)1 || extra[2] != (void *)2 || extra[4] != (void *)0)
		return 1;
	size_t n = *(size_t *)extra[3];
	unsigned char *p = extra[1];
	if (n < 448)
		return 1;
	uint64_t st, out;
	memcpy(&st, p, 8);
	memcpy(&out, p + 16, 8);
	memcpy((unsigned char *)(uintptr_t)st + 8, p + 8, 8);
	memcpy((void *)(uintptr_t)out, p + 16, 432);
	return OK;
}
CUresult cuMemAlloc_v2(uint64_t *p, size_t n)
{
	if (n >= ((size_t)1 << 40))
		return 2;
	*p = (uint64_t)(uintptr_t)calloc(1, n);
	return need_ctx();
}
CUresult cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); return need_ctx(); }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return need_ctx(); }
CUresult cuMemcpyDtoH_v2(void *d, uint64_t s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return need_ctx(); }
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *s, size_t n, void *st) { (void)st; return cuMemcpyHtoD_v2(d, s, n); }
CUresult cuMemcpyDtoHAsync_v2(void *d, uint64_t s, size_t n, void *st) { (void)st; return cuMemcpyDtoH_v2(d, s, n); }
CUresult cuMemsetD32_v2(uint64_t p, unsigned v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((unsigned *)(uintptr_t)p)[i] = v;
	return need_ctx();
}
CUresult cuMemsetD32Async(uint64_t p, unsigned v, size_t n, void *s) { (void)s; return cuMemsetD32_v2(p, v, n); }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { *p = f == 3 ? malloc(n) : NULL; return *p ? need_ctx() : 1; }
CUresult cuMemFreeHost(void *p) { free(p); return need_ctx(); }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned f) { (void)p; (void)n; return f == 3 ? need_ctx() : 1; }
CUresult cuMemHostUnregister(void *p) { (void)p; return need_ctx(); }
CUresult cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned f) { *d = (uint64_t)(uintptr_t)p; return f == 0 ? need_ctx() : 1; }
CUresult cuStreamCreateWithPriority(void **s, unsigned f, int prio) { (void)prio; *s = (void *)0x57; return f == 1 ? need_ctx() : 1; }
CUresult cuStreamDestroy_v2(void *s) { (void)s; return need_ctx(); }
CUresult cuStreamSynchronize(void *s) { (void)s; return need_ctx(); }
CUresult cuStreamQuery(void *s) { return s == (void *)0x57 ? 600 : need_ctx(); }
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = (void *)0xe; return need_ctx(); }
CUresult cuEventDestroy_v2(void *e) { (void)e; return need_ctx(); }
CUresult cuEventRecord(void *e, void *s) { (void)e; (void)s; return need_ctx(); }
CUresult cuEventSynchronize(void *e) { (void)e; return need_ctx(); }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 1.5f; return need_ctx(); }

/* green contexts: SM resources are 144-byte records, smCount at 96 */
CUresult cuDeviceGetDevResource(int d, void *r, int type)
{
	(void)d;
	if (type != 1)
		return 1;
	unsigned n = 4;
	memcpy(r, &type, 4);
	memcpy((char *)r + 96, &n, 4);
	return OK;
}
/* a split into groups of min rounded up to 2 SMs, as many as *nb asks and
 * the input holds, records of 144 bytes (the driver ABI's CUdevResource) */
CUresult cuDevSmResourceSplitByCount(void *res, unsigned *nb, const void *in, void *rem,
				     unsigned flags, unsigned min)
{
	unsigned total, got = (min + 1) / 2 * 2, n, left, sm = 1;
	memcpy(&total, (const char *)in + 96, 4);
	if (*nb < 1 || flags || got > total)
		return 1;
	n = total / got < *nb ? total / got : *nb;
	for (unsigned i = 0; i < n; i++) {
		memcpy((char *)res + 144 * i, &sm, 4);
		memcpy((char *)res + 144 * i + 96, &got, 4);
	}
	left = total - n * got;
	memcpy((char *)rem + 96, &left, 4);
	*nb = n;
	return OK;
}
CUresult cuDevResourceGenerateDesc(void **d, void *r, unsigned n) { (void)r; *d = (void *)0xde5c; return n >= 1 ? OK : 1; }
CUresult cuGreenCtxCreate(void **g, void *desc, int d, unsigned f) { (void)d; *g = (void *)0x9c; return desc == (void *)0xde5c && f == 1 ? OK : 1; }
CUresult cuGreenCtxDestroy(void *g) { return g == (void *)0x9c ? OK : 1; }
CUresult cuCtxFromGreenCtx(void **c, void *g) { *c = CTX2; return g == (void *)0x9c ? OK : 1; }
CUresult cuGreenCtxStreamCreate(void **s, void *g, unsigned f, int prio)
{
	(void)prio;
	*s = (void *)0x58;
	return g == (void *)0x9c && f == 1 && cur == CTX2 ? OK : 1;
}
