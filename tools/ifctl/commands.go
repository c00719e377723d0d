package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sluice/ifmanager"
	"sluice/orchestrator"
)

// command is one ifctl command: flags registers its flags on fs and
// returns the function that runs it; set names the flags given.
type command struct {
	synopsis string
	doc      string
	flags    func(fs *flag.FlagSet) func(e *env, set map[string]bool) error
}

func commands() map[string]command {
	return map[string]command{
		"status": {
			synopsis: "[-name IF]",
			doc:      "Show the appliance and its IFs (or one IF).",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				name := fs.String("name", "", "show only this IF")
				return func(e *env, _ map[string]bool) error {
					var r orchestrator.StatusReply
					if err := e.call(orchestrator.CmdStatus, orchestrator.StatusArgs{Name: *name}, &r, 0); err != nil || e.g.json {
						return err
					}
					printStatus(e.stdout, r)
					return nil
				}
			},
		},
		"plan": {
			synopsis: "",
			doc:      "Show how the cpu IFs' units are placed; under the inss placement, the latency the model predicts against the observed p99.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				return func(e *env, _ map[string]bool) error {
					var r orchestrator.PlanReply
					if err := e.call(orchestrator.CmdPlan, orchestrator.PlanArgs{}, &r, 0); err != nil || e.g.json {
						return err
					}
					printPlan(e.stdout, r)
					return nil
				}
			},
		},
		"deploy": {
			synopsis: "-name IF -model M -model-id N [flags]",
			doc:      "Start a new IF. Unset flags take the appliance's defaults.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				var a orchestrator.DeployArgs
				fs.StringVar(&a.Name, "name", "", "IF name (required)")
				fs.StringVar(&a.Model, "model", "", `model, "zoo:NAME" or "onnx:PATH" (required)`)
				modelID := fs.Uint("model-id", 0, "wire model id routed to the IF, 0..65535 (required)")
				fs.StringVar(&a.Backend, "backend", "", `backend, "cpu", "cuda" or "ort"`)
				fs.StringVar(&a.Class, "class", "", `scheduling class, "rt" or "be"`)
				fs.Float64Var(&a.SLOMS, "slo-ms", 0, "latency objective in milliseconds")
				fs.StringVar(&a.TimeoutAction, "timeout-action", "", `a request that cannot finish by its deadline: "reject" (answered deadline_exceeded at once; the default) or "serve_late"`)
				fs.IntVar(&a.MaxBatch, "max-batch", 0, "batch size bound, 1..1024")
				fs.IntVar(&a.MinBatch, "min-batch", 0, "smallest batch limit adaptive batching may choose, 1..max-batch")
				fs.StringVar(&a.Batching, "batching", "", "batching: slab, aimd or fixed")
				fs.IntVar(&a.QueueLen, "queue-len", 0, "queue bound")
				input := fs.String("input", "", `payload format, "f32" or "u8-hwc"`)
				fs.Float64Var(&a.Share, "share", 0, "starting resource share, 0 < share <= 1 (default: chosen by the appliance)")
				fs.BoolVar(&a.AutoShare, "auto-share", false, "self-tuning share (GSLICE)")
				fs.StringVar(&a.Policy, "policy", "", "scheduling policy: none, reef, seq, conc, srpt or split (default: the appliance's, for cpu IFs)")
				mean := fs.String("mean", "", "u8-hwc channel means, comma-separated")
				std := fs.String("std", "", "u8-hwc channel standard deviations, comma-separated")
				shape := fs.String("input-shape", "", "input shape for ONNX models with dynamic dims, comma-separated")
				return func(e *env, set map[string]bool) error {
					if err := required(set, "name", "model", "model-id"); err != nil {
						return err
					}
					if *modelID > math.MaxUint16 {
						return usagef("-model-id %d: out of range 0..65535", *modelID)
					}
					a.ModelID = uint16(*modelID)
					a.Input = ifmanager.InputFormat(*input)
					var err error
					if a.Mean, err = floatList("mean", *mean); err != nil {
						return err
					}
					if a.Std, err = floatList("std", *std); err != nil {
						return err
					}
					if a.InputShape, err = intList("input-shape", *shape); err != nil {
						return err
					}
					var st orchestrator.IFStatus
					if err := e.call(orchestrator.CmdDeploy, a, &st, 0); err != nil || e.g.json {
						return err
					}
					fmt.Fprintf(e.stdout, "deployed %s\n", st.Name)
					printIFs(e.stdout, []orchestrator.IFStatus{st})
					return nil
				}
			},
		},
		"remove": {
			synopsis: "-name IF",
			doc:      "Stop an IF once its queue is empty.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				var a orchestrator.RemoveArgs
				fs.StringVar(&a.Name, "name", "", "IF name (required)")
				return func(e *env, set map[string]bool) error {
					if err := required(set, "name"); err != nil {
						return err
					}
					var r orchestrator.RemoveResult
					if err := e.call(orchestrator.CmdRemove, a, &r, 0); err != nil || e.g.json {
						return err
					}
					fmt.Fprintf(e.stdout, "removed %s\n", r.Name)
					return nil
				}
			},
		},
		"resize": {
			synopsis: "-name IF (-share F | -units N)",
			doc:      "Give an IF a new resource share (applied through a shadow swap).",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				var a orchestrator.ResizeArgs
				fs.StringVar(&a.Name, "name", "", "IF name (required)")
				fs.Float64Var(&a.Share, "share", 0, "fraction of the accelerator, 0 < share <= 1")
				fs.IntVar(&a.Units, "units", 0, "execution units (SMs, or CPU worker threads)")
				return func(e *env, set map[string]bool) error {
					if err := required(set, "name"); err != nil {
						return err
					}
					if set["share"] == set["units"] {
						return usagef("give exactly one of -share and -units")
					}
					var st orchestrator.IFStatus
					if err := e.call(orchestrator.CmdResize, a, &st, 0); err != nil || e.g.json {
						return err
					}
					fmt.Fprintln(e.stdout, resizeLine(st))
					printIFs(e.stdout, []orchestrator.IFStatus{st})
					return nil
				}
			},
		},
		"swap": {
			synopsis: "-name IF [-model M] [-share F] [-max-batch N]",
			doc:      "Prepare a shadow IF (same weights unless -model) and switch to it between batches.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				var a orchestrator.SwapArgs
				fs.StringVar(&a.Name, "name", "", "IF name (required)")
				fs.StringVar(&a.Model, "model", "", "new model (default: keep)")
				fs.Float64Var(&a.Share, "share", 0, "new share, 0 < share <= 1 (default: keep)")
				fs.IntVar(&a.MaxBatch, "max-batch", 0, "new batch bound (default: keep)")
				return func(e *env, set map[string]bool) error {
					if err := required(set, "name"); err != nil {
						return err
					}
					var r orchestrator.SwapResult
					if err := e.call(orchestrator.CmdSwap, a, &r, 0); err != nil || e.g.json {
						return err
					}
					fmt.Fprintf(e.stdout, "swapped %s (prepared in %s, idle gap %s)\n", r.IF.Name,
						fmtMS(r.PrepareMS), fmtMS(r.GapUS/1000))
					printIFs(e.stdout, []orchestrator.IFStatus{r.IF})
					return nil
				}
			},
		},
		"set-batch": {
			synopsis: "-name IF -max N [-min N]",
			doc:      "Change an IF's batch bounds; adaptive batching works between them.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				var a orchestrator.SetBatchArgs
				fs.StringVar(&a.Name, "name", "", "IF name (required)")
				fs.IntVar(&a.MaxBatch, "max", 0, "largest batch, 1..1024 (required)")
				fs.IntVar(&a.MinBatch, "min", 0, "smallest batch (default: keep)")
				return func(e *env, set map[string]bool) error {
					if err := required(set, "name", "max"); err != nil {
						return err
					}
					var st orchestrator.IFStatus
					if err := e.call(orchestrator.CmdSetBatch, a, &st, 0); err != nil || e.g.json {
						return err
					}
					fmt.Fprintf(e.stdout, "set batch of %s\n", st.Name)
					printIFs(e.stdout, []orchestrator.IFStatus{st})
					return nil
				}
			},
		},
		"reload-profile": {
			synopsis: "[-path FILE]",
			doc: "Re-read the profile (default: the one the appliance started with) and apply the\n" +
				"differences. Over ipc:// a relative path is made absolute here. IFs whose model\n" +
				"fails to load are listed and make the exit status 1; the rest is applied.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				var a orchestrator.ReloadArgs
				fs.StringVar(&a.Path, "path", "", "profile file, as the appliance sees it")
				return func(e *env, _ map[string]bool) error {
					if a.Path != "" && strings.HasPrefix(e.g.endpoint, "ipc://") {
						abs, err := filepath.Abs(a.Path)
						if err != nil {
							return fmt.Errorf("-path: %w", err)
						}
						a.Path = abs
					}
					var r orchestrator.ReloadResult
					if err := e.call(orchestrator.CmdReloadProfile, a, &r, 0); err != nil {
						return err
					}
					if !e.g.json {
						printReload(e.stdout, r)
					}
					if len(r.Failed) > 0 {
						return fmt.Errorf("%d IFs failed to load (the rest of the profile is applied): %s", len(r.Failed), failedNames(r.Failed))
					}
					if len(r.RestartNeeded) > 0 {
						return fmt.Errorf("the IFs are applied; %s changed and need a restart", strings.Join(r.RestartNeeded, ", "))
					}
					return nil
				}
			},
		},
		"drain": {
			synopsis: "[-wait D]",
			doc:      "Stop admitting requests and wait for the queued ones to be answered.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				wait := fs.Duration("wait", 30*time.Second, "how long the appliance waits for queued requests, at most 10m")
				return func(e *env, _ map[string]bool) error {
					if *wait < time.Millisecond || *wait > orchestrator.MaxDrainTimeoutMS*time.Millisecond {
						return usagef("-wait %s: out of range 1ms..10m", *wait)
					}
					ms := int(wait.Milliseconds())
					var r orchestrator.DrainResult
					if err := e.call(orchestrator.CmdDrain, orchestrator.DrainArgs{TimeoutMS: ms}, &r, *wait+5*time.Second); err != nil || e.g.json {
						return err
					}
					if r.Drained {
						fmt.Fprintf(e.stdout, "drained in %s\n", fmtMS(r.ElapsedMS))
					} else {
						fmt.Fprintf(e.stdout, "drain stopped waiting after %s: %d requests still queued\n", fmtMS(r.ElapsedMS), r.Pending)
					}
					return nil
				}
			},
		},
		"resume": {
			synopsis: "",
			doc:      "Admit requests again after drain (not after SIGTERM: that drain ends the process).",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				return func(e *env, _ map[string]bool) error {
					var r orchestrator.ResumeResult
					if err := e.call(orchestrator.CmdResume, orchestrator.ResumeArgs{}, &r, 0); err != nil || e.g.json {
						return err
					}
					if r.WasDraining {
						fmt.Fprintln(e.stdout, "resumed: admitting requests again")
					} else {
						fmt.Fprintln(e.stdout, "not draining: nothing to resume")
					}
					return nil
				}
			},
		},
		"keygen": {
			synopsis: "[-o FILE]",
			doc: "Make a CURVE key pair. Without -o, print it in key-file form; with -o, write the\n" +
				"file (mode 0600) and print the public key, to list in the server's allowed keys.",
			flags: func(fs *flag.FlagSet) func(*env, map[string]bool) error {
				out := fs.String("o", "", "write the key pair to this file")
				return func(e *env, _ map[string]bool) error {
					k, err := orchestrator.NewKeyPair()
					if err != nil {
						return err
					}
					if *out != "" {
						if err := orchestrator.WriteKeyFile(*out, k); err != nil {
							return err
						}
					}
					switch {
					case e.g.json && *out != "":
						return writeJSON(e, map[string]string{"public_key": k.Public, "file": *out})
					case e.g.json:
						return writeJSON(e, map[string]string{"public_key": k.Public, "secret_key": k.Secret})
					case *out != "":
						fmt.Fprintf(e.stdout, "wrote %s\npublic-key = %s\n", *out, k.Public)
					default:
						e.stdout.Write(k.Marshal())
					}
					return nil
				}
			},
		},
	}
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// required checks that the named flags were given.
func required(set map[string]bool, names ...string) error {
	for _, n := range names {
		if !set[n] {
			return usagef("-%s is required", n)
		}
	}
	return nil
}

func floatList(flagName, s string) ([]float32, error) {
	if s == "" {
		return nil, nil
	}
	var out []float32
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 32)
		if err != nil {
			return nil, usagef("-%s: %q is not a number", flagName, f)
		}
		out = append(out, float32(v))
	}
	return out, nil
}

func intList(flagName, s string) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	var out []int64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, usagef("-%s: %q is not an integer", flagName, f)
		}
		out = append(out, v)
	}
	return out, nil
}
