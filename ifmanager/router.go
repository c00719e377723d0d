package ifmanager

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"sluice/dataplane/ioloop"
	"sluice/dataplane/wire"
)

// Router is an ioloop.Sink: it hands each completed request to the IF
// serving its model id, and answers unknown_model, shutting_down and the
// IF's refusals (overloaded, deadline_exceeded) itself, through the
// request's own reply. The routing table
// is an immutable snapshot swapped atomically, so Deliver takes no lock.
// One router may serve several ports: requests carry their way back.
type Router struct {
	mu    sync.Mutex // serializes writers
	table atomic.Pointer[map[uint16]*IF]
	// draining refuses every request with shutting_down.
	draining atomic.Bool
	// Unknown counts requests for models no IF serves.
	Unknown atomic.Uint64
	// Refused counts requests refused while draining.
	Refused atomic.Uint64
}

// NewRouter makes a router with no routes.
func NewRouter() *Router {
	rt := &Router{}
	empty := map[uint16]*IF{}
	rt.table.Store(&empty)
	return rt
}

// ErrDuplicateModel is returned by Add for a model id already routed.
var ErrDuplicateModel = errors.New("ifmanager: model id already served")

// Add routes f's model id to f.
func (rt *Router) Add(f *IF) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	cur := *rt.table.Load()
	if _, ok := cur[f.cfg.ModelID]; ok {
		return fmt.Errorf("%w: %d", ErrDuplicateModel, f.cfg.ModelID)
	}
	next := maps.Clone(cur)
	next[f.cfg.ModelID] = f
	rt.table.Store(&next)
	return nil
}

// Remove stops routing model id to f (if f still serves it).
func (rt *Router) Remove(f *IF) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	cur := *rt.table.Load()
	if cur[f.cfg.ModelID] != f {
		return
	}
	next := maps.Clone(cur)
	delete(next, f.cfg.ModelID)
	rt.table.Store(&next)
}

// Replace routes next's model id to next and stops routing old's (when it
// differs), in one step: no request between them finds no IF. It fails,
// changing nothing, when another IF serves next's model id.
func (rt *Router) Replace(old, next *IF) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	cur := *rt.table.Load()
	if f, ok := cur[next.cfg.ModelID]; ok && f != old {
		return fmt.Errorf("%w: %d", ErrDuplicateModel, next.cfg.ModelID)
	}
	nt := maps.Clone(cur)
	if cur[old.cfg.ModelID] == old {
		delete(nt, old.cfg.ModelID)
	}
	nt[next.cfg.ModelID] = next
	rt.table.Store(&nt)
	return nil
}

// SetDraining makes the router refuse new requests with shutting_down.
func (rt *Router) SetDraining(on bool) { rt.draining.Store(on) }

// Deliver implements ioloop.Sink.
func (rt *Router) Deliver(r *ioloop.Request) {
	var st wire.Status
	switch f := (*rt.table.Load())[r.Model]; {
	case rt.draining.Load():
		rt.Refused.Add(1)
		st = wire.StatusShuttingDown
	case f == nil:
		rt.Unknown.Add(1)
		st = wire.StatusUnknownModel
	default:
		// overloaded, deadline_exceeded or shutting_down, counted by
		// the IF; ok: the IF answers
		if st = f.Admit(r); st == wire.StatusOK {
			return
		}
	}
	r.Reply(st, nil, nil)
}
