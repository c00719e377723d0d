package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"sluice/appliance/buildinfo"
	"sluice/ifmanager"
	"sluice/libml"
	"sluice/orchestrator"
)

// newControlServer makes the ZeroMQ control server over this appliance.
func (a *Appliance) newControlServer() (*orchestrator.Server, error) {
	ap := a.prof.Appliance
	cfg := orchestrator.ServerConfig{Endpoint: ap.Control, CurveServerSecretKey: ap.ControlCurveSecretKey,
		AllowedClientKeys: ap.ControlClientKeys}
	if ap.DrainTimeoutMS > 0 {
		// Commands still running at shutdown get a quarter of the drain
		// timeout (at most 5 s), then are abandoned.
		cfg.ShutdownTimeout = min(5*time.Second, time.Duration(ap.DrainTimeoutMS)*time.Millisecond/4)
	}
	srv, err := orchestrator.NewServer(cfg, &controlHandler{a: a}, a.log)
	if err != nil {
		return nil, fmt.Errorf("appliance: control: %w", err)
	}
	return srv, nil
}

// ControlEndpoint is the bound control endpoint, once Run listens.
func (a *Appliance) ControlEndpoint() string {
	s, _ := a.controlEndpoint.Load().(string)
	return s
}

// controlHandler implements orchestrator.Handler over the appliance.
type controlHandler struct{ a *Appliance }

var _ orchestrator.Handler = (*controlHandler)(nil)

func notFound(name string) error {
	return orchestrator.Errorf(orchestrator.CodeNotFound, "no IF named %q", name)
}

// lookup returns the running IF called name.
func (a *Appliance) lookup(name string) (*ifRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.ifs[name]
	if !ok {
		return nil, notFound(name)
	}
	return r, nil
}

func (a *Appliance) ifStatus(r *ifRun) orchestrator.IFStatus {
	a.mu.Lock()
	spec := r.spec
	a.mu.Unlock()
	st := r.f.Status()
	state := "serving"
	switch {
	case r.f.Closing():
		state = "stopping"
	case st.UnderProvisioned:
		state = "underprovisioned"
	}
	backend := spec.Backend
	if name := r.be.Name(); name != backendKey(&spec) {
		// the driver's or the engine's fallback
		backend = name + " (fallback from " + backend + ")"
	}
	return orchestrator.IFStatus{Name: spec.Name, ModelID: spec.ModelID, Model: spec.Model,
		Backend: backend, Policy: spec.Policy, Class: spec.Class, SLOMS: spec.SLOMS, MaxBatch: st.MaxBatch,
		MinBatch: spec.MinBatch, QueueLen: spec.QueueLen, Queued: st.QueueDepth, Share: st.Share, Demand: demandOf(spec),
		Units: unitsOf(r.f.Units()), State: state, Served: st.Served, Failed: st.Failed, Overloaded: st.Overloaded,
		TimeoutAction: spec.TimeoutAction, DeadlineExceeded: st.DeadlineAdmission + st.DeadlineBatch,
		P99MS: float64(st.P99) / 1e6, Bottleneck: bottleneckOf(st), Flows: flowsOf(r.f),
		Next: spec.Next, Forwarded: r.f.C.Forwarded.Load()}
}

// flowsOf is a stateful IF's flow count, nil for other IFs.
func flowsOf(f *ifmanager.IF) *int {
	if !f.Stateful() {
		return nil
	}
	n := int(f.C.Flows.Flows.Load())
	return &n
}

// bottleneckOf is the IF's bottleneck, "" before its first batch.
func bottleneckOf(st ifmanager.Status) string {
	if st.Bottleneck == "unknown" {
		return ""
	}
	return st.Bottleneck
}

func unitsOf(mask uint64) int {
	n := 0
	for ; mask != 0; mask &= mask - 1 {
		n++
	}
	return n
}

// Deploy implements orchestrator.Handler.
func (h *controlHandler) Deploy(ctx context.Context, args orchestrator.DeployArgs) (orchestrator.IFStatus, error) {
	spec := args // the deploy command carries an [[if]] table's spec
	h.a.mu.Lock()
	policy := h.a.prof.Appliance.Policy
	h.a.mu.Unlock()
	if err := spec.Resolve(policy); err != nil {
		return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "args.%v", err)
	}
	r, err := h.a.Deploy(ctx, spec)
	if err != nil {
		return orchestrator.IFStatus{}, err
	}
	return h.a.ifStatus(r), nil
}

// Deploy loads and starts a new IF and routes its model id on every port.
// A model that fails to load is CodeNotFound (no such file) or
// CodeBadRequest; an IF of the profile that had failed to load and is
// deployed is no longer failed.
func (a *Appliance) Deploy(ctx context.Context, spec IFSection) (*ifRun, error) {
	r, err := a.deploy(ctx, spec)
	var le *loadError
	if errors.As(err, &le) {
		return nil, orchestrator.Errorf(loadErrorCode(le.err), "%v", le.err)
	}
	return r, err
}

// deploy is Deploy with a model that fails to load returned as a
// *loadError.
func (a *Appliance) deploy(ctx context.Context, spec IFSection) (*ifRun, error) {
	if a.draining.Load() {
		return nil, orchestrator.Errorf(orchestrator.CodeConflict, "the appliance is draining")
	}
	a.mu.Lock()
	placement := a.prof.Appliance.Placement
	a.mu.Unlock()
	if err := checkPlacement(placement, &spec); err != nil {
		return nil, orchestrator.Errorf(orchestrator.CodeBadRequest, "args.%v", err)
	}
	a.mu.Lock()
	for _, r := range a.ifs {
		if r.spec.Name == spec.Name {
			a.mu.Unlock()
			return nil, orchestrator.Errorf(orchestrator.CodeConflict, "an IF named %q exists", spec.Name)
		}
		if r.spec.ModelID == spec.ModelID {
			a.mu.Unlock()
			return nil, orchestrator.Errorf(orchestrator.CodeConflict, "model id %d is served by %q", spec.ModelID, r.spec.Name)
		}
	}
	if _, ok := a.ifs[spec.Next]; spec.Next != "" && !ok {
		a.mu.Unlock()
		return nil, orchestrator.Errorf(orchestrator.CodeBadRequest, "args.next %q: no IF of that name runs", spec.Next)
	}
	a.mu.Unlock()
	r, err := a.loadIF(ctx, spec)
	if err != nil {
		return nil, &loadError{err}
	}
	a.mu.Lock()
	a.ifs[spec.Name] = r
	a.order = append(a.order, spec.Name)
	if a.running {
		a.startIF(r)
	}
	for _, p := range a.ports {
		if err := p.router.Add(r.f); err != nil {
			a.mu.Unlock()
			return nil, orchestrator.Errorf(orchestrator.CodeConflict, "%v", err)
		}
	}
	a.mu.Unlock()
	a.setFailed(spec, "")
	a.applyShares(true)
	a.log.Info("IF deployed", "if", spec.Name)
	return r, nil
}

// replace moves the running IF r to the spec next by a new IF, make
// before break: next is loaded (and warmed) while r serves; then every
// port routes next's model id to the new IF in one step (and r's, if it
// differs, nowhere); then r stops taking requests and serves its queue.
// No request finds no IF in between (a reload used to answer requests
// unknown_model while the replacement compiled). If next fails to load,
// r keeps serving.
func (a *Appliance) replace(ctx context.Context, r *ifRun, next IFSection) error {
	a.mu.Lock()
	err := a.replaceConflict(r, next)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	nr, err := a.loadIF(ctx, next)
	if err != nil {
		return &loadError{err}
	}
	if hook := a.replaceLoaded.Load(); hook != nil {
		(*hook)() // tests: the old IF must still serve here
	}
	a.mu.Lock()
	// checked again: a command may have changed the IFs while next loaded
	if err := a.replaceConflict(r, next); err != nil {
		a.mu.Unlock()
		nr.f.Run(closedCtx()) // closes its instance
		return err
	}
	a.ifs[next.Name] = nr
	running := a.running
	if running {
		a.startIF(nr)
	}
	for _, p := range a.ports {
		if err := p.router.Replace(r.f, nr.f); err != nil {
			a.mu.Unlock()
			return orchestrator.Errorf(orchestrator.CodeConflict, "%v", err)
		}
	}
	a.mu.Unlock()
	if running {
		if err := r.f.Stop(ctx); err != nil {
			return orchestrator.Errorf(orchestrator.CodeUnavailable, "%v", err)
		}
	} else {
		r.f.Run(closedCtx())
	}
	a.applyShares(true)
	a.log.Info("IF replaced", "if", next.Name, "model_id", next.ModelID)
	return nil
}

// replaceConflict is the reason r cannot be replaced by an IF of spec
// next: r is no longer the IF of that name, or another IF serves next's
// model id; a.mu is held.
func (a *Appliance) replaceConflict(r *ifRun, next IFSection) error {
	if a.ifs[next.Name] != r {
		return orchestrator.Errorf(orchestrator.CodeConflict, "IF %q changed while its replacement loaded", next.Name)
	}
	for _, o := range a.ifs {
		if o != r && o.spec.ModelID == next.ModelID {
			return orchestrator.Errorf(orchestrator.CodeConflict, "model id %d is served by %q", next.ModelID, o.spec.Name)
		}
	}
	return nil
}

// closedCtx is an ended context: an IF worker run on it stops at once,
// closing its instance (an IF that never served).
func closedCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Remove implements orchestrator.Handler.
func (h *controlHandler) Remove(ctx context.Context, args orchestrator.RemoveArgs) error {
	return h.a.Remove(ctx, args.Name)
}

// Remove stops routing to an IF, serves what it has queued, and unloads it.
// An IF of the profile that failed to load is forgotten.
func (a *Appliance) Remove(ctx context.Context, name string) error {
	r, err := a.lookup(name)
	if err != nil {
		if len(a.failedStatus(name)) > 0 {
			a.setFailed(IFSection{Name: name}, "")
			a.log.Info("failed IF removed", "if", name)
			return nil
		}
		return err
	}
	a.mu.Lock()
	for _, p := range a.ports {
		p.router.Remove(r.f)
	}
	running := a.running
	a.mu.Unlock()
	if running {
		if err := r.f.Stop(ctx); err != nil {
			return orchestrator.Errorf(orchestrator.CodeUnavailable, "%v", err)
		}
	}
	a.mu.Lock()
	delete(a.ifs, name)
	a.order = slices.DeleteFunc(a.order, func(n string) bool { return n == name })
	a.mu.Unlock()
	a.applyShares(true)
	a.log.Info("IF removed", "if", name)
	return nil
}

// Resize implements orchestrator.Handler: a new share through a swap.
func (h *controlHandler) Resize(ctx context.Context, args orchestrator.ResizeArgs) (orchestrator.IFStatus, error) {
	r, err := h.a.lookup(args.Name)
	if err != nil {
		return orchestrator.IFStatus{}, err
	}
	if p := r.spec.Policy; p != PolicyNone {
		return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeConflict, "IF %q runs under policy %q: the scheduler shares the units, an IF has no share to resize", args.Name, p)
	}
	share := args.Share
	total := h.a.totalUnits()
	if args.Units > 0 {
		if args.Units > total {
			return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "units %d: only %d exist", args.Units, total)
		}
		share = float64(args.Units) / float64(total)
	}
	if share <= 0 || share > 1 {
		return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "give share in (0, 1] or units")
	}
	h.a.mu.Lock()
	r.spec.Share = share
	r.spec.AutoShare = false // an operator's share stays until changed
	r.tuner.Store(nil)
	h.a.mu.Unlock()
	if err := h.a.applySharesCtx(ctx, true); err != nil {
		return orchestrator.IFStatus{}, err
	}
	return h.a.ifStatus(r), nil
}

// demandOf is the share an IF asks for (none under a policy: the
// scheduler shares the units).
func demandOf(s IFSection) float64 {
	if s.Policy != PolicyNone {
		return 0
	}
	return s.Share
}

// Swap implements orchestrator.Handler.
func (h *controlHandler) Swap(ctx context.Context, args orchestrator.SwapArgs) (orchestrator.SwapResult, error) {
	r, err := h.a.lookup(args.Name)
	if err != nil {
		return orchestrator.SwapResult{}, err
	}
	spec := ifmanager.SwapSpec{MaxBatch: args.MaxBatch, Share: args.Share}
	if args.Share < 0 || args.Share > 1 || args.MaxBatch < 0 {
		return orchestrator.SwapResult{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "share must be in (0, 1], max_batch positive")
	}
	if args.Share > 0 {
		if p := r.spec.Policy; p != PolicyNone {
			return orchestrator.SwapResult{}, orchestrator.Errorf(orchestrator.CodeConflict, "IF %q runs under policy %q: the scheduler shares the units, a swap cannot give it a share", args.Name, p)
		}
		spec.Units, spec.SetUnits = h.a.unitsFor(r, args.Share)
	}
	h.a.mu.Lock()
	newSpec := r.spec
	h.a.mu.Unlock()
	if args.Model != "" && args.Model != newSpec.Model {
		newSpec.Model = args.Model
		if err := newSpec.Validate(); err != nil {
			return orchestrator.SwapResult{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "args.%v", err)
		}
		_, inst, _, err := h.a.loadInstance(ctx, &newSpec)
		if err != nil {
			return orchestrator.SwapResult{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "%v", err)
		}
		spec.Instance = inst
	}
	res, err := r.f.Swap(ctx, spec)
	if err != nil {
		return orchestrator.SwapResult{}, orchestrator.Errorf(orchestrator.CodeUnavailable, "%v", err)
	}
	h.a.mu.Lock()
	r.spec.Model = newSpec.Model
	if args.MaxBatch > 0 {
		r.spec.MaxBatch = args.MaxBatch
	}
	if args.Share > 0 {
		r.spec.Share = args.Share
	}
	h.a.mu.Unlock()
	return orchestrator.SwapResult{IF: h.a.ifStatus(r), PrepareMS: float64(res.Prepare) / 1e6, GapUS: float64(res.Gap) / 1e3}, nil
}

// SetBatch implements orchestrator.Handler.
func (h *controlHandler) SetBatch(ctx context.Context, args orchestrator.SetBatchArgs) (orchestrator.IFStatus, error) {
	r, err := h.a.lookup(args.Name)
	if err != nil {
		return orchestrator.IFStatus{}, err
	}
	minB := args.MinBatch
	if minB == 0 {
		minB = 1
	}
	if args.MaxBatch < 1 || args.MaxBatch > 1024 || minB > args.MaxBatch {
		return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "batch bounds %d..%d: want 1 <= min <= max <= 1024", minB, args.MaxBatch)
	}
	if err := r.f.SetBatch(ctx, minB, args.MaxBatch); err != nil {
		return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeUnavailable, "%v", err)
	}
	h.a.mu.Lock()
	r.spec.MinBatch, r.spec.MaxBatch = minB, args.MaxBatch
	h.a.mu.Unlock()
	return h.a.ifStatus(r), nil
}

// ReloadProfile implements orchestrator.Handler.
func (h *controlHandler) ReloadProfile(ctx context.Context, args orchestrator.ReloadArgs) (orchestrator.ReloadResult, error) {
	return h.a.Reload(ctx, args.Path)
}

// Reload reads a profile and applies its IF changes: new IFs are
// deployed, missing ones removed, changed ones swapped (a new model or
// batch bound or share) or replaced. A profile that cannot be read or
// does not validate changes nothing; only a regular file of at most
// MaxProfileBytes is read (see LoadProfile). An IF whose model fails to
// load is listed in the result's Failed and the rest is applied: a new
// IF is then shown as failed, a changed one keeps serving as it was. IFs
// that had failed are loaded again. Port and [appliance] changes need a
// restart and are reported in the log. One reload runs at a time.
func (a *Appliance) Reload(ctx context.Context, path string) (orchestrator.ReloadResult, error) {
	select {
	case a.iso.reload <- struct{}{}:
		defer func() { <-a.iso.reload }()
	case <-ctx.Done():
		return orchestrator.ReloadResult{}, orchestrator.Errorf(orchestrator.CodeUnavailable, "reload not run: another reload was still running: %v", context.Cause(ctx))
	}
	a.mu.Lock()
	if path == "" {
		path = a.path
	}
	old := a.prof
	a.mu.Unlock()
	if path == "" {
		return orchestrator.ReloadResult{}, orchestrator.Errorf(orchestrator.CodeBadRequest, "no profile path: the appliance was not started from a file")
	}
	prof, err := LoadProfileContext(ctx, path)
	if err != nil {
		if ctx.Err() != nil {
			return orchestrator.ReloadResult{}, orchestrator.Errorf(orchestrator.CodeUnavailable, "%v", err)
		}
		if errors.Is(err, os.ErrNotExist) {
			return orchestrator.ReloadResult{}, orchestrator.Errorf(orchestrator.CodeNotFound, "%v", err)
		}
		return orchestrator.ReloadResult{}, orchestrator.Errorf(orchestrator.CodeInvalidProfile, "%v", err)
	}
	res := orchestrator.ReloadResult{Path: path, Added: []string{}, Removed: []string{}, Changed: []string{}, Unchanged: []string{},
		RestartNeeded: restartKeys(old, prof)}
	if len(res.RestartNeeded) > 0 {
		a.log.Warn("reload: [appliance] and [[port]] changes are not applied; they take effect at the next start", "path", path, "keys", res.RestartNeeded)
	}
	want := map[string]IFSection{}
	for _, s := range prof.IFs {
		want[s.Name] = s
	}
	a.mu.Lock()
	current := map[string]IFSection{}
	for name, r := range a.ifs {
		current[name] = r.spec
	}
	a.mu.Unlock()
	// An IF that cannot be applied is a failure of its own: the others
	// are applied all the same. Once ctx has ended, nothing more is tried.
	failed := map[string]string{}
	fail := func(i int, name string, err error) error {
		if ctx.Err() != nil {
			return orchestrator.Errorf(orchestrator.CodeUnavailable, "reload of %s stopped at IF %q: %v", path, name, err)
		}
		key := ""
		var le *loadError
		if errors.As(err, &le) {
			key, err = "model", le.err
			if i >= 0 {
				key, err = loadErrorKey(&prof.IFs[i], le.err)
			}
		}
		if i >= 0 {
			err = prof.ifError(i, key, err)
		}
		failed[name] = err.Error()
		res.Failed = append(res.Failed, orchestrator.IFFailure{Name: name, Error: err.Error()})
		return nil
	}
	// The profile file is the appliance's truth: IFs deployed by command
	// and not written into it are removed too (said in the log and in
	// the reply's removed list).
	inOld := map[string]bool{}
	for _, s := range old.IFs {
		inOld[s.Name] = true
	}
	// Removals first, so a model id can move to another IF.
	for name := range current {
		if _, ok := want[name]; !ok {
			if !inOld[name] {
				a.log.Warn("reload: removing an IF deployed by command: it is not in the profile (the profile file is the appliance's truth)", "if", name, "path", path)
			}
			if err := a.Remove(ctx, name); err != nil {
				if ferr := fail(-1, name, err); ferr != nil {
					return res, ferr
				}
				continue
			}
			res.Removed = append(res.Removed, name)
		}
	}
	for i, s := range prof.IFs {
		cur, ok := current[s.Name]
		switch {
		case !ok:
			if _, err := a.deploy(ctx, s); err != nil {
				if ferr := fail(i, s.Name, err); ferr != nil {
					return res, ferr
				}
				continue
			}
			res.Added = append(res.Added, s.Name)
		case reflect.DeepEqual(cur, s):
			res.Unchanged = append(res.Unchanged, s.Name)
		default:
			if err := a.change(ctx, cur, s); err != nil {
				if ferr := fail(i, s.Name, err); ferr != nil {
					return res, ferr
				}
				continue
			}
			res.Changed = append(res.Changed, s.Name)
		}
	}
	// The profile's IFs that do not run now are its failed ones; those of
	// the old profile that are gone from the new one are forgotten.
	a.mu.Lock()
	a.prof.IFs = prof.IFs
	a.iso.failed = nil
	for _, s := range prof.IFs {
		if _, running := a.ifs[s.Name]; !running && failed[s.Name] != "" {
			a.iso.failed = append(a.iso.failed, failedIF{spec: s, err: failed[s.Name]})
		}
	}
	a.mu.Unlock()
	slices.Sort(res.Removed)
	logReload(a.log, res)
	return res, nil
}

// restartKeys names the [appliance] and [[port]] keys whose values differ
// between the running profile and next ("appliance.threads",
// "port[1].listen", "port" when ports were added or removed).
func restartKeys(cur, next *Profile) []string {
	var keys []string
	keys = diffKeys(keys, "appliance", reflect.ValueOf(cur.Appliance), reflect.ValueOf(next.Appliance))
	if len(cur.Ports) != len(next.Ports) {
		return append(keys, "port")
	}
	for i := range cur.Ports {
		keys = diffKeys(keys, fmt.Sprintf("port[%d]", i), reflect.ValueOf(cur.Ports[i]), reflect.ValueOf(next.Ports[i]))
	}
	return keys
}

// diffKeys appends prefix.key for every field of the structs x and y
// whose values differ (key: the field's toml tag).
func diffKeys(keys []string, prefix string, x, y reflect.Value) []string {
	t := x.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		if !reflect.DeepEqual(x.Field(i).Interface(), y.Field(i).Interface()) {
			keys = append(keys, prefix+"."+tag)
		}
	}
	return keys
}

// change moves an IF from cur to next: by swaps when only the model, batch
// bounds, share, SLO or timeout action change; otherwise (model id, class,
// input, queue, policy) by a replacement IF (replace).
func (a *Appliance) change(ctx context.Context, cur, next IFSection) error {
	r, err := a.lookup(cur.Name)
	if err != nil {
		return err
	}
	swappable := cur
	swappable.Model, swappable.Backend = next.Model, next.Backend
	swappable.MaxBatch, swappable.MinBatch, swappable.Share, swappable.AutoShare = next.MaxBatch, next.MinBatch, next.Share, next.AutoShare
	swappable.SLOMS, swappable.Batching, swappable.TimeoutAction = next.SLOMS, next.Batching, next.TimeoutAction
	swappable.InputShape = next.InputShape
	if !reflect.DeepEqual(swappable, next) || cur.Backend != next.Backend || cur.Batching != next.Batching {
		// Not a swap (model id, class, input, queue, policy...): replace
		// the IF, make before break.
		return a.replace(ctx, r, next)
	}
	spec := ifmanager.SwapSpec{MaxBatch: next.MaxBatch}
	if next.Model != cur.Model || !slices.Equal(next.InputShape, cur.InputShape) {
		nbe, inst, _, err := a.loadInstance(ctx, &next)
		if err != nil {
			return &loadError{err}
		}
		if nbe != r.be {
			// the new model runs on another backend (a fallback to ONNX
			// Runtime, or back from it): a new IF, not a swap
			_ = inst.Close()
			return a.replace(ctx, r, next)
		}
		spec.Instance = inst
	}
	if _, err := r.f.Swap(ctx, spec); err != nil {
		return orchestrator.Errorf(orchestrator.CodeUnavailable, "%v", err)
	}
	if err := r.f.SetBatch(ctx, next.MinBatch, next.MaxBatch); err != nil {
		return err
	}
	if next.SLOMS != cur.SLOMS {
		if err := r.f.SetSLO(ctx, next.SLO()); err != nil {
			return err
		}
	}
	r.f.SetServeLate(next.TimeoutAction == ifmanager.TimeoutServeLate)
	a.mu.Lock()
	r.spec = next
	if next.AutoShare && r.tuner.Load() == nil {
		r.tuner.Store(ifmanager.NewShareTuner(next.SLO()))
	} else if !next.AutoShare {
		r.tuner.Store(nil)
	}
	a.mu.Unlock()
	return a.applySharesCtx(ctx, true)
}

// Status implements orchestrator.Handler.
func (h *controlHandler) Status(_ context.Context, args orchestrator.StatusArgs) (orchestrator.StatusReply, error) {
	a := h.a
	rep := orchestrator.StatusReply{Version: buildinfo.Version(), UptimeS: time.Since(a.started).Seconds(), Draining: a.draining.Load(), IFs: []orchestrator.IFStatus{}}
	a.mu.Lock()
	var runs []*ifRun
	for _, name := range a.order {
		if args.Name == "" || args.Name == name {
			runs = append(runs, a.ifs[name])
		}
	}
	a.mu.Unlock()
	failed := a.failedStatus(args.Name)
	if args.Name != "" && len(runs) == 0 && len(failed) == 0 {
		return rep, notFound(args.Name)
	}
	for _, r := range runs {
		rep.IFs = append(rep.IFs, a.ifStatus(r))
	}
	rep.IFs = append(rep.IFs, failed...) // state "failed", with the error
	slices.SortFunc(rep.IFs, func(x, y orchestrator.IFStatus) int { return strings.Compare(x.Name, y.Name) })
	return rep, nil
}

// Resume implements orchestrator.Handler: after a drain command, every port
// admits requests again and /readyz answers ready. The drain of the
// process's own shutdown (SIGTERM) cannot be undone.
func (h *controlHandler) Resume(_ context.Context, _ orchestrator.ResumeArgs) (orchestrator.ResumeResult, error) {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shuttingDown.Load() {
		return orchestrator.ResumeResult{}, orchestrator.Errorf(orchestrator.CodeConflict, "the appliance is shutting down")
	}
	was := a.draining.Swap(false)
	for _, p := range a.ports {
		p.router.SetDraining(false)
	}
	if was {
		a.log.Info("resumed: admitting requests again")
	}
	return orchestrator.ResumeResult{WasDraining: was}, nil
}

// Drain implements orchestrator.Handler: every port stops admitting new
// requests (they are answered shutting_down) and the call waits for the IF
// queues to empty.
func (h *controlHandler) Drain(ctx context.Context, args orchestrator.DrainArgs) (orchestrator.DrainResult, error) {
	a := h.a
	start := time.Now()
	a.mu.Lock()
	a.draining.Store(true)
	for _, p := range a.ports {
		p.router.SetDraining(true)
	}
	a.mu.Unlock()
	wait := 30 * time.Second
	if args.TimeoutMS > 0 {
		wait = time.Duration(args.TimeoutMS) * time.Millisecond
	}
	deadline := time.Now().Add(wait)
	for {
		pending := a.pending()
		if pending == 0 {
			return orchestrator.DrainResult{Drained: true, ElapsedMS: float64(time.Since(start)) / 1e6}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return orchestrator.DrainResult{Pending: pending, ElapsedMS: float64(time.Since(start)) / 1e6}, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// pending counts requests queued in IFs or held complete by reassembly.
func (a *Appliance) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.ifs {
		n += r.f.QueueDepth()
	}
	for _, p := range a.ports {
		c := &p.loop.Table().C
		n += int(c.Completed.Load() - c.Released.Load())
	}
	return n
}

// totalUnits is the CPU backend's unit count (1 when it has none).
func (a *Appliance) totalUnits() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.backends["cpu"].(interface{ Units() int }); ok && b.Units() > 0 {
		return b.Units()
	}
	return 1
}

// unitsFor is the unit mask an IF would get with share, the others
// keeping theirs.
func (a *Appliance) unitsFor(r *ifRun, share float64) (uint64, bool) {
	a.mu.Lock()
	names := slices.Clone(a.order)
	shares := make([]float64, len(names))
	for i, n := range names {
		shares[i] = a.ifs[n].spec.Share
		if a.ifs[n] == r {
			shares[i] = share
		}
	}
	a.mu.Unlock()
	masks := a.masks(shares)
	for i, n := range names {
		if n == r.spec.Name {
			return masks[i], true
		}
	}
	return 0, false
}

// masks turns shares into unit masks: shares are divided max-min fairly,
// then rounded to whole units.
func (a *Appliance) masks(shares []float64) []uint64 {
	total := a.totalUnits()
	alloc := ifmanager.MaxMinFair(1, shares)
	return ifmanager.UnitMasks(ifmanager.Units(alloc, total), total)
}

// applyShares recomputes every IF's units from the shares and swaps the
// IFs whose units change (swap=false sets them at load time, before any
// worker runs).
func (a *Appliance) applyShares(swap bool) {
	if err := a.applySharesCtx(context.Background(), swap); err != nil {
		a.log.Warn("applying shares", "err", err)
	}
}

func (a *Appliance) applySharesCtx(ctx context.Context, swap bool) error {
	a.mu.Lock()
	cpuBE := a.backends["cpu"]
	gpu := a.backends["cuda"]
	if gpu == cpuBE {
		gpu = nil // the cpu fallback: its IFs are divided with the cpu ones
	}
	a.mu.Unlock()
	if cpuBE != nil {
		if err := a.divideShares(ctx, swap, cpuBE, true); err != nil {
			return err
		}
	}
	if gpu != nil {
		return a.divideShares(ctx, swap, gpu, false)
	}
	return nil
}

// divideShares divides the shares of the IFs on backend be max-min fairly
// and gives each IF its allocation: CPU unit masks (units), or a share
// the instance turns into an SM partition (cuda: a green context; GSLICE
// §3.3.2, a shadow in a new partition holding the same weights). Before
// the workers run the IFs are set directly, after by shadow swaps.
// Backends manage their own IFs' units otherwise (scheduler policies, ort).
func (a *Appliance) divideShares(ctx context.Context, swap bool, be libml.Backend, units bool) error {
	var runs []*ifRun
	var shares []float64
	for _, r := range a.ifRuns() {
		a.mu.Lock()
		on, share := r.be == be, r.spec.Share
		a.mu.Unlock()
		if on {
			runs, shares = append(runs, r), append(shares, share)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	alloc := ifmanager.MaxMinFair(1, shares)
	var masks []uint64
	if units {
		masks = a.masks(shares)
		// the inss placement's global stage (or its learned
		// scheduler) chose each IF's units
		placed := a.prof.Appliance.PlacementDevices > 1 || a.learned != nil
		a.mu.Lock()
		for i, r := range runs {
			if r.planMask != 0 && placed {
				masks[i] = r.planMask
			}
		}
		a.mu.Unlock()
	}
	for i, r := range runs {
		spec := ifmanager.SwapSpec{Share: alloc[i]}
		same := r.f.Status().Share == alloc[i]
		if units {
			spec.Units, spec.SetUnits = masks[i], true
			same = r.f.Units() == masks[i]
		}
		if same {
			continue
		}
		if !swap {
			r.f.SetUnitsBeforeStart(spec.Units, alloc[i])
			continue
		}
		if _, err := r.f.Swap(ctx, spec); err != nil {
			return orchestrator.Errorf(orchestrator.CodeUnavailable, "resize %q: %v", r.spec.Name, err)
		}
	}
	return nil
}

// ifRuns is a snapshot of the IFs in profile order.
func (a *Appliance) ifRuns() []*ifRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	runs := make([]*ifRun, 0, len(a.order))
	for _, name := range a.order {
		runs = append(runs, a.ifs[name])
	}
	return runs
}

// shareRounds calls step every interval until ctx ends, with the round's
// time and the window since the last round, and applies the shares (by
// shadow swaps) after a round that changed one. The share allocators
// (auto_share's tuners, the inss placement) run on it.
func (a *Appliance) shareRounds(ctx context.Context, every time.Duration, step func(now time.Time, window time.Duration) bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			changed := step(now, now.Sub(last))
			last = now
			if changed {
				a.applyShares(true)
			}
		}
	}
}

// tuneShares runs GSLICE's self-tuning allocation for IFs with auto_share
// every share_interval_ms until ctx ends.
func (a *Appliance) tuneShares(ctx context.Context) {
	a.shareRounds(ctx, time.Duration(a.prof.Appliance.ShareIntervalMS)*time.Millisecond, a.tuneStep)
}

// tuneStep is one round of the self-tuning tuners over the last window;
// it reports whether a share changed.
func (a *Appliance) tuneStep(now time.Time, window time.Duration) bool {
	changed := false
	for _, r := range a.ifRuns() {
		tu := r.tuner.Load()
		if tu == nil {
			continue
		}
		a.mu.Lock()
		share := r.spec.Share
		a.mu.Unlock()
		arr := r.f.C.Arrivals.Load()
		r.obs.tunerMu.Lock()
		tu.ObserveArrivals(int(arr-r.arrivals), window)
		next, ok := tu.Propose(share, now)
		r.obs.tunerMu.Unlock()
		r.arrivals = arr
		if ok && next != share {
			a.mu.Lock()
			r.spec.Share = next
			a.mu.Unlock()
			cfg := r.f.Config()
			a.log.Info("self-tuning share", "if", cfg.Name, "from", share, "to", next)
			a.metrics.shareChanges.WithLabelValues(cfg.Name, cfg.Class.String()).Inc()
			changed = true
		}
	}
	return changed
}

// Swap runs a shadow swap of the IF called name (see ifmanager.IF.Swap).
func (a *Appliance) Swap(ctx context.Context, name string, spec ifmanager.SwapSpec) (ifmanager.SwapResult, error) {
	r, err := a.lookup(name)
	if err != nil {
		return ifmanager.SwapResult{}, err
	}
	return r.f.Swap(ctx, spec)
}
