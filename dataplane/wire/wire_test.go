package wire

import (
	"bytes"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	h := Header{Kind: KindResponse, Flags: FlagRT | FlagDeadline, Status: StatusOverloaded, Model: 0xBEEF,
		Flow: 0xDEADBEEF, Request: 0x0123456789ABCDEF, FragIndex: 2, FragCount: 3, TotalLen: 3000,
		Offset: 2000, DeadlineUS: 25000, PayloadLen: 1000}
	b := make([]byte, HeaderLen+1000)
	Encode(b, &h)
	if !bytes.Equal(b[:4], []byte{0x53, 0x4C, 1, 2}) {
		t.Fatalf("wire bytes start % x", b[:4])
	}
	var g Header
	if err := Decode(b, &g); err != nil {
		t.Fatal(err)
	}
	if g != h {
		t.Fatalf("round trip: got %+v want %+v", g, h)
	}
}

func TestFragSizeRules(t *testing.T) {
	mk := func(total, off uint32, n uint16, idx, count uint16) *Header {
		return &Header{Kind: KindRequest, TotalLen: total, Offset: off, PayloadLen: n, FragIndex: idx, FragCount: count}
	}
	for _, tc := range []struct {
		name string
		h    *Header
		want uint32
		ok   bool
	}{
		{"single", mk(500, 0, 500, 0, 1), 500, true},
		{"single-short", mk(500, 0, 400, 0, 1), 0, false},
		{"middle", mk(3000, 1000, 1000, 1, 3), 1000, true},
		{"last", mk(2500, 2000, 500, 2, 3), 1000, true},
		{"last-longer-than-stride", mk(3100, 2000, 1100, 2, 3), 0, false},
		{"offset-not-multiple", mk(3000, 1001, 1000, 1, 3), 0, false},
		{"count-too-big", mk(3000, 1000, 1000, 1, 4), 0, false},
		{"overrun", mk(1500, 1000, 1000, 1, 2), 0, false},
		{"empty-request", mk(0, 0, 0, 0, 1), 0, false},
	} {
		s, err := FragSize(tc.h)
		if (err == nil) != tc.ok || s != tc.want {
			t.Errorf("%s: FragSize = %d, %v; want %d, ok=%v", tc.name, s, err, tc.want, tc.ok)
		}
	}
	resp := &Header{Kind: KindResponse, FragCount: 1}
	if _, err := FragSize(resp); err != nil {
		t.Errorf("empty response rejected: %v", err)
	}
}

func TestDatagramsObeyGeometry(t *testing.T) {
	for _, total := range []int{1, 999, 1000, 1001, 150528} {
		for _, fs := range []int{1, 7, 1000, 1432, 8960} {
			if (total+fs-1)/fs > 65535 {
				continue
			}
			p := bytes.Repeat([]byte{0xA5}, total)
			ds, err := Datagrams(Header{Kind: KindRequest, Request: 1}, p, fs)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, total)
			for _, d := range ds {
				var h Header
				if err := Decode(d, &h); err != nil {
					t.Fatal(err)
				}
				s, err := FragSize(&h)
				if err != nil || (len(ds) > 1 && int(s) != fs) {
					t.Fatalf("total %d frag %d: fragment %d: size %d err %v", total, fs, h.FragIndex, s, err)
				}
				copy(got[h.Offset:], d[HeaderLen:])
			}
			if !bytes.Equal(got, p) {
				t.Fatalf("total %d frag %d: payload differs", total, fs)
			}
		}
	}
	if _, err := Datagrams(Header{}, make([]byte, 70000), 1); err == nil {
		t.Fatal("more than 65535 fragments accepted")
	}
}
