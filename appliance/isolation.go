package appliance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"sluice/ifmanager"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/orchestrator"
)

// Options are the appliance's start-up options.
type Options struct {
	// Strict makes New fail when an IF of the profile fails to load.
	// Without it the IF is logged and shown as failed (status, /readyz)
	// and the rest of the profile serves.
	Strict bool
}

// isolation keeps the IFs of the profile that failed to load, so that one
// bad model does not take the others down.
type isolation struct {
	opts Options
	// failed are the IFs of the profile that are not running because
	// their model failed to load, in profile order (guarded by
	// Appliance.mu).
	failed []failedIF
	// reload holds a token while a reload runs: SIGHUP and
	// reload-profile apply one profile at a time.
	reload chan struct{}
}

// failedIF is an IF of the profile whose model failed to load.
type failedIF struct {
	spec IFSection
	err  string
}

// loadError is a model that failed to load for an IF.
type loadError struct{ err error }

func (e *loadError) Error() string { return e.err.Error() }
func (e *loadError) Unwrap() error { return e.err }

// loadIFs loads the profile's IFs. One that fails is logged and kept as
// failed, and the others load, unless Options.Strict: then the first
// failure is returned. Errors name the file, line and key.
func (a *Appliance) loadIFs(ctx context.Context, prof *Profile) error {
	loaded := make([]*ifRun, len(prof.IFs))
	defer func() {
		for _, r := range loaded { // routed in the profile's order
			if r != nil {
				a.order = append(a.order, r.spec.Name)
			}
		}
	}()
	for _, i := range stagesFirst(prof.IFs) {
		r, err := a.loadIF(ctx, prof.IFs[i])
		if err != nil {
			key, kerr := loadErrorKey(&prof.IFs[i], err)
			err = prof.ifError(i, key, kerr)
			if a.iso.opts.Strict || ctx.Err() != nil {
				return err
			}
			a.log.Error("IF failed to load; the rest of the profile serves", "if", prof.IFs[i].Name, "err", err)
			a.iso.failed = append(a.iso.failed, failedIF{spec: prof.IFs[i], err: err.Error()})
			continue
		}
		a.mu.Lock()
		a.ifs[r.spec.Name] = r
		a.mu.Unlock()
		loaded[i] = r
	}
	if !slices.ContainsFunc(loaded, func(r *ifRun) bool { return r != nil }) && len(a.iso.failed) > 0 {
		a.log.Error("no IF loaded: every request is answered unknown_model until a reload or deploy brings one", "failed", len(a.iso.failed))
	}
	return nil
}

// stagesFirst is the order to load ifs in: each IF after the IF its next
// names (checkPipelines made sure the names form no loop), so that a
// stage's fit to its next stage is checked at its load.
func stagesFirst(ifs []IFSection) []int {
	byName := map[string]int{}
	for i, f := range ifs {
		byName[f.Name] = i
	}
	order := make([]int, 0, len(ifs))
	done := make([]bool, len(ifs))
	var visit func(i int)
	visit = func(i int) {
		if done[i] {
			return
		}
		done[i] = true
		if j, ok := byName[ifs[i].Next]; ok && ifs[i].Next != "" {
			visit(j)
		}
		order = append(order, i)
	}
	for i := range ifs {
		visit(i)
	}
	return order
}

// loadErrorKey names the profile key a load error is about: the field a
// spec check found wrong against the model (ifmanager.FieldError: "mean",
// "input"), else "model"; and the error as that key's message.
func loadErrorKey(s *IFSection, err error) (string, error) {
	var fe *ifmanager.FieldError
	if errors.As(err, &fe) {
		return fe.Key, &trimmedError{msg: strings.TrimPrefix(fe.Detail, ": "), err: err}
	}
	return "model", trimIFPrefix(s, err)
}

// trimIFPrefix drops the `appliance: IF "name": model M: ` that load
// errors start with, for errors that name the IF and its model themselves.
func trimIFPrefix(s *IFSection, err error) error {
	msg, ok := strings.CutPrefix(err.Error(), fmt.Sprintf("appliance: IF %q: ", s.Name))
	if !ok {
		return err
	}
	msg = strings.TrimPrefix(msg, fmt.Sprintf("model %s: ", s.Model))
	return &trimmedError{msg: msg, err: err}
}

type trimmedError struct {
	msg string
	err error
}

func (e *trimmedError) Error() string { return e.msg }
func (e *trimmedError) Unwrap() error { return e.err }

// setFailed records (err != "") or clears the failure of the IF spec names.
func (a *Appliance) setFailed(spec IFSection, err string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := slices.IndexFunc(a.iso.failed, func(f failedIF) bool { return f.spec.Name == spec.Name })
	switch {
	case err == "" && i >= 0:
		a.iso.failed = slices.Delete(a.iso.failed, i, i+1)
	case err != "" && i >= 0:
		a.iso.failed[i] = failedIF{spec: spec, err: err}
	case err != "":
		a.iso.failed = append(a.iso.failed, failedIF{spec: spec, err: err})
	}
}

// failedStatus describes the failed IFs for status.
func (a *Appliance) failedStatus(name string) []orchestrator.IFStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []orchestrator.IFStatus
	for _, f := range a.iso.failed {
		if name != "" && f.spec.Name != name {
			continue
		}
		s := f.spec
		out = append(out, orchestrator.IFStatus{Name: s.Name, ModelID: s.ModelID, Model: s.Model, Backend: s.Backend,
			Policy: s.Policy, Class: s.Class, SLOMS: s.SLOMS, TimeoutAction: s.TimeoutAction, MaxBatch: s.MaxBatch, MinBatch: s.MinBatch,
			QueueLen: s.QueueLen, Share: s.Share, State: "failed", Error: f.err})
	}
	return out
}

// readyz answers /readyz: 200 while the appliance serves and at least one
// IF runs, 503 before it serves, while it drains, and when no IF runs.
// IFs that failed to load do not make it non-ready (the others serve);
// the body lists them, one "failed IF NAME: ERROR" line each.
func (a *Appliance) readyz(w http.ResponseWriter, serving bool) {
	a.mu.Lock()
	running := len(a.order)
	failed := slices.Clone(a.iso.failed)
	a.mu.Unlock()
	var b strings.Builder
	code := http.StatusOK
	switch {
	case !serving || a.draining.Load():
		code = http.StatusServiceUnavailable
		b.WriteString("not ready\n")
	case running == 0:
		code = http.StatusServiceUnavailable
		b.WriteString("not ready: no IF is serving\n")
	default:
		b.WriteString("ready\n")
	}
	for _, f := range failed {
		fmt.Fprintf(&b, "failed IF %s: %s\n", f.spec.Name, f.err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// readModelFile reads an onnx: model file: a regular file of at most
// MaxModelBytes (a FIFO or a device is refused, not waited on).
func readModelFile(ctx context.Context, path string) ([]byte, error) {
	return readRegularFile(ctx, path, MaxModelBytes, 0)
}

// readONNX reads and decodes an onnx: model file.
func readONNX(ctx context.Context, path string) (*graph.Graph, error) {
	data, err := readModelFile(ctx, path)
	if err != nil {
		return nil, err
	}
	return onnx.Decode(data)
}

// checkServable refuses a model the IF manager cannot serve: it feeds one
// input tensor per request and returns one output tensor, so a model
// needs exactly one data input (initializers aside) and one output.
// Caught here, at load, rather than as an internal error on every request.
func checkServable(g *graph.Graph) error {
	var ins []string
	for _, in := range g.Inputs {
		if g.Initializer(in.Name) == nil {
			ins = append(ins, in.Name)
		}
	}
	outs := make([]string, len(g.Outputs))
	for i, o := range g.Outputs {
		outs[i] = o.Name
	}
	var bad []string
	for _, side := range []struct {
		what  string
		names []string
	}{{"inputs", ins}, {"outputs", outs}} {
		if len(side.names) != 1 {
			bad = append(bad, fmt.Sprintf("%d %s (%s)", len(side.names), side.what, strings.Join(side.names, ", ")))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("the model has %s; an IF serves models with one input and one output", strings.Join(bad, " and "))
}

// loadErrorCode is the control code of a model that failed to load:
// not_found for a missing file, bad_request otherwise.
func loadErrorCode(err error) orchestrator.Code {
	if errors.Is(err, fs.ErrNotExist) {
		return orchestrator.CodeNotFound
	}
	return orchestrator.CodeBadRequest
}

// logReload logs a reload's outcome.
func logReload(log *slog.Logger, res orchestrator.ReloadResult) {
	attrs := []any{"path", res.Path, "added", res.Added, "removed", res.Removed, "changed", res.Changed}
	if len(res.Failed) == 0 {
		log.Info("profile reloaded", attrs...)
		return
	}
	for _, f := range res.Failed {
		log.Error("reload: IF failed to load; the rest of the profile is applied", "if", f.Name, "err", f.Error)
	}
	log.Warn("profile reloaded with failed IFs", append(attrs, "failed", len(res.Failed))...)
}
