package appliance

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
)

// sendDeadline sends request id for model with the DEADLINE flag and
// deadline_us.
func sendDeadline(t *testing.T, cl *dptest.Client, to netip.AddrPort, model uint16, id uint64, deadlineUS uint32, payload []byte) {
	t.Helper()
	ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Flags: wire.FlagDeadline, Model: model, Flow: cl.Flow,
		Request: id, DeadlineUS: deadlineUS}, payload, cl.FragSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if err := cl.SendRaw(to, d); err != nil {
			t.Fatal(err)
		}
	}
}

// Over UDP through the appliance: once an IF has run two batches (so it
// knows a batch takes far more than 1 µs), every request with deadline_us = 1
// is answered deadline_exceeded, without running, and the requests
// without a deadline beside them (the IF's SLO, a minute, is theirs) are
// served ok; an IF with timeout_action = "serve_late" serves the same
// 1 µs requests, late. Each request is answered once, and the port's
// responses by status, the IFs' counters and the metrics agree.
func TestDeadlineOverUDP(t *testing.T) {
	model := classifierPath(t)
	a, stop := startAppliance(t, "deadline.toml", fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 2
metrics = "127.0.0.1:0"
control = "off"
[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "reject"
model_id = 7
model = "onnx:%[1]s"
input = "u8-hwc"
input_shape = [3, 48, 192]
slo_ms = 60000
max_batch = 4
queue_len = 256
[[if]]
name = "late"
model_id = 8
model = "onnx:%[1]s"
input = "u8-hwc"
input_shape = [3, 48, 192]
slo_ms = 60000
max_batch = 4
queue_len = 256
timeout_action = "serve_late"
`, model))
	addr, _ := a.PortAddr("udp0")
	cl := newClient(t, 31)
	frame := make([]byte, 48*192*3)
	for i := range frame {
		frame[i] = byte(i * 5)
	}
	wait := func(id uint64) wire.Status {
		t.Helper()
		r, ok := cl.Wait(id, 2*testReassemblyTimeoutMS*time.Millisecond)
		if !ok {
			t.Fatalf("request %d never answered", id)
		}
		return r.Status
	}
	// two batches on each IF first: the second is its estimate (the
	// first pages the model in and is not measured)
	for id, m := range map[uint64]uint16{1: 7, 2: 8, 3: 7, 4: 8} {
		_ = cl.Send(addr, m, id, 0, frame)
		if st := wait(id); st != wire.StatusOK {
			t.Fatalf("warm-up request %d: %v", id, st)
		}
	}
	// then 1 µs deadlines among requests without one, paced (a burst
	// larger than the socket buffer would be lost on a loaded machine)
	want := map[uint64]wire.Status{1: wire.StatusOK, 2: wire.StatusOK, 3: wire.StatusOK, 4: wire.StatusOK}
	id := uint64(10)
	for i := 0; i < 20; i++ {
		id++
		_ = cl.Send(addr, 7, id, wire.FlagRT, frame)
		want[id] = wire.StatusOK
		id++
		sendDeadline(t, cl, addr, 7, id, 1, frame)
		want[id] = wire.StatusDeadline
		if i%4 == 0 {
			id++
			sendDeadline(t, cl, addr, 8, id, 1, frame)
			want[id] = wire.StatusOK // served late
		}
		time.Sleep(2 * time.Millisecond)
	}
	count := map[wire.Status]uint64{}
	for id, w := range want {
		if st := wait(id); st != w {
			t.Errorf("request %d: %v, want %v", id, st, w)
		}
		count[w]++
	}
	wantMetrics := []string{
		`sluice_if_deadline_exceeded_total{class="be",if="reject",stage="admission"} 20`,
		`sluice_if_deadline_exceeded_total{class="be",if="reject",stage="batch"} 0`,
		`sluice_if_late_total{class="be",if="late"} 5`,
		`sluice_responses_total{port="udp0",status="deadline_exceeded"} 20`,
		`sluice_if_responses_total{class="be",if="reject",status="ok"} 22`,
	}
	body := scrapeUntil(t, a.Appliance, wantMetrics...)
	stop()
	s := a.Stats()
	ifs := map[string]IFStats{}
	for _, f := range s.IFs {
		ifs[f.Name] = f
	}
	rej, late := ifs["reject"], ifs["late"]
	p := a.ports[0]
	t.Logf("reject IF: served %d, deadline_exceeded %d at admission + %d at batch; serve_late IF: served %d, late %d",
		rej.Served, rej.DeadlineAdmission, rej.DeadlineBatch, late.Served, late.Late)
	if rej.DeadlineAdmission+rej.DeadlineBatch != 20 || rej.Served != 22 || rej.Late != 0 || rej.Overloaded != 0 || rej.Failed != 0 ||
		late.Served != 7 || late.Late != 5 || late.DeadlineAdmission+late.DeadlineBatch != 0 {
		t.Fatalf("IF counters: reject %+v, serve_late %+v", rej, late)
	}
	// the estimate was known: each was refused at admission, none was
	// queued
	if rej.DeadlineAdmission != 20 {
		t.Errorf("%d of 20 refused at admission, want all: the estimate was known", rej.DeadlineAdmission)
	}
	sent := uint64(len(want))
	ok, dl := p.out.C.ByStatus[wire.StatusOK].Load(), p.out.C.ByStatus[wire.StatusDeadline].Load()
	if s.Ports[0].Responses != sent || ok != count[wire.StatusOK] || dl != count[wire.StatusDeadline] || ok+dl != sent ||
		s.Ports[0].Completed != sent || cl.Duplicates() != 0 {
		t.Fatalf("port: %d responses (%d ok, %d deadline_exceeded) for %d requests (%d completed), %d duplicates; want %v",
			s.Ports[0].Responses, ok, dl, sent, s.Ports[0].Completed, cl.Duplicates(), count)
	}
	for _, m := range wantMetrics {
		if !strings.Contains(body, m) {
			t.Errorf("metrics lack %q", m)
		}
	}
	if s.Ports[0].Port.BufInUse != 0 {
		t.Fatalf("%d buffers in use after the run", s.Ports[0].Port.BufInUse)
	}
}
