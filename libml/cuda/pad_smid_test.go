package cuda

import (
	"encoding/binary"
	"slices"
	"testing"
)

// SM ids with gaps (as %smid may have): SM index ranges map onto ranges
// of the ids seen; ids 0..SMs-1, or fewer ids than SMs seen, leave the
// identity.
func TestPadSMIDs(t *testing.T) {
	clock := func(ids ...uint32) []byte {
		b := make([]byte, 16*3*len(ids))
		for k := 0; k < 3*len(ids); k++ {
			binary.LittleEndian.PutUint64(b[16*k:], uint64(1000+k))
			binary.LittleEndian.PutUint64(b[16*k+8:], uint64(ids[(k*7)%len(ids)]))
		}
		return b
	}
	ids := distinctSMIDs(clock(7, 0, 2, 5, 1, 4), 6)
	if !slices.Equal(ids, []uint32{0, 1, 2, 4, 5, 7}) {
		t.Fatalf("ids %v", ids)
	}
	pb := &padBufs{smid: ids}
	for _, c := range []struct{ lo, hi, wlo, whi int }{{0, 3, 0, 3}, {3, 6, 4, 8}, {3, 4, 4, 5}, {5, 6, 7, 8}, {2, 2, 2, 2}} {
		if lo, hi := pb.smRange(c.lo, c.hi); lo != uint32(c.wlo) || hi != uint32(c.whi) {
			t.Errorf("SMs [%d, %d) -> ids [%d, %d), want [%d, %d)", c.lo, c.hi, lo, hi, c.wlo, c.whi)
		}
	}
	if ids := distinctSMIDs(clock(3, 0, 2, 1), 4); ids != nil {
		t.Errorf("ids 0..3 of 4 SMs: %v, want the identity", ids)
	}
	if ids := distinctSMIDs(clock(0, 2, 9), 4); ids != nil {
		t.Errorf("3 ids of 4 SMs: %v, want the identity", ids)
	}
	if lo, hi := (&padBufs{}).smRange(2, 5); lo != 2 || hi != 5 {
		t.Errorf("identity: [%d, %d)", lo, hi)
	}
}
