package appliance

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"sluice/libml"
	"sluice/libml/cuda"
	"sluice/libml/sched"
	"sluice/libml/zoo"
)

// TestCUDAEmuReefOverUDP: a real-time and a best-effort IF on the cuda
// device (the kernel emulator, `[appliance] cuda = "emu"`) under reef,
// served over UDP. The RT IF's requests preempt the BE IF's batches on
// the device (the scheduler of one policy drives the cuda backend's
// instances), every answer of each IF is the one the cuda backend gives
// for that input alone, bit for bit, and the metrics count the
// preemptions and restores on the cuda device.
//
// The preemptions are scripted, not hoped for: in every other round the
// test arms the emulator's launch hold (cuda.Backend.HoldFrom) at a kernel
// in the middle of the BE model, sends the BE request, waits until its
// launch is held, then sends the RT request, whose arrival preempts it
// (the flag lets the held launch go). The other rounds send both requests
// back to back and let them interleave as they will.
func TestCUDAEmuReefOverUDP(t *testing.T) {
	dir := t.TempDir()
	models := map[string]struct {
		zoo string
		opt zoo.Options
	}{
		"be": {"squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 1}},
		"rt": {"bert", zoo.Options{Layers: 2, SeqLen: 16, Hidden: 64, Heads: 2, FF: 128, Seed: 3}},
	}
	for name, m := range models {
		g, err := zoo.Build(m.zoo, m.opt)
		if err != nil {
			t.Fatal(err)
		}
		writeModel(t, filepath.Join(dir, name+".onnx"), g)
	}
	a, stop := startAppliance(t, "cudareef.toml", fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 1
metrics = "127.0.0.1:0"
control = "off"
cuda = "emu"
# no timing decides an answer: the emulator is slow
reassembly_timeout_ms = 120000

[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"

[[if]]
name = "be"
model_id = 1
model = "onnx:%[1]s/be.onnx"
backend = "cuda"
policy = "reef"
class = "be"
max_batch = 1
batching = "fixed"
queue_len = 64
slo_ms = 600000

[[if]]
name = "rt"
model_id = 2
model = "onnx:%[1]s/rt.onnx"
backend = "cuda"
policy = "reef"
class = "rt"
max_batch = 1
batching = "fixed"
queue_len = 64
slo_ms = 600000
`, dir))
	a.mu.Lock()
	sb, okS := a.backends["sched/reef/cuda"].(*sched.Backend)
	cb, okC := a.backends["cuda"].(*cuda.Backend)
	a.mu.Unlock()
	if !okS || !okC || sb.Scheduler() == nil || sb.Scheduler().DeviceName() != "cuda" {
		t.Fatalf("no reef scheduler on the cuda device: backends %v", a.backends)
	}
	t.Cleanup(func() { cb.HoldFrom(-1) })
	addr, ok := a.PortAddr("udp0")
	if !ok {
		t.Fatal("no udp port address")
	}

	// each IF's inputs and the cuda backend's answers for them alone
	inputs := map[string][]float32{}
	want := map[string][]byte{}
	for name, m := range models {
		g, err := zoo.Build(m.zoo, m.opt)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		inst, err := cb.LoadModel(ctx, name+"-alone", g)
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.ConfigureBatch(inst, 1); err != nil {
			t.Fatal(err)
		}
		in := make([]float32, inst.InputSize())
		for i := range in {
			in[i] = float32((i*37+len(name))%101)/50 - 1
		}
		out := make([]float32, inst.OutputSize())
		if err := cb.InferBatch(ctx, inst, 1, in, out); err != nil {
			t.Fatal(err)
		}
		if err := inst.Close(); err != nil {
			t.Fatal(err)
		}
		inputs[name], want[name] = in, f32bytes(out)
	}

	cl := newClient(t, 43)
	const rounds = 6
	scripted := 0
	for i := 0; i < rounds; i++ {
		beID, rtID := uint64(1+i), uint64(1001+i)
		var holds func() int64
		if i%2 == 0 {
			// hold the BE request's launch of a kernel in the middle of
			// its model until the RT request preempts it
			if err := cb.HoldFrom(int64(10 + 10*(i/2))); err != nil {
				t.Fatal(err)
			}
			holds = cb.Holds
			scripted++
		}
		sendBEThenRT(t, cl, addr, beID, rtID, f32bytes(inputs["be"]), f32bytes(inputs["rt"]), holds)
		for _, c := range []struct {
			name string
			id   uint64
		}{{"rt", rtID}, {"be", beID}} {
			if got := okOutput(t, cl, c.id); !bytes.Equal(got, want[c.name]) {
				t.Errorf("round %d: the %s answer differs from the cuda backend's alone: %s", i, c.name, bitDiff(got, want[c.name]))
			}
		}
	}

	body := scrape(t, a.Appliance)
	metric := func(name string) float64 { t.Helper(); return metricValue(t, body, name) }
	pre := metric(`sluice_preemptions_total{device="cuda",policy="reef"}`)
	res := metric(`sluice_restores_total{device="cuda",policy="reef"}`)
	if pre < float64(scripted) || res < float64(scripted) {
		t.Errorf("%v preemptions, %v restores on the cuda device: want at least the %d scripted", pre, res, scripted)
	}
	for _, class := range []string{"rt", "be"} {
		if got := metric(`sluice_sched_jobs_total{class="` + class + `",device="cuda",policy="reef"}`); got != rounds {
			t.Errorf("%v %s jobs on the cuda device, want %d", got, class, rounds)
		}
	}
	if n := metric(`sluice_preemption_latency_seconds_count{device="cuda",policy="reef"}`); n < float64(scripted) {
		t.Errorf("%v preemption latencies observed on the cuda device, want at least %d", n, scripted)
	}
	var st libml.SchedStats
	if st, ok = sb.SchedStats(); !ok || st.Device != "cuda" {
		t.Fatalf("scheduler counters %+v", st)
	}
	stop()
}
