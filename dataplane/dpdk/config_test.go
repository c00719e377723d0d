package dpdk

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

func TestConfigNormalize(t *testing.T) {
	ip := netip.MustParseAddr("10.99.0.1")
	good := Config{Vdev: "net_pcap0,rx_pcap=/x.pcap", IP: ip, UDPPort: 7000}
	c, err := good.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.PortName != "net_pcap0" || c.RxDesc != DefaultRxDesc || c.TxDesc != DefaultTxDesc || c.Burst != DefaultBurst ||
		c.PoolSize != DefaultPoolSize || c.DataRoom != DefaultDataRoom || c.Hugepages != HugepagesAuto || c.Logger == nil {
		t.Errorf("defaults not filled: %+v", c)
	}
	mapped := good
	mapped.IP = netip.MustParseAddr("::ffff:10.99.0.1")
	if c, err := mapped.normalize(); err != nil || c.IP != ip {
		t.Errorf("IPv4-mapped address: %v, %v", c.IP, err)
	}

	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no device", func(c *Config) { c.Vdev = "" }, "Vdev or PortName"},
		{"devargs without name", func(c *Config) { c.Vdev = "rx_pcap=/x" }, "device name"},
		{"no IP", func(c *Config) { c.IP = netip.Addr{} }, "IPv4 address is required"},
		{"IPv6", func(c *Config) { c.IP = netip.MustParseAddr("fd00::1") }, "IPv4 address is required"},
		{"unspecified IP", func(c *Config) { c.IP = netip.IPv4Unspecified() }, "unicast"},
		{"multicast IP", func(c *Config) { c.IP = netip.MustParseAddr("239.1.1.1") }, "unicast"},
		{"no port", func(c *Config) { c.UDPPort = 0 }, "UDPPort"},
		{"burst", func(c *Config) { c.Burst = MaxBurst + 1 }, "Burst"},
		{"negative burst", func(c *Config) { c.Burst = -1 }, "Burst"},
		{"small pool", func(c *Config) { c.PoolSize = 100 }, "PoolSize 100: must exceed RxDesc+Burst = 1088"},
		{"data room", func(c *Config) { c.DataRoom = 64 }, "DataRoom 64"},
		{"big data room", func(c *Config) { c.DataRoom = 70000 }, "DataRoom 70000"},
		{"hugepage mode", func(c *Config) { c.Hugepages = 9 }, "Hugepages"},
		{"long name", func(c *Config) { c.Vdev = "net_ring" + strings.Repeat("x", 70) }, "longer than 63"},
	} {
		c := good
		tc.mod(&c)
		_, err := c.normalize()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrConfig mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestFilePrefixOf(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{DefaultEALArgs(), FilePrefix()},
		{[]string{"-l", "0", "--file-prefix=abc"}, "abc"},
		{[]string{"-l", "0"}, ""},
		{[]string{"--file-prefix"}, ""},
	} {
		if got := filePrefixOf(tc.args); got != tc.want {
			t.Errorf("filePrefixOf(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestFilterReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for r := FilterReason(0); r < NumFilterReasons; r++ {
		s := r.String()
		if s == "" || seen[s] || strings.ContainsAny(s, " -") {
			t.Errorf("reason %d: bad or duplicate name %q", r, s)
		}
		seen[s] = true
	}
	if s := NumFilterReasons.String(); !strings.HasPrefix(s, "FilterReason(") {
		t.Errorf("out of range: %q", s)
	}
}

// TestPutFrame checks the frames TxBurst writes, without DPDK.
func TestPutFrame(t *testing.T) {
	var d dataplane.Datagram
	d.To = dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.3.2:40000"), MAC: [6]byte{2, 1, 2, 3, 4, 5}}
	h := wire.Header{Kind: wire.KindResponse, Request: 77, FragCount: 1, TotalLen: 300, PayloadLen: 300}
	wire.Encode(d.Header[:], &h)
	d.Payload = bytes.Repeat([]byte{0xab}, 300)
	n, err := frameLen(&d, 2048)
	if err != nil || n != 14+20+8+40+300 {
		t.Fatalf("frameLen = %d, %v", n, err)
	}
	b := make([]byte, 2048)
	mac := [6]byte{2, 9, 9, 9, 9, 9}
	if got := putFrame(b, mac, netip.MustParseAddrPort("10.99.3.1:7000"), &d, 0x1234); got != n {
		t.Fatalf("putFrame = %d, want %d", got, n)
	}
	checkReplyFrameFrom(t, b[:n], mac, netip.MustParseAddr("10.99.3.1"), 7000, d)
	pk := gopacket.NewPacket(b[:n], layers.LayerTypeEthernet, gopacket.Default)
	ip := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip.Id != 0x1234 || ip.Flags != layers.IPv4DontFragment || ip.Length != uint16(n-14) {
		t.Errorf("IPv4 id %#x flags %v length %d", ip.Id, ip.Flags, ip.Length)
	}

	for _, tc := range []struct {
		mod  func(*dataplane.Datagram)
		room int
		want error
	}{
		{func(d *dataplane.Datagram) {}, n - 1, ErrTooLarge},
		{func(d *dataplane.Datagram) { d.Payload = make([]byte, 70000) }, 1 << 20, ErrTooLarge},
		{func(d *dataplane.Datagram) { d.To.MAC = [6]byte{} }, 2048, ErrNoMAC},
		{func(d *dataplane.Datagram) { d.To.Addr = netip.MustParseAddrPort("[fd00::1]:1") }, 2048, ErrNotIPv4},
		{func(d *dataplane.Datagram) { d.To.Addr = netip.MustParseAddrPort("10.99.3.2:0") }, 2048, ErrNotIPv4},
		{func(d *dataplane.Datagram) { d.To.Addr = netip.AddrPort{} }, 2048, ErrNotIPv4},
	} {
		dd := d
		tc.mod(&dd)
		if _, err := frameLen(&dd, tc.room); !errors.Is(err, tc.want) {
			t.Errorf("frameLen = %v, want %v", err, tc.want)
		}
	}
	if got := MaxPayload(DefaultDataRoom); got != DefaultDataRoom-42-40 {
		t.Errorf("MaxPayload(%d) = %d", DefaultDataRoom, got)
	}
	if got := MaxPayload(MaxDataRoom); got != MaxDataRoom-42-40 || got > wire.MaxPayload {
		t.Errorf("MaxPayload(max) = %d, want %d", got, MaxDataRoom-42-40)
	}
}

// TestEALProcessState runs in a child process (a fresh EAL state) and checks
// Open before InitEAL, a failing InitEAL and its repetition, and
// InitEAL/Open after CleanupEAL.
func TestEALProcessState(t *testing.T) {
	if !Available {
		t.Skip("this build has no DPDK")
	}
	if os.Getenv("SLUICE_DPDK_CHILD") == "eal-state" {
		ealStateChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEALProcessState$", "-test.v")
	cmd.Env = append(os.Environ(), "SLUICE_DPDK_CHILD=eal-state")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestEALProcessState")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func ealStateChild(t *testing.T) {
	cfg := Config{Vdev: "net_ring0", IP: netip.MustParseAddr("10.99.0.1"), UDPPort: 1}
	if _, err := Open(cfg); !errors.Is(err, ErrEALNotInitialized) {
		t.Fatalf("Open before InitEAL = %v", err)
	}
	bad := []string{"--no-such-eal-option"}
	err1 := InitEAL(bad)
	if err1 == nil || !strings.Contains(err1.Error(), "dpdk: init EAL") {
		t.Fatalf("InitEAL(bad) = %v", err1)
	}
	if err2 := InitEAL(bad); err2 != err1 {
		t.Errorf("repeated InitEAL = %v, want the first error %v", err2, err1)
	}
	if err := InitEAL(DefaultEALArgs()); err != err1 {
		t.Errorf("InitEAL after a failure = %v, want the first error", err)
	}
	if EALInitialized() {
		t.Error("EALInitialized after failure")
	}
	if _, err := Open(cfg); !errors.Is(err, ErrEALNotInitialized) {
		t.Errorf("Open after failed InitEAL = %v", err)
	}
	if err := CleanupEAL(); err != nil {
		t.Errorf("CleanupEAL = %v", err)
	}
	if err := InitEAL(DefaultEALArgs()); !errors.Is(err, ErrEALClosed) {
		t.Errorf("InitEAL after CleanupEAL = %v", err)
	}
	if _, err := Open(cfg); !errors.Is(err, ErrEALClosed) {
		t.Errorf("Open after CleanupEAL = %v", err)
	}
	if d := RuntimeDir(); d != "" {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("runtime dir %s left behind", d)
		}
	}
}

// TestEALOnce checks repeated InitEAL in the test process, the runtime
// directory, and that no Go thread was left pinned by rte_eal_init.
func TestEALOnce(t *testing.T) {
	needEAL(t)
	if err := InitEAL(DefaultEALArgs()); err != nil {
		t.Errorf("second InitEAL with the same args = %v", err)
	}
	err := InitEAL(DefaultEALArgs("--log-level=lib.eal:debug"))
	if err == nil || !strings.Contains(err.Error(), "already initialized") {
		t.Errorf("InitEAL with other args = %v", err)
	}
	if !EALInitialized() {
		t.Error("EALInitialized = false")
	}
	// Config.EAL: the same arguments are fine, others are refused.
	ip := netip.MustParseAddr("10.99.0.1")
	p, err := Open(Config{EAL: DefaultEALArgs(), Vdev: "net_ring_eal", IP: ip, UDPPort: 1, PoolSize: 2047, RxDesc: 128})
	if err != nil {
		t.Errorf("Open with Config.EAL = the running arguments: %v", err)
	} else {
		p.Close()
	}
	if _, err := Open(Config{EAL: []string{"-l", "1"}, Vdev: "net_ring_eal", IP: ip, UDPPort: 1}); err == nil ||
		!strings.Contains(err.Error(), "dpdk: open net_ring_eal: dpdk: EAL already initialized") {
		t.Errorf("Open with other Config.EAL = %v", err)
	}
	if d := RuntimeDir(); d != filepath.Join("/var/run/dpdk", FilePrefix()) {
		t.Errorf("RuntimeDir = %q", d)
	}
	if !strings.HasPrefix(Version(), "DPDK 22.11") {
		t.Logf("running on %s", Version())
	}

	// Every Go thread keeps the process's CPU set; only DPDK's own
	// threads (other names) may be pinned.
	self, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip(err)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*")
	want, goThreads, others := "", 0, 0
	for _, task := range tasks {
		comm, _ := os.ReadFile(task + "/comm")
		status, _ := os.ReadFile(task + "/status")
		var cpus string
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				cpus = strings.TrimSpace(v)
			}
		}
		if !bytes.Equal(comm, self) {
			others++ // eal-intr-thread and friends
			continue
		}
		goThreads++
		if want == "" {
			want = cpus
		}
		if cpus != want {
			t.Errorf("Go thread %s allowed on CPUs %s, others on %s", filepath.Base(task), cpus, want)
		}
	}
	t.Logf("%d Go threads on CPUs %s, %d DPDK threads", goThreads, want, others)
	if goThreads == 0 || others == 0 {
		t.Errorf("found %d Go threads and %d DPDK threads", goThreads, others)
	}
}

// TestOpenErrors checks that Open explains what went wrong, and undoes what
// it did so that the same device can be opened afterwards.
func TestOpenErrors(t *testing.T) {
	needEAL(t)
	ip := netip.MustParseAddr("10.99.0.1")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{PortName: "no_such_port", IP: ip, UDPPort: 1}, "dpdk: open no_such_port: no ethdev named no_such_port"},
		{Config{Vdev: "net_nosuchdriver0", IP: ip, UDPPort: 1}, "rte_dev_probe(net_nosuchdriver0) failed"},
		{Config{Vdev: "net_pcap_e0,rx_pcap=/nonexistent/x.pcap", IP: ip, UDPPort: 1}, "rte_dev_probe(net_pcap_e0,rx_pcap=/nonexistent/x.pcap) failed"},
		{Config{Vdev: "net_ring_e0", IP: ip, UDPPort: 1, Hugepages: HugepagesRequire, PoolSize: 2047, RxDesc: 128}, "MAP_HUGETLB"},
	} {
		p, err := Open(tc.cfg)
		if err == nil {
			hp := p.RegionInfo().Hugepages
			p.Close()
			if hp && tc.cfg.Hugepages == HugepagesRequire {
				continue // this host has hugepages
			}
			t.Errorf("Open(%+v) succeeded", tc.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s%s) = %v, want %q", tc.cfg.Vdev, tc.cfg.PortName, err, tc.want)
		}
	}
	// The failed net_ring_e0 was removed again: it opens now.
	p := openPort(t, Config{Vdev: "net_ring_e0", IP: ip, UDPPort: 1, PoolSize: 2047, RxDesc: 128})
	if _, err := Open(Config{Vdev: "net_ring_e0", IP: ip, UDPPort: 1}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Open of an open vdev = %v", err)
	}
	// The first port still works.
	d := datagram(selfEndpoint(p), fragments(1, 1, 1, 10, 10)[0])
	if n, err := p.TxBurst([]dataplane.Datagram{d}); n != 1 || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	if !pollUntil(t, p, 2*time.Second, nil, func() bool { return p.Stats().RxPackets == 1 }) {
		t.Error("port unusable after a failed duplicate Open")
	}
	info := p.RegionInfo()
	if base, size := p.Region(); base == 0 || base != info.Base || size != info.Size || size%info.PageSize != 0 || !info.Locked {
		t.Errorf("Region() = %#x+%d, info %+v", base, size, info)
	}
}
