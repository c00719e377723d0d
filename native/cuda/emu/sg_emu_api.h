/*
 * sg_emu_api.h: the emulator's C interface (for libml/cuda's tests, via
 * cgo). Memory is host memory: a "device pointer" is a host address.
 */
#ifndef SG_EMU_API_H
#define SG_EMU_API_H

#ifdef __cplusplus
extern "C" {
#endif

/* sg_emu_kernels writes the registered kernel names, space-separated, to
 * buf; returns the length or -1 when len is too small. */
int sg_emu_kernels(char *buf, int len);

/* sg_emu_launch runs kernel name over grid blocks of block threads with
 * the packed parameter buffer params (the PTX layout). nsm: SMs behind
 * %smid. reverse: run the blocks last to first. If pre_block >= 0, the
 * flag at pre_flag (0: the launch's stream flag, parameter 0) is set
 * before block pre_block starts (pre_syncs <= 0) or once it has completed
 * pre_syncs barriers. Returns 0, or -1 with a message in err. */
int sg_emu_launch(const char *name, unsigned grid, unsigned block,
		  const void *params, int nsm, int reverse, long long pre_block,
		  long long pre_syncs, unsigned long long pre_flag, char *err,
		  int errlen);

#ifdef __cplusplus
}
#endif

#endif /* SG_EMU_API_H */
