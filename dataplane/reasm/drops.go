package reasm

import "sync/atomic"

// Reason says why a datagram or a request was dropped or refused.
type Reason uint8

// Drop reasons. Packet-level reasons count datagrams; request-level reasons
// (marked) count requests.
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
	ReasonAfterFailure                 // a fragment of a request already failed and answered
	ReasonLate                         // a fragment of a request already completed or expired
	ReasonTableFull                    // no free request slot (request-level when answered overloaded)
	ReasonFragmentsFull                // fragment memory cap reached (request-level: answered overloaded)
	ReasonTimedOut                     // incomplete when the timeout expired (request-level: answered timed_out)
	ReasonShutdown                     // incomplete when the dataplane stopped (request-level: answered shutting_down)
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
}

// String returns the reason's metric label.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
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
	Fragments atomic.Uint64 // fragments accepted into a request (refreshed on every Expire)
	Completed atomic.Uint64 // requests completed and handed to the handler
	Released  atomic.Uint64 // completed requests given back with Done
	Answered  atomic.Uint64 // requests refused with an error response
	// HeldFragments and Assembling mirror the table's levels for readers on
	// other goroutines; the I/O loop refreshes them on every Expire.
	HeldFragments atomic.Int64
	Assembling    atomic.Int64
	drops         [numReasons]atomic.Uint64
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
