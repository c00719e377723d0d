package main

import (
	"fmt"
	"math"
	"strings"
)

// errPct is predicted against observed, in percent.
func errPct(pred, obs float64) float64 { return 100 * (pred - obs) / obs }

// summary is the mean and largest absolute error of a set, in percent.
func summary(errs []float64) (mean, worst float64) {
	for _, e := range errs {
		mean += math.Abs(e)
		worst = max(worst, math.Abs(e))
	}
	if len(errs) > 0 {
		mean /= float64(len(errs))
	}
	return mean, worst
}

func (r *report) markdown(o options) string {
	var b strings.Builder
	if o.device == "cpu" {
		fmt.Fprintf(&b, "### InSS latency model on the cpu device (%s, %d units)\n\n", r.deviceName, r.capacity)
		fmt.Fprintf(&b, "Command: `inssprof -models %s -size %d -batches %s -holdout %s -units %d -reps %d`. "+
			"Shares are unit counts (the instance's unit mask); times are medians of %d batches.\n\n",
			strings.Join(o.models, ","), o.size, joinInts(o.batches), joinInts(o.holdout), o.units, o.reps, o.reps)
	} else {
		fmt.Fprintf(&b, "### InSS latency model on the cuda device (%s)\n\n", r.deviceName)
		fmt.Fprintf(&b, "Command: `inssprof -device %s -models %s -size %d -batches %s -holdout %s -reps %d -probe %d`. "+
			"Shares are SM counts (a green context each, placed apart); times are medians of %d batches (copies to and from the GPU included).\n\n",
			o.device, strings.Join(o.models, ","), o.size, joinInts(o.batches), joinInts(o.holdout), o.reps, o.probeFloats, o.reps)
	}

	b.WriteString("**Computing time alone, held-out batch sizes** (InSS Table 3): measured, and predicted by LWR over the profiled grid.\n\n")
	fmt.Fprintf(&b, "| model | share (%s) | batch | observed (ms) | predicted (ms) | error |\n|---|--:|--:|--:|--:|--:|\n", r.shareUnit)
	var he []float64
	for _, h := range r.held {
		e := errPct(h.predictedNs, h.observedNs)
		he = append(he, e)
		fmt.Fprintf(&b, "| %s | %g | %d | %.3f | %.3f | %+.1f%% |\n", h.model, h.share, h.batch, h.observedNs/1e6, h.predictedNs/1e6, e)
	}
	mean, worst := summary(he)
	fmt.Fprintf(&b, "\nMean absolute error %.1f%%, largest %.1f%% (%d configurations).\n\n", mean, worst, len(he))

	fmt.Fprintf(&b, "**Co-located** (InSS Table 4): each model at batch %d %s. "+
		"Predicted with the interference term (sensitivity fitted from the model's other pairs, leave one out) and without it (the time alone).\n\n",
		o.batches[len(o.batches)/2], r.coLocation)
	b.WriteString("| model | beside | alone (ms) | observed (ms) | slowdown | predicted (ms) | error | error without the term |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
	var pe, pe0 []float64
	for _, p := range r.pairs {
		e, e0 := errPct(p.predictedNs, p.besideNs), errPct(p.aloneNs, p.besideNs)
		pe, pe0 = append(pe, e), append(pe0, e0)
		fmt.Fprintf(&b, "| %s | %s | %.3f | %.3f | %.3f | %.3f | %+.1f%% | %+.1f%% |\n", p.model, p.other,
			p.aloneNs/1e6, p.besideNs/1e6, p.besideNs/p.aloneNs, p.predictedNs/1e6, e, e0)
	}
	mean, worst = summary(pe)
	mean0, worst0 := summary(pe0)
	fmt.Fprintf(&b, "\nWith the interference term: mean absolute error %.1f%%, largest %.1f%%; without: %.1f%% and %.1f%% (%d pairs).\n\n",
		mean, worst, mean0, worst0, len(pe))

	fmt.Fprintf(&b, "**Profiles**: pressure is the slowdown of a memory-streaming probe (%.2f ms a pass alone) %s; sensitivity is fitted from all the model's pairs.\n\n", r.probeNs/1e6, r.probeWhere)
	b.WriteString("| model | pressure | sensitivity | upload (ns per item + ns) | result (ns per item + ns) | grid points |\n|---|--:|--:|--:|--:|--:|\n")
	for _, p := range r.profiles {
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.0f + %.0f | %.0f + %.0f | %d |\n", p.Model, p.Pressure, p.Sensitivity,
			p.Upload.A, p.Upload.B, p.Result.A, p.Result.B, len(p.Points))
	}
	return b.String()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for k, n := range v {
		s[k] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}
