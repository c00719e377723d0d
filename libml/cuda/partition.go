package cuda

import (
	"fmt"
	"math"
	"sync"
)

// smSlots places SM partitions (green contexts) on the device: the
// groups the driver splits the SMs into (SMGroups), one slot each, and
// how many live partitions use each. A partition takes the run of
// slots that the fewest partitions use (the least used first, then the
// lowest), so partitions that fit beside each other share no SM
// (GSLICE's spatial shares), and ones that cannot fit (a shadow prepared
// while its IF still runs, shares that sum past the device) overlap
// where the device is least loaded. Without it every green context
// would take the same first SMs of the split.
type smSlots struct {
	mu   sync.Mutex
	gran int   // SMs a slot (0: not probed yet)
	use  []int // partitions per slot
}

// partition splits a green context of at least sms SMs off the device,
// placed by b.slots; closing it frees its slots. replacing, when it is a
// partition placed here, is one its caller closes once the new one is
// ready (an instance moving to another share): its slots count as free.
func (b *Backend) partition(sms int, replacing gpuCtx) (gpuCtx, error) {
	if sms < 1 || sms > b.dev.SMs() {
		return nil, fmt.Errorf("cuda: a partition of %d SMs on a device of %d", sms, b.dev.SMs())
	}
	s := &b.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.probe(b.dev); err != nil {
		return nil, err
	}
	k := min((sms+s.gran-1)/s.gran, len(s.use))
	old, _ := replacing.(*slotCtx)
	if old != nil && old.s == s {
		s.add(old.first, old.n, -1)
	}
	first := s.place(k)
	if old != nil && old.s == s {
		s.add(old.first, old.n, 1)
	}
	p, err := b.dev.Partition(first*s.gran, k*s.gran)
	if err != nil {
		return nil, err
	}
	s.add(first, k, 1)
	return &slotCtx{gpuCtx: p, s: s, first: first, n: k}, nil
}

// probe reads the device's split into slots (SMGroups) the first time;
// the caller holds s.mu.
func (s *smSlots) probe(dev gpuCtx) error {
	if s.gran != 0 {
		return nil
	}
	n, gran, err := dev.SMGroups()
	if err != nil {
		return err
	}
	if n < 1 || gran < 1 || n*gran > dev.SMs() {
		return fmt.Errorf("cuda: %d SM groups of %d on a device of %d SMs", n, gran, dev.SMs())
	}
	s.gran, s.use = gran, make([]int, n)
	return nil
}

// shareSMs is the SMs of a partition for a share of the device below 1:
// floor(share x n) of the n slots the driver splits the SMs into, at
// least one. Rounding down makes shares that sum to at most 1 (each at
// least 1/n) fit side by side, on SMs no other share uses; rounding up
// the SM count (66 of the H200's 132 SMs for a half, 9 of its 15 groups
// of 8) made two halves overlap on 3 groups. SMs outside every group
// (the H200's last 12) belong to the whole device alone.
func (b *Backend) shareSMs(share float64) (int, error) {
	s := &b.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.probe(b.dev); err != nil {
		return 0, err
	}
	k := max(int(math.Floor(share*float64(len(s.use))+1e-9)), 1)
	return min(k, len(s.use)) * s.gran, nil
}

// place is the first slot of the run of k slots whose busiest slot is
// the least used, then whose total use is least, then the lowest.
func (s *smSlots) place(k int) int {
	best, bestMax, bestSum := 0, -1, -1
	for f := 0; f+k <= len(s.use); f++ {
		mx, sum := 0, 0
		for _, u := range s.use[f : f+k] {
			mx, sum = max(mx, u), sum+u
		}
		if bestMax < 0 || mx < bestMax || (mx == bestMax && sum < bestSum) {
			best, bestMax, bestSum = f, mx, sum
		}
	}
	return best
}

// add adds d to the use of slots [first, first+n).
func (s *smSlots) add(first, n, d int) {
	for j := first; j < first+n; j++ {
		s.use[j] += d
	}
}

// slotCtx is a partition placed by smSlots: Close frees its slots.
type slotCtx struct {
	gpuCtx
	s        *smSlots
	first, n int
	once     sync.Once
}

func (c *slotCtx) Close() error {
	err := c.gpuCtx.Close()
	c.once.Do(func() {
		c.s.mu.Lock()
		c.s.add(c.first, c.n, -1)
		c.s.mu.Unlock()
	})
	return err
}
