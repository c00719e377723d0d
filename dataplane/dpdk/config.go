package dpdk

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"sluice/dataplane/wire"
)

// HugepageMode says where the packet-buffer region comes from.
type HugepageMode int

// Hugepage modes.
const (
	// HugepagesAuto maps the region with MAP_HUGETLB when the host has
	// enough free hugepages, else with anonymous memory locked by mlock.
	HugepagesAuto HugepageMode = iota
	// HugepagesNever always uses anonymous memory locked by mlock.
	HugepagesNever
	// HugepagesRequire fails Open when hugepages cannot be mapped.
	HugepagesRequire
)

func (m HugepageMode) String() string {
	switch m {
	case HugepagesAuto:
		return "auto"
	case HugepagesNever:
		return "never"
	case HugepagesRequire:
		return "require"
	}
	return fmt.Sprintf("HugepageMode(%d)", int(m))
}

// Defaults and limits for Config.
const (
	DefaultRxDesc   = 1024
	DefaultTxDesc   = 1024
	DefaultBurst    = 64
	MaxBurst        = 1024
	DefaultPoolSize = 8191
	// DefaultDataRoom is the frame bytes one mbuf holds (after its 128-byte
	// headroom): a standard 1500-byte MTU frame with a VLAN tag fits.
	DefaultDataRoom = 2048
	// MinDataRoom fits the smallest frame the port sends: Ethernet, IPv4,
	// UDP and the sluice header.
	MinDataRoom = 128
	// MaxDataRoom is the largest data room an mbuf can describe (its
	// 16-bit buffer length minus the headroom).
	MaxDataRoom = 65535 - 128
)

// ErrConfig wraps every configuration error returned by Open.
var ErrConfig = errors.New("dpdk: invalid config")

// Config describes one port. The zero value of every numeric field means its
// default.
type Config struct {
	// EAL, when set, are the EAL arguments (see DefaultEALArgs) that Open
	// passes to InitEAL. The EAL starts once per process: every port that
	// sets EAL must set the same arguments. Empty: InitEAL must have been
	// called.
	EAL []string
	// Vdev is the virtual device to hot-plug when the port opens, as EAL
	// devargs: the device name, then comma-separated driver options, for
	// example "net_pcap0,rx_pcap=/tmp/in.pcap",
	// "net_af_packet0,iface=veth0,framecnt=32768,qpairs=1",
	// "net_tap0,iface=sltap0", "net_ring0",
	// "net_memif0,role=server,socket=/run/sluice.sock". The device is
	// removed again by Close. Empty for a device that already exists (a
	// NIC probed by the EAL, or a --vdev EAL argument): then PortName names
	// it.
	Vdev string
	// PortName is the ethdev name to open (rte_eth_dev_get_port_by_name):
	// a PCI address such as "0000:3b:00.0", or a vdev name. Defaults to the
	// name part of Vdev.
	PortName string
	// IP is the port's IPv4 address: ARP requests for it are answered,
	// datagrams to it are delivered, replies come from it. Required.
	IP netip.Addr
	// UDPPort is the UDP port sluice datagrams arrive on and replies leave
	// from. Required.
	UDPPort uint16
	// AcceptAnyIP delivers UDP datagrams to UDPPort whatever their
	// destination address (for ports that front several addresses); replies
	// then come from the address each request was sent to
	// (Endpoint.Local).
	AcceptAnyIP bool
	// VerifyUDPChecksum checks UDP checksums in software when the device
	// does not (datagrams with checksum 0 carry none and pass). Off by
	// default: it reads every payload byte once more.
	VerifyUDPChecksum bool
	// Promiscuous puts the device in promiscuous mode (needed when frames
	// for our IP arrive with another destination MAC, e.g. behind a
	// bridge that does not learn).
	Promiscuous bool
	// RxDesc and TxDesc are the receive and transmit ring sizes
	// (descriptors); the driver may round them. Defaults 1024.
	RxDesc, TxDesc uint16
	// Burst is the most frames one RxBurst or TxBurst call handles (larger
	// slices are cut; TxBurst loops). Default 64, at most 1024.
	Burst int
	// PoolSize is the number of mbufs in the port's pool, shared by
	// receive (held until Release) and transmit (held until the device
	// sent them). Must exceed RxDesc+Burst. Default 8191.
	PoolSize uint32
	// DataRoom is the frame bytes each mbuf holds after the 128-byte
	// headroom. Frames are never chained: received frames longer than this
	// are dropped (reason segmented), and TxBurst refuses datagrams whose
	// frame would not fit (Port.MaxPayload). Above the default, the device
	// MTU is raised to DataRoom-18 (a tagged frame fills the data room),
	// and Open fails if the device cannot: jumbo frames up to 65407.
	// Default 2048 (MTU left as the device has it, normally 1500).
	DataRoom uint32
	// Hugepages says where the buffer region comes from. Default
	// HugepagesAuto.
	Hugepages HugepageMode
	// Logger receives the port's log records; nil means slog.Default().
	Logger *slog.Logger
}

// vdevName returns the device name part of devargs ("net_pcap0" of
// "net_pcap0,rx_pcap=x").
func vdevName(devargs string) string {
	name, _, _ := strings.Cut(devargs, ",")
	return strings.TrimSpace(name)
}

// normalize returns cfg with defaults filled in, or an error wrapping
// ErrConfig that names the bad field.
func (cfg Config) normalize() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return cfg, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	cfg.Vdev = strings.TrimSpace(cfg.Vdev)
	if cfg.PortName == "" {
		cfg.PortName = vdevName(cfg.Vdev)
	}
	if cfg.PortName == "" {
		return bad("Vdev or PortName is required")
	}
	if cfg.Vdev != "" && strings.ContainsAny(vdevName(cfg.Vdev), " \t=") {
		return bad("Vdev %q: the devargs must start with the device name (\"net_ring0,opt=val\")", cfg.Vdev)
	}
	if len(cfg.PortName) >= 64 {
		return bad("PortName %q: longer than 63 bytes", cfg.PortName)
	}
	if !cfg.IP.IsValid() || !cfg.IP.Unmap().Is4() {
		return bad("IP %v: an IPv4 address is required", cfg.IP)
	}
	cfg.IP = cfg.IP.Unmap()
	if ip := cfg.IP.As4(); cfg.IP.IsUnspecified() || cfg.IP.IsMulticast() || ip == [4]byte{255, 255, 255, 255} {
		return bad("IP %v: must be a unicast address", cfg.IP)
	}
	if cfg.UDPPort == 0 {
		return bad("UDPPort is required")
	}
	if cfg.RxDesc == 0 {
		cfg.RxDesc = DefaultRxDesc
	}
	if cfg.TxDesc == 0 {
		cfg.TxDesc = DefaultTxDesc
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Burst < 1 || cfg.Burst > MaxBurst {
		return bad("Burst %d: must be 1..%d", cfg.Burst, MaxBurst)
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = DefaultPoolSize
	}
	if need := uint32(cfg.RxDesc) + uint32(cfg.Burst); cfg.PoolSize <= need {
		return bad("PoolSize %d: must exceed RxDesc+Burst = %d (a NIC fills its receive ring from the pool)", cfg.PoolSize, need)
	}
	if cfg.PoolSize > 1<<24 {
		return bad("PoolSize %d: more than %d mbufs", cfg.PoolSize, 1<<24)
	}
	if cfg.DataRoom == 0 {
		cfg.DataRoom = DefaultDataRoom
	}
	if cfg.DataRoom < MinDataRoom || cfg.DataRoom > MaxDataRoom {
		return bad("DataRoom %d: must be %d..%d", cfg.DataRoom, MinDataRoom, MaxDataRoom)
	}
	switch cfg.Hugepages {
	case HugepagesAuto, HugepagesNever, HugepagesRequire:
	default:
		return bad("Hugepages %v: unknown mode", cfg.Hugepages)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

// MaxPayload returns the largest datagram payload (after the sluice header)
// that one mbuf of this data room holds. A port also keeps frames within its
// MTU: Port.MaxPayload is the exact limit.
func MaxPayload(dataRoom uint32) int {
	n := int(dataRoom) - txHeaderLen - wire.HeaderLen
	if m := 65535 - 20 - 8 - wire.HeaderLen; n > m {
		n = m
	}
	return n
}
