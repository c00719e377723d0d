package cuda

import (
	"fmt"
	"math"
	"strings"
)

// fmt2 renders a value with two decimals, "–" when there is none.
func fmt2(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// Markdown renders the report as the CPU DISB's tables (tools/disb): the
// models, then one row per workload and policy, then restore overhead.
func (r *DISBReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### DISB on the CUDA backend (%d SMs, window %d, %s per run after %s of warm-up)\n\n", r.SMs, r.Window, r.Duration, r.Warmup)
	if r.Device != "" {
		fmt.Fprintf(&b, "Device: %s.\n\n", r.Device)
	}
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`.\n\n", r.Command)
	}
	b.WriteString("Models (REEF's roles played by zoo models; one job = batch 1: input copy, kernels, output copy; alone = job time and max = jobs/s of the model alone, closed loop, one job at a time):\n\n")
	b.WriteString("| role | model | size | kernels | weights (MiB) | alone p50 (ms) | alone p99 (ms) | max (jobs/s) |\n|---|---|---|--:|--:|--:|--:|--:|\n")
	for _, m := range r.Models {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f | %.3f | %.3f | %.1f |\n", m.Role, m.Name, m.Size, m.Kernels, m.WeightMiB, m.AloneMs, m.AloneP99Ms, m.MaxPerSec)
	}
	fmt.Fprintf(&b, "\nPer workload and policy: RT latency (scheduled arrival to output copied back) of the RT jobs finished inside the window and its ratio to rt-only; thr is REEF's normalized throughput (sum over clients of jobs/s over the model's max) and thr / seq its ratio to seq; preemption latency is host time from the first `Preempt` call of an RT arrival until every preempted BE instance's run has drained (its `Run` returned; the RT job's first kernel start is not observed from the host); re-exec is the share of BE kernel launches beyond their plans (restores re-running idempotent groups and kernels that exited in their prologue), relaunch / preemption the same count per preemption; violations: jobs (RT and BE) whose latency exceeded alpha = %g x their model's job time alone; jitter = standard deviation of RT latency; wrong = jobs whose output differed from the unpreempted output (must be 0).\n\n", r.Alpha)
	b.WriteString("| wl | policy | RT mean (ms) | RT p99 (ms) | mean / RT-only | p99 / RT-only | RT done / arrived | thr | thr / seq | jobs/s | BE preemptions | preempt p50 / p99 (µs) | re-exec | relaunch / preemption | viol. | jitter (ms) | wrong |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, x := range r.Rows {
		pre := "–"
		if x.PreemptN > 0 {
			pre = fmt.Sprintf("%.1f / %.1f (n %d)", x.PreemptP50Us, x.PreemptP99Us, x.PreemptN)
		}
		re := "–"
		if x.ReexecShare > 0 {
			re = fmt.Sprintf("%.2f%%", 100*x.ReexecShare)
		}
		mean, p99 := fmt2(x.RTMeanMs), fmt2(x.RTP99Ms)
		if x.RTDone == 0 && x.RTArrived > 0 {
			mean, p99 = "starved", "starved"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d / %d | %.3f | %s | %.1f | %d | %s | %s | %s | %.1f%% | %s | %d |\n",
			x.Workload, x.Policy, mean, p99, fmt2(x.RTMeanNorm), fmt2(x.RTP99Norm), x.RTDone, x.RTArrived,
			x.Thr, fmt2(x.ThrNorm), x.JobsPerSec, x.Preemptions, pre, re, fmt2(x.RelaunchPerPreempt),
			100*x.ViolRate, fmt2(x.RTJitterMs), x.Wrong)
	}
	var pad []*DISBRow
	for _, x := range r.Rows {
		if x.Policy == PolicyReefPad {
			pad = append(pad, x)
		}
	}
	if len(pad) > 0 {
		b.WriteString("\nDynamic kernel padding (reef-pad; REEF §5): of the RT kernels of RT jobs finished inside the window, those launched through sg_pad with BE blocks, the BE kernels they carried (in a version other than the default: the 32 x 32 tile of GEMM and CONV) and the BE blocks they ran; gain = thr / reef's thr. Kernel profiles:")
		for _, m := range r.Models {
			if m.PadProfile != "" {
				fmt.Fprintf(&b, " %s %s;", m.Role, m.PadProfile)
			}
		}
		b.WriteString("\n\n| wl | RT kernels | padded | BE kernels carried | of them not version 0 | BE blocks | thr | gain vs reef |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, x := range pad {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %.3f | %s |\n", x.Workload, x.PadRTKernels, x.PadLaunches,
				x.PadBEKernels, x.PadBEVersioned, x.PadBEBlocks, x.Thr, fmt2(x.PadGain))
		}
	}
	if len(r.Restore) > 0 {
		b.WriteString("\nRestore overhead (REEF §6.4): each model's jobs alone, every other job preempted once at a random moment of its run and restored at once from the idempotent group of its last started kernel; median job time of preempted vs unpreempted jobs; drain = host time from the `Preempt` call until the preempted `Run` returned; relaunch = kernels launched beyond the plan per preempted job:\n\n")
		b.WriteString("| model | jobs | preempted | alone (ms) | preempted once (ms) | overhead (ms) | overhead | drain p50 (µs) | relaunch |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, x := range r.Restore {
			fmt.Fprintf(&b, "| %s | %d | %d | %.3f | %.3f | %+.3f | %+.1f%% | %.1f | %.1f |\n", x.Role, x.Jobs, x.Preempted,
				x.BaseMs, x.PreemptedMs, x.OverheadMs, x.OverheadPct, x.DrainP50Us, x.RelaunchPerPreempt)
		}
	}
	return b.String()
}
