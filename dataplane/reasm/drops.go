package reasm

import "sync/atomic"

// Reason says why a datagram or a request was dropped or refused.
type Reason uint8

// Drop reasons. Every datagram given to Table.Add is either accepted into a
// request (Counters.Fragments) or counted under exactly one reason other
// than timed_out and shutdown, which count requests and no datagram:
//
//	Received = Fragments + sum of Drops(r) for r not timed_out or shutdown
//
// The reasons for which Answered reports true also count requests, each
// answered with one error response at that moment (the datagram that
// caused it, if any, is that request's one count):
//
//	Counters.Answered = sum of Drops(r) for r.Answered()
//
// The fragments of a request after its answer, or after it was handed over
// complete, are counted late, after_failure or duplicate and answered
// nothing, for as long as the late memory holds the request (LateWindow).
const (
	ReasonTruncated      Reason = iota // shorter than the header
	ReasonBadMagic                     // wrong magic
	ReasonBadVersion                   // unsupported protocol version
	ReasonBadKind                      // not a request (a response, or an unknown kind)
	ReasonBadFlags                     // reserved flag bits set
	ReasonLengthMismatch               // header payload length disagrees with the datagram
	ReasonBadFragIndex                 // fragment index >= count, or count 0
	ReasonBadGeometry                  // offset/length/count cannot describe a request (request-level: answered malformed)
	ReasonInconsistent                 // a fragment disagrees with its request's earlier fragments: overlap (request-level: answered malformed)
	ReasonTooLarge                     // total length or fragment count over the limit (request-level: answered too_large)
	ReasonDuplicate                    // a fragment already received
	ReasonAfterFailure                 // a fragment of a request already refused or failed, and answered
	ReasonLate                         // a fragment of a request already completed, expired or shut down
	ReasonTableFull                    // no free request slot for a new request (request-level: answered overloaded, on the first fragment seen)
	ReasonFragmentsFull                // fragment memory cap reached (request-level: answered overloaded)
	ReasonTimedOut                     // incomplete when the timeout expired (request-level: answered timed_out)
	ReasonShutdown                     // incomplete when the dataplane stopped (request-level: answered shutting_down)
	ReasonLateMemoryFull               // a new request's fragment while the late memory is at its cap (not answered, not remembered)
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonTruncated:      "truncated",
	ReasonBadMagic:       "bad_magic",
	ReasonBadVersion:     "bad_version",
	ReasonBadKind:        "bad_kind",
	ReasonBadFlags:       "bad_flags",
	ReasonLengthMismatch: "length_mismatch",
	ReasonBadFragIndex:   "bad_frag_index",
	ReasonBadGeometry:    "bad_geometry",
	ReasonInconsistent:   "inconsistent",
	ReasonTooLarge:       "too_large",
	ReasonDuplicate:      "duplicate",
	ReasonAfterFailure:   "after_failure",
	ReasonLate:           "late",
	ReasonTableFull:      "table_full",
	ReasonFragmentsFull:  "fragments_full",
	ReasonTimedOut:       "timed_out",
	ReasonShutdown:       "shutdown",
	ReasonLateMemoryFull: "late_memory_full",
}

// String returns the reason's metric label.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Answered reports whether a count of r is a request answered with an error
// response: bad_geometry (malformed), inconsistent (malformed), too_large,
// table_full (overloaded), fragments_full (overloaded), timed_out and
// shutdown (shutting_down). Every other reason counts datagrams dropped
// without an answer.
func (r Reason) Answered() bool {
	switch r {
	case ReasonBadGeometry, ReasonInconsistent, ReasonTooLarge, ReasonTableFull,
		ReasonFragmentsFull, ReasonTimedOut, ReasonShutdown:
		return true
	}
	return false
}

// Reasons lists every reason, in order.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Counters are the reassembler's cumulative counts. They are written by the
// I/O loop and may be read from any goroutine.
type Counters struct {
	Received  atomic.Uint64 // datagrams given to Add (refreshed on every Expire)
	Fragments atomic.Uint64 // fragments accepted into a request (refreshed on every Expire)
	Completed atomic.Uint64 // requests completed and handed to the handler
	Released  atomic.Uint64 // completed requests given back with Done
	Answered  atomic.Uint64 // requests refused with an error response
	// HeldFragments and Assembling mirror the table's levels for readers on
	// other goroutines; the I/O loop refreshes them on every Expire.
	HeldFragments atomic.Int64
	Assembling    atomic.Int64
	// Remembered is the number of requests in the late memory (refreshed
	// on every Expire).
	Remembered atomic.Int64
	drops      [numReasons]atomic.Uint64
}

// Drops returns the count for one reason.
func (c *Counters) Drops(r Reason) uint64 { return c.drops[r].Load() }

// TotalDrops sums every reason.
func (c *Counters) TotalDrops() uint64 {
	var n uint64
	for i := range c.drops {
		n += c.drops[i].Load()
	}
	return n
}

func (c *Counters) drop(r Reason) { c.drops[r].Add(1) }
