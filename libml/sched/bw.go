package sched

import (
	"sync"
	"time"
)

var (
	bwOnce sync.Once
	bwMBs  int64
)

// MeasureBandwidth is the memory bandwidth of the machine in MB/s: two
// goroutines copying 32 MiB buffers (touched beforehand) for ~50 ms,
// counting bytes read and written (measured once per process). Padding's
// rule 2 budgets against it.
func MeasureBandwidth() int64 {
	bwOnce.Do(func() {
		const n = 32 << 20
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bytes int64
		bufs := make([][2][]byte, 2)
		for g := range bufs {
			// touched first: page faults are not bandwidth
			bufs[g] = [2][]byte{make([]byte, n), make([]byte, n)}
			copy(bufs[g][1], bufs[g][0])
			copy(bufs[g][0], bufs[g][1])
		}
		t0 := time.Now()
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, b := bufs[g][0], bufs[g][1]
				var moved int64
				for time.Since(t0) < 50*time.Millisecond {
					copy(b, a)
					moved += 2 * n
				}
				mu.Lock()
				bytes += moved
				mu.Unlock()
			}()
		}
		wg.Wait()
		bwMBs = int64(float64(bytes) / time.Since(t0).Seconds() / 1e6)
		if bwMBs <= 0 {
			bwMBs = 1
		}
	})
	return bwMBs
}
