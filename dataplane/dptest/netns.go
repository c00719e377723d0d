package dptest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireRoot skips the test when not root, or fails it when
// SLUICE_REQUIRE_ROOT=1 (set by `make test` as root), so that CI cannot
// pass by skipping.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("SLUICE_REQUIRE_ROOT") == "1" {
		t.Fatal("this test needs root and SLUICE_REQUIRE_ROOT=1")
	}
	t.Skip("needs root; set SLUICE_REQUIRE_ROOT=1 to make this a failure")
}

// Veth is a veth pair whose peer end lives in a network namespace of its
// own: a test host on the other side of a wire.
type Veth struct {
	NS     string     // the namespace holding Peer
	Host   string     // interface in the test's namespace (no address)
	Peer   string     // interface inside NS
	HostIP netip.Addr // the address the test serves on Host (not configured in the kernel)
	PeerIP netip.Addr // the address of Peer, configured inside NS
}

// NewVeth creates a namespace and a veth pair in 10.99.x.0/24 with x drawn
// from [lo, hi), and removes both when the test ends.
func NewVeth(t testing.TB, lo, hi int64) *Veth {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2 (ip) is required: %v", err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	n, _ := rand.Int(rand.Reader, big.NewInt(hi-lo))
	x := lo + n.Int64()
	v := &Veth{NS: "sluice-e2e-" + id, Host: "sle" + id + "a", Peer: "sle" + id + "b",
		HostIP: netip.MustParseAddr(fmt.Sprintf("10.99.%d.1", x)),
		PeerIP: netip.MustParseAddr(fmt.Sprintf("10.99.%d.2", x))}
	Run(t, "ip", "netns", "add", v.NS)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", v.NS).Run() })
	Run(t, "ip", "link", "add", v.Host, "type", "veth", "peer", "name", v.Peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", v.Host).Run() })
	Run(t, "ip", "link", "set", v.Peer, "netns", v.NS)
	Run(t, "ip", "link", "set", v.Host, "up")
	_ = exec.Command("sysctl", "-qw", "net.ipv6.conf."+v.Host+".disable_ipv6=1").Run()
	Run(t, "ip", "netns", "exec", v.NS, "ip", "link", "set", "lo", "up")
	Run(t, "ip", "netns", "exec", v.NS, "ip", "addr", "add", v.PeerIP.String()+"/24", "dev", v.Peer)
	Run(t, "ip", "netns", "exec", v.NS, "ip", "link", "set", v.Peer, "up")
	return v
}

// Run runs a command and fails the test if it fails.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// UDPInNetns opens a UDP socket bound to laddr inside network namespace ns.
// It is made on a locked OS thread that entered the namespace and then
// exits with its goroutine, so nothing else ever runs in the namespace; the
// socket stays in it.
func UDPInNetns(ns string, laddr netip.AddrPort) (*net.UDPConn, error) {
	type result struct {
		c   *net.UDPConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(laddr))
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// Drops sums the packets the kernel dropped on either end of the pair
// (rx_dropped and tx_dropped of Host and of Peer): a test that cannot
// account for a datagram otherwise checks that the wire lost some.
func (v *Veth) Drops() (uint64, error) {
	var sum uint64
	for _, c := range []struct{ ns, dev string }{{"", v.Host}, {v.NS, v.Peer}} {
		for _, stat := range []string{"rx_dropped", "tx_dropped"} {
			path := "/sys/class/net/" + c.dev + "/statistics/" + stat
			var out []byte
			var err error
			if c.ns == "" {
				out, err = os.ReadFile(path)
			} else {
				out, err = exec.Command("ip", "netns", "exec", c.ns, "cat", path).Output()
			}
			if err != nil {
				return 0, fmt.Errorf("veth %s %s: %w", c.dev, stat, err)
			}
			var n uint64
			if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &n); err != nil {
				return 0, fmt.Errorf("veth %s %s: %q: %w", c.dev, stat, out, err)
			}
			sum += n
		}
	}
	return sum, nil
}
