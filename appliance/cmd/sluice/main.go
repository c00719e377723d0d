// Command sluice is the streaming inference appliance. It reads a profile,
// opens its ports, loads its inference functions and serves until SIGTERM
// or SIGINT, then drains: every request in flight is answered before it
// exits.
//
//	sluice -profile profiles/demo.toml
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sluice/appliance"
)

func main() {
	profile := flag.String("profile", "profiles/default.toml", "appliance profile (TOML)")
	statsEvery := flag.Duration("stats-interval", 5*time.Second, "log counters this often (0: never)")
	flag.Parse()
	if err := run(*profile, *statsEvery); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func run(path string, statsEvery time.Duration) error {
	prof, err := appliance.LoadProfile(path)
	if err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(prof.Appliance.LogLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a, err := appliance.New(ctx, prof, log)
	if err != nil {
		return err
	}
	defer a.Close()
	a.SetProfilePath(path)
	// SIGHUP reloads the profile; one that does not validate changes
	// nothing.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if res, err := a.Reload(ctx, path); err != nil {
					log.Error("reload rejected; the old profile stays", "path", path, "err", err)
				} else {
					log.Info("reload applied", "added", res.Added, "removed", res.Removed, "changed", res.Changed)
				}
			}
		}
	}()
	if statsEvery > 0 {
		go func() {
			t := time.NewTicker(statsEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					logStats(log, a.Stats())
				}
			}
		}()
	}
	err = a.Run(ctx)
	st := a.Stats()
	logStats(log, st)
	b, _ := json.Marshal(st)
	log.Info("final counters", "stats", string(b))
	return err
}

func logStats(log *slog.Logger, s appliance.Stats) {
	for _, p := range s.Ports {
		log.Info("port", "port", p.Name, "rx_packets", p.Port.RxPackets, "tx_packets", p.Port.TxPackets,
			"requests", p.Completed, "responses", p.Responses, "drops", p.Drops, "buf_in_use", p.Port.BufInUse)
	}
	for _, f := range s.IFs {
		log.Info("if", "if", f.Name, "served", f.Served, "failed", f.Failed, "overloaded", f.Overloaded,
			"mean_batch", fmt.Sprintf("%.2f", f.MeanBatch), "mean_compute_ms", fmt.Sprintf("%.2f", f.MeanComputeMS))
	}
}
