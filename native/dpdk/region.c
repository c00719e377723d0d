//go:build linux && cgo

/*
 * region.c - the packet-buffer region and the mbuf pool that lives in it.
 *
 * Every mbuf of a port (header, headroom, data room) is carved out of one
 * mapping that we make ourselves: MAP_HUGETLB when the host has hugepages,
 * else anonymous memory locked with mlock. The region is registered with
 * rte_extmem_register (with the IOVA of each page) so that devices can DMA
 * into it after rte_dev_dma_map, and so that a GPU backend can later pin the
 * very same range (cuMemHostRegister) and read packet payloads in place.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_memory.h>
#include <rte_mempool.h>

#include "sl_priv.h"

#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif

/* Objects are packed back to back inside each IOVA-contiguous chunk (see
 * sl_pool_create), so the pool never needs an object to straddle an IOVA
 * discontinuity. */
#define SL_POOL_FLAGS RTE_MEMPOOL_F_NO_IOVA_CONTIG

static size_t default_hugepage_size(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	size_t kb = 0;

	if (f == NULL)
		return 2u << 20;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "Hugepagesize: %zu kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb ? kb << 10 : 2u << 20;
}

static uint32_t obj_total_size(uint32_t data_room)
{
	uint32_t elt = sizeof(struct rte_mbuf) + RTE_PKTMBUF_HEADROOM +
		       data_room;

	return rte_mempool_calc_obj_size(elt, SL_POOL_FLAGS, NULL);
}

/* Bytes of region for n mbufs on pages of page_size. When the IOVA of
 * consecutive pages is not consecutive (physical addresses on small pages)
 * objects cannot cross a page, so count whole pages. Returns 0 if an object
 * does not fit a page in that case. */
size_t sl_pool_region_size(uint32_t n, uint32_t data_room, size_t page_size)
{
	size_t total = obj_total_size(data_room);
	size_t bytes;

	if (rte_eal_iova_mode() == RTE_IOVA_VA) {
		bytes = total * (size_t)n;
	} else {
		size_t per_page = page_size / total;

		if (per_page == 0)
			return 0;
		bytes = ((n + per_page - 1) / per_page) * page_size;
	}
	return RTE_ALIGN_CEIL(bytes, page_size);
}

static int region_iovas(struct sl_region *r, char *err, size_t errlen)
{
	unsigned int i;

	r->n_pages = r->size / r->page_size;
	r->iovas = calloc(r->n_pages, sizeof(*r->iovas));
	if (r->iovas == NULL) {
		sl_errf(err, errlen, "region: out of memory for %u IOVAs",
			r->n_pages);
		return -ENOMEM;
	}
	for (i = 0; i < r->n_pages; i++) {
		void *va = RTE_PTR_ADD(r->base, (size_t)i * r->page_size);

		if (rte_eal_iova_mode() == RTE_IOVA_VA)
			r->iovas[i] = (rte_iova_t)(uintptr_t)va;
		else
			r->iovas[i] = rte_mem_virt2phy(va);
	}
	return 0;
}

int sl_region_alloc(struct sl_region *r, uint32_t n, uint32_t data_room,
		    int huge_mode, char *err, size_t errlen)
{
	void *base = MAP_FAILED;
	size_t size = 0, pg;
	int ret;

	memset(r, 0, sizeof(*r));

	if (huge_mode != SL_HUGE_NEVER) {
		pg = default_hugepage_size();
		size = sl_pool_region_size(n, data_room, pg);
		if (size != 0)
			base = mmap(NULL, size, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB |
				    MAP_POPULATE, -1, 0);
		if (base != MAP_FAILED) {
			r->huge = 1;
			r->locked = 1; /* hugetlb pages are never swapped */
			r->page_size = pg;
		} else if (huge_mode == SL_HUGE_REQUIRE) {
			sl_errf(err, errlen,
				"region: mmap %zu bytes MAP_HUGETLB (page %zu): %s",
				size, pg, strerror(errno));
			return -ENOMEM;
		}
	}
	if (base == MAP_FAILED) {
		pg = (size_t)sysconf(_SC_PAGESIZE);
		size = sl_pool_region_size(n, data_room, pg);
		if (size == 0) {
			sl_errf(err, errlen,
				"region: an mbuf of data room %u does not fit a "
				"%zu-byte page and IOVAs are physical: use "
				"hugepages or IOVA-as-VA", data_room, pg);
			return -EINVAL;
		}
		base = mmap(NULL, size, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (base == MAP_FAILED) {
			sl_errf(err, errlen, "region: mmap %zu bytes: %s",
				size, strerror(errno));
			return -ENOMEM;
		}
		r->page_size = pg;
		/* mlock also faults every page in. */
		r->locked = mlock(base, size) == 0;
		if (!r->locked)
			memset(base, 0, size);
	}
	r->base = base;
	r->size = size;
	/* Packet memory must not be copied-on-write into a forked child. */
	madvise(base, size, MADV_DONTFORK);

	ret = region_iovas(r, err, errlen);
	if (ret < 0)
		goto fail;
	if (rte_extmem_register(r->base, r->size, r->iovas, r->n_pages,
				r->page_size) != 0) {
		ret = -rte_errno;
		sl_errf(err, errlen, "region: rte_extmem_register(%p, %zu): %s",
			r->base, r->size, rte_strerror(rte_errno));
		goto fail;
	}
	r->registered = 1;
	return 0;
fail:
	sl_region_free(r);
	return ret < 0 ? ret : -EINVAL;
}

void sl_region_free(struct sl_region *r)
{
	if (r->registered)
		rte_extmem_unregister(r->base, r->size);
	if (r->base != NULL && r->base != MAP_FAILED) {
		if (r->locked && !r->huge)
			munlock(r->base, r->size);
		munmap(r->base, r->size);
	}
	free(r->iovas);
	memset(r, 0, sizeof(*r));
}

struct rte_mempool *sl_pool_create(struct sl_region *r, const char *name,
				   uint32_t n, uint32_t data_room,
				   char *err, size_t errlen)
{
	struct rte_pktmbuf_pool_private priv;
	struct rte_mempool *mp;
	uint32_t elt = sizeof(struct rte_mbuf) + RTE_PKTMBUF_HEADROOM +
		       data_room;
	int ret;

	/* No per-lcore cache: our I/O threads are Go threads, not EAL lcores,
	 * so a cache would never be used, and BufInUse stays exact. */
	mp = rte_mempool_create_empty(name, n, elt, 0, sizeof(priv),
				      SOCKET_ID_ANY, SL_POOL_FLAGS);
	if (mp == NULL) {
		sl_errf(err, errlen, "pool %s: rte_mempool_create_empty(%u x %u): %s",
			name, n, elt, rte_strerror(rte_errno));
		return NULL;
	}
	/* A stack (LIFO): the mbuf a burst takes next is the one freed last,
	 * still in cache, where the default ring (FIFO) hands out the one
	 * freed longest ago, which a pool larger than the cache has evicted;
	 * the PMD's write of each frame then misses. dpbench measures it
	 * (twice the raw rx_burst rate on a 2-core Xeon). Where the stack
	 * driver is not loaded, the platform's best ops serve. */
	ret = rte_mempool_set_ops_byname(mp, "stack", NULL);
	if (ret != 0)
		ret = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(),
						 NULL);
	if (ret != 0) {
		sl_errf(err, errlen, "pool %s: set ops %s: %s", name,
			rte_mbuf_best_mempool_ops(), rte_strerror(-ret));
		goto fail;
	}
	memset(&priv, 0, sizeof(priv));
	priv.mbuf_data_room_size = (uint16_t)(RTE_PKTMBUF_HEADROOM + data_room);
	priv.mbuf_priv_size = 0;
	rte_pktmbuf_pool_init(mp, &priv);

	ret = rte_mempool_populate_virt(mp, r->base, r->size, r->page_size,
					NULL, NULL);
	if (ret < 0) {
		sl_errf(err, errlen, "pool %s: populate %p+%zu: %s", name,
			r->base, r->size, rte_strerror(-ret));
		goto fail;
	}
	if (mp->populated_size != n) {
		sl_errf(err, errlen,
			"pool %s: region of %zu bytes holds %u of %u mbufs",
			name, r->size, mp->populated_size, n);
		goto fail;
	}
	rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
	return mp;
fail:
	rte_mempool_free(mp);
	return NULL;
}
