//go:build linux && cgo

/*
 * rx.c - the receive burst: one call receives, parses, filters and answers
 * ARP for up to a burst of frames.
 */
#include <stdlib.h>
#include <string.h>

#include <rte_arp.h>
#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include "sl_priv.h"

#define ETH_P_IPV4 0x0800
#define ETH_P_ARP 0x0806
#define ETH_P_VLAN 0x8100

/* Turns an ARP request for our address into the reply, in place. Returns 1
 * if the frame is now a reply to send. */
static int arp_answer(struct sl_port *p, struct rte_ether_hdr *eth,
		      struct rte_arp_hdr *arp)
{
	struct rte_arp_ipv4 *a = &arp->arp_data;

	if (arp->arp_hardware != rte_cpu_to_be_16(RTE_ARP_HRD_ETHER) ||
	    arp->arp_protocol != rte_cpu_to_be_16(ETH_P_IPV4) ||
	    arp->arp_hlen != RTE_ETHER_ADDR_LEN || arp->arp_plen != 4 ||
	    arp->arp_opcode != rte_cpu_to_be_16(RTE_ARP_OP_REQUEST) ||
	    memcmp(&a->arp_tip, p->ip, 4) != 0)
		return 0;

	rte_ether_addr_copy(&eth->src_addr, &eth->dst_addr);
	rte_ether_addr_copy(&p->mac, &eth->src_addr);
	arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REPLY);
	rte_ether_addr_copy(&a->arp_sha, &a->arp_tha);
	a->arp_tip = a->arp_sip;
	rte_ether_addr_copy(&p->mac, &a->arp_sha);
	memcpy(&a->arp_sip, p->ip, 4);
	return 1;
}

/* Parses one frame. Returns -1 and fills *e when it is a UDP datagram for
 * us, else the filter reason. *arp is set when the frame became an ARP
 * reply. */
static inline int parse(struct sl_port *p, struct rte_mbuf *m,
			struct sl_rx_meta *e, int *arp)
{
	uint8_t *d = rte_pktmbuf_mtod(m, uint8_t *);
	uint32_t len = m->data_len;
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)d;
	struct rte_ipv4_hdr *ip;
	struct rte_udp_hdr *udp;
	uint32_t off = RTE_ETHER_HDR_LEN, ihl, tot, ulen;
	uint16_t type, frag;

	if (m->nb_segs != 1)
		return SL_F_SEGMENTED;
	if (len < RTE_ETHER_HDR_LEN)
		return SL_F_SHORT;
	type = rte_be_to_cpu_16(eth->ether_type);
	if (type == ETH_P_VLAN) {
		if (len < RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN)
			return SL_F_SHORT;
		type = rte_be_to_cpu_16(*(uint16_t *)(d + off + 2));
		off += RTE_VLAN_HLEN;
	}
	if (type == ETH_P_ARP) {
		if (len < off + sizeof(struct rte_arp_hdr))
			return SL_F_SHORT;
		*arp = arp_answer(p, eth, (struct rte_arp_hdr *)(d + off));
		return SL_F_ARP;
	}
	if (type != ETH_P_IPV4)
		return SL_F_NOT_IPV4;

	if (len < off + sizeof(struct rte_ipv4_hdr))
		return SL_F_SHORT;
	ip = (struct rte_ipv4_hdr *)(d + off);
	ihl = (uint32_t)(ip->version_ihl & 0x0f) * 4;
	if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(struct rte_ipv4_hdr))
		return SL_F_BAD_IP_HDR;
	if (len < off + ihl)
		return SL_F_SHORT;
	switch (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) {
	case RTE_MBUF_F_RX_IP_CKSUM_GOOD:
		break;
	case RTE_MBUF_F_RX_IP_CKSUM_BAD:
		return SL_F_BAD_IP_CSUM;
	default:
		if (rte_raw_cksum(ip, ihl) != 0xffff)
			return SL_F_BAD_IP_CSUM;
	}
	tot = rte_be_to_cpu_16(ip->total_length);
	/* The frame may be longer (Ethernet padding), never shorter. */
	if (tot < ihl || off + tot > len)
		return SL_F_BAD_IP_LEN;
	frag = rte_be_to_cpu_16(ip->fragment_offset);
	if (frag & (RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK))
		return SL_F_IP_FRAGMENT;
	if (ip->next_proto_id != IPPROTO_UDP)
		return SL_F_NOT_UDP;
	if (tot < ihl + sizeof(struct rte_udp_hdr))
		return SL_F_SHORT;
	if (!p->any_ip && memcmp(&ip->dst_addr, p->ip, 4) != 0)
		return SL_F_WRONG_IP;
	udp = (struct rte_udp_hdr *)((uint8_t *)ip + ihl);
	if (udp->dst_port != p->udp_port_be)
		return SL_F_WRONG_PORT;
	ulen = rte_be_to_cpu_16(udp->dgram_len);
	if (ulen < sizeof(struct rte_udp_hdr) || ulen > tot - ihl)
		return SL_F_BAD_UDP_LEN;
	if (p->verify_udp && udp->dgram_cksum != 0) {
		switch (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) {
		case RTE_MBUF_F_RX_L4_CKSUM_GOOD:
			break;
		case RTE_MBUF_F_RX_L4_CKSUM_BAD:
			return SL_F_BAD_UDP_CSUM;
		default:
			/* The pseudo-header uses the IP total length, so
			 * verify over exactly the UDP length. */
			if (ulen != tot - ihl)
				return SL_F_BAD_UDP_LEN;
			if (rte_ipv4_udptcp_cksum_verify(ip, udp) != 0)
				return SL_F_BAD_UDP_CSUM;
		}
	}

	e->mbuf = m;
	e->payload = (const uint8_t *)(udp + 1);
	e->len = ulen - sizeof(struct rte_udp_hdr);
	e->src_port = rte_be_to_cpu_16(udp->src_port);
	e->dst_port = rte_be_to_cpu_16(udp->dst_port);
	memcpy(e->src_mac, eth->src_addr.addr_bytes, 6);
	memcpy(e->src_ip, &ip->src_addr, 4);
	memcpy(e->dst_ip, &ip->dst_addr, 4);
	return -1;
}

uint16_t sl_rx_burst(struct sl_port *p, uint16_t n)
{
	uint64_t filt[SL_F_MAX] = {0};
	uint64_t bytes = 0;
	uint16_t got, i, k = 0, nd = 0, na = 0, sent;
	int r, arp;

	if (n > p->burst)
		n = p->burst;
	got = rte_eth_rx_burst(p->port_id, 0, p->rx_mbufs, n);
	for (i = 0; i < got; i++) {
		struct rte_mbuf *m = p->rx_mbufs[i];

		if (i + 1 < got)
			rte_prefetch0(rte_pktmbuf_mtod(p->rx_mbufs[i + 1], void *));
		arp = 0;
		r = parse(p, m, &p->rx[k], &arp);
		if (r < 0) {
			bytes += p->rx[k].len;
			k++;
			continue;
		}
		filt[r]++;
		if (arp)
			p->arp[na++] = m;
		else
			p->drop[nd++] = m;
	}
	if (nd != 0)
		rte_pktmbuf_free_bulk(p->drop, nd);
	if (na != 0) {
		sent = rte_eth_tx_burst(p->port_id, 0, p->arp, na);
		if (sent < na)
			rte_pktmbuf_free_bulk(p->arp + sent, na - sent);
		sl_add(&p->arp_replies, sent);
		sl_add(&p->arp_tx_failed, na - sent);
	}
	if (got != 0) {
		for (i = 0; i < SL_F_MAX; i++)
			sl_add(&p->filtered[i], filt[i]);
		sl_add(&p->rx_packets, k);
		sl_add(&p->rx_bytes, bytes);
	}
	return k;
}

/* Frees the oldest held frames until at most keep are held. */
static void held_trim(struct sl_port *p, uint32_t keep)
{
	while (p->held_n > keep) {
		uint32_t run = p->held_cap - p->held_head;

		if (run > p->held_n - keep)
			run = p->held_n - keep;
		rte_pktmbuf_free_bulk(&p->held[p->held_head], run);
		p->held_head = (p->held_head + run) % p->held_cap;
		p->held_n -= run;
	}
}

void sl_rx_held_free(struct sl_port *p)
{
	if (p->held != NULL)
		held_trim(p, 0);
	free(p->held);
	p->held = NULL;
	p->held_cap = p->held_head = p->held_n = 0;
}

uint16_t sl_rx_raw_hold(struct sl_port *p, uint16_t n, uint32_t hold)
{
	uint16_t got, i;

	if (n > p->burst)
		n = p->burst;
	if (p->held == NULL) {
		uint32_t cap = p->pool->size;

		p->held = malloc(sizeof(*p->held) * cap);
		if (p->held == NULL)
			return 0;
		p->held_cap = cap;
	}
	if (hold > p->held_cap - p->burst)
		hold = p->held_cap - p->burst;
	got = rte_eth_rx_burst(p->port_id, 0, p->rx_mbufs, n);
	for (i = 0; i < got; i++)
		p->held[(p->held_head + p->held_n++) % p->held_cap] =
			p->rx_mbufs[i];
	held_trim(p, hold);
	return got;
}

uint16_t sl_rx_raw(struct sl_port *p, uint16_t n)
{
	uint16_t got;

	if (p->held_n != 0)
		held_trim(p, 0);
	if (n > p->burst)
		n = p->burst;
	got = rte_eth_rx_burst(p->port_id, 0, p->rx_mbufs, n);
	if (got != 0)
		rte_pktmbuf_free_bulk(p->rx_mbufs, got);
	return got;
}
