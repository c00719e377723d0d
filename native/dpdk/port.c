//go:build linux && cgo

/*
 * port.c - open, configure, start and close one ethdev with its own pool.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include "sl_priv.h"

/* Calls rte_dev_dma_map (map != 0) or rte_dev_dma_unmap for every
 * IOVA-contiguous run of the region's pages. Returns 0 or -rte_errno. */
static int region_dma(struct sl_port *p, int map)
{
	struct sl_region *r = &p->region;
	unsigned int i = 0;

	while (i < r->n_pages) {
		unsigned int j = i + 1;
		void *va = RTE_PTR_ADD(r->base, (size_t)i * r->page_size);
		size_t len;
		int ret;

		while (j < r->n_pages &&
		       r->iovas[j] == r->iovas[i] + (rte_iova_t)(j - i) * r->page_size)
			j++;
		len = (size_t)(j - i) * r->page_size;
		ret = map ? rte_dev_dma_map(p->dev, va, r->iovas[i], len)
			  : rte_dev_dma_unmap(p->dev, va, r->iovas[i], len);
		if (ret != 0)
			return rte_errno ? -rte_errno : -EIO;
		i = j;
	}
	return 0;
}

/* Frees frames still queued in the device (net_ring loops, pcap replay) so
 * that they return to the pool before the pool goes. Bounded: an infinite
 * source never runs dry. */
static void drain_rx(struct sl_port *p)
{
	int i;

	for (i = 0; i < 256; i++) {
		uint16_t n = rte_eth_rx_burst(p->port_id, 0, p->rx_mbufs,
					      p->burst);
		if (n == 0)
			break;
		rte_pktmbuf_free_bulk(p->rx_mbufs, n);
	}
}

/* Undoes whatever sl_port_open did. If mbufs are still out of the pool after
 * the device is gone (a caller did not release them), the pool and region
 * are left allocated so that those callers do not touch freed memory, and
 * -EBUSY is returned; p stays valid, and calling teardown again (after the
 * release) finishes the job. */
static int teardown(struct sl_port *p, char *err, size_t errlen)
{
	int ret = 0, r;

	sl_rx_held_free(p);
	if (p->started) {
		drain_rx(p);
		r = rte_eth_dev_stop(p->port_id);
		if (r != 0 && ret == 0) {
			ret = r;
			sl_errf(err, errlen, "rte_eth_dev_stop(%s): %s",
				p->name, rte_strerror(-r));
		}
		p->started = 0;
	}
	if (p->dma_mapped) {
		region_dma(p, 0);
		p->dma_mapped = 0;
	}
	if (p->dev != NULL) {
		r = rte_eth_dev_close(p->port_id);
		if (r != 0 && ret == 0) {
			ret = r;
			sl_errf(err, errlen, "rte_eth_dev_close(%s): %s",
				p->name, rte_strerror(-r));
		}
	}
	if (p->hotplugged && p->dev != NULL) {
		r = rte_dev_remove(p->dev);
		if (r != 0 && ret == 0) {
			ret = r;
			sl_errf(err, errlen, "rte_dev_remove(%s): %s",
				p->name, rte_strerror(-r));
		}
	} else if (p->hotplugged) {
		rte_eal_hotplug_remove("vdev", p->name);
	}
	p->hotplugged = 0;
	p->dev = NULL;

	if (p->pool != NULL) {
		unsigned int out = rte_mempool_in_use_count(p->pool);

		if (out != 0) {
			sl_errf(err, errlen,
				"%s: %u mbufs still held by callers; pool and "
				"region left allocated", p->name, out);
			return -EBUSY; /* p stays for a later retry */
		}
		rte_mempool_free(p->pool);
		p->pool = NULL;
	}
	sl_region_free(&p->region);
	free(p->rx);
	free(p->rx_mbufs);
	free(p->drop);
	free(p->arp);
	free(p->tx_mbufs);
	free(p->tx_data);
	free(p->tx_len);
	free(p);
	return ret;
}

int sl_port_open(const struct sl_port_cfg *cfg, struct sl_port **out,
		 struct sl_port_info *info, char *err, size_t errlen)
{
	struct rte_eth_dev_info dev_info;
	struct rte_eth_conf conf;
	struct sl_port *p;
	char pool_name[RTE_MEMPOOL_NAMESIZE];
	uint16_t rxd = cfg->rx_desc, txd = cfg->tx_desc;
	int ret, socket;

	*out = NULL;
	memset(info, 0, sizeof(*info));
	p = calloc(1, sizeof(*p));
	if (p == NULL) {
		sl_errf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	p->burst = cfg->burst;
	memcpy(p->ip, cfg->ip, 4);
	p->udp_port_be = rte_cpu_to_be_16(cfg->udp_port);
	p->any_ip = cfg->any_ip;
	p->verify_udp = cfg->verify_udp;
	strlcpy(p->name, cfg->name, sizeof(p->name));

	p->rx = calloc(p->burst, sizeof(*p->rx));
	p->rx_mbufs = calloc(p->burst, sizeof(*p->rx_mbufs));
	p->drop = calloc(p->burst, sizeof(*p->drop));
	p->arp = calloc(p->burst, sizeof(*p->arp));
	p->tx_mbufs = calloc(p->burst, sizeof(*p->tx_mbufs));
	p->tx_data = calloc(p->burst, sizeof(*p->tx_data));
	p->tx_len = calloc(p->burst, sizeof(*p->tx_len));
	if (!p->rx || !p->rx_mbufs || !p->drop || !p->arp || !p->tx_mbufs ||
	    !p->tx_data || !p->tx_len) {
		sl_errf(err, errlen, "out of memory for burst arrays");
		ret = -ENOMEM;
		goto fail;
	}

	if (cfg->devargs != NULL && cfg->devargs[0] != '\0') {
		if (sl_eth_exists(cfg->name)) {
			sl_errf(err, errlen, "device %s already exists",
				cfg->name);
			ret = -EEXIST;
			goto fail;
		}
		ret = rte_dev_probe(cfg->devargs);
		if (ret != 0) {
			/* Drivers return -1 as often as -errno: the reason is
			 * in the EAL log. */
			sl_errf(err, errlen,
				"rte_dev_probe(%s) failed (%d%s%s); the driver's "
				"reason is in the EAL log", cfg->devargs, ret,
				ret < -1 ? ": " : "",
				ret < -1 ? rte_strerror(-ret) : "");
			ret = ret < -1 ? ret : -ENODEV;
			goto fail;
		}
		p->hotplugged = 1;
	}
	ret = rte_eth_dev_get_port_by_name(cfg->name, &p->port_id);
	if (ret != 0) {
		sl_errf(err, errlen, "no ethdev named %s", cfg->name);
		ret = -ENODEV;
		goto fail;
	}
	ret = rte_eth_dev_info_get(p->port_id, &dev_info);
	if (ret != 0) {
		sl_errf(err, errlen, "rte_eth_dev_info_get: %s",
			rte_strerror(-ret));
		goto fail;
	}
	p->dev = dev_info.device;
	ret = rte_eth_macaddr_get(p->port_id, &p->mac);
	if (ret != 0) {
		sl_errf(err, errlen, "rte_eth_macaddr_get: %s",
			rte_strerror(-ret));
		goto fail;
	}
	if (rte_is_zero_ether_addr(&p->mac)) {
		/* net_ring and some others have no address: make up a locally
		 * administered one; tell the device if it listens. */
		rte_eth_random_addr(p->mac.addr_bytes);
		rte_eth_dev_default_mac_addr_set(p->port_id, &p->mac);
	}

	ret = sl_region_alloc(&p->region, cfg->pool_size, cfg->data_room,
			      cfg->hugepages, err, errlen);
	if (ret != 0)
		goto fail;
	snprintf(pool_name, sizeof(pool_name), "sl%u_%" PRIxPTR,
		 p->port_id, ((uintptr_t)p->region.base >> 12) & 0xffffffffu);
	p->pool = sl_pool_create(&p->region, pool_name, cfg->pool_size,
				 cfg->data_room, err, errlen);
	if (p->pool == NULL) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = region_dma(p, 1);
	if (ret == 0) {
		p->dma_mapped = 1;
	} else if (ret != -ENOTSUP) {
		/* Devices that DMA (PCI under VFIO) need the mapping. */
		sl_errf(err, errlen, "rte_dev_dma_map(%s): %s", p->name,
			rte_strerror(-ret));
		goto fail;
	}

	memset(&conf, 0, sizeof(conf));
	if (cfg->data_room > RTE_MBUF_DEFAULT_DATAROOM) {
		/* Jumbo: an MTU whose frames (with one VLAN tag) fill the
		 * data room. The CRC is stripped on receive. */
		uint32_t mtu = cfg->data_room - RTE_ETHER_HDR_LEN -
			       RTE_VLAN_HLEN;

		if (mtu > UINT16_MAX)
			mtu = UINT16_MAX;
		if (dev_info.max_mtu != 0 && mtu > dev_info.max_mtu) {
			sl_errf(err, errlen,
				"data room %u needs MTU %u but %s (%s) allows "
				"at most %u", cfg->data_room, mtu, p->name,
				dev_info.driver_name, dev_info.max_mtu);
			ret = -EINVAL;
			goto fail;
		}
		conf.rxmode.mtu = mtu;
	}
	ret = rte_eth_dev_configure(p->port_id, 1, 1, &conf);
	if (ret != 0) {
		sl_errf(err, errlen, "rte_eth_dev_configure(%s): %s", p->name,
			rte_strerror(-ret));
		goto fail;
	}
	ret = rte_eth_dev_adjust_nb_rx_tx_desc(p->port_id, &rxd, &txd);
	if (ret != 0) {
		sl_errf(err, errlen, "adjust descriptors (%u/%u): %s",
			cfg->rx_desc, cfg->tx_desc, rte_strerror(-ret));
		goto fail;
	}
	socket = rte_eth_dev_socket_id(p->port_id);
	ret = rte_eth_rx_queue_setup(p->port_id, 0, rxd, socket, NULL, p->pool);
	if (ret != 0) {
		sl_errf(err, errlen, "rte_eth_rx_queue_setup(%s, %u): %s",
			p->name, rxd, rte_strerror(-ret));
		goto fail;
	}
	ret = rte_eth_tx_queue_setup(p->port_id, 0, txd, socket, NULL);
	if (ret != 0) {
		sl_errf(err, errlen, "rte_eth_tx_queue_setup(%s, %u): %s",
			p->name, txd, rte_strerror(-ret));
		goto fail;
	}
	ret = rte_eth_dev_start(p->port_id);
	if (ret != 0) {
		sl_errf(err, errlen, "rte_eth_dev_start(%s): %s", p->name,
			rte_strerror(-ret));
		goto fail;
	}
	p->started = 1;
	if (cfg->promisc) {
		ret = rte_eth_promiscuous_enable(p->port_id);
		if (ret != 0 && ret != -ENOTSUP) {
			sl_errf(err, errlen, "promiscuous mode (%s): %s",
				p->name, rte_strerror(-ret));
			goto fail;
		}
	}

	info->port_id = p->port_id;
	memcpy(info->mac, p->mac.addr_bytes, 6);
	info->pool_capacity = p->pool->size;
	info->tx_room = rte_pktmbuf_data_room_size(p->pool) -
			RTE_PKTMBUF_HEADROOM;
	if (rte_eth_dev_get_mtu(p->port_id, &info->mtu) != 0)
		info->mtu = RTE_ETHER_MTU;
	info->huge = p->region.huge;
	info->locked = p->region.locked;
	info->dma_mapped = p->dma_mapped;
	info->page_size = p->region.page_size;
	info->region = p->region.base;
	info->region_size = p->region.size;
	info->rx = p->rx;
	info->tx_data = p->tx_data;
	info->tx_len = p->tx_len;
	strlcpy(info->driver, dev_info.driver_name ? dev_info.driver_name : "",
		sizeof(info->driver));
	*out = p;
	return 0;
fail:
	teardown(p, NULL, 0);
	return ret < 0 ? ret : -EINVAL;
}

int sl_port_close(struct sl_port *p, char *err, size_t errlen)
{
	return teardown(p, err, errlen);
}

uint32_t sl_port_in_use(struct sl_port *p)
{
	return p->pool ? rte_mempool_in_use_count(p->pool) : 0;
}

void sl_port_stats(struct sl_port *p, struct sl_stats *out)
{
	struct rte_eth_stats st;
	int i;

	memset(out, 0, sizeof(*out));
	out->rx_packets = sl_load(&p->rx_packets);
	out->rx_bytes = sl_load(&p->rx_bytes);
	out->tx_packets = sl_load(&p->tx_packets);
	out->tx_bytes = sl_load(&p->tx_bytes);
	out->tx_failed = sl_load(&p->tx_failed);
	for (i = 0; i < SL_F_MAX; i++)
		out->filtered[i] = sl_load(&p->filtered[i]);
	out->arp_replies = sl_load(&p->arp_replies);
	out->arp_tx_failed = sl_load(&p->arp_tx_failed);
	if (rte_eth_stats_get(p->port_id, &st) == 0) {
		out->imissed = st.imissed;
		out->rx_nombuf = st.rx_nombuf;
		out->ierrors = st.ierrors;
		out->oerrors = st.oerrors;
		out->dev_ipackets = st.ipackets;
		out->dev_opackets = st.opackets;
	}
	out->buf_in_use = rte_mempool_in_use_count(p->pool);
	out->buf_capacity = p->pool->size;
}

int sl_port_link_up(struct sl_port *p)
{
	struct rte_eth_link link;

	memset(&link, 0, sizeof(link));
	if (rte_eth_link_get_nowait(p->port_id, &link) != 0)
		return 0;
	return link.link_status == RTE_ETH_LINK_UP;
}

const char *sl_port_pool_ops(const struct sl_port *p)
{
	const struct rte_mempool_ops *ops;

	if (p->pool == NULL)
		return "";
	ops = rte_mempool_get_ops(p->pool->ops_index);
	return ops != NULL ? ops->name : "";
}
