/*
 * cudrv.h: the slice of the CUDA driver API that sluice uses, declared
 * here (no CUDA headers needed) and resolved at run time with dlopen +
 * dlsym, so nothing links against libcuda. Every call that works in a
 * context takes it and makes it current first, in the same cgo call (Go
 * moves goroutines between OS threads; CUDA's current context is per
 * thread).
 */
#ifndef SL_CUDRV_H
#define SL_CUDRV_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef struct CUdevResourceDesc_st *CUdevResourceDesc;

/* CUdevResource is 144 bytes in the ABI of the entry points we resolve
 * (CUDA 12.4..13: type at 0, the SM resource's smCount at 96). A single
 * record gets 512 bytes to be safe; an array of a split's groups is laid
 * out at SL_RES_STRIDE, which sl_cu_green_range checks on the second
 * group before it trusts it. */
#define SL_RES_BYTES 512
#define SL_RES_SMCOUNT 96
#define SL_RES_STRIDE 144
#define SL_MAX_GROUPS 64
#define SL_GROUPS_BYTES ((SL_MAX_GROUPS + 1) * SL_RES_STRIDE + SL_RES_BYTES)

/* sl_cu_open loads libname (NULL: "libcuda.so.1") and resolves the entry
 * points. Returns 0, 1 when the library is missing (err says why), 2 when
 * a required entry point is missing. Idempotent after success. */
int sl_cu_open(const char *libname, char *err, int errlen);
/* sl_cu_has_green reports whether the green-context entry points exist. */
int sl_cu_has_green(void);
void sl_cu_error(CUresult r, const char **name, const char **msg);

CUresult sl_cu_init(void);
CUresult sl_cu_driver_version(int *v);
CUresult sl_cu_device_count(int *n);
CUresult sl_cu_device_get(CUdevice *d, int ordinal);
CUresult sl_cu_device_name(char *buf, int len, CUdevice d);
CUresult sl_cu_device_attr(int *v, int attr, CUdevice d);
CUresult sl_cu_device_mem(size_t *bytes, CUdevice d);
CUresult sl_cu_ctx_create(CUcontext *c, unsigned flags, CUdevice d);
CUresult sl_cu_ctx_destroy(CUcontext c);
CUresult sl_cu_ctx_sync(CUcontext c);
/* The device's primary context (optional entry points: CUDA_ERROR_NOT_SUPPORTED
 * when missing). Green contexts share its memory. */
CUresult sl_cu_primary_retain(CUcontext *c, CUdevice d);
CUresult sl_cu_primary_release(CUdevice d);

CUresult sl_cu_module_load(CUcontext c, CUmodule *m, const void *image,
			   char *log, unsigned loglen);
CUresult sl_cu_module_unload(CUcontext c, CUmodule m);
CUresult sl_cu_module_function(CUcontext c, CUfunction *f, CUmodule m, const char *name);
CUresult sl_cu_func_attr(CUcontext c, int *v, int attr, CUfunction f);
CUresult sl_cu_occupancy(CUcontext c, int *blocks, CUfunction f, int block, size_t smem);
/* sl_cu_launch launches f with a packed parameter buffer (the kernel's
 * PTX parameter layout), through CU_LAUNCH_PARAM_BUFFER_POINTER. */
CUresult sl_cu_launch(CUcontext c, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		      unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
		      void *params, size_t size);

CUresult sl_cu_mem_alloc(CUcontext c, CUdeviceptr *p, size_t n);
CUresult sl_cu_mem_free(CUcontext c, CUdeviceptr p);
CUresult sl_cu_memcpy_htod(CUcontext c, CUdeviceptr dst, const void *src, size_t n);
CUresult sl_cu_memcpy_dtoh(CUcontext c, void *dst, CUdeviceptr src, size_t n);
CUresult sl_cu_memcpy_htod_async(CUcontext c, CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult sl_cu_memcpy_dtoh_async(CUcontext c, void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult sl_cu_memset32(CUcontext c, CUdeviceptr p, unsigned v, size_t n);
CUresult sl_cu_memset32_async(CUcontext c, CUdeviceptr p, unsigned v, size_t n, CUstream s);
CUresult sl_cu_host_alloc(CUcontext c, void **p, size_t n, unsigned flags);
CUresult sl_cu_host_free(CUcontext c, void *p);
CUresult sl_cu_host_register(CUcontext c, void *p, size_t n, unsigned flags);
CUresult sl_cu_host_unregister(CUcontext c, void *p);
CUresult sl_cu_host_devptr(CUcontext c, CUdeviceptr *d, void *p);

CUresult sl_cu_stream_create(CUcontext c, CUstream *s, unsigned flags, int prio);
CUresult sl_cu_stream_destroy(CUcontext c, CUstream s);
CUresult sl_cu_stream_sync(CUcontext c, CUstream s);
CUresult sl_cu_stream_query(CUcontext c, CUstream s);
CUresult sl_cu_event_create(CUcontext c, CUevent *e, unsigned flags);
CUresult sl_cu_event_destroy(CUcontext c, CUevent e);
CUresult sl_cu_event_record(CUcontext c, CUevent e, CUstream s);
CUresult sl_cu_event_sync(CUcontext c, CUevent e);
CUresult sl_cu_event_elapsed(CUcontext c, float *ms, CUevent a, CUevent b);

/* Green contexts (driver API 12.4+): a partition of smCount SMs split off
 * the device's (or rem's, when non-NULL) SM resource; rem receives the
 * rest. */
/* sl_cu_green_range makes a green context of the SMs [first, first+sms)
 * of the device split into its smallest groups (cuDevSmResourceSplitByCount:
 * disjoint, in a fixed order; first a multiple of the group size, sms
 * rounded up to it, *got says to what), so that ranges that do not
 * overlap are partitions that share no SM. */
CUresult sl_cu_green_range(CUdevice d, unsigned first, unsigned sms, CUgreenCtx *g,
			   CUcontext *c, unsigned *got);
/* sl_cu_sm_groups is the split sl_cu_green_range cuts ranges from: n
 * groups of gran SMs. */
CUresult sl_cu_sm_groups(CUdevice d, unsigned *n, unsigned *gran);
CUresult sl_cu_green_destroy(CUgreenCtx g);
CUresult sl_cu_green_stream(CUgreenCtx g, CUcontext c, CUstream *s, int prio);

#endif /* SL_CUDRV_H */
