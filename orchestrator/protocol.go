package orchestrator

import (
	"encoding/json"
	"math"

	"sluice/ifmanager"
)

// Command names, as in a request's cmd field.
const (
	CmdDeploy        = "deploy"
	CmdRemove        = "remove"
	CmdResize        = "resize"
	CmdSwap          = "swap"
	CmdSetBatch      = "set-batch"
	CmdReloadProfile = "reload-profile"
	CmdStatus        = "status"
	CmdDrain         = "drain"
	CmdResume        = "resume"
	CmdPlan          = "plan"
)

// Commands lists every command name, in documentation order.
func Commands() []string {
	return []string{CmdDeploy, CmdRemove, CmdResize, CmdSwap, CmdSetBatch,
		CmdReloadProfile, CmdStatus, CmdDrain, CmdResume, CmdPlan}
}

// Limits on request fields.
const (
	// MaxIDLen bounds a request id, in bytes.
	MaxIDLen = 128
	// MaxBatchLimit bounds max_batch and min_batch.
	MaxBatchLimit = ifmanager.MaxBatchLimit
	// MaxDrainTimeoutMS bounds drain's timeout_ms (10 minutes).
	MaxDrainTimeoutMS = 600_000
	// DefaultMaxRequestBytes is the default cap on a request's size.
	DefaultMaxRequestBytes = 1 << 20
)

// Request is one command request on the wire.
type Request struct {
	// ID identifies the request; the reply carries it back. Non-empty, at
	// most MaxIDLen bytes. Reusing an id makes the request a retry.
	ID string `json:"id"`
	// Cmd is the command name (CmdDeploy, ...).
	Cmd string `json:"cmd"`
	// Args are the command's arguments, an object; absent or null means
	// no arguments.
	Args json.RawMessage `json:"args,omitempty"`
}

// Reply is one reply on the wire: OK with Data, or not OK with Error.
//
// A reply with Running set is a progress notice, not the answer: the
// command is still queued or running on the server (Error, with
// CodeUnavailable, says which and for how long), and its final reply,
// with the same ID, follows. The server sends one every
// ServerConfig.ProgressInterval while its waiters have heard nothing else.
type Reply struct {
	ID      string          `json:"id"`
	OK      bool            `json:"ok"`
	Running bool            `json:"running,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// DeployArgs are deploy's arguments: start a new IF. They are the IF spec
// a profile's [[if]] table holds, with the same keys (ifmanager.Spec): name,
// model_id and model are required; zero optional fields take the
// appliance's defaults (those of a profile's [[if]] table), and the
// scheduling policy of a cpu IF that names none is the appliance's.
type DeployArgs = ifmanager.Spec

// RemoveArgs are remove's arguments: stop an IF after its queue empties.
type RemoveArgs struct {
	// Name is the IF (required).
	Name string `json:"name"`
}

// RemoveResult is remove's reply data.
type RemoveResult struct {
	// Name is the removed IF.
	Name string `json:"name"`
}

// ResizeArgs are resize's arguments: give an IF a new resource share
// (through a shadow swap). Exactly one of Share and Units is set.
type ResizeArgs struct {
	// Name is the IF (required).
	Name string `json:"name"`
	// Share is the fraction of the accelerator, 0 < share <= 1.
	Share float64 `json:"share,omitempty"`
	// Units is a count of execution units (SMs on a GPU, worker threads on
	// the CPU), >= 1.
	Units int `json:"units,omitempty"`
}

// SwapArgs are swap's arguments: prepare a shadow IF and switch to it
// between batches. Unset fields keep the active IF's value; with none set
// the shadow is a fresh copy of the active IF.
type SwapArgs struct {
	// Name is the IF (required).
	Name string `json:"name"`
	// Model replaces the model ("zoo:NAME" or "onnx:PATH").
	Model string `json:"model,omitempty"`
	// Share replaces the share, 0 < share <= 1.
	Share float64 `json:"share,omitempty"`
	// MaxBatch replaces the batch bound (1..MaxBatchLimit).
	MaxBatch int `json:"max_batch,omitempty"`
}

// SwapResult is swap's reply data.
type SwapResult struct {
	// IF is the new active IF.
	IF IFStatus `json:"if"`
	// PrepareMS is how long the shadow took to load and warm up.
	PrepareMS float64 `json:"prepare_ms"`
	// GapUS is the idle gap of the switch, in microseconds.
	GapUS float64 `json:"gap_us"`
}

// SetBatchArgs are set-batch's arguments: change an IF's batch bounds
// (adaptive batching then works between them).
type SetBatchArgs struct {
	// Name is the IF (required).
	Name string `json:"name"`
	// MaxBatch is the new upper bound (required, 1..MaxBatchLimit).
	MaxBatch int `json:"max_batch"`
	// MinBatch is the lower bound (1..MaxBatch); 0 keeps it.
	MinBatch int `json:"min_batch,omitempty"`
}

// ReloadArgs are reload-profile's arguments: read a profile and apply the
// differences (new IFs deployed, missing ones removed, changed ones swapped).
type ReloadArgs struct {
	// Path is the profile file as the appliance sees it; empty means the
	// profile the appliance was started with.
	Path string `json:"path,omitempty"`
}

// ReloadResult is reload-profile's reply data.
type ReloadResult struct {
	// Path is the profile that was applied.
	Path string `json:"path"`
	// Added, Removed, Changed and Unchanged name the IFs by outcome.
	Added     []string `json:"added"`
	Removed   []string `json:"removed"`
	Changed   []string `json:"changed"`
	Unchanged []string `json:"unchanged"`
	// Failed are the IFs of the profile that could not be applied (a
	// model that does not load): a new IF is not deployed (its status
	// shows state "failed"), a changed one keeps serving as it was. The
	// rest of the profile is applied all the same.
	Failed []IFFailure `json:"failed,omitempty"`
	// RestartNeeded names the [appliance] and [[port]] keys whose new
	// values were not applied: they take effect at the next start
	// ("appliance.threads", "port[0].listen").
	RestartNeeded []string `json:"restart_needed,omitempty"`
}

// IFFailure is an IF that could not be loaded or changed, and why.
type IFFailure struct {
	Name string `json:"name"`
	// Error names the profile file, line and key where it can
	// ("profile p.toml:14: if[1].model \"onnx:/m/bad.onnx\": ...").
	Error string `json:"error"`
}

// StatusArgs are status's arguments.
type StatusArgs struct {
	// Name limits the reply to one IF (not_found if there is none).
	Name string `json:"name,omitempty"`
}

// StatusReply is status's reply data.
type StatusReply struct {
	// Version is the appliance's version string.
	Version string `json:"version,omitempty"`
	// UptimeS is the appliance's uptime in seconds.
	UptimeS float64 `json:"uptime_s"`
	// Draining is true once a drain has started.
	Draining bool `json:"draining"`
	// IFs are the IFs, sorted by name.
	IFs []IFStatus `json:"ifs"`
}

// IFStatus describes one IF.
type IFStatus struct {
	Name    string `json:"name"`
	ModelID uint16 `json:"model_id"`
	Model   string `json:"model"`
	Backend string `json:"backend"`
	// Policy is the scheduling policy the IF runs under ("none" when it
	// runs on its own share of the units).
	Policy string  `json:"policy,omitempty"`
	Class  string  `json:"class"`
	SLOMS  float64 `json:"slo_ms"`
	// TimeoutAction is "reject" or "serve_late" (ifmanager.Spec).
	TimeoutAction string `json:"timeout_action,omitempty"`
	MaxBatch      int    `json:"max_batch"`
	MinBatch      int    `json:"min_batch,omitempty"`
	QueueLen      int    `json:"queue_len"`
	// Queued is the current queue depth.
	Queued int `json:"queued"`
	// Share is the current resource share (0..1).
	Share float64 `json:"share"`
	// Demand is the share the IF asks for (its profile's, deploy's or the
	// last resize's; the self-tuning share's with auto_share). Shares are
	// divided max-min fairly, and capacity no IF asks for goes to the IFs
	// there are, so Share may exceed Demand (omitted under a policy).
	Demand float64 `json:"demand,omitempty"`
	// Units is the current count of execution units, when known.
	Units int `json:"units,omitempty"`
	// State is "serving", "underprovisioned", "stopping", or "failed" for
	// an IF of the profile that failed to load (Error says why; it serves
	// nothing and only a reload or deploy brings it back).
	State string `json:"state"`
	// Error is why a failed IF failed to load.
	Error string `json:"error,omitempty"`
	// Served, Failed and Overloaded count requests answered ok, answered
	// with an error after admission, and refused at admission.
	Served     uint64 `json:"served"`
	Failed     uint64 `json:"failed"`
	Overloaded uint64 `json:"overloaded"`
	// DeadlineExceeded counts requests answered deadline_exceeded, at
	// admission or when their batch was formed.
	DeadlineExceeded uint64 `json:"deadline_exceeded,omitempty"`
	// P99MS is the 99th percentile of the latest requests answered ok
	// (first fragment to result), when there are any.
	P99MS float64 `json:"p99_ms,omitempty"`
	// Bottleneck is "cpu" when gathering and converting inputs takes
	// longer than the model, "compute" otherwise (absent before the
	// first batch).
	Bottleneck string `json:"bottleneck,omitempty"`
	// Flows is the number of flows a stateful IF keeps state for (absent
	// for other IFs).
	Flows *int `json:"flows,omitempty"`
	// Next names the IF's next pipeline stage, which answers its
	// requests; Forwarded counts the requests handed to it (absent for
	// IFs that answer themselves).
	Next      string `json:"next,omitempty"`
	Forwarded uint64 `json:"forwarded,omitempty"`
}

// DrainArgs are drain's arguments: stop admitting requests, finish the
// queued ones, and report.
type DrainArgs struct {
	// TimeoutMS bounds the wait (0: the appliance's default, at most
	// MaxDrainTimeoutMS).
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// PlanArgs are plan's arguments (none).
type PlanArgs struct{}

// PlanReply is plan's reply data: how the cpu IFs' units are placed and,
// under the inss placement, what the latency model predicts for them.
type PlanReply struct {
	// Placement is "gslice" or "inss" ([appliance] placement).
	Placement string `json:"placement"`
	// Units is the cpu device's unit count; IntervalMS how often the inss
	// placement plans.
	Units      int `json:"units"`
	IntervalMS int `json:"interval_ms,omitempty"`
	// Devices is the number of unit groups the inss placement's global
	// stage places IFs on ([appliance] placement_devices; 1: none).
	Devices int `json:"devices,omitempty"`
	// RoundS is how long ago the inss placement's last round ran (absent
	// before the first).
	RoundS float64 `json:"round_s,omitempty"`
	// Planner is what planned the inss placement's last round: "greedy",
	// "learned" (placement_learned), or the greedy stages standing in for
	// an incomplete learned plan (absent before the first round).
	Planner string `json:"planner,omitempty"`
	// IFs are the cpu IFs under policy none, sorted by name.
	IFs []PlanIF `json:"ifs"`
}

// PlanIF is one IF of the plan.
type PlanIF struct {
	Name string `json:"name"`
	// Profile is the latency model's profile the IF is planned with
	// (absent: none covers it, or the placement is gslice).
	Profile string `json:"profile,omitempty"`
	// Units and Share are the IF's current units and share; Device the
	// unit group the global stage placed it on (with placement_devices
	// > 1; -1 before its first round).
	Units  int     `json:"units"`
	Share  float64 `json:"share"`
	Device *int    `json:"device,omitempty"`
	SLOMS  float64 `json:"slo_ms"`
	// RateRPS is the arrival rate the last round observed; Batch the
	// batch size the model predicts the IF best served with at its units.
	RateRPS float64 `json:"rate_rps,omitempty"`
	Batch   int     `json:"batch,omitempty"`
	// PredictedMS is the latency the model predicts at the IF's units and
	// that batch (InSS eq. 3 with a batch in progress: half a batch's
	// execution, then its own); ObservedP99MS the 99th percentile of the
	// IF's latest requests answered ok.
	PredictedMS   float64 `json:"predicted_ms,omitempty"`
	ObservedP99MS float64 `json:"observed_p99_ms,omitempty"`
}

// ResumeArgs are resume's arguments (none): admit requests again after a
// drain command.
type ResumeArgs struct{}

// ResumeResult is resume's reply data.
type ResumeResult struct {
	// WasDraining is true when a drain was undone (false: the appliance
	// was serving already, and nothing changed).
	WasDraining bool `json:"was_draining"`
}

// DrainResult is drain's reply data.
type DrainResult struct {
	// Drained is true when every queued request was answered in time.
	Drained bool `json:"drained"`
	// Pending counts requests still queued when the wait ended.
	Pending int `json:"pending"`
	// ElapsedMS is how long the drain took.
	ElapsedMS float64 `json:"elapsed_ms"`
}

// validator is implemented by argument types with checks beyond JSON
// decoding; the server calls it before the handler.
type validator interface {
	validate() *Error
}

// fieldValidator is implemented by argument types defined with the layer
// below (DeployArgs, an ifmanager.Spec): their errors name the key, and
// the server puts "args." in front. Validate may normalize the args.
type fieldValidator interface {
	Validate() error
}

func validName(field, s string) *Error {
	if err := ifmanager.CheckName(field, s); err != nil {
		return Errorf(CodeBadRequest, "args.%v", err)
	}
	return nil
}

func validShare(v float64) *Error {
	if math.IsNaN(v) || v <= 0 || v > 1 {
		return Errorf(CodeBadRequest, "args.share %v: want 0 < share <= 1", v)
	}
	return nil
}

func validBatch(field string, v int) *Error {
	if v < 1 || v > MaxBatchLimit {
		return Errorf(CodeBadRequest, "args.%s %d: out of range 1..%d", field, v, MaxBatchLimit)
	}
	return nil
}

func (a *RemoveArgs) validate() *Error { return validName("name", a.Name) }

func (a *ResizeArgs) validate() *Error {
	if e := validName("name", a.Name); e != nil {
		return e
	}
	switch {
	case a.Share != 0 && a.Units != 0:
		return Errorf(CodeBadRequest, "args: give share or units, not both")
	case a.Share != 0:
		return validShare(a.Share)
	case a.Units < 0:
		return Errorf(CodeBadRequest, "args.units %d: want >= 1", a.Units)
	case a.Units == 0:
		return Errorf(CodeBadRequest, "args: share or units is required")
	}
	return nil
}

func (a *SwapArgs) validate() *Error {
	if e := validName("name", a.Name); e != nil {
		return e
	}
	if a.Share != 0 {
		if e := validShare(a.Share); e != nil {
			return e
		}
	}
	if a.MaxBatch != 0 {
		return validBatch("max_batch", a.MaxBatch)
	}
	return nil
}

func (a *SetBatchArgs) validate() *Error {
	if e := validName("name", a.Name); e != nil {
		return e
	}
	if e := validBatch("max_batch", a.MaxBatch); e != nil {
		return e
	}
	if a.MinBatch != 0 {
		if e := validBatch("min_batch", a.MinBatch); e != nil {
			return e
		}
		if a.MinBatch > a.MaxBatch {
			return Errorf(CodeBadRequest, "args.min_batch %d: above max_batch %d", a.MinBatch, a.MaxBatch)
		}
	}
	return nil
}

func (a *StatusArgs) validate() *Error {
	if a.Name != "" {
		return validName("name", a.Name)
	}
	return nil
}

func (a *DrainArgs) validate() *Error {
	if a.TimeoutMS < 0 || a.TimeoutMS > MaxDrainTimeoutMS {
		return Errorf(CodeBadRequest, "args.timeout_ms %d: out of range 0..%d", a.TimeoutMS, MaxDrainTimeoutMS)
	}
	return nil
}
