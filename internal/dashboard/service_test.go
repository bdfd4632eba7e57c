package dashboard

import (
	"context"
	"crypto/sha256"
	"hash"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verification"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// testService is the real verification service (internal/verification, tested there and through
// internal/api) over the fixture's database and an embedded NATS server without verifier
// workers, so only what the local layers decide is verified ("not-an-address"). It records what
// the pages ask of it: how often, as which account, and the bytes of the last upload.
type testService struct {
	*verification.Service

	calls    atomic.Int32 // verifications
	uploads  atomic.Int32
	cancels  atomic.Int32
	deletes  atomic.Int32
	accounts chan string
	// last is the caller of the last verification.
	last atomic.Pointer[verification.Caller]

	// delay holds every verification and upload for a while, as a person clicking twice sees.
	delay time.Duration
	// down, when set, is what every call fails with instead of running (an outage).
	down error
	// fixed are lists the service answers for as they are given (the pages' wording); a cancel
	// of one is refused as finished, a deletion of one is counted.
	fixed map[uuid.UUID]list.List
	// listed, when set, is the lists page's answer instead of the account's stored lists.
	listed []list.List

	mu     sync.Mutex
	upload testUpload // the last upload as the service read it
}

type testUpload struct {
	req   verification.ListUpload
	bytes int64
	sum   [sha256.Size]byte
	err   error // what the upload ended with
}

func newTestService(t *testing.T, cfg config.Config, pool *pgxpool.Pool) *testService {
	t.Helper()
	nc, js := natstest.Connect(t)
	if err := queue.EnsureStreams(context.Background(), js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	d := queue.NewDispatcher(nc, js, queue.Layout{})
	t.Cleanup(d.Close)
	engine, err := verify.New(verify.Config{SMTP: smtp.Config{Helo: "verifier.example.com", MailFrom: "probe@example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(engine.Close)
	log := slog.New(slog.DiscardHandler)
	ledger := usage.NewLedger(pool, log)
	t.Cleanup(ledger.Close)
	svc := verification.New(verification.Config{Local: engine, Fleet: d, Ledger: ledger, Pool: pool, Log: log,
		Lists: list.NewStore(pool, list.Configured(cfg.Lists.Retention)), JS: js,
		ListLimits: verification.ListLimits{MaxBytes: cfg.Lists.MaxBytes, MaxRows: cfg.Lists.MaxRows},
		Uploads:    verification.UploadLimits{PerAddress: cfg.Uploads.PerAddress, Free: cfg.Uploads.Free}})
	return &testService{Service: svc, accounts: make(chan string, 64)}
}

func (s *testService) record(account string) {
	select {
	case s.accounts <- account:
	default:
	}
}

func (s *testService) lastUpload() testUpload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upload
}

func (s *testService) One(ctx context.Context, req verification.Request, email string) (*verification.Answer, verification.Window, error) {
	s.calls.Add(1)
	s.last.Store(&req.Caller)
	s.record(req.Caller.Account)
	time.Sleep(s.delay)
	if s.down != nil {
		return nil, verification.Window{}, s.down
	}
	return s.Service.One(ctx, req, email)
}

// counting hashes and counts what is read through it.
type counting struct {
	r io.Reader
	n int64
	h hash.Hash
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.h.Write(p[:n])
	return n, err
}

func (s *testService) UploadList(ctx context.Context, u verification.ListUpload, file io.Reader) (list.List, error) {
	s.uploads.Add(1)
	s.record(u.Caller.Account)
	time.Sleep(s.delay)
	if s.down != nil {
		_, _ = io.Copy(io.Discard, file)
		return list.List{}, s.down
	}
	c := &counting{r: file, h: sha256.New()}
	l, err := s.Service.UploadList(ctx, u, c)
	up := testUpload{req: u, bytes: c.n, err: err}
	copy(up.sum[:], c.h.Sum(nil))
	s.mu.Lock()
	s.upload = up
	s.mu.Unlock()
	return l, err
}

func (s *testService) Lists(ctx context.Context, account string, after *uuid.UUID, limit int) ([]list.List, bool, error) {
	s.record(account)
	if s.down != nil {
		return nil, false, s.down
	}
	if s.listed != nil {
		return s.listed, false, nil
	}
	return s.Service.Lists(ctx, account, after, limit)
}

func (s *testService) List(ctx context.Context, account string, id uuid.UUID) (list.List, error) {
	s.record(account)
	if s.down != nil {
		return list.List{}, s.down
	}
	if l, ok := s.fixed[id]; ok {
		return l, nil
	}
	return s.Service.List(ctx, account, id)
}

func (s *testService) CancelList(ctx context.Context, account string, id uuid.UUID) (list.List, error) {
	s.record(account)
	if s.down != nil {
		return list.List{}, s.down
	}
	if _, ok := s.fixed[id]; ok {
		s.cancels.Add(1)
		return list.List{}, list.ErrFinished
	}
	return s.Service.CancelList(ctx, account, id)
}

func (s *testService) DeleteList(ctx context.Context, account string, id uuid.UUID) error {
	s.record(account)
	if s.down != nil {
		return s.down
	}
	if _, ok := s.fixed[id]; ok {
		s.deletes.Add(1)
		return nil
	}
	return s.Service.DeleteList(ctx, account, id)
}
