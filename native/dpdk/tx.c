//go:build linux && cgo

/*
 * tx.c - the transmit burst (allocate in bulk, Go writes the frames, send in
 * bulk) and the bulk release of receive buffers.
 */
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "sl_priv.h"

uint16_t sl_tx_alloc(struct sl_port *p, uint16_t n)
{
	uint16_t i;

	if (n > p->burst)
		n = p->burst;
	/* All or nothing: on a short pool, retry with what it still has. */
	while (n > 0 && rte_pktmbuf_alloc_bulk(p->pool, p->tx_mbufs, n) != 0) {
		unsigned int avail = rte_mempool_avail_count(p->pool);

		n = avail < n ? (uint16_t)avail : (uint16_t)(n / 2);
	}
	for (i = 0; i < n; i++)
		p->tx_data[i] = rte_pktmbuf_mtod(p->tx_mbufs[i], uint8_t *);
	p->tx_alloced = n;
	return n;
}

uint16_t sl_tx_send(struct sl_port *p, uint16_t n)
{
	uint64_t bytes = 0;
	uint16_t i, sent = 0, tries;

	if (n > p->tx_alloced)
		n = p->tx_alloced;
	if (p->tx_alloced > n)
		rte_pktmbuf_free_bulk(p->tx_mbufs + n, p->tx_alloced - n);
	p->tx_alloced = 0;
	for (i = 0; i < n; i++) {
		struct rte_mbuf *m = p->tx_mbufs[i];

		m->data_len = p->tx_len[i];
		m->pkt_len = p->tx_len[i];
	}
	/* A full descriptor ring drains quickly; give it two more chances. */
	for (tries = 0; tries < 3 && sent < n; tries++)
		sent += rte_eth_tx_burst(p->port_id, 0, p->tx_mbufs + sent,
					 n - sent);
	if (sent < n)
		rte_pktmbuf_free_bulk(p->tx_mbufs + sent, n - sent);
	for (i = 0; i < sent; i++)
		bytes += p->tx_len[i] - SL_TX_HDR_LEN;
	sl_add(&p->tx_packets, sent);
	sl_add(&p->tx_bytes, bytes);
	sl_add(&p->tx_failed, n - sent);
	return sent;
}

void sl_release(const uint64_t *mbufs, uint32_t n)
{
	/* BufRef is the mbuf pointer as a 64-bit integer; on the 64-bit
	 * targets DPDK supports the two have the same representation. */
	RTE_BUILD_BUG_ON(sizeof(void *) != sizeof(uint64_t));
	if (n != 0)
		rte_pktmbuf_free_bulk((struct rte_mbuf **)(uintptr_t)mbufs, n);
}
