// Command sluice is the streaming inference appliance. It reads a profile,
// opens its ports, loads its inference functions and serves until SIGTERM
// or SIGINT, then drains: every request in flight is answered before it
// exits.
//
//	sluice -profile profiles/demo.toml [-strict] [-pid-file FILE]
//	sluice -check -profile FILE
//	sluice -version
//
// An IF whose model fails to load is logged (with the profile's file, line
// and key) and shown as failed by `ifctl status` and /readyz; the rest of
// the profile serves. With -strict, sluice exits with status 1 instead.
//
// After SIGTERM or SIGINT, sluice exits within the profile's
// appliance.drain_timeout_ms (default 10 s): status 0 when the drain
// finished, 1 when it had to stop waiting. A second SIGTERM or SIGINT
// exits at once (status 1). SIGHUP reloads the profile.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"sluice/appliance"
	"sluice/appliance/buildinfo"
)

func main() {
	profile := flag.String("profile", "", "appliance profile (TOML); default: profiles/default.toml in the working directory, else beside the binary (its ../profiles)")
	statsEvery := flag.Duration("stats-interval", 5*time.Second, "log counters this often (0: never)")
	strict := flag.Bool("strict", false, "exit when an IF of the profile fails to load, instead of serving the others")
	version := flag.Bool("version", false, "print sluice's version and exit")
	pidFile := flag.String("pid-file", "", "write the process id to this `file` while serving (removed at exit): kill -HUP $(cat FILE)")
	check := flag.Bool("check", false, "check the profile and load every IF's model, without serving: exit 0 when all load, 1 otherwise")
	flag.Parse()
	if *version {
		fmt.Println(buildinfo.String("sluice"))
		return
	}
	if *profile == "" {
		p, err := defaultProfile()
		if err != nil {
			fmt.Fprintln(os.Stderr, "sluice:", err)
			os.Exit(2)
		}
		*profile = p
	}
	if *check {
		os.Exit(checkProfile(*profile, os.Stdout, os.Stderr))
	}
	atExit := func() {}
	if *pidFile != "" {
		if err := writePidFile(*pidFile); err != nil {
			fmt.Fprintln(os.Stderr, "sluice:", err)
			os.Exit(1)
		}
		atExit = func() { _ = os.Remove(*pidFile) }
	}
	err := run(*profile, *statsEvery, *strict, atExit)
	atExit()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// defaultProfile finds profiles/default.toml: in the working directory,
// else in the profiles folder beside the binary's (bin/sluice ->
// profiles/default.toml).
func defaultProfile() (string, error) {
	const rel = "profiles/default.toml"
	tried := []string{rel}
	if _, err := os.Stat(rel); err == nil {
		return rel, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "..", rel)
		tried = append(tried, p)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no -profile given, and no default profile at %s", strings.Join(tried, " or "))
}

// writePidFile writes the process id to path, refusing a file another
// running sluice holds (its process still exists).
func writePidFile(path string) error {
	if b, err := os.ReadFile(path); err == nil {
		var pid int
		if _, serr := fmt.Sscan(string(b), &pid); serr == nil && pid > 0 && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("pid file %s: process %d is running", path, pid)
		}
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	return nil
}

// checkProfile is sluice -check: it parses path and loads every IF's
// model as serving would, prints what loads and what does not (file:line:
// key), and returns the exit status.
func checkProfile(path string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	prof, err := appliance.LoadProfileContext(ctx, path)
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 1
	}
	res, err := appliance.Check(ctx, prof, nil)
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 1
	}
	for _, e := range res.Failed {
		fmt.Fprintln(stderr, "sluice:", e)
	}
	fmt.Fprintf(stdout, "profile %s: %d of %d IFs load, %d ports\n", path, len(res.Loaded), len(prof.IFs), len(prof.Ports))
	if len(res.Failed) > 0 {
		return 1
	}
	return 0
}

// run serves the profile at path until SIGTERM or SIGINT and the drain.
// atExit runs before the process exits from inside run (a second signal,
// the drain timeout).
func run(path string, statsEvery time.Duration, strict bool, atExit func()) error {
	// Signals first: a SIGTERM while the profile is read or the models
	// load stops the start-up too.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sup := &supervisor{exit: func(code int) { atExit(); os.Exit(code) }}
	sup.timeout.Store(int64(appliance.DefaultDrainTimeoutMS) * int64(time.Millisecond))
	sup.log.Store(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	finished := make(chan struct{})
	defer close(finished)
	go sup.watch(sigs, cancel, finished)

	prof, err := appliance.LoadProfileContext(ctx, path)
	if err != nil {
		return err
	}
	log := prof.Appliance.NewLogger(os.Stderr)
	sup.log.Store(log)
	sup.timeout.Store(int64(prof.Appliance.DrainTimeoutMS) * int64(time.Millisecond))
	a, err := appliance.NewWithOptions(ctx, prof, log, appliance.Options{Strict: strict})
	if err != nil {
		return err
	}
	defer a.Close()
	a.SetProfilePath(path)
	// SIGHUP reloads the profile; one that cannot be read or does not
	// validate changes nothing.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if _, err := a.Reload(ctx, path); err != nil {
					log.Error("reload rejected; the old profile stays", "path", path, "err", err)
				}
			}
		}
	}()
	if statsEvery > 0 {
		go func() {
			t := time.NewTicker(statsEvery)
			defer t.Stop()
			var last string
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					// an idle appliance logs nothing: only counters that
					// moved since the last lines are worth a line
					st := a.Stats()
					if k := statsKey(st); k != last {
						last = k
						logStats(log, "counters", st)
					}
				}
			}
		}()
	}
	err = a.Run(ctx)
	logStats(log, "final counters", a.Stats())
	return err
}

// statsKey is what decides whether counters moved: every count logStats
// prints.
func statsKey(s appliance.Stats) string {
	var b strings.Builder
	for _, p := range s.Ports {
		fmt.Fprintf(&b, "%s %d %d %d %d %d|", p.Name, p.Port.RxPackets, p.Port.TxPackets, p.Completed, p.Responses, p.Port.BufInUse)
		for _, r := range slices.Sorted(maps.Keys(p.Drops)) {
			fmt.Fprintf(&b, "%s=%d ", r, p.Drops[r])
		}
	}
	for _, f := range s.IFs {
		fmt.Fprintf(&b, "%s %d %d %d %d %d %d|", f.Name, f.Served, f.Failed, f.Overloaded, f.DeadlineAdmission, f.DeadlineBatch, f.Late)
	}
	return b.String()
}

// supervisor turns signals into a bounded shutdown: the first SIGTERM or
// SIGINT cancels the appliance's context (it drains); if the process is
// still running the drain timeout later, or on a second signal, it exits
// at once with status 1.
type supervisor struct {
	// timeout is the drain timeout (a time.Duration).
	timeout atomic.Int64
	log     atomic.Pointer[slog.Logger]
	exit    func(code int)
}

// watch runs until finished is closed (a normal exit) or it exits the
// process.
func (s *supervisor) watch(sigs <-chan os.Signal, cancel context.CancelFunc, finished <-chan struct{}) {
	var first os.Signal
	select {
	case first = <-sigs:
	case <-finished:
		return
	}
	timeout := time.Duration(s.timeout.Load())
	s.log.Load().Info("signal: draining; a second signal exits at once", "signal", first.String(), "drain_timeout", timeout)
	cancel()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-finished:
	case sig := <-sigs:
		s.log.Load().Error("second signal: exiting at once, without finishing the drain", "signal", sig.String())
		s.exit(1)
	case <-t.C:
		s.log.Load().Error("drain did not finish within the drain timeout: exiting without it", "drain_timeout", timeout)
		s.exit(1)
	}
}

func logStats(log *slog.Logger, msg string, s appliance.Stats) {
	for _, p := range s.Ports {
		attrs := []any{"port", p.Name, "rx_packets", p.Port.RxPackets, "tx_packets", p.Port.TxPackets,
			"requests", p.Completed, "responses", p.Responses, "buf_in_use", p.Port.BufInUse}
		// drops as flat keys, only those seen (sluice_drops_total's reasons)
		for _, r := range slices.Sorted(maps.Keys(p.Drops)) {
			attrs = append(attrs, "drops_"+r, p.Drops[r])
		}
		log.Info(msg, attrs...)
	}
	for _, f := range s.IFs {
		log.Info(msg, "if", f.Name, "served", f.Served, "failed", f.Failed, "overloaded", f.Overloaded,
			"deadline_exceeded", f.DeadlineAdmission+f.DeadlineBatch, "late", f.Late,
			"mean_batch", fmt.Sprintf("%.2f", f.MeanBatch), "mean_compute_ms", fmt.Sprintf("%.2f", f.MeanComputeMS))
	}
}
