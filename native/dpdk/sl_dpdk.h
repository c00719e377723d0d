/*
 * sl_dpdk.h - sluice's thin burst-level binding to DPDK 22.11.
 *
 * This is the only header the Go package dataplane/dpdk includes. Every
 * function here works on a whole burst: Go makes one call per burst, never
 * one per packet.
 *
 *   eal.c     EAL start/stop (once per process), vdev hot-plug helpers
 *   region.c  the packet-buffer region (hugepages or mlock'ed anonymous
 *             memory), rte_extmem registration, the mbuf pool built on it
 *   port.c    port open/configure/start/close, counters
 *   rx.c      rx burst: parse Ethernet/VLAN/IPv4/UDP into sl_rx_meta,
 *             filter and count the rest, answer ARP
 *   tx.c      tx burst: bulk mbuf allocation, lengths, rte_eth_tx_burst,
 *             bulk release of receive buffers
 */
#ifndef SL_DPDK_H
#define SL_DPDK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Why a received frame did not become a packet. Order is ABI with Go. */
enum sl_filter {
	SL_F_SHORT = 0,     /* frame too short for the headers it announces */
	SL_F_ARP,           /* ARP (requests for our address are answered) */
	SL_F_NOT_IPV4,      /* other EtherType (IPv6, LLDP, stacked VLANs...) */
	SL_F_BAD_IP_HDR,    /* IPv4 version/IHL invalid */
	SL_F_BAD_IP_CSUM,   /* IPv4 header checksum wrong */
	SL_F_BAD_IP_LEN,    /* IPv4 total length below IHL or beyond the frame */
	SL_F_IP_FRAGMENT,   /* IPv4 fragment (MF set or offset != 0) */
	SL_F_NOT_UDP,       /* other IP protocol */
	SL_F_WRONG_IP,      /* UDP to an address that is not the port's */
	SL_F_WRONG_PORT,    /* UDP to another port */
	SL_F_BAD_UDP_LEN,   /* UDP length below 8 or beyond the IP payload */
	SL_F_BAD_UDP_CSUM,  /* UDP checksum wrong (only when verification is on) */
	SL_F_SEGMENTED,     /* frame spans several mbufs (larger than data room) */
	SL_F_MAX
};

/* Bytes in front of the UDP payload in frames we send: Ethernet + IPv4 (no
 * options) + UDP. */
#define SL_TX_HDR_LEN 42

/* One received sluice datagram, pre-parsed by sl_rx_burst. 40 bytes. */
struct sl_rx_meta {
	void *mbuf;             /* the rte_mbuf, released with sl_release */
	const uint8_t *payload; /* UDP payload inside the mbuf */
	uint32_t len;           /* UDP payload length */
	uint16_t src_port;      /* host byte order */
	uint16_t dst_port;      /* host byte order */
	uint8_t src_mac[6];
	uint8_t src_ip[4];      /* network byte order */
	uint8_t dst_ip[4];      /* network byte order */
	uint8_t pad[2];
};

/* Hugepage policy for the buffer region. */
enum sl_huge {
	SL_HUGE_AUTO = 0,  /* MAP_HUGETLB if it works, else anonymous + mlock */
	SL_HUGE_NEVER = 1, /* anonymous + mlock */
	SL_HUGE_REQUIRE = 2
};

/* Port configuration. Strings are only read during sl_port_open. */
struct sl_port_cfg {
	const char *devargs;  /* vdev to hot-plug ("net_ring0,..."), or NULL */
	const char *name;     /* ethdev name to open */
	uint8_t ip[4];        /* the port's IPv4 address, network order */
	uint16_t udp_port;    /* host order */
	uint16_t rx_desc;
	uint16_t tx_desc;
	uint16_t burst;       /* size of the rx/tx arrays */
	uint32_t pool_size;   /* mbufs */
	uint32_t data_room;   /* bytes per mbuf after the headroom */
	int32_t hugepages;    /* enum sl_huge */
	int32_t promisc;
	int32_t any_ip;       /* deliver UDP to udp_port whatever the dst IP */
	int32_t verify_udp;   /* verify UDP checksums in software */
};

/* What sl_port_open tells Go about the port. */
struct sl_port_info {
	uint16_t port_id;
	uint8_t mac[6];
	uint32_t pool_capacity;
	uint32_t tx_room;          /* bytes writable at each tx data pointer */
	uint16_t mtu;              /* the device's MTU after configuration */
	uint16_t pad16;
	uint32_t huge;             /* region is on hugepages */
	uint32_t locked;           /* region is mlock'ed (or hugepages) */
	uint32_t dma_mapped;       /* rte_dev_dma_map succeeded */
	uint64_t page_size;
	void *region;
	uint64_t region_size;
	struct sl_rx_meta *rx;     /* burst entries, filled by sl_rx_burst */
	uint8_t **tx_data;         /* burst entries, set by sl_tx_alloc */
	uint16_t *tx_len;          /* burst entries, set by Go before sl_tx_send */
	char driver[32];
};

/* Cumulative counters; see dataplane.PortStats for their meaning. */
struct sl_stats {
	uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes, tx_failed;
	uint64_t filtered[SL_F_MAX];
	uint64_t arp_replies, arp_tx_failed;
	uint64_t imissed, rx_nombuf, ierrors, oerrors;
	uint64_t dev_ipackets, dev_opackets;
	uint64_t buf_in_use, buf_capacity;
};

struct sl_port;

/* eal.c */
/* rte_eal_init on the calling thread; its CPU affinity is restored after.
 * Returns 0 or a negative errno, with a message in err. */
int sl_eal_init(int argc, char **argv, char *err, size_t errlen);
int sl_eal_cleanup(void);
const char *sl_eal_runtime_dir(void);
const char *sl_version(void);
/* 1 if an ethdev with this name exists. */
int sl_eth_exists(const char *name);

/* port.c */
int sl_port_open(const struct sl_port_cfg *cfg, struct sl_port **out,
		 struct sl_port_info *info, char *err, size_t errlen);
/* Stops, closes and (if hot-plugged) removes the device, then frees the pool
 * and the region. Returns 0, or a negative errno if something could not be
 * undone (the rest is still released). Returns -EBUSY, keeping the pool,
 * the region and p, while mbufs are out of the pool: call it again once they
 * are released. */
int sl_port_close(struct sl_port *p, char *err, size_t errlen);
/* mbufs out of the port's pool. */
uint32_t sl_port_in_use(struct sl_port *p);
void sl_port_stats(struct sl_port *p, struct sl_stats *out);
/* Link state: 1 up, 0 down. */
int sl_port_link_up(struct sl_port *p);

/* rx.c */
/* Receives up to n frames (n <= burst), fills info.rx[0..k) with the UDP
 * datagrams for our port, frees and counts the rest, answers ARP. */
uint16_t sl_rx_burst(struct sl_port *p, uint16_t n);
/* rte_eth_rx_burst + rte_pktmbuf_free_bulk, nothing else: the device's
 * ceiling. Returns the frames received. */
uint16_t sl_rx_raw(struct sl_port *p, uint16_t n);
/* sl_rx_raw with frames kept out of the pool: after the burst, the oldest
 * frames are freed until at most hold are held (hold is at most the pool's
 * size less one burst). It measures the ceiling of a receiver that holds
 * frames the way reassembly does. Returns the frames received, or 0 when
 * the ring cannot be allocated. sl_rx_raw frees what it held. */
uint16_t sl_rx_raw_hold(struct sl_port *p, uint16_t n, uint32_t hold);
/* The mempool driver of the port's pool ("stack", "ring_mp_mc", ...). */
const char *sl_port_pool_ops(const struct sl_port *p);

/* tx.c */
/* Allocates up to n mbufs (n <= burst) and sets info.tx_data[0..k). Returns
 * k: n, or fewer when the pool is short. */
uint16_t sl_tx_alloc(struct sl_port *p, uint16_t n);
/* Sends the first n of the k allocated mbufs with frame lengths
 * info.tx_len[0..n) (each at least SL_TX_HDR_LEN), frees the other k-n and
 * whatever the device refused (counted in tx_failed). Returns frames sent. */
uint16_t sl_tx_send(struct sl_port *p, uint16_t n);
/* rte_pktmbuf_free_bulk over n mbuf pointers given as integers (zeros are
 * skipped). */
void sl_release(const uint64_t *mbufs, uint32_t n);

#ifdef __cplusplus
}
#endif

#endif /* SL_DPDK_H */
