//go:build linux && cgo

/*
 * eal.c - EAL start and stop. rte_eal_init runs once per process; Go guards
 * that (dataplane/dpdk.InitEAL).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_version.h>

#include "sl_priv.h"

int sl_eal_init(int argc, char **argv, char *err, size_t errlen)
{
	cpu_set_t saved;
	int have_saved, ret, e;

	/* rte_eal_init pins the calling thread to the main lcore. The caller is
	 * a Go thread; the Go runtime may clone new threads from it, which
	 * would inherit that pinning. Put its affinity back afterwards. */
	have_saved = pthread_getaffinity_np(pthread_self(), sizeof(saved),
					    &saved) == 0;
	ret = rte_eal_init(argc, argv);
	e = rte_errno;
	if (have_saved)
		pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	if (ret < 0) {
		sl_errf(err, errlen, "rte_eal_init: %s (rte_errno %d)",
			rte_strerror(e), e);
		return e > 0 ? -e : -EINVAL;
	}
	return 0;
}

int sl_eal_cleanup(void)
{
	return rte_eal_cleanup();
}

const char *sl_eal_runtime_dir(void)
{
	return rte_eal_get_runtime_dir();
}

const char *sl_version(void)
{
	return rte_version();
}

int sl_eth_exists(const char *name)
{
	uint16_t id;

	return rte_eth_dev_get_port_by_name(name, &id) == 0;
}
