package reasm

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// FuzzReassembly drives a table with a script of fragment deliveries for
// three requests: each script byte picks a fragment; its high bits ask for
// a duplicate, a header corruption (the next byte says where and what), a
// truncation, or time passing. Garbage datagrams come from the script
// itself. Whatever the script, the table must not panic, must answer every
// request it saw at most once, must deliver only correct payloads, and must
// give every buffer back.
func FuzzReassembly(f *testing.F) {
	var (
		inOrder, shuffled, dup, missing, garbage []byte
	)
	for i := 0; i < 16; i++ {
		inOrder = append(inOrder, byte(i))
	}
	for _, i := range []byte{5, 0, 13, 2, 9, 1, 15, 3, 7, 11, 4, 14, 6, 12, 8, 10} {
		shuffled = append(shuffled, i)
	}
	for i := 0; i < 16; i++ {
		dup = append(dup, byte(i)|0x40, byte(i))
	}
	for i := 0; i < 16; i++ {
		if i != 4 && i != 11 {
			missing = append(missing, byte(i))
		}
	}
	missing = append(missing, 0x20) // time passes: expire
	garbage = []byte{0xC0, 0x00, 0xC1, 0x05, 0x80, 3, 0xFF, 0x13, 0x37, 0xA0, 0x16, 0x99, 0xE0, 0x02}
	f.Add(inOrder)
	f.Add(shuffled)
	f.Add(dup)
	f.Add(missing)
	f.Add(garbage)
	f.Add(append(append([]byte{}, shuffled...), garbage...))
	f.Add([]byte{})

	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, script []byte) {
	{
		cfg := DefaultConfig()
		cfg.MaxRequests = 64
		cfg.MaxHeldFragments = 512
		cfg.Timeout = time.Millisecond
		// the script's clock may run past the default late window (10x
		// the timeout), after which a key is forgotten and may start a
		// new request by design; "at most one answer per request" holds
		// within the window
		cfg.LateWindow = time.Hour
		h := newHarness(t, cfg)
		from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:5000")}
		payloads := [][]byte{payload(3000, 1), payload(1000, 2), payload(2500, 3)}
		var all [][]byte
		for i, p := range payloads {
			all = append(all, frags(t, uint64(i+1), p, 500)...)
		}
		var answered = map[key]int{}
		for i := 0; i < len(script); i++ {
			op := script[i]
			d := append([]byte(nil), all[int(op&0x1f)%len(all)]...)
			switch op >> 5 {
			case 1: // time passes
				h.now += int64(cfg.Timeout) / 2
				h.tab.Expire(h.now)
				h.collect()
				continue
			case 2: // duplicate
				h.deliver(append([]byte(nil), d...), from)
			case 4: // truncate
				d = d[:int(op)%len(d)]
			case 5: // garbage datagram made of the rest of the script
				d = append([]byte(nil), script[i+1:]...)
				i = len(script)
			case 6, 7: // corrupt one header byte
				if i+1 < len(script) {
					i++
					d[int(script[i])%wire.HeaderLen] ^= byte(op) | 1
				}
			}
			h.deliver(d, from)
			if i%7 == 0 {
				h.doneAllChecked(t, payloads)
			}
		}
		h.doneAllChecked(t, payloads)
		h.now += int64(cfg.Timeout) * 4
		h.tab.Expire(h.now)
		h.collect()
		for _, r := range h.rejects {
			answered[r.key]++
		}
		for k, n := range h.answeredOK {
			answered[k] += n
		}
		for k, n := range answered {
			if n > 1 {
				t.Fatalf("request %+v answered %d times", k, n)
			}
		}
		h.checkBaseline()
	}
}

// doneAllChecked gathers each completed request, checks the payload of the
// script's own requests, and gives them back.
func (h *harness) doneAllChecked(t *testing.T, payloads [][]byte) {
	if h.answeredOK == nil {
		h.answeredOK = map[key]int{}
	}
	for _, r := range h.completed {
		got := h.gather(r)
		if r.Flow == 9 && r.Model == 3 && r.ID >= 1 && r.ID <= uint64(len(payloads)) &&
			r.TotalLen == uint32(len(payloads[r.ID-1])) && !bytes.Equal(got, payloads[r.ID-1]) {
			t.Fatalf("request %d completed with a wrong payload", r.ID)
		}
		h.answeredOK[key{r.From.Addr, r.Flow, r.ID}]++
	}
	h.doneAll()
}
