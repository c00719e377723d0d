package reasm

import "slices"

// AppendPayload appends the payload of r, a completed request not yet
// given back with Done, to dst: one view per fragment, in payload order
// (fragment 0 first, whatever order they arrived in), aliasing the packet
// buffers: nothing is copied. The views are valid until Done. Like Gather,
// it may be called from any goroutine by the request's consumer.
func (t *Table) AppendPayload(dst [][]byte, r *Request) ([][]byte, error) {
	if r.state != stateComplete {
		return dst, ErrNotOwned
	}
	base := len(dst)
	n := int(r.FragCount)
	dst = slices.Grow(dst, n)[:base+n]
	for fi := r.fragHead; fi >= 0; fi = t.fragNext[fi] {
		f := &t.fragData[fi]
		dst[base+int(f.index)] = f.data
	}
	return dst, nil
}
