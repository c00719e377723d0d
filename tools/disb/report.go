package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// f2 formats v with two decimals ("–" for 0 or NaN).
func f2(v float64) string {
	if v == 0 || math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// spread formats the range of per-round ratios (" (min-max)"; "" for
// fewer than two rounds).
func spread(v []float64) string {
	if len(v) < 2 {
		return ""
	}
	lo, hi := v[0], v[0]
	for _, x := range v[1:] {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf(" (%.2f-%.2f)", lo, hi)
}

// markdown renders the report.
func markdown(r *report) string {
	var b strings.Builder
	switch r.Device {
	case "", "cpu":
		fmt.Fprintf(&b, "### DISB on the CPU backend (%d units, window %d, %s per run)\n\n", r.Units, r.Window, r.Duration)
	default:
		fmt.Fprintf(&b, "### DISB on the %s device (%d SMs, window %d, %s per run)\n\n", r.Device, r.Units, r.Window, r.Duration)
	}
	bw := "not measured (a GPU's)"
	if r.BandwidthM > 0 {
		bw = fmt.Sprintf("measured %d MB/s", r.BandwidthM)
	}
	fmt.Fprintf(&b, "Command: `%s` (host memory bandwidth %s; 1-minute load average at the rounds' starts: %s — the machine is shared).\n\n", r.Command, bw, loads(r.Load))
	sized := "sized for 2 cores"
	if r.Full {
		sized = "at their standard sizes"
	}
	fmt.Fprintf(&b, "Models (REEF's roles, zoo stand-ins %s; standalone time and max throughput measured alone, closed loop; narrow = kernels with fewer blocks than units, what padding can fill):\n\n", sized)
	b.WriteString("| role | zoo model | size | kernels | alone (ms) | max (jobs/s) | narrow kernels (ms) | versions kept / total |\n|---|---|---|--:|--:|--:|--:|--:|\n")
	for _, m := range r.Models {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.2f | %.1f | %d (%.2f) | %d / %d |\n", m.Role, m.Zoo, m.Size, m.Kernels, m.StandaloneMs, m.MaxPerSec, m.Narrow, m.NarrowMs, m.Kept, m.Versions)
	}
	b.WriteString("\nPer workload and policy: RT end-to-end latency (arrival to finish) of the requests done inside the window (requests still waiting at its end are not in the figures: compare done with arrived) and its ratio to RT-only; throughput is REEF's normalized throughput (sum over clients of jobs/s over the model's max jobs/s) and its ratio to seq (ratios: over the whole window, then in parentheses their range round by round, each round's ratio against the baseline of the same round; \"baseline disturbed\" where a policy with BE work was faster than RT-only in a round, which only a slowed baseline explains); preemption latency is from the preempt call until no block of a preempted stream runs any more and the RT job's first kernel runs; re-exec is the profiled time of kernels restores ran again, as a share of BE job time; pad = blocks run as padding (gain: reef over reef-nopad throughput); violations: jobs (RT and BE) whose latency exceeded alpha = ")
	fmt.Fprintf(&b, "%g x their model's standalone time; jitter = standard deviation of RT latency; sel = padding's kernel-selection time (mean ns / share of selections over 2 µs, which includes a unit descheduled while it selected).\n\n", r.Alpha)
	b.WriteString("| wl | policy | RT mean (ms) | RT p99 (ms) | mean / RT-only | p99 / RT-only | RT done / arrived | thr | thr / seq | jobs/s | preempt p50 / p99 (µs) | re-exec | pad blocks (gain) | viol. | jitter (ms) | sel (ns) |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, x := range r.Rows {
		pre := "–"
		if x.PreemptN > 0 {
			pre = fmt.Sprintf("%.1f / %.1f (n %d)", x.PreemptP50Us, x.PreemptP99Us, x.PreemptN)
		}
		re := "–"
		if x.ReexecShare > 0 {
			re = fmt.Sprintf("%.2f%%", x.ReexecShare*100)
		}
		pad := "–"
		if x.PadBlocks > 0 || x.Policy == "reef" {
			pad = fmt.Sprint(x.PadBlocks)
			if x.Policy == "reef" {
				pad += fmt.Sprintf(" (%+.1f%%)", x.PadGain*100)
			}
		}
		sel := "–"
		if x.SelCalls > 0 {
			sel = fmt.Sprintf("%.0f / %.3f%%", x.SelMeanNs, x.SelOver2us*100)
		}
		mean, p99 := f2(x.RTMeanMs), f2(x.RTP99Ms)
		if x.RTCount == 0 && x.RTArrived > 0 {
			mean, p99 = "starved", "starved"
		}
		meanNorm, p99Norm := f2(x.RTMeanNorm)+spread(x.RTMeanNormRounds), f2(x.RTP99Norm)
		if x.Disturbed {
			meanNorm, p99Norm = "baseline disturbed", "baseline disturbed"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d / %d | %.3f | %s | %.1f | %s | %s | %s | %.1f%% | %s | %s |\n",
			x.Workload, x.Policy, mean, p99, meanNorm, p99Norm, x.RTCount, x.RTArrived,
			x.Thr, f2(x.ThrNorm)+spread(x.ThrNormRounds), x.JobsPerSec, pre, re, pad, x.ViolRate*100, f2(x.RTJitterMs), sel)
	}
	if len(r.Restore) > 0 {
		b.WriteString("\nRestore overhead (REEF §6.4): each model's BE jobs alone under reef, in turn undisturbed, woken (the probing thread wakes at a random moment inside the job and does nothing: the control for what a wake-up alone costs when the units fill the cores) and preempted once at a random moment (`PreemptRestore`) and restored as soon as its stream has drained; median job time (start to finish). Overhead is preempted over undisturbed; over woken, the wake's own cost is left out. The gap is the time no unit worked for the job (preemption, lazy eviction, the completion handler and the restore); without it, the overhead is the work lost and re-run and the steering threads' CPU time:\n\n")
		b.WriteString("| model | jobs | alone (ms) | woken (ms) | preempted once (ms) | overhead | over woken | gap (µs) | overhead without the gap | profiled re-run kernels per job (ms) | preempt p50 (µs) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, x := range r.Restore {
			woken, over := "–", "–"
			if x.WokenMs > 0 {
				woken, over = fmt.Sprintf("%.2f", x.WokenMs), fmt.Sprintf("%+.1f%%", x.OverWokenPct)
			}
			fmt.Fprintf(&b, "| %s | %d | %.2f | %s | %.2f | %+.1f%% | %s | %.0f | %+.1f%% | %.3f | %.1f |\n", x.Role, x.Jobs, x.BaseMs, woken, x.PreemptedMs, x.OverheadPct, over, x.GapUs, x.WorkPct, x.ReexecMs, x.PreemptUsP50)
		}
	}
	if len(r.Splits) > 0 {
		b.WriteString("\nSPLIT's cuts (genetic algorithm, fitness eq. 2, block count by eq. 1): blocks, cut kernels, mean block time, jitter (standard deviation of block times):\n\n")
		b.WriteString("| model | blocks | cuts | mean block (ms) | jitter (ms) | fitness |\n|---|--:|---|--:|--:|--:|\n")
		for _, x := range r.Splits {
			fmt.Fprintf(&b, "| %s | %d | %v | %.2f | %.3f | %.4f |\n", x.Role, x.Blocks, x.Cuts, x.MeanMs, x.StdMs, x.Fitnes)
		}
	}
	return b.String()
}

var polColors = map[string]string{
	"rt-only": "#999999", "reef": "#d62728", "reef-nopad": "#ff9896", "seq": "#1f77b4",
	"conc": "#2ca02c", "srpt": "#9467bd", "split": "#8c564b",
}

// plot draws two grouped bar charts: RT latency (mean, p99) normalized to
// RT-only, and throughput normalized to seq, per workload.
func plot(r *report, policies []string) string {
	var wls []string
	seen := map[string]bool{}
	for _, x := range r.Rows {
		if !seen[x.Workload] {
			seen[x.Workload] = true
			wls = append(wls, x.Workload)
		}
	}
	get := func(w, p string) *row {
		for _, x := range r.Rows {
			if x.Workload == w && x.Policy == p {
				return x
			}
		}
		return nil
	}
	const W, H, top, left, ph, gap = 900, 760, 40, 60, 280, 70
	bw := float64(W-left-20) / float64(len(wls)) / float64(len(policies)+1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	// panel draws grouped bars; with logScale the axis is logarithmic
	// from lo to the largest value (latency ratios span 0.8x to 200x)
	panel := func(y0 int, title string, val func(*row) (float64, float64), ref float64, logScale bool) {
		maxv := ref * 1.2
		for _, w := range wls {
			for _, p := range policies {
				if x := get(w, p); x != nil {
					a, c := val(x)
					maxv = math.Max(maxv, math.Max(a, c))
				}
			}
		}
		lo := 0.0
		var ticks []float64
		if logScale {
			lo = 0.5
			maxv = math.Max(maxv*1.1, 2)
			for _, t := range []float64{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
				if t <= maxv {
					ticks = append(ticks, t)
				}
			}
		} else {
			maxv = math.Min(maxv, 10*ref)
			ticks = []float64{0, ref / 2, ref, maxv}
		}
		yOf := func(v float64) float64 {
			var f float64
			if logScale {
				v = math.Max(v, lo)
				f = math.Log(v/lo) / math.Log(maxv/lo)
			} else {
				f = math.Min(v, maxv) / maxv
			}
			return float64(y0+ph) - f*float64(ph)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", left, y0-12, html.EscapeString(title))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, y0+ph, W-20, y0+ph)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, y0, left, y0+ph)
		for _, t := range ticks {
			y := yOf(t)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-4, y+4, math.Round(t*100)/100)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, W-20, y)
		}
		ry := yOf(ref)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", left, ry, W-20, ry)
		for wi, w := range wls {
			gx := float64(left) + float64(wi)*bw*float64(len(policies)+1) + bw/2
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-weight="bold">DISB %s</text>`+"\n", gx+bw*float64(len(policies))/2, y0+ph+16, w)
			for pi, p := range policies {
				x := get(w, p)
				if x == nil {
					continue
				}
				a, c := val(x)
				bx := gx + float64(pi)*bw
				for k, v := range []float64{a, c} {
					if v <= 0 {
						continue
					}
					top := yOf(v)
					op := "1"
					wd := bw - 2
					xx := bx
					if c > 0 {
						wd = bw/2 - 1
						xx = bx + float64(k)*bw/2
						if k == 1 {
							op = "0.55"
						}
					}
					fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%s"><title>%s %s %.3f</title></rect>`+"\n",
						xx, top, wd, float64(y0+ph)-top, polColors[p], op, w, p, v)
				}
			}
		}
	}
	panel(top, "RT latency / RT-only, log scale (solid: mean, light: p99; missing: starved)", func(x *row) (float64, float64) { return x.RTMeanNorm, x.RTP99Norm }, 1, true)
	panel(top+ph+gap, "Throughput / seq (REEF's normalized throughput)", func(x *row) (float64, float64) { return x.ThrNorm, 0 }, 1, false)
	ly := top + 2*ph + gap + 40
	for i, p := range policies {
		x := left + i*120
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, ly, polColors[p], x+18, ly+12, p)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func loads(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	lo, hi, sum := v[0], v[0], 0.0
	for _, x := range v {
		lo, hi, sum = math.Min(lo, x), math.Max(hi, x), sum+x
	}
	return fmt.Sprintf("%.2f-%.2f, mean %.2f", lo, hi, sum/float64(len(v)))
}
