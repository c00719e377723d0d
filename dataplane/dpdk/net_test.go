//go:build linux

package dpdk

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/dataplane"
	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
)

// runQuiet runs a cleanup command and ignores its result.
func runQuiet(name string, args ...string) {
	_ = exec.Command(name, args...).Run()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randSubnet returns a random x in [lo, hi) for a test subnet 10.99.x.0/24.
func randSubnet(lo, hi int64) int {
	n, _ := rand.Int(rand.Reader, big.NewInt(hi-lo))
	return int(lo + n.Int64())
}

// needIP checks that iproute2 is there.
func needIP(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2 (ip) is required: %v", err)
	}
}

// disableIPv6 stops the kernel sending router solicitations and MLD on a
// test interface (noise for the exact counts), best effort.
func disableIPv6(ns, ifname string) {
	args := []string{"sysctl", "-qw", "net.ipv6.conf." + ifname + ".disable_ipv6=1"}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	runQuiet(args[0], args[1:]...)
}

// echoLoad is a kernel-side sender of request fragments and a counter of
// the replies the DPDK side echoes back.
type echoLoad struct {
	conn    *net.UDPConn
	to      netip.AddrPort
	frags   [][]byte
	replies atomic.Int64
	badRepl atomic.Int64
	done    chan struct{}
}

func newEchoLoad(t testing.TB, conn *net.UDPConn, to netip.AddrPort, n int) *echoLoad {
	t.Helper()
	// Room for every reply even if the reader is not scheduled for a
	// while (2 cores, one busy polling): SO_RCVBUFFORCE passes rmem_max.
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	})
	if serr != nil {
		t.Fatalf("SO_RCVBUFFORCE: %v", serr)
	}
	l := &echoLoad{conn: conn, to: to, done: make(chan struct{})}
	// n fragments of requests of 8 x 1000 bytes.
	for req := uint64(1); len(l.frags) < n; req++ {
		l.frags = append(l.frags, fragments(4, 11, req, 8000, 1000)...)
	}
	l.frags = l.frags[:n]
	go l.readReplies()
	return l
}

func (l *echoLoad) readReplies() {
	defer close(l.done)
	buf := make([]byte, 65536)
	var h wire.Header
	for {
		n, _, err := l.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if wire.Decode(buf[:n], &h) != nil || h.Kind != wire.KindResponse {
			l.badRepl.Add(1)
			continue
		}
		l.replies.Add(1)
	}
}

// send sends every fragment, paced to perSec datagrams per second.
func (l *echoLoad) send(perSec int) error {
	start := time.Now()
	for i, f := range l.frags {
		if _, err := l.conn.WriteToUDPAddrPort(f, l.to); err != nil {
			return fmt.Errorf("send %d: %w", i, err)
		}
		if due := start.Add(time.Duration(i+1) * time.Second / time.Duration(perSec)); time.Until(due) > 0 {
			time.Sleep(time.Until(due))
		}
	}
	return nil
}

// echoServer polls p until stop is closed (then for linger more), checks
// every datagram against the fragments sent, and echoes a response header
// for each one to its sender. It returns the count of valid datagrams.
func echoServer(t *testing.T, p *Port, frags [][]byte, stop <-chan struct{}, linger time.Duration) (valid, invalid int) {
	t.Helper()
	want := map[[2]uint64][]byte{}
	var h wire.Header
	for _, f := range frags {
		if err := wire.Decode(f, &h); err != nil {
			t.Fatal(err)
		}
		want[[2]uint64{h.Request, uint64(h.FragIndex)}] = f
	}
	pkts := make([]dataplane.Packet, 64)
	bufs := make([]dataplane.BufRef, 0, 64)
	replies := make([]dataplane.Datagram, 0, 64)
	var end time.Time
	for {
		if end.IsZero() {
			select {
			case <-stop:
				end = time.Now().Add(linger)
			default:
			}
		} else if time.Now().After(end) {
			return valid, invalid
		}
		n, err := p.RxBurst(pkts)
		if err != nil {
			t.Fatalf("RxBurst: %v", err)
		}
		if n == 0 {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		replies = replies[:0]
		bufs = bufs[:0]
		for i := 0; i < n; i++ {
			pk := &pkts[i]
			bufs = append(bufs, pk.Buf)
			if wire.Decode(pk.Data, &h) != nil || string(want[[2]uint64{h.Request, uint64(h.FragIndex)}]) != string(pk.Data) {
				invalid++
				continue
			}
			valid++
			var d dataplane.Datagram
			d.To = pk.From
			rh := wire.Header{Kind: wire.KindResponse, Model: h.Model, Flow: h.Flow, Request: h.Request,
				FragCount: 1, TotalLen: 0, PayloadLen: 0}
			wire.Encode(d.Header[:], &rh)
			replies = append(replies, d)
		}
		p.Release(bufs)
		// A full device queue is transient: offer what it refused again
		// for a while (the Port contract lets the caller retry).
		for try := 0; len(replies) > 0 && try < 200; try++ {
			k, err := p.TxBurst(replies)
			if err != nil {
				t.Errorf("TxBurst: %v", err)
				break
			}
			replies = replies[k:]
			if len(replies) > 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
}

// TestAfPacketVeth receives paced request fragments from a UDP socket in
// another network namespace over a veth pair, through net_af_packet, and
// echoes a response to each sender.
func TestAfPacketVeth(t *testing.T) {
	needEAL(t)
	needIP(t)
	id := randHex(3)
	ns := "sluice-test-" + id
	vethA, vethB := "slv"+id+"a", "slv"+id+"b"
	x := randSubnet(200, 250)
	dpdkIP := netip.MustParseAddr(fmt.Sprintf("10.99.%d.1", x))
	peerIP := netip.MustParseAddr(fmt.Sprintf("10.99.%d.2", x))

	dptest.Run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { runQuiet("ip", "netns", "del", ns) })
	dptest.Run(t, "ip", "link", "add", vethA, "type", "veth", "peer", "name", vethB)
	t.Cleanup(func() { runQuiet("ip", "link", "del", vethA) })
	disableIPv6("", vethA)
	dptest.Run(t, "ip", "link", "set", vethB, "netns", ns)
	dptest.Run(t, "ip", "link", "set", vethA, "up")
	dptest.Run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	disableIPv6(ns, vethB)
	dptest.Run(t, "ip", "netns", "exec", ns, "ip", "addr", "add", peerIP.String()+"/24", "dev", vethB)
	dptest.Run(t, "ip", "netns", "exec", ns, "ip", "link", "set", vethB, "up")

	p := openPort(t, Config{
		Vdev: fmt.Sprintf("net_af_packet_%s,iface=%s,framecnt=32768,qpairs=1", id, vethA),
		IP:   dpdkIP, UDPPort: serverPort,
	})
	base := p.Stats().BufInUse

	conn, err := dptest.UDPInNetns(ns, netip.AddrPortFrom(peerIP, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 2000
	load := newEchoLoad(t, conn, netip.AddrPortFrom(dpdkIP, serverPort), n)
	stop := make(chan struct{})
	sendErr := make(chan error, 1)
	go func() {
		defer close(stop)
		sendErr <- load.send(2000) // 2000 datagrams in about 1 s
	}()
	valid, invalid := echoServer(t, p, load.frags, stop, 300*time.Millisecond)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	<-load.done

	st, ds := p.Stats(), p.DriverStats()
	t.Logf("af_packet: %d/%d datagrams received, %d replies back, stats %+v, arp replies %d, filtered %v",
		valid, n, load.replies.Load(), st, ds.ARPReplies, ds.Filtered)
	if invalid != 0 {
		t.Errorf("%d datagrams with wrong content", invalid)
	}
	if valid < n*95/100 {
		t.Errorf("received %d of %d datagrams, want >= 95%%", valid, n)
	}
	if ds.ARPReplies == 0 {
		t.Error("no ARP reply sent: the peer cannot have resolved our address")
	}
	if r := load.replies.Load(); r < int64(valid)*95/100 {
		t.Errorf("%d replies reached the sender for %d datagrams, want >= 95%%", r, valid)
	}
	if load.badRepl.Load() != 0 {
		t.Errorf("%d malformed replies", load.badRepl.Load())
	}
	assertBufs(t, p, base)
}

// TestTap sends from a kernel UDP socket to the DPDK side of a net_tap
// device (the kernel resolves our address with ARP first) and checks the
// echoed replies.
func TestTap(t *testing.T) {
	needEAL(t)
	needIP(t)
	id := randHex(3)
	ifname := "sltap" + id
	x := randSubnet(100, 200)
	dpdkIP := netip.MustParseAddr(fmt.Sprintf("10.99.%d.1", x))
	kernIP := netip.MustParseAddr(fmt.Sprintf("10.99.%d.2", x))

	p := openPort(t, Config{Vdev: fmt.Sprintf("net_tap_%s,iface=%s", id, ifname), IP: dpdkIP, UDPPort: serverPort})
	// The tap goes away with the port; this is for a failed Close.
	t.Cleanup(func() { runQuiet("ip", "link", "del", ifname) })
	base := p.Stats().BufInUse
	disableIPv6("", ifname)
	dptest.Run(t, "ip", "addr", "add", kernIP.String()+"/24", "dev", ifname)
	dptest.Run(t, "ip", "link", "set", ifname, "up")

	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(kernIP, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 500
	load := newEchoLoad(t, conn, netip.AddrPortFrom(dpdkIP, serverPort), n)
	stop := make(chan struct{})
	sendErr := make(chan error, 1)
	go func() {
		defer close(stop)
		sendErr <- load.send(5000)
	}()
	valid, invalid := echoServer(t, p, load.frags, stop, 300*time.Millisecond)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	<-load.done
	st, ds := p.Stats(), p.DriverStats()
	t.Logf("tap: %d/%d received, %d replies, stats %+v, arp replies %d, filtered %v",
		valid, n, load.replies.Load(), st, ds.ARPReplies, ds.Filtered)
	if invalid != 0 {
		t.Errorf("%d datagrams with wrong content", invalid)
	}
	if valid < n*95/100 {
		t.Errorf("received %d of %d datagrams, want >= 95%%", valid, n)
	}
	if ds.ARPReplies == 0 || ds.Filtered[FilterARP] == 0 {
		t.Errorf("ARP not exercised: %d replies, %d ARP frames", ds.ARPReplies, ds.Filtered[FilterARP])
	}
	if r := load.replies.Load(); r < int64(valid)*95/100 {
		t.Errorf("%d replies reached the kernel socket for %d datagrams, want >= 95%%", r, valid)
	}
	assertBufs(t, p, base)
}

// TestMemif connects a memif server and client in this process (copy mode,
// one socket file) and sends datagrams both ways.
func TestMemif(t *testing.T) {
	needEAL(t)
	id := randHex(3)
	sock := fmt.Sprintf("%s/memif-%s.sock", t.TempDir(), id)
	ipS := netip.MustParseAddr("10.99.2.1")
	ipC := netip.MustParseAddr("10.99.2.2")
	srv := openPort(t, Config{Vdev: fmt.Sprintf("net_memif_s%s,role=server,id=0,socket=%s,socket-abstract=no", id, sock),
		IP: ipS, UDPPort: 7000, PoolSize: 4095, RxDesc: 512, TxDesc: 512})
	cli := openPort(t, Config{Vdev: fmt.Sprintf("net_memif_c%s,role=client,id=0,socket=%s,socket-abstract=no", id, sock),
		IP: ipC, UDPPort: 7001, PoolSize: 4095, RxDesc: 512, TxDesc: 512})
	baseS, baseC := srv.Stats().BufInUse, cli.Stats().BufInUse
	deadline := time.Now().Add(5 * time.Second)
	for !(srv.LinkUp() && cli.LinkUp()) {
		if time.Now().After(deadline) {
			t.Fatalf("memif link not up after 5 s (server %v, client %v)", srv.LinkUp(), cli.LinkUp())
		}
		time.Sleep(10 * time.Millisecond)
	}

	const n = 1000
	frags := make([][]byte, 0, n)
	for req := uint64(1); len(frags) < n; req++ {
		frags = append(frags, fragments(5, 1, req, 4000, 1000)...)
	}
	to := dataplane.Endpoint{Addr: netip.AddrPortFrom(ipS, 7000), MAC: srv.MAC()}
	dgs := make([]dataplane.Datagram, len(frags))
	for i, f := range frags {
		dgs[i] = datagram(to, f)
	}
	// The client sends and receives on one goroutine, as an I/O loop does:
	// a memif client must poll its receive ring to give the server buffers
	// to answer into.
	sent, replies := 0, 0
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		pkts := make([]dataplane.Packet, 64)
		bufs := make([]dataplane.BufRef, 0, 64)
		var h wire.Header
		for (sent < len(dgs) || replies < sent) && time.Now().Before(deadline.Add(5*time.Second)) {
			if sent < len(dgs) {
				k, err := cli.TxBurst(dgs[sent:min(sent+32, len(dgs))])
				if err != nil {
					t.Errorf("client TxBurst: %v", err)
					return
				}
				sent += k
			}
			k, _ := cli.RxBurst(pkts)
			bufs = bufs[:0]
			for i := 0; i < k; i++ {
				if wire.Decode(pkts[i].Data, &h) == nil && h.Kind == wire.KindResponse && pkts[i].From.Addr == to.Addr {
					replies++
				}
				bufs = append(bufs, pkts[i].Buf)
			}
			cli.Release(bufs)
			if k == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	valid, invalid := echoServer(t, srv, frags, stop, 100*time.Millisecond)
	if sent != n || valid != n || invalid != 0 {
		t.Errorf("client sent %d, server got %d valid and %d invalid; want %d", sent, valid, invalid, n)
	}
	if replies != valid {
		t.Errorf("client got %d replies, want %d", replies, valid)
	}
	t.Logf("memif: server %+v; client %+v", srv.Stats(), cli.Stats())
	assertBufs(t, srv, baseS)
	assertBufs(t, cli, baseC)
}
