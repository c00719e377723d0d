package sched

import (
	"math"
	"math/rand"
	"sluice/libml/kprof"
	"sort"
)

// split is SPLIT's policy (§3.4) on one stream: each model runs as evenly
// sized blocks of kernels (cut offline by SplitModel, tools/splitter); the
// queue is ordered by greedy response-ratio preemption: a new job moves
// ahead of its neighbour while that lowers the pair's summed response
// ratio, never past a job of the same model and class (FIFO per model
// and class). The job at
// the head runs its next block; preemption happens at block boundaries, so
// a job that moves to the head waits at most the running block.
//
// Two rules beyond Algorithm 1, which knows neither classes nor waiting
// (the wait a queued job has done enters both sides of its comparison
// alike and cancels, so a stream of short jobs passes a long one forever):
//   - classes: an RT job passes every BE job, of its own model too, and
//     a BE job never passes an RT job; within a class, Algorithm 1;
//   - aging (PREMA's, which SPLIT's latency target comes from): a job that
//     has waited past its latency target (Alpha x its standalone time) is
//     not passed any more, so no job starves.
type split struct {
	s *Scheduler
	l *lane
	q []*Job
}

func newSplit(s *Scheduler) *split { return &split{s: s, l: s.lanes[0]} }

// rr is a job's response ratio if it waits `waiting` more before running
// its remaining blocks, relative to its latency target Alpha x standalone
// time (SPLIT eq. 3, Algorithm 1).
func (p *split) rr(j *Job, now int64, waiting float64) float64 {
	ext := j.Model.remain[0]
	waited := float64(now - j.Arrival)
	return (waited + waiting + remaining(j)) / (p.s.cfg.Alpha * ext)
}

// insert places j by Algorithm 1, walking from the back of the queue.
func (p *split) insert(j *Job) int { return p.insertAt(j, Now()) }

// insertAt is insert at time now (the clock the queued jobs' waits and
// targets are read at).
func (p *split) insertAt(j *Job, now int64) int {
	ahead := 0.0 // remaining work ahead of q[pos-1]
	for _, o := range p.q {
		ahead += remaining(o)
	}
	pos := len(p.q)
	for pos > 0 {
		t := p.q[pos-1]
		if (t.Model == j.Model && t.Class == j.Class) || (t.Class == RT && j.Class != RT) {
			break
		}
		ahead -= remaining(t)
		if j.Class == RT && t.Class != RT {
			pos--
			continue
		}
		if p.overdue(t, now) {
			break
		}
		newBack, newFront := p.rr(j, now, ahead+remaining(t)), p.rr(j, now, ahead)
		tBack, tFront := p.rr(t, now, ahead), p.rr(t, now, ahead+remaining(j))
		if newFront+tFront >= newBack+tBack {
			break
		}
		pos--
	}
	p.q = append(p.q, nil)
	copy(p.q[pos+1:], p.q[pos:])
	p.q[pos] = j
	return pos
}

// overdue reports whether j has waited past its latency target.
func (p *split) overdue(j *Job, now int64) bool {
	return float64(now-j.Arrival) >= p.s.cfg.Alpha*j.Model.remain[0]
}

func (p *split) submit(j *Job) {
	p.insert(j)
	if !p.l.busy {
		p.dispatch()
	}
}

// nextCut is the end of the block that starts at kernel pos.
func nextCut(m *Model, pos int) int {
	for _, c := range m.cuts {
		if c > pos {
			return c
		}
	}
	return len(m.prog.Kernels)
}

func (p *split) dispatch() {
	for len(p.q) > 0 {
		j := p.q[0]
		if !p.s.bind(p.l, j) {
			p.q = p.q[1:]
			continue
		}
		p.s.run(p.l, nextCut(j.Model, j.pos), lkFast)
		return
	}
}

func (p *split) segDone(l *lane, _ bool) {
	j := l.job
	l.job = nil
	if j.pos >= len(j.Model.prog.Kernels) {
		p.q = removeJob(p.q, j)
		p.s.finish(j)
	}
	p.dispatch()
}

func (p *split) drop() []*Job {
	out := notRunning(p.q, p.l.job)
	p.q = nil
	return out
}

func (p *split) close() {}

// ---- evenly sized model splitting (SPLIT §3.3) -----------------------------

// GAConfig tunes the genetic algorithm of SplitModel.
type GAConfig struct {
	// Population, Generations, Crossover and Mutation probabilities, Elite
	// fraction, and Patience (stop after this many generations without a
	// better fitness). Defaults: 64, 300, 0.8, 0.2, 0.1, 40.
	Population, Generations int
	Crossover, Mutation     float64
	Elite                   float64
	Patience                int
	// CutNs is the cost of one cut: the dispatch gap between two blocks
	// (default 20 us); the splitting overhead of a solution is cuts x
	// CutNs / T.
	CutNs float64
	// Seed makes runs reproducible.
	Seed int64
}

func (c *GAConfig) defaults() {
	if c.Population <= 0 {
		c.Population = 64
	}
	if c.Generations <= 0 {
		c.Generations = 300
	}
	if c.Crossover <= 0 {
		c.Crossover = 0.8
	}
	if c.Mutation <= 0 {
		c.Mutation = 0.2
	}
	if c.Elite <= 0 {
		c.Elite = 0.1
	}
	if c.Patience <= 0 {
		c.Patience = 40
	}
	if c.CutNs <= 0 {
		c.CutNs = 20e3
	}
}

// SplitResult is a model split into blocks.
type SplitResult struct {
	// Cuts are the kernel indices where blocks 2.. start.
	Cuts []int
	// BlockNs are the blocks' profiled times; StdNs their standard
	// deviation (SPLIT's jitter) and MeanNs their mean.
	BlockNs       []float64
	StdNs, MeanNs float64
	// Overhead is the splitting overhead (cuts x CutNs / T); Fitness is
	// SPLIT eq. 2: -(e^(std/T) - 1 + e^(overhead/m) - 1).
	Overhead, Fitness float64
	Generations       int
}

// blockTimes sums kernel times per block.
func blockTimes(t []float64, cuts []int) []float64 {
	out := make([]float64, 0, len(cuts)+1)
	prev := 0
	for _, c := range append(append([]int(nil), cuts...), len(t)) {
		var s float64
		for _, x := range t[prev:c] {
			s += x
		}
		out = append(out, s)
		prev = c
	}
	return out
}

func evalSplit(t []float64, total float64, cuts []int, cfg *GAConfig) SplitResult {
	bt := blockTimes(t, cuts)
	var mean, sd float64
	for _, b := range bt {
		mean += b
	}
	mean /= float64(len(bt))
	for _, b := range bt {
		sd += (b - mean) * (b - mean)
	}
	sd = math.Sqrt(sd / float64(len(bt)))
	m := float64(len(bt))
	over := float64(len(cuts)) * cfg.CutNs / total
	fit := -(math.Exp(sd/total) - 1 + math.Exp(over/m) - 1)
	return SplitResult{Cuts: cuts, BlockNs: bt, StdNs: sd, MeanNs: mean, Overhead: over, Fitness: fit}
}

// SplitModel cuts a model into blocks evenly sized blocks of kernels with
// SPLIT's genetic algorithm (§3.3): individuals are sets of blocks-1 cut
// points, fitness is eq. 2 over the profiled kernel times; tournament
// selection, crossover of the parents' cut sets, mutation moving one cut,
// elitism, and an early stop when the best fitness stalls. Cut points are
// searched among kernels away from the model's first kernels first, as
// SPLIT's observations suggest (their cost is higher there), by seeding
// the population with time-balanced cuts.
func SplitModel(p *kprof.Model, blocks int, cfg GAConfig) SplitResult {
	cfg.defaults()
	t := make([]float64, len(p.Kernels))
	var total float64
	for i := range p.Kernels {
		t[i] = p.Kernels[i].Versions[0].KernNs
		total += t[i]
	}
	n := len(t)
	if blocks > n {
		blocks = n
	}
	if blocks <= 1 || total <= 0 {
		return evalSplit(t, math.Max(total, 1), nil, &cfg)
	}
	k := blocks - 1
	rng := rand.New(rand.NewSource(cfg.Seed + 1))
	norm := func(c []int) []int {
		sort.Ints(c)
		out := c[:0]
		for i, x := range c {
			if x >= 1 && x < n && (i == 0 || x != c[i-1]) {
				out = append(out, x)
			}
		}
		// refill to k distinct cuts
		for len(out) < k {
			x := 1 + rng.Intn(n-1)
			dup := false
			for _, y := range out {
				dup = dup || y == x
			}
			if !dup {
				out = append(out, x)
				sort.Ints(out)
			}
		}
		return out
	}
	// seeds: time-balanced cuts (every total/blocks of work)
	balanced := func() []int {
		var c []int
		acc, next := 0.0, total/float64(blocks)
		for i := 0; i < n && len(c) < k; i++ {
			acc += t[i]
			if acc >= next {
				c = append(c, i+1)
				next += total / float64(blocks)
			}
		}
		return norm(c)
	}
	type ind struct {
		c []int
		r SplitResult
	}
	pop := make([]ind, cfg.Population)
	for i := range pop {
		var c []int
		if i == 0 {
			c = balanced()
		} else {
			for j := 0; j < k; j++ {
				c = append(c, 1+rng.Intn(n-1))
			}
			c = norm(c)
		}
		pop[i] = ind{c, evalSplit(t, total, c, &cfg)}
	}
	byFit := func() {
		sort.SliceStable(pop, func(a, b int) bool { return pop[a].r.Fitness > pop[b].r.Fitness })
	}
	byFit()
	best := pop[0]
	stall, gen := 0, 0
	tour := func() ind {
		a, b := pop[rng.Intn(len(pop))], pop[rng.Intn(len(pop))]
		if a.r.Fitness >= b.r.Fitness {
			return a
		}
		return b
	}
	for gen = 1; gen <= cfg.Generations && stall < cfg.Patience; gen++ {
		elite := max(1, int(cfg.Elite*float64(len(pop))))
		next := make([]ind, 0, len(pop))
		next = append(next, pop[:elite]...)
		for len(next) < len(pop) {
			a, b := tour(), tour()
			var c []int
			if rng.Float64() < cfg.Crossover {
				u := append(append([]int(nil), a.c...), b.c...)
				rng.Shuffle(len(u), func(i, j int) { u[i], u[j] = u[j], u[i] })
				c = norm(append([]int(nil), u[:k]...))
			} else {
				c = append([]int(nil), a.c...)
			}
			if rng.Float64() < cfg.Mutation {
				i := rng.Intn(len(c))
				c[i] += rng.Intn(7) - 3
				c = norm(c)
			}
			next = append(next, ind{c, evalSplit(t, total, c, &cfg)})
		}
		pop = next
		byFit()
		if pop[0].r.Fitness > best.r.Fitness+1e-12 {
			best, stall = pop[0], 0
		} else {
			stall++
		}
	}
	r := best.r
	r.Cuts = append([]int(nil), best.c...)
	r.Generations = gen - 1
	return r
}

// WaitNs is SPLIT eq. 1, the mean time a job arriving at a random moment
// waits for the running block, plus the cuts' cost: 1/2 sum(t^2)/sum(t) +
// cuts x cutNs.
func (r *SplitResult) WaitNs(cutNs float64) float64 {
	var s, s2 float64
	for _, b := range r.BlockNs {
		s += b
		s2 += b * b
	}
	if s == 0 {
		return 0
	}
	return s2/(2*s) + float64(len(r.Cuts))*cutNs
}

// SplitBest picks the number of blocks (2..maxBlocks): for each, the
// genetic algorithm finds the evenest cuts (eq. 2), and the count with the
// lowest expected wait (eq. 1 plus the cuts' cost, WaitNs) wins.
func SplitBest(p *kprof.Model, maxBlocks int, cfg GAConfig) SplitResult {
	cfg.defaults()
	best := SplitModel(p, 1, cfg)
	bw := best.WaitNs(cfg.CutNs)
	for b := 2; b <= maxBlocks; b++ {
		r := SplitModel(p, b, cfg)
		if w := r.WaitNs(cfg.CutNs); w < bw {
			best, bw = r, w
		}
	}
	return best
}
