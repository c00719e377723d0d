package orchestrator

import (
	"container/list"
	"crypto/sha256"
	"time"
)

// replyCache remembers, per client identity, the most recent requests and
// their replies, so that a retried request id gets the same reply without
// running the command again. It is owned by the server's socket goroutine
// and is not safe for concurrent use.
//
// Bounds: at most perClient entries per identity and at most clients
// identities, each evicted least recently used first; done entries expire
// after ttl. Entries whose command is still running are never evicted
// (their count is bounded by the server's queue), so a bound may be
// exceeded briefly.
type replyCache struct {
	perClient int
	clients   int
	ttl       time.Duration

	byClient map[string]*list.Element // identity -> element of lru (*clientCache)
	lru      *list.List               // front: most recently used client
}

type clientCache struct {
	identity string
	byID     map[string]*list.Element // request id -> element of lru (*cacheEntry)
	lru      *list.List
	pending  int
}

// cacheEntry is one remembered request.
type cacheEntry struct {
	id   string
	hash [sha256.Size]byte
	// pending is true while the command runs; waiters are the envelopes
	// of the requests (the first and any duplicates) still to answer.
	pending bool
	waiters [][][]byte
	reply   []byte
	expires time.Time
}

func newReplyCache(perClient, clients int, ttl time.Duration) *replyCache {
	return &replyCache{
		perClient: perClient,
		clients:   clients,
		ttl:       ttl,
		byClient:  make(map[string]*list.Element),
		lru:       list.New(),
	}
}

// lookup returns the entry for (identity, id), or nil. Expired entries are
// dropped.
func (c *replyCache) lookup(identity, id string, now time.Time) *cacheEntry {
	ce, ok := c.byClient[identity]
	if !ok {
		return nil
	}
	cc := ce.Value.(*clientCache)
	el, ok := cc.byID[id]
	if !ok {
		return nil
	}
	e := el.Value.(*cacheEntry)
	if !e.pending && now.After(e.expires) {
		cc.lru.Remove(el)
		delete(cc.byID, id)
		c.dropIfEmpty(ce)
		return nil
	}
	cc.lru.MoveToFront(el)
	c.lru.MoveToFront(ce)
	return e
}

// start records a new pending entry for (identity, id) and returns it.
func (c *replyCache) start(identity, id string, hash [sha256.Size]byte, envelope [][]byte) *cacheEntry {
	ce, ok := c.byClient[identity]
	if !ok {
		ce = c.lru.PushFront(&clientCache{identity: identity, byID: make(map[string]*list.Element), lru: list.New()})
		c.byClient[identity] = ce
	} else {
		c.lru.MoveToFront(ce)
	}
	cc := ce.Value.(*clientCache)
	if old, ok := cc.byID[id]; ok { // an expired or replaced entry
		if old.Value.(*cacheEntry).pending {
			cc.pending--
		}
		cc.lru.Remove(old)
	}
	e := &cacheEntry{id: id, hash: hash, pending: true, waiters: [][][]byte{envelope}}
	cc.byID[id] = cc.lru.PushFront(e)
	cc.pending++
	c.evictEntries(cc)
	c.evictClients() // after the new entry: a client with a pending entry stays
	return e
}

// finish records the final reply of a pending entry.
func (c *replyCache) finish(identity string, e *cacheEntry, reply []byte, now time.Time) {
	if !e.pending {
		return
	}
	e.pending = false
	e.reply = reply
	e.waiters = nil
	e.expires = now.Add(c.ttl)
	if ce, ok := c.byClient[identity]; ok {
		cc := ce.Value.(*clientCache)
		if el, ok := cc.byID[e.id]; ok && el.Value == e {
			cc.pending--
			c.evictEntries(cc)
		}
	}
}

// forget drops an entry (a request that was refused before running).
func (c *replyCache) forget(identity string, e *cacheEntry) {
	ce, ok := c.byClient[identity]
	if !ok {
		return
	}
	cc := ce.Value.(*clientCache)
	if el, ok := cc.byID[e.id]; ok && el.Value == e {
		if e.pending {
			cc.pending--
		}
		cc.lru.Remove(el)
		delete(cc.byID, e.id)
		c.dropIfEmpty(ce)
	}
}

// len returns the number of entries, for tests.
func (c *replyCache) len() int {
	n := 0
	for el := c.lru.Front(); el != nil; el = el.Next() {
		n += el.Value.(*clientCache).lru.Len()
	}
	return n
}

func (c *replyCache) dropIfEmpty(ce *list.Element) {
	cc := ce.Value.(*clientCache)
	if cc.lru.Len() == 0 {
		c.lru.Remove(ce)
		delete(c.byClient, cc.identity)
	}
}

// evictEntries drops a client's oldest done entries beyond perClient.
func (c *replyCache) evictEntries(cc *clientCache) {
	for el := cc.lru.Back(); el != nil && cc.lru.Len() > c.perClient; {
		prev := el.Prev()
		if e := el.Value.(*cacheEntry); !e.pending {
			cc.lru.Remove(el)
			delete(cc.byID, e.id)
		}
		el = prev
	}
}

// evictClients drops the least recently used clients without running
// commands beyond the clients bound.
func (c *replyCache) evictClients() {
	for el := c.lru.Back(); el != nil && c.lru.Len() > c.clients; {
		prev := el.Prev()
		if cc := el.Value.(*clientCache); cc.pending == 0 {
			c.lru.Remove(el)
			delete(c.byClient, cc.identity)
		}
		el = prev
	}
}
