// Command framecast is sluice's client and load generator: it streams
// frames (synthetic, or images from files) to an appliance over UDP, per
// model at a rate and arrival process of its own (uniform, Poisson,
// lognormal or a trace file), in open or closed loop; checks every response
// against its request; shows a progress line; and reports latency
// percentiles, loss, errors and batch sizes per stream and per class, as
// markdown and optionally as JSON and an SVG latency plot.
//
//	framecast -target 10.99.1.1:9400 -duration 20s \
//	  -stream model=1,class=rt,rate=20,size=150528,arrival=poisson \
//	  -stream model=2,class=be,images=testdata/,loop=closed,concurrency=4
//
// docs/framecast.md describes every flag, stream key and report column.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sluice/appliance/buildinfo"
	"sluice/dataplane/pace"
	"sluice/dataplane/wire"
)

func main() {
	cfg, quiet, err := parseArgs(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if errors.Is(err, errVersion) {
		fmt.Println(buildinfo.String("framecast"))
		os.Exit(0)
	}
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintf(os.Stderr, "framecast: %v\n", err)
		}
		os.Exit(2)
	}
	// The first interrupt stops sending (the report still comes, after
	// the last responses); a second one kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	var prog *progressOut
	if !quiet {
		prog = &progressOut{w: os.Stderr, tty: isTerminal(os.Stderr), width: func() int { return terminalWidth(os.Stderr) }}
	}
	rep, err := run(ctx, cfg, os.Stdout, prog)
	if err != nil {
		fmt.Fprintf(os.Stderr, "framecast: %v\n", err)
		os.Exit(1)
	}
	msgs, failed := verdict(rep, cfg)
	for _, m := range msgs {
		fmt.Fprintf(os.Stderr, "framecast: %s\n", m)
	}
	if failed {
		os.Exit(exitThreshold)
	}
}

// exitThreshold is the exit status of a run whose loss or errors passed
// -max-loss or -max-errors.
const exitThreshold = 3

// verdict reads a finished run's report against -max-loss and
// -max-errors: what to tell the user, and whether the run failed them. A
// run that sent requests and got no answer at all says so, whatever the
// thresholds: the appliance is most likely not there.
func verdict(rep *Report, cfg config) (msgs []string, failed bool) {
	t := rep.Total
	if t == nil || t.Sent == 0 {
		return nil, false
	}
	bad := t.ErrorTotal + t.WrongModel + t.WrongSize + t.Mismatched
	if t.OK+bad == 0 {
		msgs = append(msgs, fmt.Sprintf("nothing answered: is sluice running at %s, serving these model ids?", rep.Target))
	}
	loss, errs := float64(t.Lost)/float64(t.Sent), float64(bad)/float64(t.Sent)
	if cfg.MaxLoss >= 0 && loss > cfg.MaxLoss {
		msgs = append(msgs, fmt.Sprintf("%d of %d requests lost (%.2f%%), more than -max-loss %g", t.Lost, t.Sent, 100*loss, cfg.MaxLoss))
		failed = true
	}
	if cfg.MaxErrors >= 0 && errs > cfg.MaxErrors {
		msgs = append(msgs, fmt.Sprintf("%d of %d requests answered with an error or a wrong output (%.2f%%), more than -max-errors %g", bad, t.Sent, 100*errs, cfg.MaxErrors))
		failed = true
	}
	return msgs, failed
}

// errVersion is parseArgs's answer to -version: print it, exit 0.
var errVersion = errors.New("version asked for")

// errReported marks errors the flag package has already printed, with the
// usage.
var errReported = errors.New("bad command line")

// parseArgs parses the command line into a run's config; quiet turns the
// progress line off.
func parseArgs(args []string, stderr io.Writer) (cfg config, quiet bool, err error) {
	var streams streamList
	fs := flag.NewFlagSet("framecast", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Target, "target", "127.0.0.1:9400", "appliance `address:port`")
	fs.StringVar(&cfg.Bind, "bind", "", "local `address:port` to send from (default: any, an ephemeral port)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Second, "a request unanswered this long after sending is lost")
	fs.IntVar(&cfg.FragSize, "frag", wire.DefaultFragSize, "request fragment payload `bytes`")
	fs.IntVar(&cfg.Frames, "frames", 8, "distinct synthetic frames per stream (equal frames must get equal outputs)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the synthetic frames and random arrivals")
	flow := fs.Uint("flow", 0, "first stream's flow `id`; stream i uses id+i (default: random)")
	fs.StringVar(&cfg.JSONPath, "json", "", "also write the report as JSON to this `file`")
	fs.StringVar(&cfg.PlotPath, "plot", "", "also write a latency CDF per stream as SVG to this `file`")
	fs.StringVar(&cfg.MetricsURL, "metrics", "", "appliance metrics `URL` (http://host:port/metrics): report batch sizes")
	fs.BoolVar(&quiet, "quiet", false, "no progress line")
	paceFlag := fs.String("pace", "0", "send at most `RATE` bytes per second, in bursts of 256 KiB (400MB, 1.5G; 0: unpaced): spreads large requests out")
	version := fs.Bool("version", false, "print framecast's version and exit")
	fs.DurationVar(&cfg.SLO, "slo", 0, "a latency target: the report gives the share of ok responses within it, the plot marks it (default: none)")
	fs.Float64Var(&cfg.MaxLoss, "max-loss", -1, "exit with status 3 when more than this `fraction` of the requests sent is lost (0.01: 1%; default: no limit)")
	fs.Float64Var(&cfg.MaxErrors, "max-errors", -1, "exit with status 3 when more than this `fraction` of the requests sent is answered with an error or a wrong output (default: no limit)")
	fs.Var(&streams, "stream", "a stream: model=ID,class=rt|be,rate=PER_S,size=BYTES,arrival=uniform|poisson|lognormal|trace,... (repeatable; see docs/framecast.md)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, quiet, err
		}
		return cfg, quiet, fmt.Errorf("%w: %w", errReported, err)
	}
	if *version {
		return cfg, quiet, errVersion
	}
	if cfg.Pace, err = pace.ParseRate(*paceFlag); err != nil {
		return cfg, quiet, fmt.Errorf("-%w", err)
	}
	if fs.NArg() > 0 {
		return cfg, quiet, fmt.Errorf("unexpected argument %q (streams are given with -stream)", fs.Arg(0))
	}
	if *flow > 0xffffffff {
		return cfg, quiet, fmt.Errorf("-flow %d: want 0..4294967295", *flow)
	}
	cfg.Flow = uint32(*flow)
	if len(streams) == 0 {
		_ = streams.Set("model=1,class=rt,rate=20")
	}
	cfg.Streams = uniqueNames(streams)
	return cfg, quiet, cfg.check()
}

// check validates the flags that the flag package does not.
func (cfg *config) check() error {
	switch {
	case cfg.Duration <= 0:
		return fmt.Errorf("-duration %v: want a positive duration", cfg.Duration)
	case cfg.Timeout <= 0:
		return fmt.Errorf("-timeout %v: want a positive duration", cfg.Timeout)
	case cfg.FragSize < 1 || cfg.FragSize > wire.MaxPayload:
		return fmt.Errorf("-frag %d: want 1..%d", cfg.FragSize, wire.MaxPayload)
	case cfg.SLO < 0:
		return fmt.Errorf("-slo %v: want a positive duration", cfg.SLO)
	case math.IsNaN(cfg.MaxLoss) || cfg.MaxLoss > 1 || cfg.MaxLoss < 0 && cfg.MaxLoss != -1:
		return fmt.Errorf("-max-loss %v: want a fraction 0..1", cfg.MaxLoss)
	case math.IsNaN(cfg.MaxErrors) || cfg.MaxErrors > 1 || cfg.MaxErrors < 0 && cfg.MaxErrors != -1:
		return fmt.Errorf("-max-errors %v: want a fraction 0..1", cfg.MaxErrors)
	case cfg.Frames < 1:
		return fmt.Errorf("-frames %d: want at least 1", cfg.Frames)
	case uint64(cfg.Flow)+uint64(len(cfg.Streams)) > 1<<32:
		return fmt.Errorf("-flow %d: %d streams need flow ids past 4294967295", cfg.Flow, len(cfg.Streams))
	}
	for _, s := range cfg.Streams {
		if n := (s.Size + cfg.FragSize - 1) / cfg.FragSize; n > 65535 {
			return fmt.Errorf("stream %s: %d bytes need %d fragments of %d bytes, more than 65535: raise -frag", s.Name, s.Size, n, cfg.FragSize)
		}
	}
	return nil
}

// uniqueNames gives streams that share a name the suffixes #2, #3, ...
func uniqueNames(specs []streamSpec) []streamSpec {
	seen := map[string]int{}
	for i := range specs {
		n := specs[i].Name
		seen[n]++
		if seen[n] > 1 {
			specs[i].Name = fmt.Sprintf("%s#%d", n, seen[n])
		}
	}
	return specs
}

// run streams frames as cfg says, prints the report on stdout, writes the
// JSON and SVG files, and returns the report. progress, when not nil,
// receives the progress line. It returns after at most -duration plus
// -timeout (and the metrics scrapes), every goroutine it started stopped.
func run(ctx context.Context, cfg config, stdout io.Writer, progress *progressOut) (*Report, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	defer c.conn.Close()
	var before map[ifKey]batchCounts
	if cfg.MetricsURL != "" {
		if before, err = scrapeBatches(ctx, cfg.MetricsURL); err != nil {
			return nil, fmt.Errorf("before the run: %w", err)
		}
	}
	start := time.Now()
	sending := c.runStreams(ctx, progress)
	rep := c.report(sending, time.Since(start))
	rep.Batches = &Batches{Note: noBatchNote}
	if cfg.MetricsURL != "" {
		after, err := scrapeBatches(context.WithoutCancel(ctx), cfg.MetricsURL)
		rep.Batches = batchReport(cfg.MetricsURL, before, after, err)
	}
	rep.writeMarkdown(stdout)
	if cfg.JSONPath != "" {
		if err := rep.writeJSON(cfg.JSONPath); err != nil {
			return rep, err
		}
	}
	if cfg.PlotPath != "" {
		if err := rep.writePlot(cfg.PlotPath); err != nil {
			return rep, err
		}
	}
	return rep, nil
}
