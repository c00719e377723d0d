package appliance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/dataplane/dpdk"
	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
	"sluice/ifmanager"
)

func freeUDPPort(t *testing.T) int {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

func newClient(t *testing.T, flow uint32) *dptest.Client {
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadBuffer(16 << 20)
	_ = conn.SetWriteBuffer(16 << 20)
	return dptest.NewClient(conn, flow, 1400)
}

// newNetnsClient is a client in v's network namespace, at its peer
// address, with flow id flow, and the address of the appliance's DPDK
// port on v's host side.
func newNetnsClient(t *testing.T, v *dptest.Veth, flow uint32) (*dptest.Client, netip.AddrPort) {
	t.Helper()
	conn, err := dptest.UDPInNetns(v.NS, netip.AddrPortFrom(v.PeerIP, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadBuffer(8 << 20)
	return dptest.NewClient(conn, flow, wire.DefaultFragSize), netip.AddrPortFrom(v.HostIP, wire.DefaultPort)
}

// TestSIGTERMDrainsBinary runs the real sluice binary, sends requests
// before and after SIGTERM, and checks that every request is answered (ok
// before the drain, ok or shutting_down during it) and that it exits 0.
func TestSIGTERMDrainsBinary(t *testing.T) {
	model := classifierPath(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	goBuild(t, "", "./cmd/sluice", bin)
	port := freeUDPPort(t)
	prof := filepath.Join(dir, "p.toml")
	_ = os.WriteFile(prof, []byte(fmt.Sprintf(`
[appliance]
threads = 2
metrics = "off"
control = "off"
[[port]]
driver = "udp"
listen = "127.0.0.1:%d"
[[if]]
name = "cls"
model_id = 7
model = "onnx:%s"
input = "u8-hwc"
input_shape = [3, 48, 192]
max_batch = 4
queue_len = 512
`, port, model)), 0o644)
	cmd := exec.Command(bin, "-profile", prof, "-stats-interval", "0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	var logBuf strings.Builder
	var logMu sync.Mutex
	logDone := make(chan struct{}) // the log read to its end (the process exited)
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			logMu.Lock()
			logBuf.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if strings.Contains(sc.Text(), "sluice serving") {
				once.Do(func() { close(serving) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-serving:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("sluice did not start:\n%s", logBuf.String())
	}
	cl := newClient(t, 21)
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	frame := make([]byte, 48*192*3)
	const n = 300
	for id := uint64(1); id <= n; id++ {
		if id == 150 {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		_ = cl.Send(addr, 7, id, wire.FlagRT, frame)
		time.Sleep(2 * time.Millisecond)
	}
	// Wait closes the pipe: read the log to its end first, or its last
	// lines ("sluice drained") may be lost
	<-logDone
	werr := cmd.Wait()
	logMu.Lock()
	logs := logBuf.String()
	logMu.Unlock()
	if werr != nil {
		t.Fatalf("sluice exited with %v:\n%s", werr, logs)
	}
	ok, down := 0, 0
	for id := uint64(1); id <= n; id++ {
		r, got := cl.Wait(id, 2*time.Second)
		switch {
		case !got:
			t.Errorf("request %d: never answered", id)
		case r.Status == wire.StatusOK:
			ok++
		case r.Status == wire.StatusShuttingDown:
			down++
			if id < 150 {
				t.Errorf("request %d sent before SIGTERM answered shutting_down", id)
			}
		default:
			t.Errorf("request %d: %v", id, r.Status)
		}
	}
	t.Logf("%d ok, %d shutting_down of %d", ok, down, n)
	if ok < 149 || cl.Duplicates() != 0 {
		t.Fatalf("ok %d (want >= 149), duplicates %d", ok, cl.Duplicates())
	}
	if !strings.Contains(logs, "sluice drained") {
		t.Fatalf("no drain in the log:\n%s", logs)
	}
}

// TestOverloadAnswered floods an IF with a short queue: every request is
// answered, ok or overloaded, and the counts add up on both sides.
func TestOverloadAnswered(t *testing.T) {
	model := classifierPath(t)
	text := fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 1
metrics = "off"
control = "off"
[[port]]
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "cls"
model_id = 7
model = "onnx:%s"
input = "u8-hwc"
input_shape = [3, 48, 192]
max_batch = 1
batching = "fixed"
queue_len = 2
`, model)
	a, stop := startAppliance(t, "overload.toml", text)
	addr, _ := a.PortAddr("port0")
	cl := newClient(t, 22)
	frame := make([]byte, 48*192*3)
	const n = 300
	for id := uint64(1); id <= n; id++ {
		_ = cl.Send(addr, 7, id, 0, frame)
		if id%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// A request whose datagram the kernel dropped (a loaded machine may
	// overflow the socket buffer with 6000 datagrams) is answered
	// timed_out after the reassembly timeout: one answer each, whatever
	// the timing.
	ok, over, timedOut := 0, 0, 0
	for id := uint64(1); id <= n; id++ {
		r, got := cl.Wait(id, 2*testReassemblyTimeoutMS*time.Millisecond)
		switch {
		case !got:
			t.Fatalf("request %d never answered", id)
		case r.Status == wire.StatusOK:
			ok++
		case r.Status == wire.StatusOverloaded:
			over++
		case r.Status == wire.StatusTimedOut:
			timedOut++
		default:
			t.Fatalf("request %d: %v", id, r.Status)
		}
	}
	stop()
	s := a.Stats()
	t.Logf("%d ok, %d overloaded, %d timed out; IF served %d overloaded %d", ok, over, timedOut, s.IFs[0].Served, s.IFs[0].Overloaded)
	if over == 0 {
		t.Fatal("no request was refused: the test did not overload the IF")
	}
	if ok+over+timedOut != n || uint64(ok) != s.IFs[0].Served || uint64(over) != s.IFs[0].Overloaded ||
		s.Ports[0].Completed+uint64(timedOut) != n || s.Ports[0].Responses != n || cl.Duplicates() != 0 {
		t.Fatalf("counts do not add up: client ok %d overloaded %d timed out %d duplicates %d; IF served %d overloaded %d; port completed %d responses %d",
			ok, over, timedOut, cl.Duplicates(), s.IFs[0].Served, s.IFs[0].Overloaded, s.Ports[0].Completed, s.Ports[0].Responses)
	}
}

// TestApplianceOverDPDK serves the classifier on a DPDK net_af_packet port
// on a veth pair, with the client in another network namespace, and swaps
// the IF under load. Every request is answered once (ok, or overloaded or
// timed_out where the VM stalled), or its loss is on record: the wire, the
// driver or the client's socket dropped at least as many datagrams as went
// unanswered. Every ok answer is the same, none came twice, and every mbuf
// is back.
func TestApplianceOverDPDK(t *testing.T) {
	dptest.RequireRoot(t)
	if !dpdk.Available {
		t.Fatal("this build has no DPDK")
	}
	model := classifierPath(t)
	v := dptest.NewVeth(t, 100, 150)
	a, stop := startAppliance(t, "dpdk.toml", fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 2
metrics = "off"
control = "off"
reassembly_timeout_ms = 5000
eal = ["-l", "0", "--no-huge", "--no-pci", "-m", "256", "--no-shconf", "--no-telemetry", "--file-prefix", "sluice-apptest-%d"]
[[port]]
name = "dpdk0"
driver = "dpdk"
ip = "%s"
vdev = "net_af_packet_app,iface=%s,framecnt=32768,qpairs=1"
pool_size = 16383
[[if]]
name = "cls"
model_id = 7
model = "onnx:%s"
input = "u8-hwc"
input_shape = [3, 48, 192]
max_batch = 4
queue_len = 256
`, os.Getpid(), v.HostIP, v.Host, model))
	cl, server := newNetnsClient(t, v, 23)
	frame := make([]byte, 48*192*3)
	for i := range frame {
		frame[i] = byte(i * 7)
	}
	const n = 300
	sendErrs := 0
	swapped := make(chan error, 1)
	for id := uint64(1); id <= n; id++ {
		if id == n/2 {
			go func() {
				a.mu.Lock()
				r := a.ifs["cls"]
				a.mu.Unlock()
				_, err := r.f.Swap(context.Background(), ifmanager.SwapSpec{})
				swapped <- err
			}()
		}
		if err := cl.Send(server, 7, id, 0, frame); err != nil {
			sendErrs++
		}
		time.Sleep(3 * time.Millisecond)
	}
	if err := <-swapped; err != nil {
		t.Fatalf("swap under load: %v", err)
	}
	// A request that lost a fragment on the wire is answered timed_out
	// after the reassembly timeout (5 s here): wait that long and more.
	// Answers already in are taken at once, so one deadline serves all.
	ok, okFirstHalf, answered := 0, 0, 0
	var first []byte
	var missing []uint64
	deadline := time.Now().Add(35 * time.Second)
	for id := uint64(1); id <= n; id++ {
		r, got := cl.Wait(id, max(time.Until(deadline), time.Millisecond))
		if !got {
			missing = append(missing, id)
			continue
		}
		answered++
		switch r.Status {
		case wire.StatusOK:
			if first == nil {
				first = r.Output
			} else if string(first) != string(r.Output) {
				t.Errorf("request %d: a different answer for the same frame", id)
			}
			ok++
			if id <= n/2 {
				okFirstHalf++
			}
		case wire.StatusOverloaded, wire.StatusTimedOut:
		default:
			t.Errorf("request %d: %v", id, r.Status)
		}
	}
	stop()
	st := a.Stats()
	a.Close()
	wireDrops, err := v.Drops()
	if err != nil {
		t.Fatal(err)
	}
	ps := st.Ports[0]
	t.Logf("DPDK appliance: %d of %d answered, %d ok (%d in the first half); responses sent %d; veth drops %d, send errors %d; port %+v, drops %v",
		answered, n, ok, okFirstHalf, ps.Responses, wireDrops, sendErrs, ps.Port, ps.Drops)
	if okFirstHalf == 0 || ok == okFirstHalf {
		t.Fatalf("%d ok answers before the swap began, %d after: want some of each", okFirstHalf, ok-okFirstHalf)
	}
	if ps.Responses < uint64(answered) {
		t.Fatalf("%d answers received, %d sent", answered, ps.Responses)
	}
	// each request lost needs a datagram lost on the way in or out
	lostOnRecord := wireDrops + ps.Port.RxMissed + ps.Port.TxFailed + uint64(sendErrs) + (ps.Responses - uint64(answered))
	if uint64(len(missing)) > lostOnRecord {
		t.Fatalf("%d requests never answered (first %d), and only %d datagrams lost on record", len(missing), missing[0], lostOnRecord)
	}
	if cl.Duplicates() != 0 {
		t.Fatalf("%d duplicate response fragments", cl.Duplicates())
	}
	if ps.Port.BufInUse != 0 {
		t.Fatalf("%d mbufs in use after the run", ps.Port.BufInUse)
	}
}

// TestCUDAFallsBackToCPU asks for the cuda backend on a machine without a
// CUDA driver: the IF must load on the cpu backend and serve.
func TestCUDAFallsBackToCPU(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	model := classifierPath(t)
	a, stop := startAppliance(t, "cuda.toml", fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 1
metrics = "off"
control = "off"
[[port]]
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "cls"
model_id = 7
model = "onnx:%s"
backend = "cuda"
input = "u8-hwc"
input_shape = [3, 48, 192]
`, model))
	if got := a.backends["cuda"].Name(); got != "cpu" {
		t.Fatalf("cuda IF runs on %q, want the cpu backend", got)
	}
	addr, _ := a.PortAddr("port0")
	cl := newClient(t, 24)
	_ = cl.Send(addr, 7, 1, 0, make([]byte, 48*192*3))
	if r, ok := cl.Wait(1, 10*time.Second); !ok || r.Status != wire.StatusOK {
		t.Fatalf("request: %v %v", ok, r.Status)
	}
	stop()
}
