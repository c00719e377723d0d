package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Handler carries out commands; the appliance implements it over its IF
// manager. The server validates every request before calling a method,
// so arguments are well-formed (required fields present, values in
// range); checks that need the appliance's state are the handler's.
//
// Return an *Error to choose the reply's code (CodeNotFound for an
// unknown IF, CodeConflict for a name or model id in use, ...); any other
// error is reported as CodeInternal, and context.DeadlineExceeded as
// CodeUnavailable. A failed command must change nothing.
//
// Methods other than Status and Plan are called one at a time, in
// arrival order; Status and Plan may run concurrently with one of them. Every method must return
// soon after ctx is done: the server waits for running calls when it stops
// (at most ServerConfig.ShutdownTimeout; then it answers their clients
// CodeUnavailable and returns without them).
type Handler interface {
	// Deploy starts a new IF and returns its status.
	Deploy(ctx context.Context, args DeployArgs) (IFStatus, error)
	// Remove stops an IF once its queue is empty.
	Remove(ctx context.Context, args RemoveArgs) error
	// Resize gives an IF a new share (through a shadow swap).
	Resize(ctx context.Context, args ResizeArgs) (IFStatus, error)
	// Swap replaces an IF by a shadow IF between batches.
	Swap(ctx context.Context, args SwapArgs) (SwapResult, error)
	// SetBatch changes an IF's batch bounds.
	SetBatch(ctx context.Context, args SetBatchArgs) (IFStatus, error)
	// ReloadProfile reads a profile and applies the differences.
	ReloadProfile(ctx context.Context, args ReloadArgs) (ReloadResult, error)
	// Status describes the appliance and its IFs (or one IF).
	Status(ctx context.Context, args StatusArgs) (StatusReply, error)
	// Drain stops admission and waits for queued requests.
	Drain(ctx context.Context, args DrainArgs) (DrainResult, error)
	// Resume admits requests again after Drain (not after the process's
	// own shutdown has begun).
	Resume(ctx context.Context, args ResumeArgs) (ResumeResult, error)
	// Plan describes the placement of the cpu IFs' units and, under InSS,
	// the latency model's predictions against what was observed.
	Plan(ctx context.Context, args PlanArgs) (PlanReply, error)
}

// command describes one command for the server: how to decode its args and
// how to call the handler with them.
type command struct {
	name string
	// mutating commands run one at a time on the serial executor.
	mutating bool
	// decode parses and validates args into a value for call.
	decode func(raw json.RawMessage) (any, *Error)
	// call runs the handler; the result is the reply's data.
	call func(ctx context.Context, h Handler, args any) (any, error)
	// timeout returns the command's time limit given its args and the
	// server's default.
	timeout func(args any, def time.Duration) time.Duration
}

func defaultTimeout(_ any, def time.Duration) time.Duration { return def }

// spec builds a command for args type A and result type R.
func spec[A any, R any](name string, mutating bool, required []string,
	call func(h Handler, ctx context.Context, a A) (R, error)) *command {
	return &command{
		name:     name,
		mutating: mutating,
		decode: func(raw json.RawMessage) (any, *Error) {
			var a A
			if e := decodeArgs(raw, &a, required); e != nil {
				return nil, e
			}
			return a, nil
		},
		call: func(ctx context.Context, h Handler, args any) (any, error) {
			return call(h, ctx, args.(A))
		},
		timeout: defaultTimeout,
	}
}

// commandTable returns the commands by name.
func commandTable() map[string]*command {
	drain := spec(CmdDrain, true, nil, Handler.Drain)
	// A drain may be asked to wait longer than the default limit.
	drain.timeout = func(args any, def time.Duration) time.Duration {
		if ms := args.(DrainArgs).TimeoutMS; ms > 0 {
			return max(def, time.Duration(ms)*time.Millisecond+5*time.Second)
		}
		return def
	}
	cmds := []*command{
		spec(CmdDeploy, true, []string{"name", "model_id", "model"}, Handler.Deploy),
		spec(CmdRemove, true, []string{"name"}, func(h Handler, ctx context.Context, a RemoveArgs) (RemoveResult, error) {
			if err := h.Remove(ctx, a); err != nil {
				return RemoveResult{}, err
			}
			return RemoveResult{Name: a.Name}, nil
		}),
		spec(CmdResize, true, []string{"name"}, Handler.Resize),
		spec(CmdSwap, true, []string{"name"}, Handler.Swap),
		spec(CmdSetBatch, true, []string{"name", "max_batch"}, Handler.SetBatch),
		spec(CmdReloadProfile, true, nil, Handler.ReloadProfile),
		spec(CmdStatus, false, nil, Handler.Status),
		drain,
		spec(CmdResume, true, nil, Handler.Resume),
		spec(CmdPlan, false, nil, Handler.Plan),
	}
	m := make(map[string]*command, len(cmds))
	for _, c := range cmds {
		if _, dup := m[c.name]; dup {
			panic(fmt.Sprintf("orchestrator: command %q defined twice", c.name))
		}
		m[c.name] = c
	}
	return m
}
