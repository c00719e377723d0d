package appliance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"sluice/libml"
)

// CheckResult is what Check found: the IFs that load, and an error per
// IF that does not (naming the profile's file, line and key).
type CheckResult struct {
	Loaded []string
	Failed []error
}

// Check loads every IF of prof as the appliance would (reads and decodes
// its model, compiles it on its backend, profiles it under a scheduling
// policy) without opening a port or the control and metrics endpoints,
// then unloads everything. The profile itself was validated when it was
// parsed; Check finds what only loading can: an unknown zoo model, a
// missing or corrupt model file, an operator the backend lacks, a model
// with several inputs or outputs. `sluice -check` runs it.
func Check(ctx context.Context, prof *Profile, log *slog.Logger) (CheckResult, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Appliance{prof: prof, log: log, backends: map[string]libml.Backend{}, ifs: map[string]*ifRun{},
		metrics: newMetricsSet(), started: time.Now()}
	a.iso = isolation{reload: make(chan struct{}, 1)}
	defer a.Close()
	if err := a.loadIFs(ctx, prof); err != nil {
		return CheckResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return CheckResult{}, err
	}
	var res CheckResult
	// an IF's worker closes its instance when it stops; started on an
	// ended context, it stops at once
	for _, name := range a.order {
		res.Loaded = append(res.Loaded, name)
		a.ifs[name].f.Run(closedCtx())
	}
	for _, f := range a.iso.failed {
		res.Failed = append(res.Failed, errors.New(f.err))
	}
	return res, nil
}
