/*
 * cudrv.c: the CUDA driver API through dlopen (see cudrv.h).
 */
#include "cudrv.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The entry points, by their exported names (the _v2 names are the ABI
 * the unversioned cuda.h names map to). */
#define SL_REQUIRED(X)                                                         \
	X(cuInit, CUresult, (unsigned))                                        \
	X(cuDriverGetVersion, CUresult, (int *))                               \
	X(cuGetErrorName, CUresult, (CUresult, const char **))                 \
	X(cuGetErrorString, CUresult, (CUresult, const char **))               \
	X(cuDeviceGetCount, CUresult, (int *))                                 \
	X(cuDeviceGet, CUresult, (CUdevice *, int))                            \
	X(cuDeviceGetName, CUresult, (char *, int, CUdevice))                  \
	X(cuDeviceGetAttribute, CUresult, (int *, int, CUdevice))              \
	X(cuDeviceTotalMem_v2, CUresult, (size_t *, CUdevice))                 \
	X(cuCtxCreate_v2, CUresult, (CUcontext *, unsigned, CUdevice))         \
	X(cuCtxDestroy_v2, CUresult, (CUcontext))                              \
	X(cuCtxSetCurrent, CUresult, (CUcontext))                              \
	X(cuCtxSynchronize, CUresult, (void))                                  \
	X(cuModuleLoadDataEx, CUresult,                                        \
	  (CUmodule *, const void *, unsigned, int *, void **))                \
	X(cuModuleUnload, CUresult, (CUmodule))                                \
	X(cuModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *)) \
	X(cuFuncGetAttribute, CUresult, (int *, int, CUfunction))              \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessor, CUresult,               \
	  (int *, CUfunction, int, size_t))                                    \
	X(cuLaunchKernel, CUresult,                                            \
	  (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,       \
	   unsigned, unsigned, CUstream, void **, void **))                    \
	X(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))                    \
	X(cuMemFree_v2, CUresult, (CUdeviceptr))                               \
	X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr, const void *, size_t))      \
	X(cuMemcpyDtoH_v2, CUresult, (void *, CUdeviceptr, size_t))            \
	X(cuMemcpyHtoDAsync_v2, CUresult,                                      \
	  (CUdeviceptr, const void *, size_t, CUstream))                       \
	X(cuMemcpyDtoHAsync_v2, CUresult, (void *, CUdeviceptr, size_t, CUstream)) \
	X(cuMemsetD32_v2, CUresult, (CUdeviceptr, unsigned, size_t))           \
	X(cuMemsetD32Async, CUresult, (CUdeviceptr, unsigned, size_t, CUstream)) \
	X(cuMemHostAlloc, CUresult, (void **, size_t, unsigned))               \
	X(cuMemFreeHost, CUresult, (void *))                                   \
	X(cuMemHostRegister_v2, CUresult, (void *, size_t, unsigned))          \
	X(cuMemHostUnregister, CUresult, (void *))                             \
	X(cuMemHostGetDevicePointer_v2, CUresult, (CUdeviceptr *, void *, unsigned)) \
	X(cuStreamCreateWithPriority, CUresult, (CUstream *, unsigned, int))   \
	X(cuStreamDestroy_v2, CUresult, (CUstream))                            \
	X(cuStreamSynchronize, CUresult, (CUstream))                           \
	X(cuStreamQuery, CUresult, (CUstream))                                 \
	X(cuEventCreate, CUresult, (CUevent *, unsigned))                      \
	X(cuEventDestroy_v2, CUresult, (CUevent))                              \
	X(cuEventRecord, CUresult, (CUevent, CUstream))                        \
	X(cuEventSynchronize, CUresult, (CUevent))                             \
	X(cuEventElapsedTime, CUresult, (float *, CUevent, CUevent))

#define SL_OPTIONAL(X)                                                         \
	X(cuDeviceGetDevResource, CUresult, (CUdevice, void *, int))           \
	X(cuDevSmResourceSplitByCount, CUresult,                               \
	  (void *, unsigned *, const void *, void *, unsigned, unsigned))      \
	X(cuDevResourceGenerateDesc, CUresult, (CUdevResourceDesc *, void *, unsigned)) \
	X(cuGreenCtxCreate, CUresult, (CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned)) \
	X(cuGreenCtxDestroy, CUresult, (CUgreenCtx))                           \
	X(cuCtxFromGreenCtx, CUresult, (CUcontext *, CUgreenCtx))              \
	X(cuGreenCtxStreamCreate, CUresult, (CUstream *, CUgreenCtx, unsigned, int)) \
	X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))         \
	X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice))

#define SL_FIELD(name, ret, args) ret(*name) args;
static struct {
	void *lib;
	SL_REQUIRED(SL_FIELD)
	SL_OPTIONAL(SL_FIELD)
} F;

int sl_cu_open(const char *libname, char *err, int errlen)
{
	void *lib = dlopen(libname ? libname : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(err, (size_t)errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	if (F.lib) {
		/* loaded before: keep the first handle */
		dlclose(lib);
		return 0;
	}
#define SL_LOAD(name, ret, args)                                                     \
	*(void **)&F.name = dlsym(lib, #name);                                     \
	if (!F.name) {                                                             \
		snprintf(err, (size_t)errlen, "libcuda has no %s", #name);         \
		dlclose(lib);                                                      \
		memset(&F, 0, sizeof F);                                           \
		return 2;                                                          \
	}
	SL_REQUIRED(SL_LOAD)
#define SL_LOAD_OPT(name, ret, args) *(void **)&F.name = dlsym(lib, #name);
	SL_OPTIONAL(SL_LOAD_OPT)
	F.lib = lib;
	return 0;
}

int sl_cu_has_green(void)
{
	return F.cuDeviceGetDevResource && F.cuDevSmResourceSplitByCount &&
	       F.cuDevResourceGenerateDesc && F.cuGreenCtxCreate &&
	       F.cuGreenCtxDestroy && F.cuCtxFromGreenCtx && F.cuGreenCtxStreamCreate;
}

void sl_cu_error(CUresult r, const char **name, const char **msg)
{
	*name = NULL;
	*msg = NULL;
	if (F.cuGetErrorName)
		F.cuGetErrorName(r, name);
	if (F.cuGetErrorString)
		F.cuGetErrorString(r, msg);
}

#define CTX(c)                                          \
	do {                                            \
		CUresult _r = F.cuCtxSetCurrent(c);     \
		if (_r)                                 \
			return _r;                      \
	} while (0)

CUresult sl_cu_init(void) { return F.cuInit(0); }
CUresult sl_cu_driver_version(int *v) { return F.cuDriverGetVersion(v); }
CUresult sl_cu_device_count(int *n) { return F.cuDeviceGetCount(n); }
CUresult sl_cu_device_get(CUdevice *d, int ordinal) { return F.cuDeviceGet(d, ordinal); }
CUresult sl_cu_device_name(char *buf, int len, CUdevice d) { return F.cuDeviceGetName(buf, len, d); }
CUresult sl_cu_device_attr(int *v, int attr, CUdevice d) { return F.cuDeviceGetAttribute(v, attr, d); }
CUresult sl_cu_device_mem(size_t *bytes, CUdevice d) { return F.cuDeviceTotalMem_v2(bytes, d); }
CUresult sl_cu_ctx_create(CUcontext *c, unsigned flags, CUdevice d) { return F.cuCtxCreate_v2(c, flags, d); }
CUresult sl_cu_ctx_destroy(CUcontext c) { return F.cuCtxDestroy_v2(c); }

CUresult sl_cu_ctx_sync(CUcontext c)
{
	CTX(c);
	return F.cuCtxSynchronize();
}

CUresult sl_cu_module_load(CUcontext c, CUmodule *m, const void *image, char *log,
			   unsigned loglen)
{
	CTX(c);
	/* CU_JIT_ERROR_LOG_BUFFER (5), CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES (6) */
	int opts[2] = {5, 6};
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	if (loglen)
		log[0] = 0;
	return F.cuModuleLoadDataEx(m, image, loglen ? 2 : 0, opts, vals);
}

CUresult sl_cu_module_unload(CUcontext c, CUmodule m)
{
	CTX(c);
	return F.cuModuleUnload(m);
}

CUresult sl_cu_module_function(CUcontext c, CUfunction *f, CUmodule m, const char *name)
{
	CTX(c);
	return F.cuModuleGetFunction(f, m, name);
}

CUresult sl_cu_func_attr(CUcontext c, int *v, int attr, CUfunction f)
{
	CTX(c);
	return F.cuFuncGetAttribute(v, attr, f);
}

CUresult sl_cu_occupancy(CUcontext c, int *blocks, CUfunction f, int block, size_t smem)
{
	CTX(c);
	return F.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, block, smem);
}

CUresult sl_cu_launch(CUcontext c, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		      unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
		      void *params, size_t size)
{
	CTX(c);
	/* CU_LAUNCH_PARAM_BUFFER_POINTER (1), _SIZE (2), _END (0) */
	void *extra[5] = {(void *)(uintptr_t)1, params, (void *)(uintptr_t)2, &size,
			  (void *)(uintptr_t)0};
	return F.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, NULL, extra);
}

CUresult sl_cu_mem_alloc(CUcontext c, CUdeviceptr *p, size_t n)
{
	CTX(c);
	return F.cuMemAlloc_v2(p, n);
}

CUresult sl_cu_mem_free(CUcontext c, CUdeviceptr p)
{
	CTX(c);
	return F.cuMemFree_v2(p);
}

CUresult sl_cu_memcpy_htod(CUcontext c, CUdeviceptr dst, const void *src, size_t n)
{
	CTX(c);
	return F.cuMemcpyHtoD_v2(dst, src, n);
}

CUresult sl_cu_memcpy_dtoh(CUcontext c, void *dst, CUdeviceptr src, size_t n)
{
	CTX(c);
	return F.cuMemcpyDtoH_v2(dst, src, n);
}

CUresult sl_cu_memcpy_htod_async(CUcontext c, CUdeviceptr dst, const void *src, size_t n,
				 CUstream s)
{
	CTX(c);
	return F.cuMemcpyHtoDAsync_v2(dst, src, n, s);
}

CUresult sl_cu_memcpy_dtoh_async(CUcontext c, void *dst, CUdeviceptr src, size_t n,
				 CUstream s)
{
	CTX(c);
	return F.cuMemcpyDtoHAsync_v2(dst, src, n, s);
}

CUresult sl_cu_memset32(CUcontext c, CUdeviceptr p, unsigned v, size_t n)
{
	CTX(c);
	return F.cuMemsetD32_v2(p, v, n);
}

CUresult sl_cu_memset32_async(CUcontext c, CUdeviceptr p, unsigned v, size_t n, CUstream s)
{
	CTX(c);
	return F.cuMemsetD32Async(p, v, n, s);
}

CUresult sl_cu_host_alloc(CUcontext c, void **p, size_t n, unsigned flags)
{
	CTX(c);
	return F.cuMemHostAlloc(p, n, flags);
}

CUresult sl_cu_host_free(CUcontext c, void *p)
{
	CTX(c);
	return F.cuMemFreeHost(p);
}

CUresult sl_cu_host_register(CUcontext c, void *p, size_t n, unsigned flags)
{
	CTX(c);
	return F.cuMemHostRegister_v2(p, n, flags);
}

CUresult sl_cu_host_unregister(CUcontext c, void *p)
{
	CTX(c);
	return F.cuMemHostUnregister(p);
}

CUresult sl_cu_host_devptr(CUcontext c, CUdeviceptr *d, void *p)
{
	CTX(c);
	return F.cuMemHostGetDevicePointer_v2(d, p, 0);
}

CUresult sl_cu_stream_create(CUcontext c, CUstream *s, unsigned flags, int prio)
{
	CTX(c);
	return F.cuStreamCreateWithPriority(s, flags, prio);
}

CUresult sl_cu_stream_destroy(CUcontext c, CUstream s)
{
	CTX(c);
	return F.cuStreamDestroy_v2(s);
}

CUresult sl_cu_stream_sync(CUcontext c, CUstream s)
{
	CTX(c);
	return F.cuStreamSynchronize(s);
}

CUresult sl_cu_stream_query(CUcontext c, CUstream s)
{
	CTX(c);
	return F.cuStreamQuery(s);
}

CUresult sl_cu_event_create(CUcontext c, CUevent *e, unsigned flags)
{
	CTX(c);
	return F.cuEventCreate(e, flags);
}

CUresult sl_cu_event_destroy(CUcontext c, CUevent e)
{
	CTX(c);
	return F.cuEventDestroy_v2(e);
}

CUresult sl_cu_event_record(CUcontext c, CUevent e, CUstream s)
{
	CTX(c);
	return F.cuEventRecord(e, s);
}

CUresult sl_cu_event_sync(CUcontext c, CUevent e)
{
	CTX(c);
	return F.cuEventSynchronize(e);
}

CUresult sl_cu_event_elapsed(CUcontext c, float *ms, CUevent a, CUevent b)
{
	CTX(c);
	return F.cuEventElapsedTime(ms, a, b);
}

/* CUDA_ERROR_NOT_SUPPORTED */
#define SL_NOT_SUPPORTED 801
#define SL_INVALID_VALUE 1 /* CUDA_ERROR_INVALID_VALUE */

/* sl_cu_split splits the device's SMs once into its smallest groups
 * (zeroed, oversized records, see cudrv.h): *n groups of *gran SMs. */
static CUresult sl_cu_split(CUdevice d, unsigned char *groups, unsigned *n, unsigned *gran)
{
	_Alignas(16) unsigned char all[SL_RES_BYTES], rest[SL_RES_BYTES];
	memset(all, 0, sizeof all);
	memset(rest, 0, sizeof rest);
	memset(groups, 0, SL_GROUPS_BYTES);
	/* CU_DEV_RESOURCE_TYPE_SM = 1 */
	CUresult r = F.cuDeviceGetDevResource(d, all, 1);
	if (r)
		return r;
	/* the results of a split cannot be split again, but groups of the
	 * same split combine into one partition: a range is a run of
	 * consecutive groups. The split may make fewer groups than SMs over
	 * the group size (clusters, GPCs). */
	*n = SL_MAX_GROUPS;
	r = F.cuDevSmResourceSplitByCount(groups, n, all, rest, 0, 1);
	if (r)
		return r;
	memcpy(gran, groups + SL_RES_SMCOUNT, sizeof *gran);
	if (*n < 1 || *gran < 1 || *n > SL_MAX_GROUPS)
		return SL_NOT_SUPPORTED;
	if (*n > 1) {
		/* the record size the stride assumes: the second group is an SM
		 * resource of the same size */
		unsigned type, c2;
		memcpy(&type, groups + SL_RES_STRIDE, sizeof type);
		memcpy(&c2, groups + SL_RES_STRIDE + SL_RES_SMCOUNT, sizeof c2);
		if (type != 1 || c2 != *gran)
			return SL_NOT_SUPPORTED;
	}
	return 0;
}

CUresult sl_cu_sm_groups(CUdevice d, unsigned *n, unsigned *gran)
{
	if (!sl_cu_has_green())
		return SL_NOT_SUPPORTED;
	_Alignas(16) unsigned char groups[SL_GROUPS_BYTES];
	return sl_cu_split(d, groups, n, gran);
}

CUresult sl_cu_green_range(CUdevice d, unsigned first, unsigned sms, CUgreenCtx *g,
			   CUcontext *c, unsigned *got)
{
	if (!sl_cu_has_green())
		return SL_NOT_SUPPORTED;
	_Alignas(16) unsigned char groups[SL_GROUPS_BYTES];
	unsigned n, gran;
	CUresult r = sl_cu_split(d, groups, &n, &gran);
	if (r)
		return r;
	unsigned i0 = first / gran, k = (sms + gran - 1) / gran;
	if (first % gran != 0 || k < 1 || i0 + k > n)
		return SL_INVALID_VALUE;
	*got = k * gran;
	CUdevResourceDesc desc;
	r = F.cuDevResourceGenerateDesc(&desc, groups + (size_t)i0 * SL_RES_STRIDE, k);
	if (r)
		return r;
	/* CU_GREEN_CTX_DEFAULT_STREAM = 1 */
	r = F.cuGreenCtxCreate(g, desc, d, 1);
	if (r)
		return r;
	r = F.cuCtxFromGreenCtx(c, *g);
	if (r) {
		F.cuGreenCtxDestroy(*g);
		return r;
	}
	return 0;
}

CUresult sl_cu_green_destroy(CUgreenCtx g) { return F.cuGreenCtxDestroy(g); }

CUresult sl_cu_green_stream(CUgreenCtx g, CUcontext c, CUstream *s, int prio)
{
	CTX(c);
	/* CU_STREAM_NON_BLOCKING = 1, required for green-context streams */
	return F.cuGreenCtxStreamCreate(s, g, 1, prio);
}

CUresult sl_cu_primary_retain(CUcontext *c, CUdevice d)
{
	if (!F.cuDevicePrimaryCtxRetain || !F.cuDevicePrimaryCtxRelease_v2)
		return SL_NOT_SUPPORTED;
	return F.cuDevicePrimaryCtxRetain(c, d);
}

CUresult sl_cu_primary_release(CUdevice d)
{
	if (!F.cuDevicePrimaryCtxRelease_v2)
		return SL_NOT_SUPPORTED;
	return F.cuDevicePrimaryCtxRelease_v2(d);
}
