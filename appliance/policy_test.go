package appliance

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/wire"
	"sluice/ifmanager"
	"sluice/libml/sched"
	"sluice/orchestrator"
)

func TestPolicyProfileErrors(t *testing.T) {
	head := "[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n"
	for _, tc := range []struct{ text, want string }{
		{"[appliance]\npolicy = \"fifo\"\n" + head + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n",
			`test.toml:2: appliance.policy "fifo": want one of none, reef, seq, conc, srpt, split`},
		{head + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\npolicy = \"edf\"\n", `test.toml:7: if[0].policy "edf"`},
		{head + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nbackend=\"ort\"\npolicy = \"reef\"\n",
			`if[0].policy "reef": scheduling policies run on the cpu and cuda backends, not "ort"`},
		{"[appliance]\npolicy = \"reef\"\n" + head + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nshare = 0.5\n",
			`test.toml:9: if[0].share: IFs under policy "reef" share the units through the scheduler`},
		{head + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\npolicy=\"seq\"\nauto_share = true\n", `if[0].share: IFs under policy "seq"`},
	} {
		_, err := ParseProfile("test.toml", tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("profile %q:\nerror %v\nwant it to contain %q", tc.text, err, tc.want)
		}
	}
	// Inheritance: cpu IFs take the appliance's policy, other backends
	// and IFs that say so run without one.
	p, err := ParseProfile("test.toml", "[appliance]\npolicy = \"reef\"\n"+head+
		"[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n"+
		"[[if]]\nname=\"b\"\nmodel_id=1\nmodel=\"onnx:/m.onnx\"\nbackend=\"ort\"\n"+
		"[[if]]\nname=\"c\"\nmodel_id=2\nmodel=\"zoo:y\"\npolicy=\"none\"\nshare=0.5\n"+
		"[[if]]\nname=\"d\"\nmodel_id=3\nmodel=\"zoo:y\"\npolicy=\"srpt\"\n")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"reef", "none", "none", "srpt"} {
		if got := p.IFs[i].Policy; got != want {
			t.Errorf("if[%d].policy = %q, want %q", i, got, want)
		}
	}
	if q, err := ParseProfile("none.toml", "[appliance]\npolicy = \"none\"\n"+head+"[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n"); err != nil {
		t.Errorf("an explicit appliance.policy = \"none\": %v", err)
	} else if q.IFs[0].Policy != PolicyNone || q.IFs[0].Share != 1 {
		t.Errorf("under appliance.policy none: policy %q share %v", q.IFs[0].Policy, q.IFs[0].Share)
	}
	if p.IFs[0].Share != 0 || p.IFs[2].Share != 0.5 || p.IFs[1].Share != 1 {
		t.Errorf("shares %v %v %v: want 0 under a policy, 0.5 as given, 1 by default", p.IFs[0].Share, p.IFs[2].Share, p.IFs[1].Share)
	}
	if backendKey(&p.IFs[0]) != "sched/reef" || backendKey(&p.IFs[1]) != "ort" || backendKey(&p.IFs[2]) != "cpu" {
		t.Errorf("backends %q %q %q", backendKey(&p.IFs[0]), backendKey(&p.IFs[1]), backendKey(&p.IFs[2]))
	}
}

// Under reef, an RT IF and a BE IF are served over UDP through the
// scheduler: every answer is right, the RT requests preempt the BE
// batches, and the scheduler's counters reach the metrics.
func TestPolicyReefServesOverUDP(t *testing.T) {
	text := `
[appliance]
log_level = "warn"
threads = 2
metrics = "127.0.0.1:0"
control = "off"
policy = "reef"
# a loaded machine may take long to receive a request's 430 datagrams
reassembly_timeout_ms = 60000

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
max_batch = 4
queue_len = 128

[[if]]
name = "rt"
model_id = 2
model = "zoo:squeezenet11"
class = "rt"
max_batch = 1
queue_len = 64
`
	a, stop := startAppliance(t, "reef.toml", text)
	addr, ok := a.PortAddr("udp0")
	if !ok {
		t.Fatal("no udp port address")
	}

	input := func(seed float64) []float32 {
		in := make([]float32, 3*224*224)
		for i := range in {
			in[i] = float32(math.Sin(seed+float64(i)*0.001)) * 0.9
		}
		return in
	}
	beIn, rtIn := input(1), input(2)
	beWant, rtWant := cpuAnswer(t, "resnet18", beIn), cpuAnswer(t, "squeezenet11", rtIn)

	cl := newClient(t, 21)
	// BE requests keep the BE IF busy, at most beWindow in flight: a flood
	// of all of them (16 x 430 datagrams) can overflow the socket buffer
	// while a loaded machine starves the I/O loop. RT requests arrive
	// meanwhile, once the BE IF is serving.
	const nBE, nRT, beWindow = 16, 16, 4
	beBytes, rtBytes := f32bytes(beIn), f32bytes(rtIn)
	beSent := make(chan error, 1)
	go func() {
		for id := uint64(1); id <= nBE; id++ {
			if id > beWindow {
				if _, ok := cl.Wait(id-beWindow, 120*time.Second); !ok {
					beSent <- fmt.Errorf("BE request %d: no response", id-beWindow)
					return
				}
			}
			if err := cl.Send(addr, 1, id, 0, beBytes); err != nil {
				beSent <- err
				return
			}
		}
		beSent <- nil
	}()
	if _, ok := cl.Wait(1, 120*time.Second); !ok {
		t.Fatal("BE request 1: no response")
	}
	for id := uint64(1001); id < 1001+nRT; id++ {
		time.Sleep(8 * time.Millisecond)
		if err := cl.Send(addr, 2, id, wire.FlagRT, rtBytes); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-beSent; err != nil {
		t.Fatal(err)
	}
	check := func(id uint64, want []float32) {
		t.Helper()
		r, ok := cl.Wait(id, 60*time.Second)
		if !ok {
			t.Fatalf("request %d: no response", id)
		}
		if r.Status != wire.StatusOK || len(r.Output) != 4*len(want) {
			t.Fatalf("request %d: status %v, %d output bytes", id, r.Status, len(r.Output))
		}
		// bit for bit: batch size, kernel versions, preemption and
		// padding never change a model's output
		for i, w := range want {
			got := binary.LittleEndian.Uint32(r.Output[4*i:])
			if got != math.Float32bits(w) {
				t.Fatalf("request %d output %d: got %v want %v", id, i, math.Float32frombits(got), w)
			}
		}
	}
	for id := uint64(1001); id < 1001+nRT; id++ {
		check(id, rtWant)
	}
	for id := uint64(1); id <= nBE; id++ {
		check(id, beWant)
	}

	// an IF counts an answer just after queuing it for the I/O loop, so
	// a client may hold the last answer a moment before it is counted
	body := scrapeUntil(t, a.Appliance, fmt.Sprintf(`sluice_if_responses_total{class="rt",if="rt",status="ok"} %d`, nRT))
	metric := func(name string) float64 { t.Helper(); return metricValue(t, body, name) }
	if got := metric(`sluice_sched_jobs_total{class="rt",device="cpu",policy="reef"}`); got != nRT {
		t.Errorf("%v RT jobs, want %d (max_batch 1)", got, nRT)
	}
	if got := metric(`sluice_sched_jobs_total{class="be",device="cpu",policy="reef"}`); got < nBE/4 || got > nBE {
		t.Errorf("%v BE jobs for %d requests in batches of at most 4", got, nBE)
	}
	pre := metric(`sluice_preemptions_total{device="cpu",policy="reef"}`)
	if pre == 0 {
		t.Errorf("no preemption: %d RT requests arrived while %d BE requests were served", nRT, nBE)
	}
	if got := metric(`sluice_preemption_latency_seconds_count{device="cpu",policy="reef"}`); got != pre {
		t.Errorf("%v preemption latencies observed for %v preemptions", got, pre)
	}
	if got := metric(`sluice_if_responses_total{class="rt",if="rt",status="ok"}`); got != nRT {
		t.Errorf("RT IF served %v, want %d", got, nRT)
	}
	// one copy per request under the scheduler too: the job's payload
	// is gathered straight into its model instance
	for _, f := range a.Stats().IFs {
		if f.BatchItems == 0 || f.PayloadCopies != f.BatchItems {
			t.Errorf("IF %s: %d payload copies for %d requests run, want one each", f.Name, f.PayloadCopies, f.BatchItems)
		}
	}
	// every answer's first-fragment-to-sent time, by the request's class
	if got := metric(`sluice_response_duration_seconds_count{class="rt",port="udp0",status="ok"}`); got != nRT {
		t.Errorf("%v RT response times, want %d", got, nRT)
	}
	if got := metric(`sluice_response_duration_seconds_count{class="be",port="udp0",status="ok"}`); got != nBE {
		t.Errorf("%v BE response times, want %d", got, nBE)
	}
	stop()
	if s := a.Stats(); s.Ports[0].Port.BufInUse != 0 {
		t.Fatalf("%d buffers in use after drain", s.Ports[0].Port.BufInUse)
	}
	// the scheduler stops with the appliance
	a.Close()
	if n := len(a.schedBackends()); n != 0 {
		t.Fatalf("%d schedulers left after Close", n)
	}
}

// Under a policy, the control paths work through the scheduler: a shadow
// swap and a model update under load lose nothing, a deployed IF inherits
// the policy and a removed one is unloaded from the scheduler, and
// resizes are refused.
func TestPolicyControlPaths(t *testing.T) {
	text := `
[appliance]
log_level = "warn"
threads = 2
metrics = "off"
control = "off"
policy = "seq"

[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"

[[if]]
name = "a"
model_id = 1
model = "zoo:squeezenet11"
max_batch = 2
queue_len = 256
`
	a, stop := startAppliance(t, "seq.toml", text)
	addr, _ := a.PortAddr("udp0")
	a.mu.Lock()
	sb, ok := a.backends["sched/seq"].(*sched.Backend)
	a.mu.Unlock()
	if !ok {
		t.Fatalf("no seq scheduler: backends %v", a.backends)
	}
	cl := newClient(t, 31)
	frame := f32bytes(make([]float32, 3*224*224))
	id := uint64(0)
	send := func(model uint16, n int) []uint64 {
		var ids []uint64
		for k := 0; k < n; k++ {
			id++
			if err := cl.Send(addr, model, id, 0, frame); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			time.Sleep(time.Millisecond)
		}
		return ids
	}
	expectOK := func(ids []uint64) {
		t.Helper()
		for _, i := range ids {
			r, ok := cl.Wait(i, 60*time.Second)
			if !ok || r.Status != wire.StatusOK {
				t.Fatalf("request %d: answered %v, status %v", i, ok, r.Status)
			}
		}
	}
	ctx := context.Background()

	// a shadow swap (linked weights) while requests are queued
	ids := send(1, 12)
	if _, err := a.Swap(ctx, "a", ifmanager.SwapSpec{}); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, send(1, 4)...)
	expectOK(ids)
	if n := sb.Loaded(); n != 1 {
		t.Fatalf("%d models loaded after a linked swap, want 1", n)
	}

	// deploy inherits the policy; remove unloads the model
	h := &controlHandler{a: a.Appliance}
	st, err := h.Deploy(ctx, orchestrator.DeployArgs{Name: "b", ModelID: 2, Model: "zoo:squeezenet11", Class: "rt", MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st.Policy != "seq" || st.Backend != "cpu" {
		t.Fatalf("deployed IF: policy %q backend %q", st.Policy, st.Backend)
	}
	if n := sb.Loaded(); n != 2 {
		t.Fatalf("%d models loaded after a deploy, want 2", n)
	}
	expectOK(send(2, 3))
	if _, err := h.Resize(ctx, orchestrator.ResizeArgs{Name: "b", Share: 0.5}); err == nil || !strings.Contains(err.Error(), "policy") {
		t.Fatalf("resize under a policy: %v", err)
	}
	if _, err := h.Deploy(ctx, orchestrator.DeployArgs{Name: "c", ModelID: 3, Model: "zoo:squeezenet11", Share: 0.5}); err == nil {
		t.Fatal("deployed an IF with a share under a policy")
	}
	if err := a.Remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if n := sb.Loaded(); n != 1 {
		t.Fatalf("%d models loaded after a remove, want 1", n)
	}

	// a model update by swap: the new model is loaded, the old unloaded
	a.mu.Lock()
	spec := a.ifs["a"].spec
	a.mu.Unlock()
	spec.Model = "zoo:squeezenet11"
	_, inst, _, err := a.loadInstance(ctx, &spec)
	if err != nil {
		t.Fatal(err)
	}
	ids = send(1, 6)
	if _, err := a.Swap(ctx, "a", ifmanager.SwapSpec{Instance: inst}); err != nil {
		t.Fatal(err)
	}
	expectOK(ids)
	if n := sb.Loaded(); n != 1 {
		t.Fatalf("%d models loaded after a model update, want 1", n)
	}
	stop()
	if n := sb.Loaded(); n != 0 {
		t.Fatalf("%d models loaded after the appliance stopped, want 0", n)
	}
}

// IFs with and without a policy side by side: the unit shares are divided
// among the IFs without one, the scheduler's IFs are left alone, and both
// run on the same units (one cpu device, no second thread pool).
func TestPolicyNextToShares(t *testing.T) {
	text := `
[appliance]
log_level = "warn"
threads = 2
metrics = "off"
control = "off"

[[port]]
driver = "udp"
listen = "127.0.0.1:0"

[[if]]
name = "plain"
model_id = 1
model = "zoo:squeezenet11"
max_batch = 1

[[if]]
name = "sched"
model_id = 2
model = "zoo:squeezenet11"
max_batch = 1
policy = "seq"
`
	a, _ := startAppliance(t, "mixed.toml", text)
	if err := a.applySharesCtx(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	plain, sch := a.ifs["plain"], a.ifs["sched"]
	a.mu.Unlock()
	if got := plain.f.Units(); got != 3 {
		t.Errorf("the only IF without a policy has units %b, want both (11)", got)
	}
	if st := sch.f.Status(); st.Swaps != 0 || sch.f.Units() != 0 {
		t.Errorf("the scheduler's IF was resized: %d swaps, units %b", st.Swaps, sch.f.Units())
	}
	// one pool of units for both: the cpu backend and the scheduler are
	// the cpu device's two users, and it has appliance.threads units
	a.mu.Lock()
	dev := a.cpuDev
	a.mu.Unlock()
	if dev == nil || dev.Users() != 2 || dev.Units() != 2 {
		t.Fatalf("the cpu backend and the seq scheduler do not share one cpu device of 2 units: %+v", dev)
	}
}

func TestSpinFor(t *testing.T) {
	for _, tc := range []struct{ spin, threads, cpus, want int }{
		{0, 0, 2, spinSharedCore}, // units on every core
		{0, 2, 2, spinSharedCore}, // as many units as cores
		{0, 1, 2, spinOwnCore},    // a core left for the loop
		{0, 15, 16, spinOwnCore},  // the GPU machine, one core spare
		{500, 0, 2, 500},          // the profile's
	} {
		if got := spinFor(tc.spin, tc.threads, tc.cpus); got != tc.want {
			t.Errorf("spinFor(%d, %d, %d) = %d, want %d", tc.spin, tc.threads, tc.cpus, got, tc.want)
		}
	}
	if _, err := ParseProfile("s.toml", "[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\nspin = -1\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n"); err == nil ||
		!strings.Contains(err.Error(), "s.toml:4: port[0].spin -1") {
		t.Errorf("negative spin: %v", err)
	}
}
