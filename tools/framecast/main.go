// Command framecast is sluice's client and load generator: it streams
// frames to an appliance over UDP at a set rate per model, checks every
// response against its request, and reports latency percentiles, loss and
// errors per stream.
//
//	framecast -target 10.99.1.1:9400 -duration 20s \
//	  -stream model=1,class=rt,rate=20,size=150528 \
//	  -stream model=2,class=be,rate=2,size=150528
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"sluice/dataplane/wire"
)

type streamSpec struct {
	Model   uint16  `json:"model"`
	Class   string  `json:"class"`
	Rate    float64 `json:"rate_per_s"`
	Size    int     `json:"size"`
	Arrival string  `json:"arrival"`
}

type streamList []streamSpec

func (l *streamList) String() string { return fmt.Sprint(*l) }

func (l *streamList) Set(v string) error {
	s := streamSpec{Class: "be", Rate: 10, Size: 150528, Arrival: "uniform"}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("stream %q: %q is not key=value", v, kv)
		}
		switch k {
		case "model":
			n, err := strconv.ParseUint(val, 10, 16)
			if err != nil {
				return fmt.Errorf("stream model %q: %w", val, err)
			}
			s.Model = uint16(n)
		case "class":
			if val != "rt" && val != "be" {
				return fmt.Errorf("stream class %q: want rt or be", val)
			}
			s.Class = val
		case "rate":
			r, err := strconv.ParseFloat(val, 64)
			if err != nil || r <= 0 {
				return fmt.Errorf("stream rate %q: want a positive number", val)
			}
			s.Rate = r
		case "size":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return fmt.Errorf("stream size %q: want a positive number", val)
			}
			s.Size = n
		case "arrival":
			if val != "uniform" && val != "poisson" {
				return fmt.Errorf("stream arrival %q: want uniform or poisson", val)
			}
			s.Arrival = val
		default:
			return fmt.Errorf("stream: unknown key %q (model, class, rate, size, arrival)", k)
		}
	}
	*l = append(*l, s)
	return nil
}

// pending is a request awaiting its response.
type pending struct {
	stream int
	frame  int
	sent   time.Time
	h      wire.Header
	got    map[uint16]bool
	data   []byte
}

// streamStats are one stream's results.
type streamStats struct {
	Spec       streamSpec     `json:"spec"`
	Sent       int            `json:"sent"`
	OK         int            `json:"ok"`
	Errors     map[string]int `json:"errors"`
	Lost       int            `json:"lost"`
	Mismatched int            `json:"mismatched"`
	// MaxDiff is the largest difference seen between outputs for equal
	// frames, relative to the output's magnitude (batching changes the
	// order of floating-point sums, so outputs agree only within
	// tolerance).
	MaxDiff   float64            `json:"max_rel_diff"`
	LatencyMS map[string]float64 `json:"latency_ms"`
	lat       []float64
}

type client struct {
	conn    *net.UDPConn
	target  netip.AddrPort
	flow    uint32
	frag    int
	streams []*streamStats
	frames  [][][]byte // per stream: distinct frames

	mu      sync.Mutex
	pending map[uint64]*pending
	outputs map[[2]int][]byte // (stream, frame) -> first output: equal inputs must give equal outputs
	dupes   int
}

func main() {
	var streams streamList
	target := flag.String("target", "127.0.0.1:9400", "appliance address:port")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	timeout := flag.Duration("timeout", 2*time.Second, "a request unanswered this long after sending is lost")
	frag := flag.Int("frag", wire.DefaultFragSize, "fragment payload bytes")
	frames := flag.Int("frames", 8, "distinct synthetic frames per stream (responses to equal frames must be equal)")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
	quiet := flag.Bool("quiet", false, "no progress line")
	flag.Var(&streams, "stream", "a stream: model=ID,class=rt|be,rate=PER_S,size=BYTES,arrival=uniform|poisson (repeatable)")
	flag.Parse()
	if len(streams) == 0 {
		_ = streams.Set("model=1,class=rt,rate=20")
	}
	dst, err := netip.ParseAddrPort(*target)
	if err != nil {
		fatal("target %q: %v", *target, err)
	}
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		fatal("socket: %v", err)
	}
	_ = conn.SetReadBuffer(16 << 20)
	_ = conn.SetWriteBuffer(16 << 20)
	c := &client{conn: conn, target: dst, flow: rand.Uint32(), frag: *frag,
		pending: map[uint64]*pending{}, outputs: map[[2]int][]byte{}}
	for i, s := range streams {
		c.streams = append(c.streams, &streamStats{Spec: s, Errors: map[string]int{}})
		var fs [][]byte
		rng := rand.New(rand.NewPCG(uint64(i)+1, 99))
		for f := 0; f < *frames; f++ {
			b := make([]byte, s.Size)
			for k := range b {
				b[k] = byte(rng.Uint32())
			}
			fs = append(fs, b)
		}
		c.frames = append(c.frames, fs)
	}
	go c.receive()
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range c.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.send(i, start.Add(*duration))
		}()
	}
	if !*quiet {
		go c.progress(start, *duration, done)
	}
	wg.Wait()
	// wait for the last responses
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(done)
	conn.Close()
	c.mu.Lock()
	for _, p := range c.pending {
		c.streams[p.stream].Lost++
	}
	c.mu.Unlock()
	report := c.report(time.Since(start))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fatal("json: %v", err)
		}
	}
}

func fatal(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "framecast: "+f+"\n", a...)
	os.Exit(1)
}

func (c *client) send(si int, end time.Time) {
	s := c.streams[si]
	rng := rand.New(rand.NewPCG(uint64(si), 7))
	interval := time.Duration(float64(time.Second) / s.Spec.Rate)
	next := time.Now()
	flags := uint8(0)
	if s.Spec.Class == "rt" {
		flags = wire.FlagRT
	}
	for n := 0; ; n++ {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		if time.Now().After(end) {
			return
		}
		id := uint64(si)<<48 | uint64(n+1)
		frame := n % len(c.frames[si])
		ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Flags: flags, Model: s.Spec.Model, Flow: c.flow, Request: id},
			c.frames[si][frame], c.frag)
		if err != nil {
			fatal("%v", err)
		}
		c.mu.Lock()
		c.pending[id] = &pending{stream: si, frame: frame, sent: time.Now()}
		s.Sent++
		c.mu.Unlock()
		for _, d := range ds {
			if _, err := c.conn.WriteToUDPAddrPort(d, c.target); err != nil {
				break
			}
		}
		if s.Spec.Arrival == "poisson" {
			next = next.Add(time.Duration(rng.ExpFloat64() * float64(interval)))
		} else {
			next = next.Add(interval)
		}
	}
}

func (c *client) receive() {
	buf := make([]byte, 65536)
	for {
		n, _, err := c.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if strings.Contains(err.Error(), "closed") {
				return
			}
			continue
		}
		now := time.Now()
		var h wire.Header
		if wire.Decode(buf[:n], &h) != nil || h.Kind != wire.KindResponse || h.Flow != c.flow {
			continue
		}
		c.mu.Lock()
		p := c.pending[h.Request]
		if p == nil {
			c.dupes++
			c.mu.Unlock()
			continue
		}
		if p.got == nil {
			p.h = h
			p.got = map[uint16]bool{}
			p.data = make([]byte, h.TotalLen)
		}
		if h.TotalLen == p.h.TotalLen && !p.got[h.FragIndex] && int(h.Offset)+n-wire.HeaderLen <= len(p.data) {
			p.got[h.FragIndex] = true
			copy(p.data[h.Offset:], buf[wire.HeaderLen:n])
		}
		if len(p.got) == int(p.h.FragCount) {
			delete(c.pending, h.Request)
			s := c.streams[p.stream]
			if p.h.Status != wire.StatusOK {
				s.Errors[p.h.Status.String()]++
			} else {
				key := [2]int{p.stream, p.frame}
				if prev, ok := c.outputs[key]; ok {
					d, same := outputDiff(prev, p.data)
					s.MaxDiff = max(s.MaxDiff, d)
					if !same {
						s.Mismatched++
					}
				} else {
					c.outputs[key] = p.data
				}
				s.OK++
				s.lat = append(s.lat, float64(now.Sub(p.sent))/1e6)
			}
		}
		c.mu.Unlock()
	}
}

func (c *client) progress(start time.Time, d time.Duration, done chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			fmt.Fprintln(os.Stderr)
			return
		case <-t.C:
			c.mu.Lock()
			var b strings.Builder
			fmt.Fprintf(&b, "\r[%4.0fs/%.0fs]", time.Since(start).Seconds(), d.Seconds())
			for _, s := range c.streams {
				p50 := percentile(slices.Clone(s.lat), 50)
				fmt.Fprintf(&b, "  m%d/%s sent %d ok %d err %d p50 %.1fms", s.Spec.Model, s.Spec.Class, s.Sent, s.OK, errs(s), p50)
			}
			c.mu.Unlock()
			fmt.Fprint(os.Stderr, b.String())
		}
	}
}

func errs(s *streamStats) int {
	n := 0
	for _, v := range s.Errors {
		n += v
	}
	return n
}

// outputDiff compares two float32 outputs: the largest difference relative
// to the largest magnitude, and whether it is within tolerance (1e-3).
// Outputs of different sizes never match.
func outputDiff(a, b []byte) (float64, bool) {
	if len(a) != len(b) || len(a)%4 != 0 {
		return math.Inf(1), false
	}
	var diff, mag float64
	for i := 0; i < len(a); i += 4 {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(a[i:])))
		y := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		if math.IsNaN(x) != math.IsNaN(y) {
			return math.Inf(1), false
		}
		diff = max(diff, math.Abs(x-y))
		mag = max(mag, math.Abs(x))
	}
	rel := diff / max(mag, 1e-6)
	return rel, rel <= 1e-3
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	i := int(math.Ceil(p/100*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}

type report struct {
	Seconds    float64        `json:"seconds"`
	Streams    []*streamStats `json:"streams"`
	Duplicates int            `json:"duplicate_response_fragments"`
}

func (c *client) report(el time.Duration) report {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Printf("framecast: %.1fs, target %v, flow %d\n\n", el.Seconds(), c.target, c.flow)
	fmt.Println("| model | class | rate/s | sent | ok | errors | lost | mismatched | p50 ms | p90 ms | p99 ms | max ms | ok/s | max rel diff |")
	fmt.Println("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range c.streams {
		s.LatencyMS = map[string]float64{}
		for _, p := range []float64{50, 90, 99, 100} {
			s.LatencyMS[fmt.Sprintf("p%g", p)] = percentile(s.lat, p)
		}
		var es []string
		for k, v := range s.Errors {
			es = append(es, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(es)
		e := strings.Join(es, " ")
		if e == "" {
			e = "0"
		}
		fmt.Printf("| %d | %s | %g | %d | %d | %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.1f | %.1e |\n",
			s.Spec.Model, s.Spec.Class, s.Spec.Rate, s.Sent, s.OK, e, s.Lost, s.Mismatched,
			s.LatencyMS["p50"], s.LatencyMS["p90"], s.LatencyMS["p99"], s.LatencyMS["p100"], float64(s.OK)/el.Seconds(), s.MaxDiff)
	}
	if c.dupes > 0 {
		fmt.Printf("\n%d response fragments for requests already answered or unknown\n", c.dupes)
	}
	return report{Seconds: el.Seconds(), Streams: c.streams, Duplicates: c.dupes}
}
