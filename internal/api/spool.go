package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mailvet/mailvet/internal/config"
)

// An upload is received in full into a temporary file before any of it reaches Postgres. Storing
// it as it arrives would hold a database connection, inside an open transaction, for as long as
// the client takes to send it: up to the import budget for a client that sends a byte just
// inside every idle deadline. A few such uploads would take every connection of the replica's
// pool, and with it every other route of the replica (docs/lists.md, "Limits").
//
// What a slow client can still hold is bounded by uploadSlots (docs/lists.md, "Limits"): a
// replica receives at most maxUploads files at once, at most maxUploadsPerAccount for one account,
// at most Limits.PerAddress from one client address, and the free tier's accounts together at
// most Limits.Free of them, so that neither one key, nor one address, nor a handful of free
// accounts can take the replica's upload slots (nor its disk: maxUploads times the size limit)
// from paying customers. A slot is also held for a bounded time: a file that arrives slower than
// the minimum rate is cut (httpbody.WithMinRate).
const (
	maxUploads           = 8
	maxUploadsPerAccount = 2
)

// uploadSlots counts the uploads a replica is receiving, in all, per account, per client address
// and for the free tier, and remembers who holds each, for the log line of a refusal.
type uploadSlots struct {
	mu        sync.Mutex
	limits    config.UploadLimits
	total     int
	free      int
	byAccount map[string]int
	byAddress map[string]int
	holders   map[*uploadHolder]struct{}
}

// uploadHolder is one upload on its way.
type uploadHolder struct {
	account, address string
	free             bool
	since            time.Time
}

var (
	errUploadsBusy       = errors.New("this server is receiving as many uploads as it takes at once")
	errAccountUploadBusy = errors.New("the account already has as many uploads on their way as it may")
	errAddressUploadBusy = errors.New("your network address already has as many uploads on their way as it may")
	errFreeUploadsBusy   = errors.New("this server is receiving as many uploads of free accounts as it takes at once; paid plans have slots of their own")
)

// take claims a slot for an upload of account from address (free: the account is on the free
// tier), or says why there is none; release gives it back.
func (u *uploadSlots) take(account, address string, free bool) (release func(), err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.byAccount[account] >= maxUploadsPerAccount:
		return nil, errAccountUploadBusy
	case u.byAddress[address] >= u.limits.PerAddress:
		return nil, errAddressUploadBusy
	case u.total >= maxUploads:
		return nil, errUploadsBusy
	case free && u.free >= u.limits.Free:
		return nil, errFreeUploadsBusy
	}
	if u.byAccount == nil {
		u.byAccount, u.byAddress, u.holders = map[string]int{}, map[string]int{}, map[*uploadHolder]struct{}{}
	}
	h := &uploadHolder{account: account, address: address, free: free, since: time.Now()}
	u.total++
	u.byAccount[account]++
	u.byAddress[address]++
	if free {
		u.free++
	}
	u.holders[h] = struct{}{}
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.total--
			if free {
				u.free--
			}
			if u.byAccount[account]--; u.byAccount[account] == 0 {
				delete(u.byAccount, account)
			}
			if u.byAddress[address]--; u.byAddress[address] == 0 {
				delete(u.byAddress, address)
			}
			delete(u.holders, h)
		})
	}, nil
}

// holding describes who holds the slots, oldest first, for the log line of a refusal: an operator
// who sees uploads refused learns which accounts and addresses are holding them, and since when.
func (u *uploadSlots) holding() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	hs := make([]*uploadHolder, 0, len(u.holders))
	for h := range u.holders {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b *uploadHolder) int { return a.since.Compare(b.since) })
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("account=%s address=%s free=%t for=%s", h.account, h.address, h.free, time.Since(h.since).Round(time.Second))
	}
	return out
}

// uploadBusy is the 503 of an upload refused for want of a slot: nothing was read or stored, and
// the same upload can be sent again once one of those on their way has been received.
func uploadBusy(err error) *Error {
	e := Errorf(http.StatusServiceUnavailable, CodeServiceUnavailable,
		"Retry after the number of seconds in Retry-After, or once an upload on its way has been answered; nothing was stored or charged.",
		"The upload was not received: %v.", err)
	e.Header = http.Header{"Retry-After": {retryAfterSeconds}, "Connection": {"close"}}
	return e
}

// errSpool marks a failure to write the temporary file (a full disk): the server's, not the
// client's, unlike a failure to read the body (too large, stalled), which is returned as it is.
var errSpool = errors.New("the upload could not be buffered")

// errUploadRead marks a body that could not be read for a reason of its own (malformed chunked
// encoding, a connection cut mid-file): the client's problem, a 400, unless it is one that has its
// own answer (too large, stalled), which uploadError checks first.
var errUploadRead = errors.New("the file could not be read")

// spool copies body into an unlinked temporary file and returns the file, rewound. The file has
// no name from the start, so its space is given back when it is closed, even by a crash.
func spool(body io.Reader) (*os.File, error) {
	f, err := os.CreateTemp("", "mailvet-upload-*")
	if err != nil {
		return nil, errors.Join(errSpool, err)
	}
	_ = os.Remove(f.Name())
	_, err = io.Copy(spoolWriter{f}, spoolReader{body})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
		if err != nil {
			err = errors.Join(errSpool, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// spoolReader marks read failures (spoolWriter marks write failures) for io.Copy's caller.
type spoolReader struct{ r io.Reader }

func (r spoolReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", errUploadRead, err)
	}
	return n, err
}

// spoolWriter tells write failures from read failures in io.Copy.
type spoolWriter struct{ f *os.File }

func (w spoolWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = errors.Join(errSpool, err)
	}
	return n, err
}

// bodyReadProblem is what was wrong with an unreadable upload body, in the HTTP library's words
// (the client's own bytes, no internals), bounded.
func bodyReadProblem(err error) string {
	_, msg, _ := strings.Cut(err.Error(), errUploadRead.Error()+": ")
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}
