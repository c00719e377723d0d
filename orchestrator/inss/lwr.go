package inss

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Point is one profiled configuration: a batch size, a share of the
// device (units on the cpu, SMs on a GPU) and the batch's computing time
// alone in ns.
type Point struct {
	Batch int     `json:"batch"`
	Share float64 `json:"share"`
	RunNs float64 `json:"run_ns"`
}

// LWR is locally weighted linear regression over (batch, share): a
// prediction at q fits a plane to the profiled points by weighted least
// squares, each point weighted by the tricube of its distance to q over
// the distance of the Span-th fraction of nearest points. Coordinates
// are scaled by their ranges first, so batch and share weigh alike; the
// share enters as its inverse, since a batch's time falls about as one
// over the resources it has. As in Cleveland's robust version, two
// robustness passes then weigh each point down by the bisquare of its
// residual (a measurement disturbed by the machine is an outlier, not a
// trend); the residuals are leave-one-out (the point's time against the
// fit of the others) and relative, which tells an outlier apart on the
// small grids profiles have, whose times span orders of magnitude.
type LWR struct {
	// Span is the fraction of the points that fall inside the
	// neighbourhood (Cleveland's f; default 0.8, at least 3 points).
	Span float64
	pts  []Point
	// ranges of batch and share, for scaling (1 where all are equal)
	rb, rs float64
	// rob are the points' robustness weights (1: none yet)
	rob []float64
}

// robustPasses is how many times the robustness weights are refitted
// (Cleveland uses two), and robustScale the multiple of the median
// residual at which a point's weight reaches 0 (Cleveland: 6; wider here,
// because a leave-one-out residual at the grid's corner, where the time
// curves most, is large without being wrong).
const (
	robustPasses = 2
	robustScale  = 12
)

// NewLWR returns a regression over pts, which must hold at least one
// point, each with a positive batch, share and time.
func NewLWR(pts []Point, span float64) (*LWR, error) {
	if len(pts) == 0 {
		return nil, errors.New("inss: LWR over no points")
	}
	if span <= 0 {
		span = 0.8
	}
	l := &LWR{Span: span, pts: slices.Clone(pts)}
	bmin, bmax := math.Inf(1), math.Inf(-1)
	smin, smax := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		if p.Batch <= 0 || !(p.Share > 0) || !(p.RunNs > 0) {
			return nil, fmt.Errorf("inss: LWR point %+v: batch, share and time must be positive", p)
		}
		b, is := float64(p.Batch), 1/p.Share
		bmin, bmax = min(bmin, b), max(bmax, b)
		smin, smax = min(smin, is), max(smax, is)
	}
	l.rb, l.rs = bmax-bmin, smax-smin
	if l.rb == 0 {
		l.rb = 1
	}
	if l.rs == 0 {
		l.rs = 1
	}
	l.rob = make([]float64, len(pts))
	for k := range l.rob {
		l.rob[k] = 1
	}
	if len(pts) < 5 {
		return l, nil // too few points to tell an outlier
	}
	res := make([]float64, len(pts))
	for pass := 0; pass < robustPasses; pass++ {
		for k, p := range l.pts {
			f := l.predict(p.Batch, p.Share, k)
			res[k] = math.Abs(p.RunNs-f) / f
		}
		sorted := slices.Clone(res)
		slices.Sort(sorted)
		m := robustScale * sorted[len(sorted)/2]
		if m == 0 {
			break // a perfect fit
		}
		for k := range l.rob {
			u := res[k] / m
			l.rob[k] = 0
			if u < 1 {
				l.rob[k] = (1 - u*u) * (1 - u*u)
			}
		}
	}
	return l, nil
}

// Predict is the regression's computing time (ns) for batch b at share
// s.
func (l *LWR) Predict(b int, s float64) float64 { return l.predict(b, s, -1) }

// predict is Predict without point skip (-1: none).
func (l *LWR) predict(b int, s float64, skip int) float64 {
	type nd struct {
		p   Point
		d   float64
		rob float64
	}
	ds := make([]nd, 0, len(l.pts))
	for k, p := range l.pts {
		if k == skip {
			continue
		}
		db := (float64(p.Batch) - float64(b)) / l.rb
		dsh := (1/p.Share - 1/s) / l.rs
		ds = append(ds, nd{p, math.Hypot(db, dsh), l.rob[k]})
	}
	slices.SortFunc(ds, func(a, b nd) int { return cmpF(a.d, b.d) })
	q := max(int(math.Ceil(l.Span*float64(len(ds)))), min(3, len(ds)))
	h := ds[q-1].d * 1.0001
	if h == 0 {
		return ds[0].p.RunNs // every neighbour sits at q
	}
	// weighted least squares on (1, batch, share): normal equations,
	// with a small ridge on the slopes so that a neighbourhood with one
	// batch size or one share still has a solution (its slope then 0)
	var a [3][3]float64
	var y [3]float64
	for _, n := range ds[:q] {
		u := n.d / h
		w := 1 - u*u*u
		w = w * w * w * n.rob
		if w <= 0 {
			continue
		}
		x := [3]float64{1, (float64(n.p.Batch) - float64(b)) / l.rb, (1/n.p.Share - 1/s) / l.rs}
		for i := 0; i < 3; i++ {
			for j := 0; j < 3; j++ {
				a[i][j] += w * x[i] * x[j]
			}
			y[i] += w * x[i] * n.p.RunNs
		}
	}
	a[1][1] += 1e-9 * a[0][0]
	a[2][2] += 1e-9 * a[0][0]
	beta, ok := solve3(a, y)
	if !ok || !(beta[0] > 0) {
		return ds[0].p.RunNs
	}
	// centred on q: the intercept is the prediction
	return beta[0]
}

// solve3 solves a·x = y by Gaussian elimination with partial pivoting.
func solve3(a [3][3]float64, y [3]float64) ([3]float64, bool) {
	for c := 0; c < 3; c++ {
		p := c
		for r := c + 1; r < 3; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if math.Abs(a[p][c]) < 1e-300 {
			return y, false
		}
		a[c], a[p] = a[p], a[c]
		y[c], y[p] = y[p], y[c]
		for r := c + 1; r < 3; r++ {
			f := a[r][c] / a[c][c]
			for k := c; k < 3; k++ {
				a[r][k] -= f * a[c][k]
			}
			y[r] -= f * y[c]
		}
	}
	var x [3]float64
	for c := 2; c >= 0; c-- {
		s := y[c]
		for k := c + 1; k < 3; k++ {
			s -= a[c][k] * x[k]
		}
		x[c] = s / a[c][c]
	}
	return x, true
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
