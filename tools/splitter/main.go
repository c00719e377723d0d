// Command splitter cuts a model into evenly sized blocks of kernels for
// the scheduler's split policy (SPLIT §3.3): a genetic algorithm over cut
// points with SPLIT's fitness (eq. 2: evenness of the blocks' profiled
// times against the cuts' overhead); the number of blocks is either given
// or chosen by SPLIT eq. 1 (the expected wait of a request arriving at a
// random moment, plus the cuts' cost). It reads a kernel profile written
// by tools/kprof and prints (or writes, as JSON) the cut points that
// sched.ModelOptions.Cuts takes.
//
//	splitter -profile resnet18.json [-blocks 0] [-max-blocks 8] [-cut-us 20]
//	         [-pop 64] [-gens 300] [-seed 1] [-o cuts.json]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"sluice/libml/kprof"
	"sluice/libml/sched"
)

// Output is what -o writes.
type Output struct {
	Model   string    `json:"model"`
	Cuts    []int     `json:"cuts"`
	BlockNs []float64 `json:"block_ns"`
	StdNs   float64   `json:"std_ns"`
	MeanNs  float64   `json:"mean_ns"`
	Fitness float64   `json:"fitness"`
	WaitNs  float64   `json:"wait_ns"`
}

func main() {
	prof := flag.String("profile", "", "kernel profile (tools/kprof -o)")
	blocks := flag.Int("blocks", 0, "number of blocks (0: choose 2..max-blocks by SPLIT eq. 1)")
	maxBlocks := flag.Int("max-blocks", 8, "largest block count tried")
	cutUs := flag.Float64("cut-us", 20, "cost of one cut (dispatch gap between blocks), microseconds")
	pop := flag.Int("pop", 64, "population")
	gens := flag.Int("gens", 300, "generations")
	seed := flag.Int64("seed", 1, "random seed")
	out := flag.String("o", "", "write the cuts (JSON) here")
	flag.Parse()
	if *prof == "" {
		fmt.Fprintln(os.Stderr, "splitter: -profile is required (write one with tools/kprof -o)")
		os.Exit(2)
	}
	p, err := kprof.Load(*prof)
	if err != nil {
		fmt.Fprintln(os.Stderr, "splitter:", err)
		os.Exit(1)
	}
	if len(p.Kernels) == 0 {
		fmt.Fprintln(os.Stderr, "splitter: the profile has no kernels")
		os.Exit(1)
	}
	cfg := sched.GAConfig{Population: *pop, Generations: *gens, CutNs: *cutUs * 1e3, Seed: *seed}
	var r sched.SplitResult
	if *blocks > 0 {
		r = sched.SplitModel(p, *blocks, cfg)
	} else {
		r = sched.SplitBest(p, *maxBlocks, cfg)
	}
	fmt.Printf("%s: %d kernels, %.3f ms -> %d blocks, cuts %v (%d generations)\n", p.Model, len(p.Kernels), p.TotalNs/1e6, len(r.BlockNs), r.Cuts, r.Generations)
	for i, b := range r.BlockNs {
		fmt.Printf("  block %d: %.3f ms\n", i, b/1e6)
	}
	fmt.Printf("mean %.3f ms, std (jitter) %.3f ms, overhead %.2f%%, fitness %.4f, expected wait (eq. 1) %.3f ms\n",
		r.MeanNs/1e6, r.StdNs/1e6, r.Overhead*100, r.Fitness, r.WaitNs(cfg.CutNs)/1e6)
	if *out != "" {
		b, _ := json.MarshalIndent(Output{Model: p.Model, Cuts: r.Cuts, BlockNs: r.BlockNs, StdNs: r.StdNs, MeanNs: r.MeanNs,
			Fitness: r.Fitness, WaitNs: r.WaitNs(cfg.CutNs)}, "", " ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "splitter:", err)
			os.Exit(1)
		}
	}
}
