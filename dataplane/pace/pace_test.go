package pace

import (
	"testing"
	"time"
)

// fakeClock is a clock that advances only when the pacer sleeps.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time        { return c.t }
func (c *fakeClock) sleep(d time.Duration) { c.t = c.t.Add(d) }
func newFake(rate float64, burst int) (*Pacer, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	p := New(rate, burst)
	p.now, p.sleep = c.now, c.sleep
	return p, c
}

// A burst goes at once; past it, bytes go at the rate.
func TestPacerKeepsTheRate(t *testing.T) {
	p, c := newFake(1e6, 10000) // 1 MB/s, 10 kB burst
	start := c.t
	for i := 0; i < 10; i++ {
		p.Wait(1000) // the burst
	}
	if got := c.t.Sub(start); got != 0 {
		t.Fatalf("the burst waited %v", got)
	}
	for i := 0; i < 1000; i++ {
		p.Wait(1000) // 1 MB more: one second
	}
	if got := c.t.Sub(start); got < 999*time.Millisecond || got > 1001*time.Millisecond {
		t.Fatalf("1 MB past the burst at 1 MB/s took %v, want 1 s", got)
	}
	if p.Waited() != c.t.Sub(start) {
		t.Fatalf("Waited %v, slept %v", p.Waited(), c.t.Sub(start))
	}
	// idle time refills the bucket, up to the burst only
	c.t = c.t.Add(time.Hour)
	before := c.t
	for i := 0; i < 10; i++ {
		p.Wait(1000)
	}
	if c.t != before {
		t.Fatal("a refilled burst waited")
	}
	p.Wait(1000)
	if got := c.t.Sub(before); got != time.Millisecond {
		t.Fatalf("the byte past a refilled burst waited %v, want 1 ms", got)
	}
}

func TestPacerOff(t *testing.T) {
	var nilP *Pacer
	nilP.Wait(1 << 30)
	p, c := newFake(0, 0)
	start := c.t
	p.Wait(1 << 30)
	if c.t != start || nilP.Rate() != 0 || p.Rate() != 0 {
		t.Fatal("a pacer without a rate waited")
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"0": 0, "400MB": 400e6, "1.5G": 1.5e9, "250k": 250e3, "123": 123, " 2M ": 2e6} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "-1M", "2T", "1e13", "MB"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
}
