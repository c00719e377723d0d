// Package orchtest provides a fake orchestrator.Handler for tests of the
// control plane and of programs that drive it (tools/ifctl). It keeps a
// small in-memory IF table so that commands have visible effects, and
// records every call.
package orchtest

import (
	"context"
	"slices"
	"strings"
	"sync"

	"sluice/orchestrator"
)

// Call is one recorded handler call: the command name and its typed args
// (orchestrator.DeployArgs, ...).
type Call struct {
	Cmd  string
	Args any
}

// Fake is an in-memory orchestrator.Handler. It is safe for concurrent
// use.
type Fake struct {
	mu       sync.Mutex
	ifs      map[string]orchestrator.IFStatus
	calls    []Call
	hooks    map[string]func(context.Context) error
	draining bool
	// reloadFailed are reported as failed IFs by ReloadProfile.
	reloadFailed []orchestrator.IFFailure
}

var _ orchestrator.Handler = (*Fake)(nil)

// New returns a Fake with the given IFs already deployed.
func New(ifs ...orchestrator.IFStatus) *Fake {
	f := &Fake{ifs: make(map[string]orchestrator.IFStatus), hooks: make(map[string]func(context.Context) error)}
	for _, s := range ifs {
		f.ifs[s.Name] = s
	}
	return f
}

// SetHook makes calls of cmd run fn first (after being recorded): fn may
// block, sleep, panic, or return an error, which the call then returns
// without changing anything. A nil fn removes the hook.
func (f *Fake) SetHook(cmd string, fn func(ctx context.Context) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn == nil {
		delete(f.hooks, cmd)
		return
	}
	f.hooks[cmd] = fn
}

// SetReloadFailures makes ReloadProfile report these IFs as failed to
// load (the rest of the profile applied).
func (f *Fake) SetReloadFailures(failed ...orchestrator.IFFailure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloadFailed = slices.Clone(failed)
}

// SetError makes calls of cmd fail with err.
func (f *Fake) SetError(cmd string, err error) {
	f.SetHook(cmd, func(context.Context) error { return err })
}

// Calls returns the calls so far, oldest first.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// CallCount returns how many calls were made.
func (f *Fake) CallCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// IFs returns the IF table sorted by name.
func (f *Fake) IFs() []orchestrator.IFStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sorted()
}

// Draining reports whether Drain was called.
func (f *Fake) Draining() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.draining
}

func (f *Fake) sorted() []orchestrator.IFStatus {
	out := make([]orchestrator.IFStatus, 0, len(f.ifs))
	for _, s := range f.ifs {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b orchestrator.IFStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// begin records a call and runs its hook outside the lock.
func (f *Fake) begin(ctx context.Context, cmd string, args any) error {
	f.mu.Lock()
	f.calls = append(f.calls, Call{Cmd: cmd, Args: args})
	hook := f.hooks[cmd]
	f.mu.Unlock()
	if hook != nil {
		return hook(ctx)
	}
	return nil
}

func notFound(name string) error {
	return orchestrator.Errorf(orchestrator.CodeNotFound, "no IF named %q", name)
}

// Deploy adds an IF with the appliance's defaults for unset fields.
func (f *Fake) Deploy(ctx context.Context, a orchestrator.DeployArgs) (orchestrator.IFStatus, error) {
	if err := f.begin(ctx, orchestrator.CmdDeploy, a); err != nil {
		return orchestrator.IFStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining {
		return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeConflict, "appliance is draining")
	}
	if _, ok := f.ifs[a.Name]; ok {
		return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeConflict, "IF %q exists", a.Name)
	}
	for _, s := range f.ifs {
		if s.ModelID == a.ModelID {
			return orchestrator.IFStatus{}, orchestrator.Errorf(orchestrator.CodeConflict, "model id %d is served by %q", a.ModelID, s.Name)
		}
	}
	s := orchestrator.IFStatus{
		Name: a.Name, ModelID: a.ModelID, Model: a.Model, Backend: orDefault(a.Backend, "cpu"),
		Class: orDefault(a.Class, "be"), SLOMS: a.SLOMS, MaxBatch: orDefaultInt(a.MaxBatch, 8),
		QueueLen: orDefaultInt(a.QueueLen, 256), Share: a.Share, State: "serving",
	}
	if s.Share == 0 {
		s.Share = 0.3
	}
	f.ifs[a.Name] = s
	return s, nil
}

// Remove deletes an IF.
func (f *Fake) Remove(ctx context.Context, a orchestrator.RemoveArgs) error {
	if err := f.begin(ctx, orchestrator.CmdRemove, a); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ifs[a.Name]; !ok {
		return notFound(a.Name)
	}
	delete(f.ifs, a.Name)
	return nil
}

// Resize sets an IF's share or units.
func (f *Fake) Resize(ctx context.Context, a orchestrator.ResizeArgs) (orchestrator.IFStatus, error) {
	if err := f.begin(ctx, orchestrator.CmdResize, a); err != nil {
		return orchestrator.IFStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.ifs[a.Name]
	if !ok {
		return s, notFound(a.Name)
	}
	if a.Share != 0 {
		s.Share, s.Units = a.Share, 0
	} else {
		s.Units = a.Units
	}
	f.ifs[a.Name] = s
	return s, nil
}

// Swap applies the given fields as a shadow swap would.
func (f *Fake) Swap(ctx context.Context, a orchestrator.SwapArgs) (orchestrator.SwapResult, error) {
	if err := f.begin(ctx, orchestrator.CmdSwap, a); err != nil {
		return orchestrator.SwapResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.ifs[a.Name]
	if !ok {
		return orchestrator.SwapResult{}, notFound(a.Name)
	}
	s.Model = orDefault(a.Model, s.Model)
	if a.Share != 0 {
		s.Share = a.Share
	}
	s.MaxBatch = orDefaultInt(a.MaxBatch, s.MaxBatch)
	f.ifs[a.Name] = s
	return orchestrator.SwapResult{IF: s, PrepareMS: 1.5, GapUS: 42}, nil
}

// SetBatch sets an IF's batch bounds.
func (f *Fake) SetBatch(ctx context.Context, a orchestrator.SetBatchArgs) (orchestrator.IFStatus, error) {
	if err := f.begin(ctx, orchestrator.CmdSetBatch, a); err != nil {
		return orchestrator.IFStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.ifs[a.Name]
	if !ok {
		return s, notFound(a.Name)
	}
	s.MaxBatch = a.MaxBatch
	s.MinBatch = orDefaultInt(a.MinBatch, s.MinBatch)
	f.ifs[a.Name] = s
	return s, nil
}

// ReloadProfile reports every IF unchanged; a path containing "bad" is an
// invalid profile.
func (f *Fake) ReloadProfile(ctx context.Context, a orchestrator.ReloadArgs) (orchestrator.ReloadResult, error) {
	if err := f.begin(ctx, orchestrator.CmdReloadProfile, a); err != nil {
		return orchestrator.ReloadResult{}, err
	}
	path := orDefault(a.Path, "/etc/sluice/profile.toml")
	if strings.Contains(path, "bad") {
		return orchestrator.ReloadResult{}, orchestrator.Errorf(orchestrator.CodeInvalidProfile, "profile %s:3: unknown key \"x\"", path)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := orchestrator.ReloadResult{Path: path, Added: []string{}, Removed: []string{}, Changed: []string{}, Unchanged: []string{}}
	for _, s := range f.sorted() {
		r.Unchanged = append(r.Unchanged, s.Name)
	}
	r.Failed = slices.Clone(f.reloadFailed)
	return r, nil
}

// Plan returns the IFs' units and shares as a gslice placement on 2
// units.
func (f *Fake) Plan(ctx context.Context, a orchestrator.PlanArgs) (orchestrator.PlanReply, error) {
	if err := f.begin(ctx, orchestrator.CmdPlan, a); err != nil {
		return orchestrator.PlanReply{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := orchestrator.PlanReply{Placement: "gslice", Units: 2, IFs: []orchestrator.PlanIF{}}
	for _, s := range f.sorted() {
		r.IFs = append(r.IFs, orchestrator.PlanIF{Name: s.Name, Units: s.Units, Share: s.Share, SLOMS: s.SLOMS, ObservedP99MS: s.P99MS})
	}
	return r, nil
}

// Status returns the IF table, or one IF.
func (f *Fake) Status(ctx context.Context, a orchestrator.StatusArgs) (orchestrator.StatusReply, error) {
	if err := f.begin(ctx, orchestrator.CmdStatus, a); err != nil {
		return orchestrator.StatusReply{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := orchestrator.StatusReply{Version: "fake", UptimeS: 12.5, Draining: f.draining, IFs: f.sorted()}
	if a.Name != "" {
		s, ok := f.ifs[a.Name]
		if !ok {
			return orchestrator.StatusReply{}, notFound(a.Name)
		}
		r.IFs = []orchestrator.IFStatus{s}
	}
	return r, nil
}

// Drain marks the fake draining.
func (f *Fake) Drain(ctx context.Context, a orchestrator.DrainArgs) (orchestrator.DrainResult, error) {
	if err := f.begin(ctx, orchestrator.CmdDrain, a); err != nil {
		return orchestrator.DrainResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.draining = true
	return orchestrator.DrainResult{Drained: true, ElapsedMS: 0.5}, nil
}

// Resume undoes the fake's drain.
func (f *Fake) Resume(ctx context.Context, a orchestrator.ResumeArgs) (orchestrator.ResumeResult, error) {
	if err := f.begin(ctx, orchestrator.CmdResume, a); err != nil {
		return orchestrator.ResumeResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.draining
	f.draining = false
	return orchestrator.ResumeResult{WasDraining: was}, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func orDefaultInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
