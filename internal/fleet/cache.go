package fleet

import (
	"context"
	"time"
)

// Cache is a shared store of answers by domain over one bucket. Every value carries its own
// expiry, decided by the worker that wrote it; the bucket's MaxAge (queue.KnowledgeTTL) only
// bounds how long anything is kept.
type Cache struct {
	b    *bucket
	puts chan struct{} // one token per write in flight
}

// maxPuts bounds the writes in flight; past it a write is dropped, which costs at most a look-up
// or a probe another worker repeats.
const maxPuts = 64

// putWait bounds one write.
const putWait = time.Second

func newCache(b *bucket) *Cache { return &Cache{b: b, puts: make(chan struct{}, maxPuts)} }

// Get returns the value stored under key. Anything but an answer — no entry, NATS unreachable,
// ctx over — is a miss: the caller then finds out for itself.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, bool) {
	if !validKey.MatchString(key) {
		return nil, false
	}
	e, err := c.b.kv.Get(ctx, key)
	if err != nil {
		c.b.heal(err)
		return nil, false
	}
	return e.Value(), true
}

// Put stores value under key in the background: the caller, a look-up or a probe with its answer
// in hand, never waits for NATS.
func (c *Cache) Put(key string, value []byte) {
	if !validKey.MatchString(key) {
		return
	}
	select {
	case c.puts <- struct{}{}:
	default:
		return
	}
	go func() {
		defer func() { <-c.puts }()
		ctx, cancel := context.WithTimeout(context.Background(), putWait)
		defer cancel()
		if _, err := c.b.kv.Put(ctx, key, value); err != nil {
			c.b.heal(err)
		}
	}()
}
