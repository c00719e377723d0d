package ifmanager

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"sluice/dataplane/ioloop"
	"sluice/dataplane/wire"
)

// Stateful IFs serve models with recurrent state (libml/pack): the
// instance's input row is the request's payload followed by its flow's
// state, and its output row the result followed by the flow's new state.
// The IF keeps each flow's state between its requests (Triton's sequence
// batcher with implicit state): a batch holds at most one request of a
// flow, a flow's requests run in the order they were admitted (within
// their class), and batching across flows works as for any IF.

// StateConfig configures a stateful IF; the zero value is a stateless IF.
type StateConfig struct {
	// Elems is the float32 count of a flow's state: the instance's input
	// is the payload and then the state, its output the result and then
	// the new state (libml/pack.Layout.StateElems).
	Elems int
	// Idle drops a flow's state after this long without a request (its
	// next request starts from zeros); 0 means DefaultStateIdle.
	Idle time.Duration
	// MaxFlows bounds the flows whose state the IF keeps; a request of a
	// new flow beyond it is answered overloaded. 0 means DefaultMaxFlows.
	MaxFlows int
}

// Defaults and limits of stateful IFs.
const (
	// DefaultStateIdle is StateConfig.Idle when not given.
	DefaultStateIdle = time.Minute
	// DefaultMaxFlows is StateConfig.MaxFlows when not given.
	DefaultMaxFlows = 1024
	// MaxFlowsLimit bounds MaxFlows.
	MaxFlowsLimit = 1 << 20
	// MaxStateBytes bounds the memory of an IF's flow states: MaxFlows
	// times the state's size.
	MaxStateBytes = 1 << 30
)

// flowKey identifies a flow: the sender's address and its flow id.
type flowKey struct {
	from netip.AddrPort
	flow uint32
}

func keyOf(r *ioloop.Request) flowKey { return flowKey{from: r.From.Addr, flow: r.Flow} }

// flowState is one flow's state, as the little-endian float32 bytes the
// instance reads after the payload (a fragment of the request's input).
type flowState struct {
	buf  []byte
	last int64 // the IF's clock when its latest request was served
}

// FlowCounters count a stateful IF's flows.
type FlowCounters struct {
	// Flows is the number of flows with state now.
	Flows atomic.Int64
	// Started counts flows given a state (new, or back after their state
	// was dropped); Idle the states dropped for idleness; Resets the
	// requests that asked for a fresh state (wire.FlagReset); Full the
	// requests of new flows refused because MaxFlows flows had state.
	Started, Idle, Resets, Full atomic.Uint64
}

// flowTable holds a stateful IF's flow states. It belongs to the IF's
// worker: no lock. States are reused from a free list, so a flow costs
// an allocation only when the table grows past its largest size.
type flowTable struct {
	bytes     int
	idle      int64
	max       int
	m         map[flowKey]*flowState
	free      []*flowState
	lastSweep int64
	c         *FlowCounters
	// formBatch's scratch: each flow's earliest candidate, and the flows
	// the batch being formed already holds
	first map[flowKey]uint64
	taken map[flowKey]bool
}

func newFlowTable(cfg StateConfig, c *FlowCounters) (*flowTable, error) {
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultStateIdle
	}
	if cfg.MaxFlows <= 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	if cfg.MaxFlows > MaxFlowsLimit {
		return nil, fmt.Errorf("max_flows %d: out of range 1..%d", cfg.MaxFlows, MaxFlowsLimit)
	}
	if int64(cfg.MaxFlows)*4*int64(cfg.Elems) > MaxStateBytes {
		return nil, fmt.Errorf("max_flows %d × a state of %d bytes is more than %d MiB: lower max_flows", cfg.MaxFlows, 4*cfg.Elems, MaxStateBytes>>20)
	}
	return &flowTable{bytes: 4 * cfg.Elems, idle: int64(cfg.Idle), max: cfg.MaxFlows, m: map[flowKey]*flowState{}, c: c,
		first: map[flowKey]uint64{}, taken: map[flowKey]bool{}}, nil
}

// state returns r's flow state for a request served at now: a fresh
// (zero) one for a new flow, a flow idle for longer than the idle time, or
// a request with wire.FlagReset; nil when the flow is new and the table
// is full.
func (t *flowTable) state(r *ioloop.Request, now int64) *flowState {
	k := keyOf(r)
	s, ok := t.m[k]
	switch {
	case ok && now-s.last > t.idle:
		t.c.Idle.Add(1)
		t.c.Started.Add(1)
		clear(s.buf)
	case ok && r.Flags&wire.FlagReset != 0:
		t.c.Resets.Add(1)
		clear(s.buf)
	case !ok:
		if len(t.m) >= t.max {
			t.sweep(now)
		}
		if len(t.m) >= t.max {
			t.c.Full.Add(1)
			return nil
		}
		if n := len(t.free); n > 0 {
			s, t.free = t.free[n-1], t.free[:n-1]
			clear(s.buf)
		} else {
			s = &flowState{buf: make([]byte, t.bytes)}
		}
		t.m[k] = s
		t.c.Started.Add(1)
		t.c.Flows.Store(int64(len(t.m)))
	}
	s.last = now
	return s
}

// sweep drops the states idle for longer than the idle time; it runs at
// most four times per idle time unless the table is full.
func (t *flowTable) sweep(now int64) {
	if now-t.lastSweep < t.idle/4 && len(t.m) < t.max {
		return
	}
	t.lastSweep = now
	for k, s := range t.m {
		if now-s.last > t.idle {
			delete(t.m, k)
			t.free = append(t.free, s)
			t.c.Idle.Add(1)
		}
	}
	t.c.Flows.Store(int64(len(t.m)))
}

// markCandidates notes each flow's earliest admitted candidate, before a
// batch is picked from cand.
func (t *flowTable) markCandidates(cand []item) {
	clear(t.first)
	clear(t.taken)
	for _, it := range cand {
		k := keyOf(it.r)
		if s, ok := t.first[k]; !ok || it.seq < s {
			t.first[k] = it.seq
		}
	}
}

// take reports whether it may join the batch being formed, and counts its
// flow in when it may: it must be its flow's earliest candidate, and its
// flow must not be in the batch yet (the next request of a flow starts
// from the state this one leaves).
func (t *flowTable) take(it item) bool {
	k := keyOf(it.r)
	if t.taken[k] || t.first[k] != it.seq {
		return false
	}
	t.taken[k] = true
	return true
}
