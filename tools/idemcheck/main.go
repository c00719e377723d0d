// Command idemcheck computes a model's idempotent kernel groups by tracing
// (REEF §4.4): it runs the compiled program kernel by kernel, records the
// arena floats each kernel writes and the buffers it reads, and finds for
// every kernel the minimal group of consecutive kernels that may be
// re-executed as a whole (no float the group reads before writing it is
// written inside the group). A job preempted in a kernel restarts at its
// group's first kernel. The metadata it writes is what
// sched.ModelOptions.Idem (sched.LoadIdem) loads.
//
//	idemcheck -model bert [-layers 4 -seq 32 -hidden 128 -heads 4 -ff 512] [-h 32 -w 32 -classes 10]
//	          [-batch 1] [-o bert.idem.json] [-v]
//
// It exits non-zero when a kernel wrote outside the buffers the compiler
// declared, or when no group (not even a restart from the first kernel)
// is idempotent.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"sluice/libml/sched"
	"sluice/libml/zoo"
)

func main() {
	model := flag.String("model", "bert", "zoo model ("+strings.Join(zoo.Names(), ", ")+")")
	zopt := zoo.SmallFlags(flag.CommandLine)
	batch := flag.Int("batch", 1, "batch size")
	noInPlace := flag.Bool("no-inplace", false, "compile without in-place kernels")
	out := flag.String("o", "", "write the metadata (JSON) here")
	verbose := flag.Bool("v", false, "list every kernel")
	flag.Parse()
	g, err := zoo.Build(*model, *zopt)
	if err != nil {
		fatalf("%v", err)
	}
	meta, rep, err := sched.TraceIdempotence(*model, g, sched.ModelOptions{Batch: *batch, NoInPlace: *noInPlace})
	if err != nil {
		fatalf("%v", err)
	}
	groups := map[int]int{}
	for i, e := range meta.Entry {
		if e != i {
			groups[i-e+1]++
		}
	}
	if *verbose {
		for i, e := range meta.Entry {
			kind := "idempotent"
			if !meta.Idempotent[i] {
				kind = fmt.Sprintf("restart at %d (group of %d)", e, i-e+1)
			}
			fmt.Printf("%4d %-28s %s  reads %v writes %v\n", i, meta.Ops[i], kind, meta.Trace[i].Reads, meta.Trace[i].Writes)
		}
	}
	nonIdem := 0
	for _, ok := range meta.Idempotent {
		if !ok {
			nonIdem++
		}
	}
	fmt.Printf("%s: %d kernels, %d not idempotent alone; group sizes %v; %s\n", *model, len(meta.Entry), nonIdem, groups, rep)
	if *out != "" {
		if err := meta.Save(*out); err != nil {
			fatalf("%v", err)
		}
	}
	if len(rep.Undeclared) > 0 || len(rep.NoGroup) > 0 {
		os.Exit(1)
	}
}

func fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "idemcheck: "+f+"\n", a...)
	os.Exit(1)
}
