package appliance

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"testing"
	"time"

	"sluice/dataplane/dpdk"
	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
	"sluice/libml"
	"sluice/libml/cuda"
	"sluice/libml/sched"
)

// TestCUDAEmuServesZeroCopy runs a cuda IF on the kernel emulator
// (`[appliance] cuda = "emu"`) behind two ports: a DPDK net_af_packet port
// on a veth pair, whose packet region the appliance maps into the cuda
// backend, and a kernel UDP port, whose packets lie outside every region.
// Requests through DPDK must reach the model with zero host copies (the
// batch gather reads the fragments in place and converts the 8-bit image
// on the device); requests through UDP are gathered on the host (two
// copies). Every answer, either way, must be bit-identical to the cuda
// backend's own output for the host-converted image, and the counts must
// add up.
//
// It runs twice: the IF on its own SM share (policy "none"), and under
// reef, where the scheduler's job carries the payload and the device
// gathers it all the same.
func TestCUDAEmuServesZeroCopy(t *testing.T) {
	dptest.RequireRoot(t)
	if !dpdk.Available {
		t.Fatal("this build has no DPDK")
	}
	for _, policy := range []string{"none", "reef"} {
		t.Run(policy, func(t *testing.T) { cudaZeroCopy(t, CUDAEmu, policy) })
	}
}

// TestCUDAServesZeroCopyGPU is TestCUDAEmuServesZeroCopy on a real GPU
// (`cuda = "driver"`): the DPDK port's packet region registered with the
// driver, the batch gather reading the fragments in place over the bus
// and converting the image on the GPU, every answer the same bits as the
// GPU's own output for the host-converted image. It runs where
// SLUICE_GPU=1 (run-gpu.sh zerocopy, with the appliance's test binary
// from make gpu-bundle); elsewhere it is skipped.
func TestCUDAServesZeroCopyGPU(t *testing.T) {
	if os.Getenv("SLUICE_GPU") != "1" {
		t.Skip("GPU test: set SLUICE_GPU=1 on a machine with a GPU")
	}
	dptest.RequireRoot(t)
	if !dpdk.Available {
		t.Fatal("this build has no DPDK")
	}
	for _, policy := range []string{"none", "reef"} {
		t.Run(policy, func(t *testing.T) { cudaZeroCopy(t, CUDADriver, policy) })
	}
}

// cudaZeroCopy serves the classifier on the cuda backend in mode (emu or
// driver) under policy behind a DPDK and a UDP port (see
// TestCUDAEmuServesZeroCopy).
func cudaZeroCopy(t *testing.T, mode, policy string) {
	model := classifierPath(t)
	v := dptest.NewVeth(t, 100, 150)
	udpPort := freeUDPPort(t)
	a, stop := startAppliance(t, "cudaemu.toml", fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 1
metrics = "off"
control = "off"
cuda = "%s"
eal = ["-l", "0", "--no-huge", "--no-pci", "-m", "256", "--no-shconf", "--no-telemetry", "--file-prefix", "sluice-cudaemu-%d"]
[[port]]
name = "dpdk0"
driver = "dpdk"
ip = "%s"
vdev = "net_af_packet_emu_%s,iface=%s,framecnt=32768,qpairs=1"
pool_size = 8191
[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:%d"
[[if]]
name = "cls"
model_id = 7
model = "onnx:%s"
backend = "cuda"
policy = "%s"
input = "u8-hwc"
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]
input_shape = [3, 48, 192]
max_batch = 1
queue_len = 64
slo_ms = 60000
`, mode, os.Getpid(), v.HostIP, policy, v.Host, udpPort, model, policy))
	if b := a.backends["cuda"]; b == nil || b.Name() != "cuda" {
		t.Fatalf("the cuda IF has no cuda backend (%s): backends %v (the log says why)", mode, a.backends)
	}
	if policy != "none" {
		sb, ok := a.backends["sched/"+policy+"/cuda"].(*sched.Backend)
		if !ok || sb.Scheduler().DeviceName() != "cuda" {
			t.Fatalf("no %s scheduler on the cuda device: backends %v", policy, a.backends)
		}
	}
	if len(a.regions) != 1 || a.regions[0].unmap[a.backends["cuda"]] == nil {
		t.Fatalf("the DPDK port's packet region is not mapped into the cuda backend: %d regions", len(a.regions))
	}

	frames := make([][]byte, 6)
	for k := range frames {
		frames[k] = make([]byte, 48*192*3)
		for i := range frames[k] {
			frames[k][i] = byte(i*7 + k*31 + i/577)
		}
	}
	want := cudaAnswers(t, mode == CUDAEmu, model, frames)

	overDPDK, dpdkAddr := newNetnsClient(t, v, 41)
	overUDP := newClient(t, 42)
	udpAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(udpPort))

	// One request at a time per port, so none waits for its deadline;
	// a datagram the VM drops is counted, not failed (>= 1 ok per port
	// is required, and the copies are checked per answered request).
	okDPDK, okUDP := 0, 0
	for k, f := range frames {
		id := uint64(k + 1)
		for _, c := range []struct {
			cl   *dptest.Client
			to   netip.AddrPort
			ok   *int
			name string
		}{{overDPDK, dpdkAddr, &okDPDK, "dpdk"}, {overUDP, udpAddr, &okUDP, "udp"}} {
			_ = c.cl.Send(c.to, 7, id, 0, f)
			r, got := c.cl.Wait(id, 30*time.Second)
			if !got {
				t.Logf("%s request %d: no answer (a dropped datagram)", c.name, id)
				continue
			}
			if r.Status != wire.StatusOK {
				t.Fatalf("%s request %d: %v", c.name, id, r.Status)
			}
			if w := f32bytes(want[k]); string(r.Output) != string(w) {
				t.Fatalf("%s request %d: answer differs from the cuda backend's output: %s", c.name, id, bitDiff(r.Output, w))
			}
			*c.ok++
		}
	}
	stop()
	st := a.Stats()
	if okDPDK == 0 || okUDP == 0 {
		t.Fatalf("answered ok: %d over DPDK, %d over UDP; want some of each", okDPDK, okUDP)
	}
	f := st.IFs[0]
	t.Logf("cuda %s: %d ok over DPDK, %d over UDP; %d requests run, %d payload copies", mode, okDPDK, okUDP, f.BatchItems, f.PayloadCopies)
	if f.BatchItems != uint64(okDPDK+okUDP) {
		t.Fatalf("%d requests run, %d answered ok", f.BatchItems, okDPDK+okUDP)
	}
	// zero host copies for each DPDK request, two for each UDP one
	if f.PayloadCopies != uint64(2*okUDP) {
		t.Fatalf("%d payload copies for %d DPDK and %d UDP requests, want %d (0 per DPDK request, 2 per UDP one)",
			f.PayloadCopies, okDPDK, okUDP, 2*okUDP)
	}
	if overDPDK.Duplicates() != 0 || overUDP.Duplicates() != 0 {
		t.Fatal("duplicate responses")
	}
	a.Close()
	if len(a.regions) != 0 {
		t.Fatal("packet regions still recorded after Close")
	}
	if st.Ports[0].Port.BufInUse != 0 {
		t.Fatalf("%d mbufs in use after the run", st.Ports[0].Port.BufInUse)
	}
}

// cudaAnswers runs the classifier on a cuda backend of its own (the
// emulator, or the GPU), at batch 1, on each frame converted on the
// host: the reference the appliance's answers must equal bit for bit.
func cudaAnswers(t *testing.T, emulate bool, model string, frames [][]byte) [][]float32 {
	t.Helper()
	ctx := context.Background()
	g, err := readONNX(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	if err := fixInputShape(g, []int64{3, 48, 192}, nil); err != nil {
		t.Fatal(err)
	}
	b := cuda.NewBackend(cuda.Options{Emulate: emulate})
	if err := b.Init(ctx, libml.BackendConfig{}); err != nil {
		t.Fatal(err)
	}
	defer b.Deinit()
	inst, err := b.LoadModel(ctx, "ref", g)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := b.ConfigureBatch(inst, 1); err != nil {
		t.Fatal(err)
	}
	enc, err := libml.NewEncoding(libml.InputImageU8, []float32{0.5, 0.5, 0.5}, []float32{0.5, 0.5, 0.5}, inst.InputShape())
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, len(frames))
	for k, f := range frames {
		in := &libml.Input{Enc: enc}
		in.Add(f)
		x := make([]float32, inst.InputSize())
		if err := in.Decode(x, 0, 1); err != nil {
			t.Fatal(err)
		}
		out[k] = make([]float32, inst.OutputSize())
		if err := b.InferBatch(ctx, inst, 1, x, out[k]); err != nil {
			t.Fatal(err)
		}
		for _, y := range out[k] {
			if math.IsNaN(float64(y)) {
				t.Fatalf("frame %d: NaN in the reference", k)
			}
		}
	}
	return out
}
