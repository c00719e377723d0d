package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strings"

	"sluice/libml"
	"sluice/libml/cuda"
	"sluice/libml/kprof"
	"sluice/libml/zoo"
)

// runKprof is `gpubench kprof`: the offline kernel profile of the DISB
// models (REEF §5.2) on the cuda backend, per kernel and version (REEF
// §5.3: GEMM and CONV have two, dominated ones marked): grid, occupancy,
// the SMs it can fill, kernel time (GPU events) and block time (trace
// ring, %globaltimer). Models are loaded under their DISB role names.
func runKprof(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpubench kprof", flag.ContinueOnError)
	fs.SetOutput(stderr)
	roles := fs.String("roles", strings.Join(disbRoleOrder, ","), "DISB roles to profile")
	small := fs.Bool("small", false, "the CPU DISB's reduced model sizes instead of the full ones")
	batch := fs.Int("batch", 1, "batch size")
	reps := fs.Int("reps", cuda.DefaultProfileReps, "launches per kernel for its time")
	jsonPath := fs.String("json", "", "write the profile here (JSON)")
	mdPath := fs.String("md", "", "write the summary table here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *batch < 1 || *reps < 1 {
		return fmt.Errorf("kprof: batch %d, reps %d: need 1 or more", *batch, *reps)
	}
	var want []string
	for _, r := range splitList(*roles) {
		if !slices.Contains(disbRoleOrder, r) {
			return fmt.Errorf("kprof: unknown role %q (have %v)", r, disbRoleOrder)
		}
		want = append(want, r)
	}
	if len(want) == 0 {
		return errors.New("kprof: no role")
	}
	logf := log.New(stderr, "", log.Ltime).Printf
	b := cuda.NewBackend(cuda.Options{Logf: logf})
	if err := b.Init(ctx, libml.BackendConfig{}); err != nil {
		return fmt.Errorf("kprof: %w", err)
	}
	defer b.Deinit()
	prof := &kprof.Set{Device: deviceName(0), Command: "gpubench kprof " + strings.Join(args, " ")}
	for _, role := range want {
		spec := zooSpec(disbRoles[role], *small)
		g, err := zoo.Build(spec.Zoo, spec.Opt)
		if err != nil {
			return fmt.Errorf("kprof: %w", err)
		}
		li, err := b.LoadModel(ctx, role, g)
		if err != nil {
			return fmt.Errorf("kprof %s: %w", role, err)
		}
		inst := li.(*cuda.Instance)
		err = b.ConfigureBatch(inst, *batch)
		var mp *kprof.Model
		if err == nil {
			mp, err = inst.ProfileKernels(*batch, *reps)
		}
		if cerr := inst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("kprof %s (%s): %w", role, spec.Zoo, err)
		}
		nv := 0
		for _, k := range mp.Kernels {
			nv += len(k.Versions)
		}
		logf("%s (%s): %d kernel versions profiled", role, spec.Zoo, nv)
		prof.Models = append(prof.Models, *mp)
	}
	md := kprofMarkdown(prof)
	fmt.Fprint(stdout, md)
	if *mdPath != "" {
		if err := os.WriteFile(*mdPath, []byte(md), 0o644); err != nil {
			return fmt.Errorf("kprof: %w", err)
		}
	}
	if *jsonPath != "" {
		f, err := os.Create(*jsonPath)
		if err != nil {
			return fmt.Errorf("kprof: %w", err)
		}
		err = prof.WriteJSON(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("kprof: %w", err)
		}
	}
	return nil
}

// kprofMarkdown summarizes a profile per model: kernels (version 0), how
// many leave SMs idle (the padding opportunity) and their share of the
// time, kernel and block time percentiles, the other versions profiled
// and the versions pruned by dominance.
func kprofMarkdown(p *kprof.Set) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Kernel profile (%s)\n\n", p.Device)
	if p.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`.\n\n", p.Command)
	}
	b.WriteString("Per model: kernels (in their default version); those that fill fewer SMs than the device has (ceil(grid / occupancy) < SMs: room for padding) and their share of the summed kernel time; kernel and block time p50 / p90 (µs); sg_pad's occupancy; the other versions profiled (GEMM and CONV in a 32 x 32 tile) and how many versions, of all, another version of the same kernel dominates (REEF §5.3: pruned, never a padding candidate); of the kernels that leave SMs idle, those a padded launch with nothing to pad (sg_pad, its control block out and back) slows by more than 5% (never padded; measured with GPU events only).\n\n")
	b.WriteString("| model | batch | SMs | timing | kernels | leave SMs idle | their time share | kernel p50 / p90 (µs) | block p50 / p90 (µs) | sg_pad blocks/SM | other versions | pruned | too costly to pad |\n|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, m := range p.Models {
		var kt, bt []float64
		idle, total, idleT := 0, 0.0, 0.0
		others, pruned, costly := 0, 0, 0
		for _, k := range m.Kernels {
			if k.Versions[0].Grid == 0 {
				continue // nothing to launch
			}
			for v, vp := range k.Versions {
				if vp.Pruned {
					pruned++
				}
				if v > 0 {
					others++
				}
			}
			v0 := &k.Versions[0]
			kt, bt = append(kt, v0.KernNs/1e3), append(bt, v0.BlockNs/1e3)
			total += v0.KernNs
			if v0.SMs < m.Units {
				idle++
				idleT += v0.KernNs
				if v0.PadCostly() {
					costly++
				}
			}
		}
		if len(kt) == 0 {
			fmt.Fprintf(&b, "| %s | %d | %d | %s | 0 | | | | | %d | %d | %d | |\n", m.Model, m.Batch, m.Units, m.Timing, m.PadOccupancy, others, pruned)
			continue
		}
		slices.Sort(kt)
		slices.Sort(bt)
		share := 0.0
		if total > 0 {
			share = 100 * idleT / total
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d | %d | %.1f%% | %.1f / %.1f | %.1f / %.1f | %d | %d | %d | %d |\n", m.Model, m.Batch, m.Units, m.Timing,
			len(kt), idle, share, pct(kt, 50), pct(kt, 90), pct(bt, 50), pct(bt, 90), m.PadOccupancy, others, pruned, costly)
	}
	return b.String()
}
