package ifmanager

import (
	"testing"
	"time"
)

// The p99 of the latest RecentLatencies answers, nearest rank; older ones
// are forgotten.
func TestLatencyRingP99(t *testing.T) {
	var l latencyRing
	if l.p99() != 0 {
		t.Fatal("an empty ring has a p99")
	}
	for i := 1; i <= 100; i++ {
		l.add(int64(i) * int64(time.Millisecond))
	}
	if got := l.p99(); got != 99*time.Millisecond {
		t.Fatalf("p99 of 1..100 ms: %v, want 99ms", got)
	}
	// a full ring of 5 ms answers hides the old ones entirely
	for i := 0; i < RecentLatencies; i++ {
		l.add(int64(5 * time.Millisecond))
	}
	if got := l.p99(); got != 5*time.Millisecond {
		t.Fatalf("p99 after a full ring of 5 ms: %v", got)
	}
	if n := testing.AllocsPerRun(100, func() { l.add(1) }); n != 0 {
		t.Fatalf("add allocates %v times", n)
	}
}
