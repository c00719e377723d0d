// Command kprof profiles a model's kernels offline for the scheduler
// (libml/sched, REEF §5.2-§5.3): for every kernel and every version (tiling
// for a different unit count), the block count, the mean block and kernel
// times, the per-unit scratch and the bandwidth a block demands; dominated
// versions are pruned (REEF §5.3). The JSON profile it writes is what
// sched.ModelOptions.Profile (and disb -profiles) load.
//
//	kprof -model resnet18 [-h 32 -w 32 -classes 10] [-layers 4 -seq 32 -hidden 128 -heads 4 -ff 512]
//	      [-batch 1] [-units 2] [-versions 2,8,1] [-runs 10] [-o profile.json] [-q]
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"sluice/libml/kprof"
	"sluice/libml/sched"
	"sluice/libml/zoo"
)

func main() {
	model := flag.String("model", "resnet18", "zoo model ("+strings.Join(zoo.Names(), ", ")+")")
	zopt := zoo.SmallFlags(flag.CommandLine)
	batch := flag.Int("batch", 1, "batch size")
	units := flag.Int("units", 2, "worker units")
	vers := flag.String("versions", "", "unit counts the versions are tiled for, comma separated (default: units, 4*units, 1)")
	runs := flag.Int("runs", 10, "timed runs per version")
	out := flag.String("o", "", "write the profile (JSON) here")
	name := flag.String("name", "", "name the profile's model (default: -model; disb loads its models as RNET, VGG, YOLO, BERT, GPT2)")
	quiet := flag.Bool("q", false, "no per-kernel table")
	flag.Parse()

	var versions []int
	if *vers != "" {
		for _, f := range strings.Split(*vers, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v < 1 {
				fatalf("bad version %q: want a unit count >= 1", f)
			}
			versions = append(versions, v)
		}
	}
	g, err := zoo.Build(*model, *zopt)
	if err != nil {
		fatalf("%v", err)
	}
	s, err := sched.New(sched.Config{Policy: sched.PolicySeq, Units: *units})
	if err != nil {
		fatalf("%v", err)
	}
	defer s.Close()
	if *name == "" {
		*name = *model
	}
	m, err := s.Load(*name, g, sched.ModelOptions{Batch: *batch, Versions: versions, ProfileRuns: *runs})
	if err != nil {
		fatalf("%v", err)
	}
	p := m.Profile()
	if !*quiet {
		fmt.Printf("%-4s %-8s %-24s", "k", "op", "ops")
		for _, v := range p.Kernels[0].Versions {
			fmt.Printf(" | %-29s", fmt.Sprintf("tiled for %d units", v.TileUnits))
		}
		fmt.Println()
		fmt.Printf("%-4s %-8s %-24s", "", "", "")
		for range p.Kernels[0].Versions {
			fmt.Printf(" | %5s %8s %8s %6s", "grid", "block us", "kern us", "MB/s")
		}
		fmt.Println()
		for _, k := range p.Kernels {
			ops := k.Ops
			if len(ops) > 24 {
				ops = ops[:24]
			}
			fmt.Printf("%-4d %-8s %-24s", k.Index, k.Op, ops)
			for _, v := range k.Versions {
				mark := " "
				if v.Pruned {
					mark = "x"
				}
				fmt.Printf(" |%s%5d %8.1f %8.1f %6d", mark, v.Grid, v.BlockNs/1e3, v.KernNs/1e3, v.BlockBW)
			}
			fmt.Println()
		}
		fmt.Println("(x: pruned, dominated by another version)")
	}
	sm := kprof.Summarize(p, *units)
	fmt.Printf("%s: %d kernels, %.3f ms (sum of kernel times; whole runs %.3f ms) on %d units; %d versions, %d kept after pruning; %d kernels narrower than the pool (%.3f ms: padding room)\n",
		*model, sm.Kernels, p.TotalNs/1e6, p.WallNs/1e6, *units, sm.Versions, sm.Kept, sm.NarrowKernels, sm.NarrowNs/1e6)
	if *out != "" {
		if err := p.Save(*out); err != nil {
			fatalf("%v", err)
		}
	}
}

func fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "kprof: "+f+"\n", a...)
	os.Exit(1)
}
