package orchestrator

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"
)

func TestReplyCacheBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newReplyCache(3, 2, time.Minute)
	h := sha256.Sum256([]byte("x"))
	env := [][]byte{[]byte("a")}
	for i := range 5 {
		e := c.start("a", fmt.Sprint(i), h, env)
		c.finish("a", e, []byte(fmt.Sprint("reply", i)), now)
	}
	if n := c.len(); n != 3 {
		t.Fatalf("entries = %d, want 3", n)
	}
	if c.lookup("a", "0", now) != nil || c.lookup("a", "4", now) == nil {
		t.Error("per-client eviction is not least-recently-used")
	}
	// Expiry.
	if c.lookup("a", "4", now.Add(2*time.Minute)) != nil {
		t.Error("expired entry returned")
	}
	// Pending entries survive eviction; the bound is restored when they end.
	p1 := c.start("b", "p1", h, env)
	p2 := c.start("b", "p2", h, env)
	p3 := c.start("b", "p3", h, env)
	p4 := c.start("b", "p4", h, env)
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		if e := c.lookup("b", id, now); e == nil || !e.pending {
			t.Fatalf("pending %s evicted", id)
		}
	}
	for _, e := range []*cacheEntry{p1, p2, p3, p4} {
		c.finish("b", e, []byte("r"), now)
	}
	if got := len(c.byClient["b"].Value.(*clientCache).byID); got != 3 {
		t.Errorf("client b entries = %d, want 3", got)
	}
	// Client bound: a third client evicts the least recently used one
	// without pending work.
	c.start("c", "1", h, env)
	if len(c.byClient) != 2 {
		t.Errorf("clients = %d, want 2", len(c.byClient))
	}
	if _, ok := c.byClient["a"]; ok {
		t.Error("client a (least recently used) kept")
	}
	// forget drops a refused entry.
	e := c.start("c", "2", h, env)
	c.forget("c", e)
	if c.lookup("c", "2", now) != nil {
		t.Error("forgotten entry returned")
	}
}
