// Command dpbench measures the dataplane on one core: packets and requests
// per second through DPDK receive, zero-copy reassembly, the batch gather
// into a float32 tensor (in C, from the payload views) and each request's
// answer,
// against the raw rx_burst rate of the same port in the same run (the
// ceiling), and the allocations per packet.
//
// The source is deterministic: a pcap of whole requests (150,528-byte
// frames in 1 KiB fragments by default) replayed forever by net_pcap
// (infinite_rx=1). Needs root.
//
//	go build -o bin/dpbench ./tools/dpbench && sudo bin/dpbench -duration 5s
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"sluice/dataplane/dpdk"
	"sluice/dataplane/egress"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
	"sluice/dataplane/wire/wirelayer"
	"sluice/libml"
	"sluice/libml/cpu"
)

type options struct {
	duration   time.Duration
	rounds     int
	requests   int
	size       int
	frag       int
	batch      int
	burst      int
	hold       bool
	views      bool
	jsonOut    string
	cpuProfile string
}

// result is one measured phase.
type result struct {
	Phase          string  `json:"phase"`
	Seconds        float64 `json:"seconds"`
	Packets        uint64  `json:"packets"`
	Requests       uint64  `json:"requests"`
	PPS            float64 `json:"pps"`
	RPS            float64 `json:"rps"`
	GbpsPayload    float64 `json:"gbps_payload"`
	AllocsPerPkt   float64 `json:"allocs_per_packet"`
	BytesGathered  uint64  `json:"bytes_gathered"`
	ReassemblyDrop uint64  `json:"reassembly_drops"`
	// Held is the mean of the frames out of the pool while the phase
	// ran (sampled every 256 polls), over the pool's idle baseline.
	Held float64 `json:"held_frames"`
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", time.Second, "length of each measured phase")
	flag.IntVar(&o.rounds, "rounds", 11, "raw/full phase pairs, interleaved; medians are reported")
	flag.IntVar(&o.requests, "requests", 32, "distinct requests in the replayed pcap")
	flag.IntVar(&o.size, "size", 150528, "request payload bytes (224x224x3)")
	flag.IntVar(&o.frag, "frag", 1024, "fragment payload bytes")
	flag.IntVar(&o.batch, "batch", 8, "requests per gathered batch")
	flag.IntVar(&o.burst, "burst", 64, "rx burst size")
	flag.BoolVar(&o.hold, "hold", false, "hold each batch's requests and gather them in one call, as an IF does (default: gather each request as it completes)")
	flag.BoolVar(&o.views, "views", false, "hand each batch's payload views on without a host copy, as the cuda path does (its device gather reads the fragments in place from the mapped packet region; that read is the GPU's, not measured here)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured phases to this file")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "dpbench:", err)
		os.Exit(1)
	}
}

var (
	benchIP   = netip.MustParseAddr("10.99.0.1")
	clientIP  = netip.MustParseAddrPort("10.99.0.2:40000")
	benchMAC  = [6]byte{0x02, 0, 0, 0, 0, 1}
	clientMAC = [6]byte{0x02, 0, 0, 0, 0, 2}
)

// writePcap writes o.requests whole requests, fragments in order.
func writePcap(path string, o options) (frames int, err error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return 0, err
	}
	payload := make([]byte, o.size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	dst := netip.AddrPortFrom(benchIP, wire.DefaultPort)
	for id := 1; id <= o.requests; id++ {
		ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 1, Request: uint64(id)}, payload, o.frag)
		if err != nil {
			return 0, err
		}
		for _, d := range ds {
			fr, err := wirelayer.Frame(clientMAC, benchMAC, clientIP, dst, d)
			if err != nil {
				return 0, err
			}
			ci := gopacketCapture(len(fr))
			if err := w.WritePacket(ci, fr); err != nil {
				return 0, err
			}
			frames++
		}
	}
	return frames, nil
}

// gatherSink gathers each request's payload, from its views in the packet
// buffers (no copy until then), into the float32 batch tensor in one pass
// in C (libml/cpu's Ingester: the request's one copy) and answers it (one
// response datagram), which gives its packet buffers back. By default
// each request is gathered as soon as it completes, into the next slot of
// the tensor, while its fragments are still in cache (one cgo call per
// request); with -hold, batch requests are held and gathered together
// (one cgo call per batch), as an IF does.
type gatherSink struct {
	ing      cpu.Ingester
	in       libml.Input
	held     []*ioloop.Request
	hold     bool
	views    bool // no host gather: the views go to a device (-views)
	batch    int
	slot     int
	tensor   []float32
	batches  uint64
	gathered uint64
	err      error
}

func (s *gatherSink) Deliver(r *ioloop.Request) {
	var err error
	if s.in.Payload, err = r.AppendPayload(s.in.Payload); err != nil && s.err == nil {
		s.err = err
	}
	s.in.EndRequest()
	s.held = append(s.held, r)
	if s.hold && len(s.held) < s.batch {
		return
	}
	elems := s.in.Enc.Elems
	if s.views {
		// what the cuda path's host side does with a batch: check it
		// (every request whole, its size) and hand the views on
		if err := s.in.Check(len(s.held), elems); err != nil && s.err == nil {
			s.err = err
		}
	} else if err := s.ing.Ingest(s.tensor[s.slot*elems:], &s.in, 0, len(s.held)); err != nil && s.err == nil {
		s.err = err
	}
	for _, h := range s.held {
		s.gathered += uint64(h.TotalLen)
		h.Reply(wire.StatusOK, nil, nil)
	}
	if s.slot += len(s.held); s.slot == s.batch {
		s.slot = 0
		s.batches++
	}
	clear(s.held)
	s.held = s.held[:0]
	s.in.Reset()
}

func run(o options) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (DPDK)")
	}
	dir, err := os.MkdirTemp("", "dpbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pcapPath := filepath.Join(dir, "requests.pcap")
	frames, err := writePcap(pcapPath, o)
	if err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	if err := dpdk.InitEAL(dpdk.DefaultEALArgs()); err != nil {
		return err
	}
	defer dpdk.CleanupEAL()
	port, err := dpdk.Open(dpdk.Config{
		Vdev:     "net_pcap0,rx_pcap=" + pcapPath + ",infinite_rx=1",
		IP:       benchIP,
		UDPPort:  wire.DefaultPort,
		Burst:    o.burst,
		PoolSize: uint32(frames + 16384),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer port.Close()

	out, err := egress.New(egress.DefaultConfig())
	if err != nil {
		return err
	}
	if o.size%4 != 0 {
		return fmt.Errorf("-size %d: the payload is float32 values, a multiple of 4 bytes", o.size)
	}
	enc, err := libml.NewEncoding(libml.InputF32, nil, nil, []int64{int64(o.size / 4)})
	if err != nil {
		return err
	}
	sink := &gatherSink{batch: o.batch, hold: o.hold, views: o.views, tensor: make([]float32, o.batch*o.size/4), in: libml.Input{Enc: enc}}
	lcfg := ioloop.DefaultConfig()
	lcfg.Burst = o.burst
	loop, err := ioloop.New(lcfg, port, out, sink, nil)
	if err != nil {
		return err
	}
	rcfg := reasm.DefaultConfig()
	// Fewer slots than distinct requests in the pcap, so a replayed
	// request id finds its old slot recycled and counts as new.
	rcfg.MaxRequests = min(16, o.requests/2)
	rcfg.MaxHeldFragments = 8192
	rcfg.Timeout = time.Second
	// No late memory: it would drop every replayed request as late.
	rcfg.LateWindow = -1
	table, err := loop.NewTable(rcfg)
	if err != nil {
		return err
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mode := "each request gathered as it completes"
	if o.hold {
		mode = "requests held and gathered by batch"
	}
	if o.views {
		mode += ", payload views handed on without a host copy (-views: the cuda path's host side)"
	}
	fmt.Printf("dpbench: %s, %d requests x %d B in %d B fragments (%d frames), batch %d (%s), burst %d, %v x %d rounds, GOMAXPROCS %d\n",
		dpdk.Version(), o.requests, o.size, o.frag, frames, o.batch, mode, o.burst, o.duration, o.rounds, runtime.GOMAXPROCS(0))

	// warm up: fill the PMD's replay ring and the caches; the full
	// path's warm-up says how many frames it holds, which the held raw
	// phase then holds too
	rawPhase(port, o, 300*time.Millisecond, -1)
	base := port.Stats().BufInUse
	hold := int(fullPhase(loop, port, sink, o, 300*time.Millisecond, base).Held + 0.5)

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var raws, helds, fulls []result
	for r := 0; r < o.rounds; r++ {
		raws = append(raws, rawPhase(port, o, o.duration, -1))
		helds = append(helds, rawPhase(port, o, o.duration, hold))
		fulls = append(fulls, fullPhase(loop, port, sink, o, o.duration, base))
	}
	if sink.err != nil {
		return sink.err
	}
	raw, held, full := median(raws), median(helds), median(fulls)
	// The ratios are taken per round, between adjacent phases, so load
	// that drifts across the run (a noisy shared machine) cancels out.
	ratio, ratioLo, ratioHi := roundRatios(fulls, raws)
	hratio, hratioLo, hratioHi := roundRatios(fulls, helds)
	fmt.Printf("mempool %q; the full path holds %.0f frames out of the pool on average (warm-up), the held raw phase %d\n", port.PoolOps(), float64(hold), hold)
	fmt.Println()
	fmt.Println("| phase | packets/s | requests/s | payload Gbit/s | allocs/packet | frames held |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, r := range []result{raw, held, full} {
		fmt.Printf("| %s | %.3f M | %.0f | %.2f | %.4f | %.0f |\n", r.Phase, r.PPS/1e6, r.RPS, r.GbpsPayload, r.AllocsPerPkt, r.Held)
	}
	fmt.Printf("\nreassembly+gather / raw rx = %.3f, median of per-round ratios (range %.3f-%.3f; target >= 0.80); full path %.3f Mpps (target >= 1.2 Mpps)\n",
		ratio, ratioLo, ratioHi, full.PPS/1e6)
	fmt.Printf("reassembly+gather / raw rx holding as many frames = %.3f (range %.3f-%.3f)\n", hratio, hratioLo, hratioHi)
	fmt.Printf("rounds (Mpps raw/held/full):")
	for i := range raws {
		fmt.Printf(" %.3f/%.3f/%.3f", raws[i].PPS/1e6, helds[i].PPS/1e6, fulls[i].PPS/1e6)
	}
	fmt.Println()
	if d := table.C.TotalDrops(); d != 0 {
		fmt.Printf("reassembly drops: %d:", d)
		for _, r := range reasm.Reasons() {
			if n := table.C.Drops(r); n > 0 {
				fmt.Printf(" %s=%d", r, n)
			}
		}
		fmt.Println()
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"raw": raw, "raw_held": held, "full": full, "ratio": ratio, "ratio_held": hratio, "pool_ops": port.PoolOps(), "rounds_raw": raws, "rounds_raw_held": helds, "rounds_full": fulls}, "", "  ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int {
		switch {
		case a.PPS < b.PPS:
			return -1
		case a.PPS > b.PPS:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// roundRatios is the median, least and greatest of num[i].PPS /
// den[i].PPS.
func roundRatios(num, den []result) (med, lo, hi float64) {
	rs := make([]float64, len(num))
	for i := range num {
		rs[i] = num[i].PPS / den[i].PPS
	}
	slices.Sort(rs)
	return rs[len(rs)/2], rs[0], rs[len(rs)-1]
}

// rawPhase polls rx_burst and frees the mbufs at once (hold < 0: the
// ceiling), or keeps the last hold frames out of the pool (the ceiling of
// a receiver that holds as many frames as the full path does).
func rawPhase(port *dpdk.Port, o options, d time.Duration, hold int) result {
	var pkts uint64
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	phase := "raw rx_burst"
	if hold >= 0 {
		phase = "raw rx_burst, frames held"
	}
	start := time.Now()
	end := start.Add(d)
	for i := 0; ; i++ {
		if hold < 0 {
			pkts += uint64(port.RxRaw(o.burst))
		} else {
			pkts += uint64(port.RxRawHold(o.burst, hold))
		}
		if i&255 == 0 && time.Now().After(end) {
			break
		}
	}
	el := time.Since(start).Seconds()
	runtime.ReadMemStats(&ms1)
	if hold >= 0 {
		port.RxRaw(0) // give the held frames back
	}
	return result{Phase: phase, Seconds: el, Packets: pkts, PPS: float64(pkts) / el, Held: float64(max(hold, 0)),
		RPS:          float64(pkts) / el / float64(wire.FragCountFor(uint32(o.size), uint32(o.frag))),
		GbpsPayload:  float64(pkts) * float64(o.frag) * 8 / el / 1e9,
		AllocsPerPkt: float64(ms1.Mallocs-ms0.Mallocs) / float64(max(pkts, 1))}
}

// fullPhase runs the I/O loop: rx, reassembly, gather, answers, release.
func fullPhase(loop *ioloop.Loop, port *dpdk.Port, sink *gatherSink, o options, d time.Duration, base uint64) result {
	s0 := port.Stats()
	c0, g0, d0 := loop.Table().C.Completed.Load(), sink.gathered, loop.Table().C.TotalDrops()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	end := start.Add(d)
	now := loop.Now()
	var held, samples float64
	for i := 0; ; i++ {
		if _, err := loop.Poll(now); err != nil {
			panic(err)
		}
		if i&255 == 0 {
			held += float64(port.Stats().BufInUse) - float64(base)
			samples++
			if time.Now().After(end) {
				break
			}
			now = loop.Now()
		}
	}
	el := time.Since(start).Seconds()
	runtime.ReadMemStats(&ms1)
	s1 := port.Stats()
	pkts := s1.RxPackets - s0.RxPackets
	reqs := loop.Table().C.Completed.Load() - c0
	return result{Phase: "rx + reassembly + gather", Seconds: el, Packets: pkts, Requests: reqs,
		PPS: float64(pkts) / el, RPS: float64(reqs) / el,
		GbpsPayload:    float64(sink.gathered-g0) * 8 / el / 1e9,
		AllocsPerPkt:   float64(ms1.Mallocs-ms0.Mallocs) / float64(max(pkts, 1)),
		BytesGathered:  sink.gathered - g0,
		ReassemblyDrop: loop.Table().C.TotalDrops() - d0,
		Held:           held / max(samples, 1)}
}

func gopacketCapture(n int) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: time.Unix(0, 0), CaptureLength: n, Length: n}
}
