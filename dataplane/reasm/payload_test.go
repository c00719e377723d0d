package reasm

import (
	"bytes"
	"errors"
	"testing"

	"sluice/dataplane/wire"
)

// AppendPayload gives a completed request's payload as views in payload
// order, whatever order its fragments arrived in, aliasing the received
// datagrams (no copy), after what dst already held; once the request is
// given back it is refused.
func TestAppendPayloadViewsInOrder(t *testing.T) {
	h := newHarness(t, smallConfig())
	p := payload(5000, 3)
	ds := frags(t, 1, p, 700)
	order := []int{3, 0, 7, 1, 6, 2, 5, 4}
	if len(ds) != len(order) {
		t.Fatalf("%d fragments, want %d", len(ds), len(order))
	}
	for _, i := range order {
		h.deliver(ds[i], client)
	}
	if len(h.completed) != 1 {
		t.Fatalf("%d requests completed", len(h.completed))
	}
	r := h.completed[0]
	sentinel := []byte("kept")
	views, err := h.tab.AppendPayload([][]byte{sentinel}, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 1+len(ds) || &views[0][0] != &sentinel[0] {
		t.Fatalf("%d views, want the caller's one and %d", len(views), len(ds))
	}
	for i, v := range views[1:] {
		if &v[0] != &ds[i][wire.HeaderLen] {
			t.Fatalf("view %d does not alias fragment %d's datagram", i, i)
		}
	}
	if got := bytes.Join(views[1:], nil); !bytes.Equal(got, p) {
		t.Fatal("the views do not make up the payload")
	}
	h.doneAll()
	if _, err := h.tab.AppendPayload(nil, r); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("after Done: err %v, want ErrNotOwned", err)
	}
	h.checkBaseline()
}
