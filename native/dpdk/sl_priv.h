/*
 * sl_priv.h - state shared by the .c files of the binding; not seen by Go.
 */
#ifndef SL_PRIV_H
#define SL_PRIV_H

#include <stdarg.h>
#include <stdio.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "sl_dpdk.h"

/* The buffer region: one mapping holding every mbuf of the port's pool. */
struct sl_region {
	void *base;
	size_t size;
	size_t page_size;
	int huge;
	int locked;
	int registered; /* rte_extmem_register done */
	rte_iova_t *iovas; /* one per page, as registered */
	unsigned int n_pages;
};

struct sl_port {
	uint16_t port_id;
	uint16_t burst;
	uint8_t ip[4];
	uint16_t udp_port_be;
	int any_ip;
	int verify_udp;
	int hotplugged;
	int started;
	int dma_mapped;
	struct rte_ether_addr mac;
	struct rte_device *dev;
	char name[RTE_ETH_NAME_MAX_LEN];

	struct sl_region region;
	struct rte_mempool *pool;

	/* burst arrays, sized burst */
	struct sl_rx_meta *rx;
	struct rte_mbuf **rx_mbufs; /* raw rx_burst output */
	struct rte_mbuf **drop;     /* filtered frames, freed in bulk */
	struct rte_mbuf **arp;      /* ARP replies, sent in bulk */
	struct rte_mbuf **tx_mbufs;
	uint8_t **tx_data;
	uint16_t *tx_len;
	uint16_t tx_alloced;

	/* sl_rx_raw_hold's frames, oldest first: a ring of held_cap (the
	 * pool's size, allocated on first use) */
	struct rte_mbuf **held;
	uint32_t held_cap, held_head, held_n;

	/* counters: written by the I/O thread only (relaxed atomic stores),
	 * read by any thread (relaxed atomic loads). */
	uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes, tx_failed;
	uint64_t filtered[SL_F_MAX];
	uint64_t arp_replies, arp_tx_failed;
};

/* Single-writer counter update. */
static inline void sl_add(uint64_t *c, uint64_t v)
{
	if (v != 0)
		__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v,
				 __ATOMIC_RELAXED);
}

static inline uint64_t sl_load(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* snprintf into an error buffer that may be NULL. */
__attribute__((format(printf, 3, 4)))
static inline void sl_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* region.c */
int sl_region_alloc(struct sl_region *r, uint32_t n, uint32_t data_room,
		    int huge_mode,
		    char *err, size_t errlen);
void sl_region_free(struct sl_region *r);
struct rte_mempool *sl_pool_create(struct sl_region *r, const char *name,
				   uint32_t n, uint32_t data_room,
				   char *err, size_t errlen);
size_t sl_pool_region_size(uint32_t n, uint32_t data_room, size_t page_size);

/* rx.c: frees sl_rx_raw_hold's frames and ring (teardown). */
void sl_rx_held_free(struct sl_port *p);

#endif /* SL_PRIV_H */
