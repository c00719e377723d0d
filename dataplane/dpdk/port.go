//go:build linux && cgo

package dpdk

/*
#include "sl_dpdk.h"
*/
import "C"

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// Port is one DPDK ethdev with one receive and one transmit queue, its own
// mbuf pool and buffer region. It implements dataplane.Port: RxBurst,
// Release and TxBurst are called from one goroutine (the port's I/O loop);
// Stats, DriverStats and LinkUp from any.
type Port struct {
	c    *C.struct_sl_port
	cfg  Config
	name string
	log  *slog.Logger

	mac    [6]byte
	ip     netip.Addr
	id     uint16
	driver string
	burst  int

	rx     []C.struct_sl_rx_meta // C array, burst entries
	txData []*C.uint8_t          // C array, burst entries
	txLen  []C.uint16_t          // C array, burst entries
	txRoom int                   // bytes writable in one transmit mbuf
	txMax  int                   // largest frame TxBurst sends: min(txRoom, MTU+14)
	mtu    int
	ipID   uint16

	region     uintptr
	regionPtr  unsafe.Pointer // region, as the C pointer it is
	regionSize uintptr
	regionInfo RegionInfo

	closed   atomic.Bool
	txFailed atomic.Uint64 // datagrams refused before reaching C

	mu    sync.Mutex // orders Stats/DriverStats against Close
	final *C.struct_sl_stats
}

var _ dataplane.Port = (*Port)(nil)

// Open hot-plugs cfg.Vdev (if set), opens the ethdev cfg.PortName, builds its
// buffer region and mbuf pool, configures one rx and one tx queue and starts
// it. The EAL must be up: InitEAL succeeded, or cfg.EAL starts it. Close undoes all of it, so one process can
// open and close many ports in turn.
func Open(cfg Config) (*Port, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if len(cfg.EAL) > 0 {
		if err := InitEAL(cfg.EAL); err != nil {
			return nil, fmt.Errorf("dpdk: open %s: %w", cfg.PortName, err)
		}
	}
	eal.mu.Lock()
	ready, closed := eal.tried && eal.err == nil, eal.closed
	eal.mu.Unlock()
	switch {
	case closed:
		return nil, ErrEALClosed
	case !ready:
		return nil, ErrEALNotInitialized
	}

	var cc C.struct_sl_port_cfg
	var devargs, name *C.char
	if cfg.Vdev != "" {
		devargs = cstr(cfg.Vdev)
		defer cfree(devargs)
	}
	name = cstr(cfg.PortName)
	defer cfree(name)
	cc.devargs = devargs
	cc.name = name
	ip4 := cfg.IP.As4()
	for i := range ip4 {
		cc.ip[i] = C.uint8_t(ip4[i])
	}
	cc.udp_port = C.uint16_t(cfg.UDPPort)
	cc.rx_desc = C.uint16_t(cfg.RxDesc)
	cc.tx_desc = C.uint16_t(cfg.TxDesc)
	cc.burst = C.uint16_t(cfg.Burst)
	cc.pool_size = C.uint32_t(cfg.PoolSize)
	cc.data_room = C.uint32_t(cfg.DataRoom)
	cc.hugepages = C.int32_t(cfg.Hugepages)
	cc.promisc = cbool(cfg.Promiscuous)
	cc.any_ip = cbool(cfg.AcceptAnyIP)
	cc.verify_udp = cbool(cfg.VerifyUDPChecksum)

	var cp *C.struct_sl_port
	var info C.struct_sl_port_info
	var e cErr
	if rc := C.sl_port_open(&cc, &cp, &info, e.ptr(), errBufLen); rc != 0 {
		return nil, fmt.Errorf("dpdk: open %s: %s: %w", cfg.PortName, e.String(), syscall.Errno(-rc))
	}
	p := &Port{
		c:      cp,
		cfg:    cfg,
		name:   cfg.PortName,
		log:    cfg.Logger.With("port", cfg.PortName),
		ip:     cfg.IP,
		id:     uint16(info.port_id),
		driver: C.GoString(&info.driver[0]),
		burst:  cfg.Burst,
		rx:     unsafe.Slice(info.rx, cfg.Burst),
		txData: unsafe.Slice(info.tx_data, cfg.Burst),
		txLen:  unsafe.Slice(info.tx_len, cfg.Burst),
		txRoom: int(info.tx_room),
		mtu:    int(info.mtu),
	}
	p.txMax = min(p.txRoom, p.mtu+14)
	for i := range p.mac {
		p.mac[i] = byte(info.mac[i])
	}
	p.regionPtr = unsafe.Pointer(info.region)
	p.region = uintptr(info.region)
	p.regionSize = uintptr(info.region_size)
	p.regionInfo = RegionInfo{
		Base:      p.region,
		Size:      p.regionSize,
		PageSize:  uintptr(info.page_size),
		Hugepages: info.huge != 0,
		Locked:    info.locked != 0,
		DMAMapped: info.dma_mapped != 0,
	}
	p.log.Info("dpdk: port open", "driver", p.driver, "port_id", p.id,
		"mac", net.HardwareAddr(p.mac[:]).String(), "ip", p.ip, "udp_port", cfg.UDPPort,
		"mbufs", uint32(info.pool_capacity), "data_room", cfg.DataRoom, "mtu", p.mtu,
		"region_bytes", p.regionSize, "hugepages", p.regionInfo.Hugepages, "locked", p.regionInfo.Locked)
	if !p.regionInfo.Locked {
		p.log.Warn("dpdk: buffer region is not locked in memory (mlock failed; raise RLIMIT_MEMLOCK or run as root)")
	}
	return p, nil
}

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// Name returns the ethdev name.
func (p *Port) Name() string { return p.name }

// PortID returns the DPDK port id.
func (p *Port) PortID() uint16 { return p.id }

// Driver returns the ethdev driver's name ("net_pcap").
func (p *Port) Driver() string { return p.driver }

// MAC returns the port's MAC address (the source of every frame it sends).
func (p *Port) MAC() [6]byte { return p.mac }

// IP returns the port's IPv4 address.
func (p *Port) IP() netip.Addr { return p.ip }

// MTU returns the device's MTU.
func (p *Port) MTU() int { return p.mtu }

// MaxPayload returns the largest datagram payload (after the sluice header)
// TxBurst sends: the frame must fit both one mbuf and the device's MTU.
func (p *Port) MaxPayload() int { return p.txMax - txHeaderLen - wire.HeaderLen }

// Config returns the port's configuration with defaults filled in.
func (p *Port) Config() Config { return p.cfg }

// Region returns the base address and size of the memory region that holds
// every mbuf of the port's pool (headers, headroom and data). It is one
// mapping, page aligned, registered with rte_extmem_register; a GPU backend
// may pin it (cuMemHostRegister) and read Packet.Data in place. It stays
// valid until Close.
func (p *Port) Region() (ptr uintptr, size uintptr) { return p.region, p.regionSize }

// PacketRegion returns the buffer region (dataplane.PacketRegioner): every
// received payload lies in it until released.
func (p *Port) PacketRegion() (unsafe.Pointer, int) { return p.regionPtr, int(p.regionSize) }

// RegionInfo returns how the buffer region was made.
func (p *Port) RegionInfo() RegionInfo { return p.regionInfo }

// LinkUp reports the device's link state (memif ports are down until their
// peer connects).
func (p *Port) LinkUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.final != nil {
		return false
	}
	return C.sl_port_link_up(p.c) != 0
}

// RxBurst receives up to min(len(pkts), Config.Burst) sluice datagrams in
// one cgo call. Data aliases the mbuf (zero copy) and stays valid until Buf
// is given to Release. Frames that are not UDP to our address and port are
// freed and counted (DriverStats.Filtered); ARP requests for our address are
// answered.
func (p *Port) RxBurst(pkts []dataplane.Packet) (int, error) {
	if p.closed.Load() {
		return 0, ErrClosed
	}
	n := len(pkts)
	if n > p.burst {
		n = p.burst
	}
	if n == 0 {
		return 0, nil
	}
	got := int(C.sl_rx_burst(p.c, C.uint16_t(n)))
	rx := p.rx[:got]
	pkts = pkts[:got]
	for i := range rx {
		e := &rx[i]
		pk := &pkts[i]
		pk.Data = unsafe.Slice((*byte)(unsafe.Pointer(e.payload)), int(e.len))
		pk.Buf = dataplane.BufRef(uintptr(e.mbuf))
		src := *(*[4]byte)(unsafe.Pointer(&e.src_ip))
		dst := *(*[4]byte)(unsafe.Pointer(&e.dst_ip))
		pk.From.Addr = netip.AddrPortFrom(netip.AddrFrom4(src), uint16(e.src_port))
		pk.From.Local = netip.AddrPortFrom(netip.AddrFrom4(dst), uint16(e.dst_port))
		pk.From.MAC = *(*[6]byte)(unsafe.Pointer(&e.src_mac))
	}
	return got, nil
}

// RxRaw receives up to n frames (at most Config.Burst) and frees them at
// once, without parsing or counting them: one cgo call around
// rte_eth_rx_burst and rte_pktmbuf_free_bulk. It measures the device's
// ceiling (see MeasureRawRx); it is not part of the data path.
func (p *Port) RxRaw(n int) int {
	if p.closed.Load() || n < 0 {
		return 0
	}
	if n > p.burst {
		n = p.burst
	}
	return int(C.sl_rx_raw(p.c, C.uint16_t(n)))
}

// RxRawHold is RxRaw with frames kept out of the pool: after each burst
// the oldest frames go back until at most hold are out (hold is capped at
// the pool's size less one burst). It measures the ceiling of a receiver
// that holds frames as long as reassembly does, with the same memory
// footprint; it is not part of the data path. RxRaw (even of 0 frames)
// gives back what it held.
func (p *Port) RxRawHold(n, hold int) int {
	if p.closed.Load() || n <= 0 {
		return 0
	}
	if n > p.burst {
		n = p.burst
	}
	return int(C.sl_rx_raw_hold(p.c, C.uint16_t(n), C.uint32_t(max(hold, 0))))
}

// PoolOps is the mempool driver of the port's pool: "stack" (a LIFO, the
// mbuf a burst takes next is the one freed last, still in cache) where
// DPDK's stack driver is loaded, else the platform's default.
func (p *Port) PoolOps() string {
	if p.closed.Load() {
		return ""
	}
	return C.GoString(C.sl_port_pool_ops(p.c))
}

// Release gives receive buffers back to the pool with one cgo call
// (rte_pktmbuf_free_bulk). Zero refs are skipped.
func (p *Port) Release(bufs []dataplane.BufRef) {
	if len(bufs) == 0 {
		return
	}
	C.sl_release((*C.uint64_t)(unsafe.Pointer(&bufs[0])), C.uint32_t(len(bufs)))
}

// TxBurst sends dgs with two cgo calls per Config.Burst datagrams: one
// allocates the mbufs and returns their data pointers, Go writes Ethernet,
// IPv4 (checksummed) and UDP (checksum 0) headers, the sluice header and the
// payload straight into them, and one sets the lengths and calls
// rte_eth_tx_burst. Each frame goes to d.To.MAC and d.To.Addr, from the
// port's MAC, from d.To.Local's address when it is IPv4 (else Config.IP),
// and from Config.UDPPort.
//
// It returns how many datagrams (a prefix of dgs) were sent; the rest are
// counted in TxFailed. The error is non-nil when a datagram cannot be sent at
// all (ErrTooLarge, ErrNoMAC, ErrNotIPv4; sending stops before it); a pool
// or device that is momentarily full only shortens the count.
func (p *Port) TxBurst(dgs []dataplane.Datagram) (int, error) {
	if p.closed.Load() {
		return 0, ErrClosed
	}
	total := 0
	for len(dgs) > 0 {
		chunk := dgs
		if len(chunk) > p.burst {
			chunk = chunk[:p.burst]
		}
		k := 0
		var bad error
		for ; k < len(chunk); k++ {
			if _, err := frameLen(&chunk[k], p.txMax); err != nil {
				bad = fmt.Errorf("dpdk: tx %s: datagram %d: %w", p.name, total+k, err)
				break
			}
		}
		got := 0
		if k > 0 {
			got = int(C.sl_tx_alloc(p.c, C.uint16_t(k)))
		}
		for i := 0; i < got; i++ {
			d := &chunk[i]
			src := p.ip
			if l := d.To.Local.Addr(); l.Is4() && !l.IsUnspecified() {
				src = l
			}
			b := unsafe.Slice((*byte)(unsafe.Pointer(p.txData[i])), p.txRoom)
			p.txLen[i] = C.uint16_t(putFrame(b, p.mac, netip.AddrPortFrom(src, p.cfg.UDPPort), d, p.ipID))
			p.ipID++
		}
		sent := 0
		if got > 0 {
			sent = int(C.sl_tx_send(p.c, C.uint16_t(got)))
		}
		total += sent
		dgs = dgs[sent:]
		if sent < len(chunk) {
			// sl_tx_send counted the device's refusals (got-sent); the
			// datagrams never written are counted here.
			p.txFailed.Add(uint64(len(dgs) - (got - sent)))
			if bad == nil && got < k {
				p.log.Debug("dpdk: tx short of mbufs", "wanted", k, "got", got)
			}
			return total, bad
		}
	}
	return total, nil
}

// Stats returns the port's counters. RxMissed is the device's imissed plus
// rx_nombuf. BufInUse is rte_mempool_in_use_count of the port's pool: every
// mbuf not in the pool, i.e. held by RxBurst callers, queued in the device
// (pre-filled receive descriptors of a NIC, frames cached by pcap
// infinite_rx, frames waiting in a net_ring or memif ring) or not yet freed
// after transmission. BufCapacity is the pool size.
func (p *Port) Stats() dataplane.PortStats {
	st := p.cstats()
	return dataplane.PortStats{
		RxPackets:   uint64(st.rx_packets),
		RxBytes:     uint64(st.rx_bytes),
		TxPackets:   uint64(st.tx_packets),
		TxBytes:     uint64(st.tx_bytes),
		RxFiltered:  sumFiltered(&st),
		RxMissed:    uint64(st.imissed) + uint64(st.rx_nombuf),
		TxFailed:    uint64(st.tx_failed) + p.txFailed.Load(),
		BufInUse:    uint64(st.buf_in_use),
		BufCapacity: uint64(st.buf_capacity),
	}
}

// DriverStats returns the per-reason filter counters and device counters.
func (p *Port) DriverStats() DriverStats {
	st := p.cstats()
	var d DriverStats
	for i := range d.Filtered {
		d.Filtered[i] = uint64(st.filtered[i])
	}
	d.ARPReplies = uint64(st.arp_replies)
	d.ARPTxFailed = uint64(st.arp_tx_failed)
	d.IMissed = uint64(st.imissed)
	d.RxNoMbuf = uint64(st.rx_nombuf)
	d.IErrors = uint64(st.ierrors)
	d.OErrors = uint64(st.oerrors)
	d.DevRxPackets = uint64(st.dev_ipackets)
	d.DevTxPackets = uint64(st.dev_opackets)
	return d
}

func sumFiltered(st *C.struct_sl_stats) uint64 {
	var t uint64
	for _, v := range st.filtered {
		t += uint64(v)
	}
	return t
}

func (p *Port) cstats() C.struct_sl_stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.final != nil {
		st := *p.final
		if p.c != nil { // closing, buffers still held
			st.buf_in_use = C.uint64_t(C.sl_port_in_use(p.c))
		}
		return st
	}
	var st C.struct_sl_stats
	C.sl_port_stats(p.c, &st)
	return st
}

// Close stops the device, removes it if Open hot-plugged it, and frees the
// pool and the region. Every buffer from RxBurst should have been released
// first: if some were not, Close leaves the pool and region allocated (the
// holders may still read them and Release them) and returns an error
// wrapping ErrBuffersHeld; call Close again after releasing them. The port
// stops receiving and sending at the first Close; Stats keep returning the
// final counters. Close is idempotent.
func (p *Port) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return nil
	}
	if p.final == nil {
		var st C.struct_sl_stats
		C.sl_port_stats(p.c, &st)
		p.final = &st
		p.closed.Store(true)
	}
	start := time.Now()
	var e cErr
	rc := C.sl_port_close(p.c, e.ptr(), errBufLen)
	if rc == -C.int(syscall.EBUSY) {
		return fmt.Errorf("dpdk: close %s: %s: %w", p.name, e.String(), ErrBuffersHeld)
	}
	p.final.buf_in_use = 0
	p.c = nil
	if rc != 0 {
		return fmt.Errorf("dpdk: close %s: %s: %w", p.name, e.String(), syscall.Errno(-rc))
	}
	p.log.Info("dpdk: port closed", "took", time.Since(start).Round(time.Microsecond))
	return nil
}
