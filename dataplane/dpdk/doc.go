// Package dpdk is sluice's DPDK port driver: a thin cgo binding to Debian's
// DPDK 22.11 (C half in native/dpdk, compiled into this package through the
// sl_*.c and sl_*.h symlinks) that implements dataplane.Port.
//
// # Process setup
//
// DPDK's EAL starts once per process and can never start again, not even
// after rte_eal_cleanup. Call InitEAL once, early; repeated calls with the
// same arguments return the first result (error included). DefaultEALArgs
// gives arguments that work in containers without hugepages or PCI devices
// ("-l 0 --no-huge --no-pci -m 256 --no-shconf --no-telemetry
// --file-prefix sluice-<pid>"); append --vdev or --allow options as needed.
// Config.EAL may carry the arguments instead: Open then calls InitEAL with
// them. CleanupEAL, at exit, releases the EAL and removes
// /var/run/dpdk/<prefix>.
// rte_eal_init runs on a throw-away OS thread: no Go thread stays pinned to
// the main lcore or registered as one.
//
//	if err := dpdk.InitEAL(dpdk.DefaultEALArgs()); err != nil { ... }
//	defer dpdk.CleanupEAL()
//	p, err := dpdk.Open(dpdk.Config{
//		Vdev:    "net_af_packet0,iface=eth1,framecnt=32768,qpairs=1",
//		IP:      netip.MustParseAddr("10.99.0.1"),
//		UDPPort: 7000,
//	})
//	defer p.Close()
//
// # Ports
//
// Open hot-plugs Config.Vdev (rte_dev_probe), opens the ethdev by name
// (rte_eth_dev_get_port_by_name), builds the port's buffer region and mbuf
// pool, and starts one receive and one transmit queue. Close stops the
// device, removes the vdev and frees everything, so one process can open and
// close many ports in turn. Tested vdevs: net_pcap (rx_pcap=FILE, tx_pcap=FILE,
// infinite_rx=1), net_ring, net_af_packet (framecnt=32768, qpairs=1: smaller
// rings lose packets), net_tap (iface=NAME) and net_memif (a server and a
// client can live in one process). Devargs are split on ',' and '=': file
// paths in them must not contain either. A device probed by the EAL itself
// (a NIC, or a --vdev argument) is opened by PortName alone.
//
// # Receive
//
// RxBurst makes one cgo call per burst. The C side receives the frames,
// parses Ethernet (one optional 802.1Q tag), IPv4 (options allowed; header
// checksum verified unless the NIC did) and UDP to Config.UDPPort, and fills
// a compact C array of {mbuf, payload pointer, length, source MAC, source and
// destination IP and port}. Go walks that array and fills dataplane.Packet
// values whose Data is an unsafe.Slice over the mbuf payload: zero copy, C
// memory, nothing allocated. Every other frame is freed in C and counted by
// FilterReason (DriverStats.Filtered; their sum is PortStats.RxFiltered).
// ARP requests for Config.IP are answered from C (DriverStats.ARPReplies), so
// kernel peers on net_tap, net_af_packet or a real network can reach the
// port. Release frees receive buffers in bulk with one cgo call.
//
// # Transmit
//
// TxBurst makes two cgo calls per burst: one allocates the mbufs in bulk and
// returns their data pointers, Go writes the Ethernet, IPv4 (checksummed) and
// UDP (checksum 0, legal over IPv4) headers, the sluice header and the payload
// straight into them, and one sets the lengths and calls rte_eth_tx_burst.
// Frames are never chained: a frame must fit one mbuf. Config.DataRoom sizes
// every mbuf (default 2048 bytes, enough for a 1500-byte MTU plus a VLAN tag;
// up to 65407 for jumbo frames, and the device MTU follows), so MaxPayload
// tells the largest payload TxBurst accepts and received frames larger than
// the data room are dropped as FilterSegmented. One data room for the whole
// pool keeps the burst paths branch-free and every payload contiguous for the
// zero-copy gather.
//
// # Buffer region
//
// Every mbuf of a port lives in one mapping that the driver makes itself:
// MAP_HUGETLB when the host has free hugepages (Config.Hugepages), else
// anonymous memory locked with mlock. It is registered with
// rte_extmem_register, with each page's IOVA, and mapped for device DMA with
// rte_dev_dma_map where the bus supports it (a real mapping for PCI under
// VFIO, a no-op for vdevs, which do not DMA). The pool is created empty and populated on the region
// (rte_mempool_populate_virt), objects packed back to back inside each
// IOVA-contiguous run. Its driver is DPDK's stack (a LIFO; PoolOps), so
// the mbuf a burst takes next is the one freed last, still in cache: with
// the default ring (FIFO) it is the one freed longest ago, and the PMD's
// write of each frame misses (dpbench: raw rx_burst twice as fast, the
// full receive path 1.2-1.5 times). Region returns the base and size so that the CUDA
// backend can pin the same memory (cuMemHostRegister) and gather payloads on
// the GPU straight from the packet buffers.
//
// # Buffer accounting
//
// PortStats.BufInUse is rte_mempool_in_use_count of the port's pool: every
// mbuf not in the pool, whoever holds it. That is the buffers RxBurst handed
// out and not yet released, plus those the device holds: receive
// descriptors a NIC or net_tap fills at start (a constant baseline), frames
// net_pcap caches for infinite_rx, frames waiting in a net_ring or memif ring,
// transmitted mbufs a NIC has not freed yet. The pool has no per-lcore cache
// (the I/O loop is a Go thread, not an EAL lcore), so the count is exact.
// Receive and transmit share the pool: size PoolSize for the receive ring,
// the buffers reassembly may hold, and a burst of transmit. Close refuses to
// free a pool whose buffers are still held (ErrBuffersHeld) and leaves it
// allocated, so holders never read freed memory; Close again after Release
// finishes the job.
//
// # Threads
//
// RxBurst, Release and TxBurst belong to one goroutine, the port's I/O loop;
// Stats, DriverStats and LinkUp may be called from any goroutine. Counters
// written in C by the I/O thread are read with atomic loads.
//
// # Benchmarks
//
// BenchmarkRxRaw measures the device ceiling (rx burst and bulk free only,
// on net_pcap infinite replay); BenchmarkRxBurst the driver's whole receive
// path. MeasureRawRx gives the ceiling to other benchmarks:
//
//	go test -run '^$' -bench . ./dataplane/dpdk/   (as root; make bench-dpdk)
package dpdk
