package mx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Shared is a store of answers that the resolvers of the verifier fleet read and write by domain
// (docs/fleet.md). The fleet's implementation is a NATS key-value bucket.
type Shared interface {
	// Get returns the value stored under key, if any, within ctx.
	Get(ctx context.Context, key string) ([]byte, bool)
	// Put stores value under key without making the caller wait for it.
	Put(key string, value []byte)
}

// sharedWait bounds the shared cache's answer, well inside the look-up's budget: a fleet cache
// that is slow or unreachable costs at most this before the resolver asks DNS itself.
const sharedWait = 100 * time.Millisecond

// sharedEntry is one cached answer as the fleet shares it: the hosts, or the reason the domain
// takes no mail, and when the answer expires — the worker that looked it up decides, so that an
// answer lasts its lifetime across the fleet rather than again on every worker that reads it.
type sharedEntry struct {
	Hosts    []Host `json:"hosts,omitempty"`
	Implicit bool   `json:"implicit,omitempty"`
	NoMX     string `json:"no_mx,omitempty"` // the error, when the domain takes no mail
	NullMX   bool   `json:"null_mx,omitempty"`
	// NoAddress: the MX hosts have no address (ErrNoMXAddress).
	NoAddress bool  `json:"no_address,omitempty"`
	Expires   int64 `json:"expires"` // Unix milliseconds
}

// sharedErr is a cached "no mail" answer read back from the fleet: its text is the original
// error's, and it wraps ErrNullMX or ErrNoMX like the original did.
type sharedErr struct {
	msg  string
	kind error
}

func (e *sharedErr) Error() string { return e.msg }
func (e *sharedErr) Unwrap() error { return e.kind }

// loadShared looks domain up in the fleet's cache and, when an answer is there and still
// current, caches it here until it expires.
func (r *Resolver) loadShared(ctx context.Context, domain string) (Result, error, bool) {
	if r.cfg.Shared == nil {
		return Result{}, nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, sharedWait)
	defer cancel()
	b, ok := r.cfg.Shared.Get(ctx, domain)
	if !ok {
		return Result{}, nil, false
	}
	var e sharedEntry
	if json.Unmarshal(b, &e) != nil {
		return Result{}, nil, false
	}
	exp := time.UnixMilli(e.Expires)
	if !r.now().Before(exp) {
		return Result{}, nil, false
	}
	var (
		res Result
		err error
	)
	switch {
	case e.NoMX != "" && e.NullMX:
		err = &sharedErr{msg: e.NoMX, kind: ErrNullMX}
	case e.NoMX != "" && e.NoAddress:
		err = &sharedErr{msg: e.NoMX, kind: ErrNoMXAddress}
	case e.NoMX != "":
		err = &sharedErr{msg: e.NoMX, kind: ErrNoMX}
	case len(e.Hosts) == 0:
		return Result{}, nil, false // not an answer this resolver would have cached
	case !slices.ContainsFunc(e.Hosts, func(h Host) bool { return len(h.Addrs) > 0 }):
		// Shared by a worker from before ErrNoMXAddress, which kept such hosts as an answer.
		err = &sharedErr{msg: fmt.Sprintf("%v: %s", ErrNoMXAddress, domain), kind: ErrNoMXAddress}
	default:
		res = Result{Hosts: e.Hosts, Implicit: e.Implicit}
	}
	r.storeUntil(domain, res, err, exp)
	return res, err, true
}

// share hands an answer this resolver cached until exp to the fleet.
func (r *Resolver) share(domain string, res Result, err error, exp time.Time) {
	if r.cfg.Shared == nil {
		return
	}
	e := sharedEntry{Hosts: res.Hosts, Implicit: res.Implicit, Expires: exp.UnixMilli()}
	if err != nil {
		e.NoMX, e.NullMX, e.NoAddress = err.Error(), errors.Is(err, ErrNullMX), errors.Is(err, ErrNoMXAddress)
	}
	b, _ := json.Marshal(e)
	r.cfg.Shared.Put(domain, b)
}

// Share makes the resolver use the fleet's cache; nil shares nothing. It must be called before
// the first look-up.
func (r *Resolver) Share(s Shared) { r.cfg.Shared = s }
