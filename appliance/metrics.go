package appliance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"sluice/appliance/buildinfo"
	"sluice/dataplane/egress"
	"sluice/dataplane/wire"
	"sluice/libml"
)

// collector exports the appliance's counters at scrape time: the hot path
// only bumps its own atomics, and nothing is copied until Prometheus asks.
type collector struct {
	a *Appliance

	rxPackets, rxBytes, txPackets, txBytes, rxFiltered, rxMissed, txFailed *prometheus.Desc
	bufInUse, bufCap, heldFrags, assembling                                *prometheus.Desc
	completed, drops, responses, egressFull, egressWait                    *prometheus.Desc
	failed, overloaded, queueDepth, loadSeconds                            *prometheus.Desc
	share, batchLimit, swaps, under                                        *prometheus.Desc
	schedJobs, preemptions, restores, padBlocks, modeSwitches              *prometheus.Desc
	// the request path's copies and buffers (newPathDescs)
	payloadCopies, outBuffers, outBuffersInUse, inFlight *prometheus.Desc
	// deadlines (newDeadlineDescs)
	deadlineExceeded, late *prometheus.Desc
	// the inss placement's prediction per IF
	predicted *prometheus.Desc
	// stateful IFs' flows
	flows, flowEvents *prometheus.Desc
	// pipeline stages' hand-overs
	forwarded *prometheus.Desc
}

func newCollector(a *Appliance) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sluice_"+name, help, labels, nil)
	}
	c := &collector{a: a,
		rxPackets:    d("rx_packets_total", "Sluice datagrams received by the port driver.", "port"),
		rxBytes:      d("rx_bytes_total", "UDP payload bytes of received sluice datagrams.", "port"),
		txPackets:    d("tx_packets_total", "Datagrams transmitted.", "port"),
		txBytes:      d("tx_bytes_total", "UDP payload bytes transmitted.", "port"),
		rxFiltered:   d("rx_filtered_total", "Frames the driver consumed or discarded before they became sluice datagrams (ARP, other traffic).", "port"),
		rxMissed:     d("rx_missed_total", "Packets the device or kernel dropped for lack of buffers.", "port"),
		txFailed:     d("tx_failed_total", "Datagrams the driver could not transmit.", "port"),
		bufInUse:     d("pool_buffers_in_use", "Receive buffers out of the port's pool.", "port"),
		bufCap:       d("pool_buffers_capacity", "Size of the port's receive buffer pool.", "port"),
		heldFrags:    d("reassembly_held_fragments", "Packet buffers held by reassembly (in-flight and queued requests).", "port"),
		assembling:   d("reassembly_assembling", "Requests still collecting fragments.", "port"),
		completed:    d("requests_total", "Requests reassembled completely.", "port"),
		drops:        d("drops_total", "Datagrams or requests dropped or refused, by reason.", "port", "reason"),
		responses:    d("responses_total", "Responses transmitted, by status.", "port", "status"),
		egressFull:   d("egress_queue_full_total", "Responses refused because the egress queue was full.", "port"),
		egressWait:   d("egress_wait_seconds_total", "Time responses waited between being queued and being sent (divide by responses for the mean).", "port"),
		failed:       d("if_failed_total", "Admitted requests answered with an error.", "if", "class"),
		overloaded:   d("if_overloaded_total", "Requests refused because the IF queue was full.", "if", "class"),
		queueDepth:   d("if_queue_depth", "Requests waiting in the IF queue.", "if", "class"),
		loadSeconds:  d("if_load_seconds", "How long loading the IF's running instance took (reading, compiling and warming its model).", "if", "class"),
		share:        d("if_share", "The IF's resource share (fraction of the compute units).", "if", "class"),
		batchLimit:   d("if_batch_limit", "The batch limit SLAB currently allows.", "if", "class"),
		swaps:        d("if_swaps_total", "Shadow swaps completed.", "if", "class"),
		under:        d("if_underprovisioned", "1 when the IF missed its SLO at batch 1 five times in a row.", "if", "class"),
		schedJobs:    d("sched_jobs_total", "Jobs (batches) the scheduler of a policy finished, by class.", "policy", "class", "device"),
		preemptions:  d("preemptions_total", "Times real-time work preempted running best-effort work.", "policy", "device"),
		restores:     d("restores_total", "Best-effort jobs restored after a preemption.", "policy", "device"),
		padBlocks:    d("pad_blocks_total", "Best-effort blocks run as padding beside real-time kernels.", "policy", "device"),
		modeSwitches: d("sched_rt_mode_switches_total", "Switches from normal to real-time mode.", "policy", "device"),
	}
	c.newPathDescs(d)
	c.forwarded = d("if_forwarded_total", "Pipeline stages: requests handed to the next stage (accepted), or refused by it and answered here with its status (refused).", "if", "class", "outcome")
	c.flows = d("if_flows", "Stateful IFs: the flows whose state the IF keeps.", "if", "class")
	c.flowEvents = d("if_flow_events_total", "Stateful IFs: flows started (new, or back after their state was dropped), states dropped when idle, resets asked for by requests (the RESET flag), and requests of new flows refused because max_flows flows had state.", "if", "class", "event")
	c.newDeadlineDescs(d)
	c.predicted = d("if_predicted_latency_seconds", "Under placement inss: the latency InSS's latency model predicts for the IF at its units (compare sluice_request_duration_seconds).", "if", "class")
	return c
}

// newDeadlineDescs describes the deadline refusals and late answers.
func (c *collector) newDeadlineDescs(d func(name, help string, labels ...string) *prometheus.Desc) {
	c.deadlineExceeded = d("if_deadline_exceeded_total", "Requests answered deadline_exceeded: at admission (predicted to finish past their deadline) or at batch formation (could no longer finish in time).", "if", "class", "stage")
	c.late = d("if_late_total", "Requests answered ok past their deadline (timeout_action serve_late, or a batch that ran longer than its estimate).", "if", "class")
}

// newPathDescs describes the request path's copies and buffers.
func (c *collector) newPathDescs(d func(name, help string, labels ...string) *prometheus.Desc) {
	c.payloadCopies = d("if_payload_copies_total", "Copies of request payloads made on their way to the model's input (divide by sluice_batch_size_sum, the requests run, for copies per request; 1 on the cpu backend: packet to tensor).", "if", "class")
	c.outBuffers = d("if_output_buffers", "Output buffers in the IF's pool (one per batch whose responses are being sent, kept for reuse).", "if", "class")
	c.outBuffersInUse = d("if_output_buffers_in_use", "Output buffers whose responses are not all sent yet.", "if", "class")
	c.inFlight = d("requests_in_flight", "Requests handed to the IFs whose replies are not sent yet (each holds a reply slot).", "port")
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	c.a.mu.Lock()
	ports := c.a.ports
	c.a.mu.Unlock()
	for _, p := range ports {
		n := p.name
		s := p.port.Stats()
		counter(c.rxPackets, s.RxPackets, n)
		counter(c.rxBytes, s.RxBytes, n)
		counter(c.txPackets, s.TxPackets, n)
		counter(c.txBytes, s.TxBytes, n)
		counter(c.rxFiltered, s.RxFiltered, n)
		counter(c.rxMissed, s.RxMissed, n)
		counter(c.txFailed, s.TxFailed, n)
		gauge(c.bufInUse, float64(s.BufInUse), n)
		gauge(c.bufCap, float64(s.BufCapacity), n)
		t := p.loop.Table()
		gauge(c.heldFrags, float64(t.C.HeldFragments.Load()), n)
		gauge(c.assembling, float64(t.C.Assembling.Load()), n)
		counter(c.completed, t.C.Completed.Load(), n)
		p.eachDrop(func(reason string, v uint64) { counter(c.drops, v, n, reason) })
		gauge(c.inFlight, float64(p.loop.InFlight()), n)
		for st := range p.out.C.ByStatus {
			if v := p.out.C.ByStatus[st].Load(); v > 0 || st <= int(wire.StatusBadInput) {
				counter(c.responses, v, n, wire.Status(st).String())
			}
		}
		counter(c.egressFull, p.out.C.QueueFull.Load(), n)
		ch <- prometheus.MustNewConstMetric(c.egressWait, prometheus.CounterValue, float64(p.out.C.WaitNS.Load())/1e9, n)
	}
	for _, sb := range c.a.schedBackends() {
		st, ok := sb.SchedStats()
		if !ok {
			continue
		}
		pol, dev := st.Policy, st.Device
		counter(c.schedJobs, uint64(st.RTJobs), pol, "rt", dev)
		counter(c.schedJobs, uint64(st.BEJobs), pol, "be", dev)
		counter(c.preemptions, uint64(st.Preemptions), pol, dev)
		counter(c.restores, uint64(st.Restores), pol, dev)
		counter(c.padBlocks, uint64(st.PadBlocks), pol, dev)
		counter(c.modeSwitches, uint64(st.ModeSwitches), pol, dev)
	}
	var predicted map[string]float64
	if c.a.plan != nil {
		predicted = map[string]float64{}
		for _, p := range c.a.planReply().IFs {
			if p.PredictedMS > 0 {
				predicted[p.Name] = p.PredictedMS / 1e3
			}
		}
	}
	for _, r := range c.a.ifRuns() {
		f := r.f
		cfg := f.Config()
		l := []string{cfg.Name, cfg.Class.String()}
		if v, ok := predicted[cfg.Name]; ok {
			gauge(c.predicted, v, l...)
		}
		st := f.Status()
		gauge(c.share, st.Share, l...)
		gauge(c.batchLimit, float64(st.BatchLimit), l...)
		counter(c.swaps, st.Swaps, l...)
		under := 0.0
		if st.UnderProvisioned {
			under = 1
		}
		gauge(c.under, under, l...)
		counter(c.failed, f.C.Failed.Load(), l...)
		counter(c.overloaded, f.C.Overloaded.Load(), l...)
		counter(c.deadlineExceeded, f.C.DeadlineAdmission.Load(), cfg.Name, cfg.Class.String(), "admission")
		counter(c.deadlineExceeded, f.C.DeadlineBatch.Load(), cfg.Name, cfg.Class.String(), "batch")
		counter(c.late, f.C.Late.Load(), l...)
		gauge(c.queueDepth, float64(f.QueueDepth()), l...)
		gauge(c.loadSeconds, r.load.Seconds(), l...)
		counter(c.payloadCopies, f.C.PayloadCopies.Load(), l...)
		gauge(c.outBuffers, float64(st.OutBuffers), l...)
		gauge(c.outBuffersInUse, float64(st.OutBuffersInUse), l...)
		if f.Next() != "" {
			counter(c.forwarded, f.C.Forwarded.Load(), cfg.Name, cfg.Class.String(), "accepted")
			counter(c.forwarded, f.C.ForwardRefused.Load(), cfg.Name, cfg.Class.String(), "refused")
		}
		if f.Stateful() {
			fc := &f.C.Flows
			gauge(c.flows, float64(fc.Flows.Load()), l...)
			for _, e := range []struct {
				name string
				v    uint64
			}{{"started", fc.Started.Load()}, {"idle", fc.Idle.Load()}, {"reset", fc.Resets.Load()}, {"full", fc.Full.Load()}} {
				counter(c.flowEvents, e.v, cfg.Name, cfg.Class.String(), e.name)
			}
		}
	}
}

// MetricsAddr is the address the metrics server listens on, once it does.
func (a *Appliance) MetricsAddr() string {
	s, _ := a.metricsAddr.Load().(string)
	return s
}

// serveHTTP serves /metrics, /healthz and /readyz on addr until ctx ends.
func (a *Appliance) serveHTTP(ctx context.Context, addr string, ready *atomic.Bool) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { a.readyz(w, ready.Load()) })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("appliance: metrics listener: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	a.metricsAddr.Store(ln.Addr().String())
	a.log.Info("metrics listening", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics server", "err", err)
		}
	}()
	return nil
}

// metricsSet holds the appliance's registry and the histograms the IFs
// observe into.
type metricsSet struct {
	reg                             *prometheus.Registry
	request, queue, compute, gather *prometheus.HistogramVec
	batch                           *prometheus.HistogramVec
	swapGap                         *prometheus.HistogramVec
	responses                       *prometheus.CounterVec
	shareChanges                    *prometheus.CounterVec
	preemptLat                      *prometheus.HistogramVec
	response                        *prometheus.HistogramVec
}

func newMetricsSet() *metricsSet {
	lat := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	m := &metricsSet{reg: prometheus.NewRegistry(),
		request: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_request_duration_seconds",
			Help: "Server-side request latency: first fragment received to result computed.", Buckets: lat}, []string{"if", "class"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_queue_duration_seconds",
			Help: "Time a request waited in its IF queue.", Buckets: lat}, []string{"if", "class"}),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_compute_duration_seconds",
			Help: "Model inference time per batch.", Buckets: lat}, []string{"if", "class"}),
		gather: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_gather_duration_seconds",
			Help: "Gather and input conversion time per batch.", Buckets: lat}, []string{"if", "class"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_batch_size",
			Help: "Requests per batch.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}}, []string{"if", "class"}),
		swapGap: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_swap_gap_seconds",
			Help:    "Idle gap of the IF's worker at a shadow swap.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2}}, []string{"if", "class"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_if_responses_total",
			Help: "Requests answered by the IF, by status."}, []string{"if", "class", "status"}),
		shareChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_share_changes_total",
			Help: "Share changes made by the self-tuning allocator or the inss placement."}, []string{"if", "class"}),
		preemptLat: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_preemption_latency_seconds",
			Help:    "Preemption latency: from the preempt call until no preempted block runs and the real-time job's first kernel has started.",
			Buckets: []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2}}, []string{"policy", "device"}),
	}
	m.response = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_response_duration_seconds",
		Help: "Server-side request life: first fragment received to response handed to the port driver.", Buckets: lat},
		[]string{"port", "class", "status"})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_build_info",
		Help: "Always 1: the running build's version and the Go release it was built with."}, []string{"version", "goversion"})
	build.WithLabelValues(buildinfo.Version(), buildinfo.GoVersion()).Set(1)
	m.reg.MustRegister(m.request, m.queue, m.compute, m.gather, m.batch, m.swapGap, m.responses, m.shareChanges, m.preemptLat, m.response,
		build, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *metricsSet) registerCollector(a *Appliance) { m.reg.MustRegister(newCollector(a)) }

// sentObserver returns the egress hook of one port: each response's time
// from its request's first fragment to its hand-over to the driver, by
// class and status (observers resolved once, not per response).
func (m *metricsSet) sentObserver(port string) func(r *egress.Response, sentNS int64) {
	var obs [2][16]prometheus.Observer
	for c, class := range []string{"be", "rt"} {
		for st := wire.StatusOK; st <= wire.StatusBadInput; st++ {
			obs[c][st] = m.response.WithLabelValues(port, class, st.String())
		}
	}
	return func(r *egress.Response, sentNS int64) {
		if r.ArrivedNS == 0 {
			return
		}
		c := 0
		if r.Flags&wire.FlagRT != 0 {
			c = 1
		}
		if o := obs[c][r.Status&15]; o != nil {
			o.Observe(float64(sentNS-r.ArrivedNS) / 1e9)
		}
	}
}

// schedBackends are the backends that schedule under a policy (one per
// policy in use).
func (a *Appliance) schedBackends() []libml.Scheduling {
	a.mu.Lock()
	defer a.mu.Unlock()
	var bs []libml.Scheduling
	seen := map[libml.Backend]bool{}
	for _, b := range a.backends {
		// a policy's cuda IFs share the cpu scheduler where cuda fell
		// back to the cpu: one backend under two names, counted once
		if sb, ok := b.(libml.Scheduling); ok && !seen[b] {
			seen[b] = true
			bs = append(bs, sb)
		}
	}
	return bs
}

// observer returns the ifmanager.Observer for one IF.
func (m *metricsSet) observer(name, class string) *ifObserver {
	o := &ifObserver{
		request: m.request.WithLabelValues(name, class), queue: m.queue.WithLabelValues(name, class),
		compute: m.compute.WithLabelValues(name, class), gather: m.gather.WithLabelValues(name, class),
		batch: m.batch.WithLabelValues(name, class), swapGap: m.swapGap.WithLabelValues(name, class),
	}
	for st := wire.StatusOK; st <= wire.StatusBadInput; st++ {
		o.status[st] = m.responses.WithLabelValues(name, class, st.String())
	}
	return o
}

// ifObserver turns an IF's measurements into metrics and feeds its share
// tuner.
type ifObserver struct {
	request, queue, compute, gather, batch, swapGap prometheus.Observer
	status                                          [16]prometheus.Counter
	run                                             *ifRun
	tunerMu                                         sync.Mutex
}

func (o *ifObserver) Request(st wire.Status, queue, compute, total time.Duration) {
	o.queue.Observe(queue.Seconds())
	o.request.Observe(total.Seconds())
	if c := o.status[st&15]; c != nil {
		c.Inc()
	}
}

func (o *ifObserver) Batch(n int, gather, compute, latency time.Duration) {
	o.batch.Observe(float64(n))
	o.gather.Observe(gather.Seconds())
	o.compute.Observe(compute.Seconds())
	if r := o.run; r != nil {
		if tu := r.tuner.Load(); tu != nil {
			o.tunerMu.Lock()
			tu.ObserveBatch(n, latency, compute)
			o.tunerMu.Unlock()
		}
	}
}

func (o *ifObserver) Swap(gap time.Duration) { o.swapGap.Observe(gap.Seconds()) }
