package verification

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/listname"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
)

// The bulk lists (docs/lists.md) as the API's list routes and the dashboard's list pages both
// run them: an upload is received, stored, admitted and started here, so that one from the
// dashboard is bounded, held and billed exactly as one through the API.

// ListLimits bound one list (docs/lists.md, "Limits"): MAILVET_LIST_MAX_BYTES and
// MAILVET_LIST_MAX_ROWS.
type ListLimits struct {
	MaxBytes int64
	MaxRows  int
}

// UploadLimits bound the uploads a replica receives at once (docs/lists.md, "Limits"):
// MAILVET_UPLOAD_SLOTS_PER_ADDRESS and MAILVET_UPLOAD_SLOTS_FREE.
type UploadLimits struct {
	PerAddress int
	Free       int
}

// Bounds of an upload besides the configured limits (docs/lists.md, "Limits").
const (
	MaxListLineBytes = 100 << 10 // one line of an uploaded file
	// ListImportBudget bounds the database work of one upload of the largest list.
	ListImportBudget = 10 * time.Minute
)

// An upload is received in full into a temporary file before any of it reaches Postgres. Storing
// it as it arrives would hold a database connection, inside an open transaction, for as long as
// the client takes to send it: up to the import budget for a client that sends a byte just
// inside every idle deadline. A few such uploads would take every connection of the replica's
// pool, and with it every other route of the replica (docs/lists.md, "Limits").
//
// What a slow client can still hold is bounded by uploadSlots: a replica receives at most
// MaxUploads files at once, at most MaxUploadsPerAccount for one account, at most
// UploadLimits.PerAddress from one client address, and the free tier's accounts together at most
// UploadLimits.Free of them, so that neither one key, nor one address, nor a handful of free
// accounts can take the replica's upload slots (nor its disk: MaxUploads times the size limit)
// from paying customers. The API and the dashboard share the one service, so its slots count
// the uploads of both.
const (
	MaxUploads           = 8
	MaxUploadsPerAccount = 2
)

// uploadSlots counts the uploads a replica is receiving, in all, per account, per client address
// and for the free tier, and remembers who holds each, for the log line of a refusal.
type uploadSlots struct {
	mu        sync.Mutex
	limits    UploadLimits
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
	case u.byAccount[account] >= MaxUploadsPerAccount:
		return nil, errAccountUploadBusy
	case u.byAddress[address] >= u.limits.PerAddress:
		return nil, errAddressUploadBusy
	case u.total >= MaxUploads:
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

// Receiving is how many uploads the replica is receiving now.
func (s *Service) Receiving() int {
	s.uploads.mu.Lock()
	defer s.uploads.mu.Unlock()
	return s.uploads.total
}

// UploadBusyError is an upload refused for want of a slot: nothing was read or stored. Reason
// says which bound was reached. When the replica's own slots ran out (not the account's or the
// address's share), Holders describes who holds them, oldest first, for the adapter's log line:
// an operator who sees uploads refused learns which accounts and addresses hold the slots.
type UploadBusyError struct {
	Reason           error
	Account, Address string
	Holders          []string
}

func (e *UploadBusyError) Error() string { return "upload refused: " + e.Reason.Error() }
func (e *UploadBusyError) Unwrap() error { return e.Reason }

// FileTooLargeError is an upload over the size limit: refused before any of it is read when its
// announced Size is over, or cut once more than Limit bytes arrived (Size 0: not announced).
type FileTooLargeError struct{ Size, Limit int64 }

func (e *FileTooLargeError) Error() string {
	if e.Size > 0 {
		return fmt.Sprintf("the file is %d bytes; the limit is %d bytes", e.Size, e.Limit)
	}
	return fmt.Sprintf("the file is larger than %d bytes", e.Limit)
}

// limitedFile reads a file up to its limit, and fails with a FileTooLargeError at the first byte
// past it, so that whatever the adapter, a file over the limit is never read whole.
type limitedFile struct {
	r           io.Reader
	left, limit int64
}

func (l *limitedFile) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, &FileTooLargeError{Limit: l.limit}
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n - 1, &FileTooLargeError{Limit: l.limit}
	}
	return n, err
}

// ErrSpool marks a failure to write the temporary file (a full disk): the server's, not the
// client's, unlike a failure to read the body (too large, stalled), which is returned as it is.
var ErrSpool = errors.New("the upload could not be buffered")

// ErrUploadRead marks a body that could not be read for a reason of its own (malformed chunked
// encoding, a connection cut mid-file): the client's problem, unless it is one that has its own
// answer (too large, stalled), which the error mapping checks first (internal/problem).
var ErrUploadRead = errors.New("the file could not be read")

// spool copies body into an unlinked temporary file and returns the file, rewound. The file has
// no name from the start, so its space is given back when it is closed, even by a crash.
func spool(body io.Reader) (*os.File, error) {
	f, err := os.CreateTemp("", "mailvet-upload-*")
	if err != nil {
		return nil, errors.Join(ErrSpool, err)
	}
	_ = os.Remove(f.Name())
	_, err = io.Copy(spoolWriter{f}, spoolReader{body})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
		if err != nil {
			err = errors.Join(ErrSpool, err)
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
		err = fmt.Errorf("%w: %w", ErrUploadRead, err)
	}
	return n, err
}

// spoolWriter tells write failures from read failures in io.Copy.
type spoolWriter struct{ f *os.File }

func (w spoolWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = errors.Join(ErrSpool, err)
	}
	return n, err
}

// ReadProblem is what was wrong with an unreadable upload body, in the HTTP library's words (the
// client's own bytes, no internals), bounded.
func ReadProblem(err error) string {
	_, msg, _ := strings.Cut(err.Error(), ErrUploadRead.Error()+": ")
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// ListUpload is one list upload: who sends it, how to read it, and where from.
type ListUpload struct {
	Caller        Caller
	Format        list.Format
	Column        string
	Name          string
	WebhookURL    string
	WebhookSecret string
	// Address is the client's network address, for the upload slots; "" is unknown.
	Address string
	// Size is the announced size of the file (Content-Length), -1 or 0 when not announced.
	Size int64
	// Stored, when set, runs inside the transaction that stores the list, just before its
	// COMMIT (list.Upload.Stored).
	Stored func(ctx context.Context, tx pgx.Tx, l list.List) error
}

// UploadList receives file, stores it as a list, admits its unique addresses and starts it
// (docs/lists.md). The adapter has checked the upload's parameters; this refuses an upload that
// cannot run (the broker down), is announced larger than the limit, or finds no upload slot
// before it reads any of file, and holds file to the size and row limits as it reads it. Any
// error leaves nothing stored and nothing charged, but a COMMIT whose answer was lost: its list
// may be stored, held and queued, and the workers' sweep then starts it (docs/reliability.md).
func (s *Service) UploadList(ctx context.Context, u ListUpload, file io.Reader) (list.List, error) {
	if !s.fleet.Up() {
		return list.List{}, unavailable(queue.ErrUnavailable) // before reading the file: it could not run
	}
	limit := s.listLimits.MaxBytes
	if u.Size > limit {
		return list.List{}, &FileTooLargeError{Size: u.Size, Limit: limit}
	}
	who := u.Caller
	address := u.Address
	if address == "" {
		address = "unknown"
	}
	release, err := s.uploads.take(who.Account, address, who.Tier == plan.Free)
	if err != nil {
		busy := &UploadBusyError{Reason: err, Account: who.Account, Address: address}
		if !errors.Is(err, errAccountUploadBusy) && !errors.Is(err, errAddressUploadBusy) {
			busy.Holders = s.uploads.holding()
		}
		return list.List{}, busy
	}
	defer release()
	// The whole file first, then Postgres: a slow client holds no database connection.
	f, err := spool(&limitedFile{r: file, left: limit, limit: limit})
	if err != nil {
		return list.List{}, err
	}
	defer f.Close()
	rd, err := list.NewReader(f, u.Format, u.Column, list.Limits{MaxRows: s.listLimits.MaxRows, MaxLineBytes: MaxListLineBytes})
	if err != nil {
		return list.List{}, err
	}
	secret := u.WebhookSecret
	if secret != "" {
		// Only the sealed value is stored (docs/reliability.md, "Webhook secrets at rest").
		if secret, err = s.secrets.Seal(secret); err != nil {
			return list.List{}, fmt.Errorf("seal the list's webhook secret: %w", err)
		}
	}
	ictx, cancel := context.WithTimeout(ctx, ListImportBudget)
	defer cancel()
	// A sandbox key's list carries Sandbox and is not admitted against the quota (docs/sandbox.md).
	l, err := s.lists.Import(ictx, list.Upload{AccountID: who.Account, KeyID: who.Key, Tier: who.Tier, Plan: who.Limits,
		Name: u.Name, WebhookURL: u.WebhookURL, WebhookSecret: secret, Now: s.now(), Sandbox: who.Sandbox, Stored: u.Stored}, rd)
	if err != nil {
		return list.List{}, err
	}
	// The list is stored and admitted: from here on the upload succeeded, whatever fails, or the
	// client would upload and be charged for it again. Starting it is best effort, as the sweep
	// of the verifier workers starts (and publishes the chunks of) any list this does not. These
	// are request-path statements: a context without the import's long deadline gives each the
	// database's default one (about a second), so a Postgres that stopped answering does not
	// hold the answer.
	qctx := context.WithoutCancel(ctx)
	s.publishChunks(qctx, l.AccountID)
	if got, err := s.lists.Get(qctx, who.Account, l.ID); err == nil {
		l = got
	} else {
		s.log.Warn("upload stored; its list could not be read back", "list_id", l.ID, "err", err)
	}
	return l, nil
}

// publishChunks starts the account's queued lists and publishes the chunks they hand out.
func (s *Service) publishChunks(ctx context.Context, account uuid.UUID, chunks ...list.Chunk) {
	started, err := s.lists.Start(ctx, account)
	if err != nil {
		s.log.Warn("start lists", "account", account, "err", err)
	}
	if err := queue.PublishChunks(ctx, s.js, s.layout, time.Second, append(chunks, started...), nil); err != nil {
		s.log.Warn("publish list chunks", "account", account, "err", err)
	}
}

// Lists pages through the account's lists, newest first.
func (s *Service) Lists(ctx context.Context, account string, after *uuid.UUID, limit int) ([]list.List, bool, error) {
	return s.lists.Page(ctx, account, after, limit)
}

// List reads one list of the account; another account's list, like a missing one, is
// list.ErrNotFound.
func (s *Service) List(ctx context.Context, account string, id uuid.UUID) (list.List, error) {
	return s.lists.Get(ctx, account, id)
}

// CancelList stops a queued or running list; its unverified addresses are not billed. The lists
// its room lets start are started.
func (s *Service) CancelList(ctx context.Context, account string, id uuid.UUID) (list.List, error) {
	l, started, err := s.lists.Cancel(ctx, account, id)
	if err != nil {
		return l, err
	}
	if len(started) > 0 {
		s.publishChunks(ctx, l.AccountID, started...)
	}
	return l, nil
}

// DeleteList removes a list's rows and results for good. The lists its room lets start are
// started.
func (s *Service) DeleteList(ctx context.Context, account string, id uuid.UUID) error {
	started, err := s.lists.Delete(ctx, account, id)
	if err != nil {
		return err
	}
	if len(started) > 0 {
		acct, _ := uuid.Parse(account)
		s.publishChunks(ctx, acct, started...)
	}
	return nil
}

// ExportList writes list l's rows with their results in input order (list.Store.Export).
func (s *Service) ExportList(ctx context.Context, l list.List, format list.Format, statuses []string, formulas list.Formulas, w io.Writer, flush func()) error {
	return s.lists.Export(ctx, l, format, statuses, formulas, w, flush)
}

// MaxColumnName bounds an upload's column parameter.
const MaxColumnName = 200

// CheckListFields checks an upload's column and name as every adapter must before UploadList:
// text the store can hold, within their bounds (docs/lists.md, "Uploading").
func CheckListFields(column, name string) error {
	if err := CheckText("column", column, MaxColumnName); err != nil {
		return err
	}
	if err := listname.Check(name); err != nil {
		return invalid("Field name %v.", err)
	}
	return nil
}

// CheckText bounds a text field that bypasses a JSON decoder's checks (a query parameter, a
// header, a form field): bytes that are not UTF-8 or a NUL would reach Postgres, which refuses
// them, as a server error.
func CheckText(field, v string, max int) error {
	switch {
	case !utf8.ValidString(v):
		return invalid("Field %s is not valid UTF-8 text.", field)
	case utf8.RuneCountInString(v) > max:
		return invalid("Field %s is longer than %d characters.", field, max)
	case strings.IndexByte(v, 0) >= 0:
		return invalid("Field %s contains a NUL character.", field)
	}
	return nil
}
