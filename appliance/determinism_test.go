package appliance

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/sched"
	"sluice/libml/zoo"
)

// TestDeterminismReefOverUDP: the same frame, sent 100 times through a
// real-time IF and 100 times through a best-effort IF of one appliance
// under reef (max_batch 1), gets the same answer every time, bit for bit,
// and the answer the model gives on the plain cpu backend at batch 1,
// while real-time requests preempt the best-effort ones (ARCHITECTURE.md
// §3: a model's output depends on its input and batch size only).
//
// The preemptions are scripted, not hoped for: in every fourth round the
// test arms the runtime's block hold (ncpu.Pool.HoldFrom) on the
// scheduler's best-effort streams, sends the best-effort request, waits
// until one of its kernels is held past its prologue, then sends the
// real-time request, whose arrival preempts it (the flag lets the held
// block go). The other rounds send both requests back to back and let
// them interleave as they will. Padding depends on profiles measured at
// load time here, so it may or may not run; the bit-for-bit check under
// padding that is certain to run is libml/sched's
// TestDeterminismUnderReef (profiles given as data).
func TestDeterminismReefOverUDP(t *testing.T) {
	text := `
[appliance]
log_level = "warn"
threads = 2
metrics = "127.0.0.1:0"
control = "off"
policy = "reef"
# no timing decides an answer: a request whose fragments a starved I/O
# loop reads late (the race detector, a loaded machine) is not expired
reassembly_timeout_ms = 120000

[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
pool_size = 16384

[[if]]
name = "be"
model_id = 1
model = "zoo:resnet18"
class = "be"
max_batch = 1
batching = "fixed"
queue_len = 64

[[if]]
name = "rt"
model_id = 2
model = "zoo:squeezenet11"
class = "rt"
max_batch = 1
batching = "fixed"
queue_len = 64
`
	a, stop := startAppliance(t, "determinism.toml", text)
	addr, ok := a.PortAddr("udp0")
	if !ok {
		t.Fatal("no udp port address")
	}
	a.mu.Lock()
	sb, ok := a.backends["sched/reef"].(*sched.Backend)
	a.mu.Unlock()
	if !ok || sb.Scheduler() == nil {
		t.Fatalf("no reef scheduler: backends %v", a.backends)
	}
	pool := sb.Scheduler().Pool()
	// registered after startAppliance's cleanup: runs before it
	t.Cleanup(func() {
		pool.HoldFrom(-1, false)
		pool.ReleaseHold()
	})

	frame := make([]float32, 3*224*224)
	for i := range frame {
		frame[i] = float32(math.Sin(3+float64(i)*0.0007)) * 0.9
	}
	beWant, rtWant := cpuAnswer(t, "resnet18", frame), cpuAnswer(t, "squeezenet11", frame)

	cl := newClient(t, 41)
	payload := f32bytes(frame)
	const rounds, every = 100, 4
	var beAns, rtAns [][]byte
	scripted := 0
	for i := 0; i < rounds; i++ {
		beID, rtID := uint64(1+i), uint64(1001+i)
		var holds func() int64
		if i%every == 0 {
			// preempt the BE request inside one of its kernels (from
			// kernel 1 to 24, round by round)
			pool.HoldFrom(int64(1+(i/every)%24), true)
			holds = pool.Holds
			scripted++
		}
		sendBEThenRT(t, cl, addr, beID, rtID, payload, payload, holds)
		rtAns = append(rtAns, okOutput(t, cl, rtID))
		beAns = append(beAns, okOutput(t, cl, beID))
	}
	for _, c := range []struct {
		name string
		got  [][]byte
		want []float32
	}{{"BE", beAns, beWant}, {"RT", rtAns, rtWant}} {
		for i, g := range c.got {
			if !bytes.Equal(g, c.got[0]) {
				t.Errorf("%s answer %d differs from answer 0: %s", c.name, i, bitDiff(g, c.got[0]))
			}
		}
		if want := f32bytes(c.want); !bytes.Equal(c.got[0], want) {
			t.Errorf("%s answers differ from the cpu backend's at batch 1: %s", c.name, bitDiff(c.got[0], want))
		}
	}

	body := scrape(t, a.Appliance)
	metric := func(name string) float64 { t.Helper(); return metricValue(t, body, name) }
	pre := metric(`sluice_preemptions_total{device="cpu",policy="reef"}`)
	res := metric(`sluice_restores_total{device="cpu",policy="reef"}`)
	if pre < float64(scripted) || res < float64(scripted) {
		t.Errorf("%v preemptions, %v restores: want at least the %d scripted", pre, res, scripted)
	}
	if got := metric(`sluice_sched_jobs_total{class="rt",device="cpu",policy="reef"}`); got != rounds {
		t.Errorf("%v RT jobs, want %d", got, rounds)
	}
	if got := metric(`sluice_sched_jobs_total{class="be",device="cpu",policy="reef"}`); got != rounds {
		t.Errorf("%v BE jobs, want %d (max_batch 1)", got, rounds)
	}
	t.Logf("%d rounds: %v preemptions (%d scripted), %v restores, %v padded blocks",
		rounds, pre, scripted, res, metric(`sluice_pad_blocks_total{device="cpu",policy="reef"}`))
	stop()
}

// cpuAnswer is zoo model name's output for in on the plain cpu backend at
// batch 1, as an answer's bytes would carry it.
func cpuAnswer(t *testing.T, name string, in []float32) []float32 {
	t.Helper()
	ctx := context.Background()
	b := cpu.New()
	if err := b.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	defer b.Deinit()
	g, err := zoo.Build(name, zoo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := b.LoadModel(ctx, name, g)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := b.ConfigureBatch(inst, 1); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, inst.OutputSize())
	if err := b.InferBatch(ctx, inst, 1, in, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// bitDiff says how two answers (little-endian float32s) differ: how many
// values and by how much at most.
func bitDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	n, worst, at := 0, 0.0, -1
	for i := 0; i+4 <= len(want); i += 4 {
		g := math.Float32frombits(binary.LittleEndian.Uint32(got[i:]))
		w := math.Float32frombits(binary.LittleEndian.Uint32(want[i:]))
		if math.Float32bits(g) != math.Float32bits(w) {
			n++
			if d := math.Abs(float64(g) - float64(w)); d > worst || at < 0 {
				worst, at = d, i/4
			}
		}
	}
	return fmt.Sprintf("%d of %d values differ, by up to %.3g (value %d)", n, len(want)/4, worst, at)
}
