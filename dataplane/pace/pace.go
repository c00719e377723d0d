// Package pace spaces a client's datagrams over time. A request of many
// megabytes is thousands of datagrams; sent as fast as the socket takes
// them they arrive in one burst, and a kernel-socket receiver whose I/O
// loop is held off its core for a few milliseconds loses the overflow
// from its socket buffer (a 12.6 MB request in 1432-byte fragments: 263
// of 8788 datagrams lost). A Pacer keeps the average rate at or below a
// limit while letting a burst of up to Burst bytes go at once, so small
// requests are never delayed and large ones are spread out.
package pace

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultBurst is the burst a Pacer allows when none is given: 256 KiB,
// larger than any image request, a small part of a receiver's socket
// buffer.
const DefaultBurst = 256 << 10

// Pacer is a token bucket over bytes, safe for concurrent use. The zero
// Pacer, and a nil one, never wait.
type Pacer struct {
	mu     sync.Mutex
	rate   float64 // bytes per second; 0: off
	burst  float64
	tokens float64
	last   time.Time
	sleep  func(time.Duration)
	now    func() time.Time
	waited time.Duration
}

// New returns a Pacer of rate bytes per second (0: no pacing) that allows
// bursts of burst bytes (0: DefaultBurst).
func New(rate float64, burst int) *Pacer {
	if burst <= 0 {
		burst = DefaultBurst
	}
	return &Pacer{rate: rate, burst: float64(burst), tokens: float64(burst), sleep: time.Sleep, now: time.Now}
}

// Rate is the pacer's rate in bytes per second (0: off).
func (p *Pacer) Rate() float64 {
	if p == nil {
		return 0
	}
	return p.rate
}

// Wait blocks until n more bytes may be sent. Pacers are shared by the
// goroutines that send on one socket: the bucket is taken under a lock,
// the sleep is not.
func (p *Pacer) Wait(n int) {
	if p == nil || p.rate <= 0 {
		return
	}
	p.mu.Lock()
	now := p.now()
	if !p.last.IsZero() {
		p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	}
	p.last = now
	p.tokens -= float64(n)
	var d time.Duration
	if p.tokens < 0 {
		d = time.Duration(-p.tokens / p.rate * float64(time.Second))
		p.waited += d
	}
	p.mu.Unlock()
	if d > 0 {
		p.sleep(d)
	}
}

// Waited is the total time Wait has asked its callers to sleep.
func (p *Pacer) Waited() time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waited
}

// ParseRate reads a rate in bytes per second: a number with an optional
// decimal suffix k, M or G (1e3, 1e6, 1e9) and an optional B, as in
// "400MB", "1.5G" or "0" (off).
func ParseRate(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "B")
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "k"), strings.HasSuffix(t, "K"):
		mult, t = 1e3, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1e6, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1e9, t[:len(t)-1]
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1e12 {
		return 0, fmt.Errorf("pace %q: want bytes per second, such as 400MB, 1.5G or 0 (off)", s)
	}
	return v * mult, nil
}
