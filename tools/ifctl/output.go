package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sluice/orchestrator"
)

// printStatus prints the appliance line and the IF table.
func printStatus(w io.Writer, r orchestrator.StatusReply) {
	state := "serving"
	if r.Draining {
		state = "draining"
	}
	version := ""
	if r.Version != "" {
		version = " " + r.Version
	}
	up := time.Duration(r.UptimeS * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(w, "sluice%s: %s, up %s, %d IFs\n", version, state, up, len(r.IFs))
	if len(r.IFs) > 0 {
		fmt.Fprintln(w)
		printIFs(w, r.IFs)
	}
	first := true
	for _, s := range r.IFs {
		if s.State == "failed" {
			if first {
				fmt.Fprintln(w)
				first = false
			}
			fmt.Fprintf(w, "%s failed: %s\n", s.Name, s.Error)
		}
	}
}

// printPlan prints the placement line and the plan's IFs: units, share,
// SLO, the rate the last round saw, the batch and latency the latency
// model predicts ("-" where it has none) and the observed p99; with the
// global stage's unit groups, UNITS reads units@group; the placement line
// names the last round's planner.
func printPlan(w io.Writer, r orchestrator.PlanReply) {
	fmt.Fprintf(w, "placement %s on %d cpu units", r.Placement, r.Units)
	if r.Devices > 1 {
		fmt.Fprintf(w, " in %d groups", r.Devices)
	}
	if r.IntervalMS > 0 {
		fmt.Fprintf(w, ", every %d ms", r.IntervalMS)
		if r.RoundS > 0 {
			fmt.Fprintf(w, ", last round %.1f s ago", r.RoundS)
		}
		if r.Planner != "" {
			fmt.Fprintf(w, " (%s)", r.Planner)
		}
	}
	fmt.Fprintf(w, ", %d IFs\n", len(r.IFs))
	if len(r.IFs) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	units := func(p orchestrator.PlanIF) string { return strconv.Itoa(p.Units) }
	if r.Devices > 1 { // the global stage's groups: UNITS reads units@group
		units = func(p orchestrator.PlanIF) string {
			if p.Device == nil || *p.Device < 0 {
				return strconv.Itoa(p.Units) + "@-"
			}
			return fmt.Sprintf("%d@%d", p.Units, *p.Device)
		}
	}
	fmt.Fprintln(tw, "NAME\tPROFILE\tUNITS\tSHARE\tSLO\tRATE\tBATCH\tPREDICTED\tOBSERVED P99")
	dash := func(v float64, f string) string {
		if v <= 0 {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}
	for _, p := range r.IFs {
		profile, batch := p.Profile, "-"
		if profile == "" {
			profile = "-"
		}
		if p.Batch > 0 {
			batch = strconv.Itoa(p.Batch)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f%%\t%s\t%s\t%s\t%s\t%s\n", p.Name, profile, units(p), p.Share*100,
			dash(p.SLOMS, "%gms"), dash(p.RateRPS, "%.1f/s"), batch, dash(p.PredictedMS, "%.2fms"), dash(p.ObservedP99MS, "%.2fms"))
	}
	tw.Flush()
}

// printIFs prints IFs as an aligned table. SHARE is the share of the
// device's units the IF runs on ("-" under a scheduling policy, whose
// scheduler hands out the units; the backend column then reads
// backend/policy); STATE adds a stateful stream's flows and a pipeline
// stage's hand-overs to its next stage; BOTTLENECK says whether input
// gathering (cpu) or the model (compute) takes longer.
func printIFs(w io.Writer, ifs []orchestrator.IFStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tMODEL\tBACKEND\tCLASS\tSLO\tBATCH\tQUEUE\tSHARE\tSTATE\tSERVED\tFAILED\tOVERLOADED\tP99\tBOTTLENECK")
	for _, s := range ifs {
		batch := strconv.Itoa(s.MaxBatch)
		if s.MinBatch > 0 {
			batch = fmt.Sprintf("%d-%d", s.MinBatch, s.MaxBatch)
		}
		share := fmt.Sprintf("%.0f%%", s.Share*100)
		backend := s.Backend
		if s.Policy != "" && s.Policy != "none" {
			backend += "/" + s.Policy
			share = "-"
		}
		slo, p99, bn := "-", "-", "-"
		if s.SLOMS > 0 {
			slo = fmtMS(s.SLOMS)
		}
		if s.P99MS > 0 {
			p99 = fmtMS(s.P99MS)
		}
		if s.Bottleneck != "" {
			bn = s.Bottleneck
		}
		state := s.State
		if s.Flows != nil { // a stateful stream
			state += fmt.Sprintf(" (%d flows)", *s.Flows)
		}
		if s.Next != "" { // a pipeline stage: its requests answered further on
			state += fmt.Sprintf(" (%d to %s)", s.Forwarded, s.Next)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n",
			s.Name, s.ModelID, s.Model, backend, s.Class, slo, batch, s.Queued, s.QueueLen,
			share, state, s.Served, s.Failed, s.Overloaded, p99, bn)
	}
	tw.Flush()
}

// printReload prints what a profile reload did.
func printReload(w io.Writer, r orchestrator.ReloadResult) {
	fmt.Fprintf(w, "reloaded %s: %d added, %d removed, %d changed, %d unchanged",
		r.Path, len(r.Added), len(r.Removed), len(r.Changed), len(r.Unchanged))
	if len(r.Failed) > 0 {
		fmt.Fprintf(w, ", %d failed", len(r.Failed))
	}
	fmt.Fprintln(w)
	for _, l := range []struct {
		name  string
		names []string
	}{{"added", r.Added}, {"removed", r.Removed}, {"changed", r.Changed}} {
		if len(l.names) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", l.name, strings.Join(l.names, ", "))
		}
	}
	for _, f := range r.Failed {
		fmt.Fprintf(w, "  failed: %s: %s\n", f.Name, f.Error)
	}
	if len(r.RestartNeeded) > 0 {
		fmt.Fprintf(w, "  not applied, they take effect at the next start: %s\n", strings.Join(r.RestartNeeded, ", "))
	}
}

// failedNames lists the names of failed IFs.
func failedNames(fs []orchestrator.IFFailure) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// fmtMS renders milliseconds as a short duration ("25ms", "1.5ms", "42µs").
func fmtMS(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case d >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	case d >= time.Microsecond:
		d = d.Round(time.Microsecond)
	default:
		d = d.Round(10 * time.Nanosecond) // sub-microsecond swap gaps
	}
	return d.String()
}

// resizeLine says what a resize did: the share asked for and the share
// given, which differ when other IFs leave capacity unasked (max-min
// fairness gives it out rather than leave it idle).
func resizeLine(st orchestrator.IFStatus) string {
	given := fmt.Sprintf("%.2f", st.Share)
	if st.Units > 0 {
		given += fmt.Sprintf(" (%d units)", st.Units)
	}
	if st.Demand > 0 && math.Abs(st.Share-st.Demand) > 1e-9 {
		return fmt.Sprintf("resized %s: asked for share %.2f, runs on %s: shares are divided max-min fairly, and capacity no IF asks for goes to the IFs there are", st.Name, st.Demand, given)
	}
	return fmt.Sprintf("resized %s: share %s", st.Name, given)
}
