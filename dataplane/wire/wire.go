// Package wire implements sluice wire protocol v1: the fixed header that
// starts every request and response datagram, its validation rules, and the
// fragmentation arithmetic shared by senders and receivers.
//
// The byte layout is documented in docs/protocol.md; this file is the
// reference implementation of that document.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Protocol constants.
const (
	// Magic is the first two bytes of every sluice datagram ("SL").
	Magic uint16 = 0x534C
	// Version is the protocol version this package speaks.
	Version uint8 = 1
	// HeaderLen is the fixed size of the header in bytes.
	HeaderLen = 40
	// MaxPayload is the largest fragment payload a UDP/IPv4 datagram can carry
	// behind a sluice header (65535 - 20 IPv4 - 8 UDP - 40 header).
	MaxPayload = 65535 - 20 - 8 - HeaderLen
	// DefaultFragSize is the payload bytes per fragment that fits a standard
	// 1500-byte Ethernet MTU with IPv4 and UDP headers (1500-20-8-40 = 1432),
	// rounded down to a multiple of 8.
	DefaultFragSize = 1432
	// DefaultPort is the UDP port sluice listens on unless configured.
	DefaultPort = 9400
)

// Kind tells requests from responses.
type Kind uint8

// Message kinds.
const (
	KindRequest  Kind = 1
	KindResponse Kind = 2
)

// Flag bits of the header's flags byte.
const (
	// FlagRT marks a real-time request; its absence means best effort.
	FlagRT uint8 = 1 << 0
	// FlagDeadline says the deadline field holds a latency budget.
	FlagDeadline uint8 = 1 << 1
	// FlagReset starts the request's flow from a fresh state on an IF
	// that keeps state per flow (a stateful stream); other IFs ignore it.
	FlagReset uint8 = 1 << 2
	// flagsKnown is every flag bit version 1 defines; others must be zero.
	flagsKnown = FlagRT | FlagDeadline | FlagReset
)

// Class is a request's scheduling class.
type Class uint8

// Scheduling classes.
const (
	ClassBE Class = 0 // best effort
	ClassRT Class = 1 // real time
)

func (c Class) String() string {
	if c == ClassRT {
		return "rt"
	}
	return "be"
}

// Status is the result code a response carries.
type Status uint8

// Response status codes. Requests carry StatusOK (zero) in that byte.
const (
	StatusOK           Status = 0 // the output follows
	StatusMalformed    Status = 1 // a fragment broke the protocol's rules
	StatusTooLarge     Status = 2 // total length or fragment count over the receiver's limit
	StatusTimedOut     Status = 3 // not all fragments arrived within the reassembly timeout
	StatusOverloaded   Status = 4 // refused by admission control: queue or memory full
	StatusUnknownModel Status = 5 // no inference function serves this model id
	StatusDeadline     Status = 6 // the request's deadline passed before it could run
	StatusInternal     Status = 7 // the inference failed inside the appliance
	StatusShuttingDown Status = 8 // the appliance is draining and accepts no new work
	StatusBadInput     Status = 9 // the payload does not match the model's input size
)

var statusNames = [...]string{
	StatusOK:           "ok",
	StatusMalformed:    "malformed",
	StatusTooLarge:     "too_large",
	StatusTimedOut:     "timed_out",
	StatusOverloaded:   "overloaded",
	StatusUnknownModel: "unknown_model",
	StatusDeadline:     "deadline_exceeded",
	StatusInternal:     "internal",
	StatusShuttingDown: "shutting_down",
	StatusBadInput:     "bad_input",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Header is the decoded form of the 40-byte datagram header.
type Header struct {
	Kind      Kind
	Flags     uint8
	Status    Status
	Model     uint16
	Flow      uint32
	Request   uint64
	FragIndex uint16
	FragCount uint16
	TotalLen  uint32
	Offset    uint32
	// DeadlineUS is the latency budget in microseconds, counted from the
	// arrival of the request's first fragment. Valid when FlagDeadline is set.
	DeadlineUS uint32
	PayloadLen uint16
}

// Class returns the scheduling class encoded in the flags.
func (h *Header) Class() Class {
	if h.Flags&FlagRT != 0 {
		return ClassRT
	}
	return ClassBE
}

// Errors returned by Decode and Validate. Each maps to one drop reason.
var (
	ErrTruncated      = errors.New("datagram shorter than the header")
	ErrBadMagic       = errors.New("bad magic")
	ErrBadVersion     = errors.New("unsupported version")
	ErrBadKind        = errors.New("unknown message kind")
	ErrBadFlags       = errors.New("reserved flag bits set")
	ErrLengthMismatch = errors.New("payload length does not match datagram length")
	ErrBadFragIndex   = errors.New("fragment index out of range")
	ErrBadGeometry    = errors.New("fragment offset, length and count are inconsistent")
)

// Decode parses and checks the header at the start of b. It checks
// everything one datagram can show on its own; Validate adds the fragment
// geometry rules for requests.
func Decode(b []byte, h *Header) error {
	if len(b) < HeaderLen {
		return ErrTruncated
	}
	if binary.BigEndian.Uint16(b[0:2]) != Magic {
		return ErrBadMagic
	}
	if b[2] != Version {
		return ErrBadVersion
	}
	h.Kind = Kind(b[3])
	if h.Kind != KindRequest && h.Kind != KindResponse {
		return ErrBadKind
	}
	h.Flags = b[4]
	if h.Flags&^flagsKnown != 0 {
		return ErrBadFlags
	}
	h.Status = Status(b[5])
	h.Model = binary.BigEndian.Uint16(b[6:8])
	h.Flow = binary.BigEndian.Uint32(b[8:12])
	h.Request = binary.BigEndian.Uint64(b[12:20])
	h.FragIndex = binary.BigEndian.Uint16(b[20:22])
	h.FragCount = binary.BigEndian.Uint16(b[22:24])
	h.TotalLen = binary.BigEndian.Uint32(b[24:28])
	h.Offset = binary.BigEndian.Uint32(b[28:32])
	h.DeadlineUS = binary.BigEndian.Uint32(b[32:36])
	h.PayloadLen = binary.BigEndian.Uint16(b[36:38])
	if int(h.PayloadLen) != len(b)-HeaderLen {
		return ErrLengthMismatch
	}
	if h.FragCount == 0 || h.FragIndex >= h.FragCount {
		return ErrBadFragIndex
	}
	return nil
}

// Encode writes h into the first HeaderLen bytes of b, which must be long
// enough.
func Encode(b []byte, h *Header) {
	_ = b[HeaderLen-1]
	binary.BigEndian.PutUint16(b[0:2], Magic)
	b[2] = Version
	b[3] = uint8(h.Kind)
	b[4] = h.Flags
	b[5] = uint8(h.Status)
	binary.BigEndian.PutUint16(b[6:8], h.Model)
	binary.BigEndian.PutUint32(b[8:12], h.Flow)
	binary.BigEndian.PutUint64(b[12:20], h.Request)
	binary.BigEndian.PutUint16(b[20:22], h.FragIndex)
	binary.BigEndian.PutUint16(b[22:24], h.FragCount)
	binary.BigEndian.PutUint32(b[24:28], h.TotalLen)
	binary.BigEndian.PutUint32(b[28:32], h.Offset)
	binary.BigEndian.PutUint32(b[32:36], h.DeadlineUS)
	binary.BigEndian.PutUint16(b[36:38], h.PayloadLen)
	b[38], b[39] = 0, 0
}

// FragSize returns the fragment size S implied by one fragment's header:
// every fragment but the last carries exactly S bytes at offset index*S, and
// the last carries the remaining 1..S bytes. It returns ErrBadGeometry when
// the header cannot belong to any well-formed request.
func FragSize(h *Header) (uint32, error) {
	total, off, n := h.TotalLen, h.Offset, uint32(h.PayloadLen)
	count, idx := uint32(h.FragCount), uint32(h.FragIndex)
	if h.Kind == KindResponse && total == 0 && n == 0 && off == 0 && count == 1 {
		return 0, nil // an error response without output
	}
	if total == 0 || n == 0 || uint64(off)+uint64(n) > uint64(total) {
		return 0, ErrBadGeometry
	}
	var s uint32
	switch {
	case count == 1:
		if off != 0 || n != total {
			return 0, ErrBadGeometry
		}
		return total, nil
	case idx < count-1:
		s = n
		if uint64(off) != uint64(idx)*uint64(s) {
			return 0, ErrBadGeometry
		}
	default: // last fragment of several
		if off%idx != 0 {
			return 0, ErrBadGeometry
		}
		s = off / idx
		if n > s || off+n != total {
			return 0, ErrBadGeometry
		}
	}
	if FragCountFor(total, s) != count {
		return 0, ErrBadGeometry
	}
	return s, nil
}

// FragCountFor returns how many fragments of size s carry total bytes.
func FragCountFor(total, s uint32) uint32 {
	if s == 0 {
		return 0
	}
	return uint32((uint64(total) + uint64(s) - 1) / uint64(s))
}

// SetFragment fills the fragment fields of h (FragCount, FragIndex, Offset,
// PayloadLen) for fragment i of a message of h.TotalLen bytes cut into
// fragments of fragSize bytes. An empty message is one empty fragment.
func (h *Header) SetFragment(i int, fragSize int) {
	total := int(h.TotalLen)
	count := 1
	if total > 0 {
		count = (total + fragSize - 1) / fragSize
	}
	off := i * fragSize
	n := min(fragSize, total-off)
	if total == 0 {
		off, n = 0, 0
	}
	h.FragCount = uint16(count)
	h.FragIndex = uint16(i)
	h.Offset = uint32(off)
	h.PayloadLen = uint16(n)
}

// Datagrams cuts a message into encoded datagrams of at most fragSize
// payload bytes each, header included. It allocates; it is meant for
// clients and tests, not for the appliance's hot path.
func Datagrams(h Header, payload []byte, fragSize int) ([][]byte, error) {
	if fragSize <= 0 || fragSize > MaxPayload {
		return nil, fmt.Errorf("wire: fragment size %d out of range 1..%d", fragSize, MaxPayload)
	}
	h.TotalLen = uint32(len(payload))
	count := 1
	if len(payload) > 0 {
		count = (len(payload) + fragSize - 1) / fragSize
	}
	if count > 65535 {
		return nil, fmt.Errorf("wire: %d bytes need %d fragments of %d, more than 65535", len(payload), count, fragSize)
	}
	out := make([][]byte, count)
	for i := range out {
		h.SetFragment(i, fragSize)
		d := make([]byte, HeaderLen+int(h.PayloadLen))
		Encode(d, &h)
		copy(d[HeaderLen:], payload[h.Offset:h.Offset+uint32(h.PayloadLen)])
		out[i] = d
	}
	return out, nil
}
