package api

import (
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/idempotency"
)

// keyJSON is a listed standard key (docs/api.md): never the raw key.
type keyJSON struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Prefix string `json:"prefix"`
	// Mode is live or sandbox (docs/sandbox.md).
	Mode      string `json:"mode"`
	CreatedAt string `json:"created_at"`
}

type createdKeyJSON struct {
	keyJSON
	Key     string `json:"key"`
	Warning string `json:"warning"`
}

// KeyWarning accompanies the one response that carries a raw key.
const KeyWarning = "Store this key securely now: it is shown only once and cannot be retrieved later."

func toKeyJSON(k account.Key) keyJSON {
	return keyJSON{ID: k.ID, Label: k.Label, Prefix: k.Prefix, Mode: string(k.Mode), CreatedAt: isoTime(k.CreatedAt)}
}

func (s *Server) listKeys(c echo.Context) error {
	ctx := c.Request().Context()
	p := principalOf(c)
	keys, err := s.accounts.ListStandardKeys(ctx, p.AccountID)
	if err != nil {
		return err
	}
	a, err := s.accounts.Get(ctx, p.AccountID)
	if err != nil {
		return err
	}
	limits := s.cfg.Plans.Of(a.Tier)
	out := make([]keyJSON, 0, len(keys))
	for _, k := range keys {
		out = append(out, toKeyJSON(k))
	}
	return c.JSON(http.StatusOK, map[string]any{"keys": out, "count": len(out), "max": limits.MaxKeys})
}

type createKeyRequest struct {
	Label *string `json:"label"`
	// Mode is "live" (the default) or "sandbox" (docs/sandbox.md).
	Mode *string `json:"mode"`
}

func (s *Server) createKey(c echo.Context) error {
	var req createKeyRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if req.Label == nil {
		return InvalidRequest("Field label is required (a string of 1 to %d characters).", account.MaxLabelLen)
	}
	if err := account.CheckLabel(*req.Label); err != nil {
		return InvalidRequest("Field %s.", err.Error())
	}
	mode := auth.ModeLive
	if req.Mode != nil {
		mode = auth.Mode(*req.Mode)
		if mode != auth.ModeLive && mode != auth.ModeSandbox {
			return InvalidRequest(`Field mode must be "live" or "sandbox" (a sandbox key, sk_test_…, answers from the documented test addresses and is never billed).`)
		}
	}
	ctx := c.Request().Context()
	var k account.CreatedKey
	// The answer of the request's Idempotency-Key commits with the key: a key made while the API
	// lost its COMMIT's answer is what the retry gets, its secret included (sealed, as every
	// kept answer is), not a second key counted against max_keys.
	keep, kept := idempotency.KeepOf(c), false
	err := s.audited(ctx, func(tx pgx.Tx) error {
		var err error
		k, err = account.NewStore(tx).CreateStandardKeyIn(ctx, principalOf(c).AccountID, *req.Label, mode, "", s.cfg.Plans.MaxKeys)
		if err != nil {
			return err
		}
		if err := record(ctx, tx, s.auditEvent(c, audit.KeyCreated, keyDetail(k.Key))); err != nil || keep == nil {
			return err
		}
		if err := keepJSON(ctx, keep, tx, http.StatusCreated, nil, createdKey(k)); err != nil {
			return err
		}
		kept = true
		return nil
	})
	if err != nil {
		if kept {
			// Only the COMMIT followed the Keep: the key may be stored with its answer.
			idempotency.MayHaveCommitted(c)
		}
		return err
	}
	return c.JSON(http.StatusCreated, createdKey(k))
}

// createdKey is the answer to a key creation: the one response that carries the raw key.
func createdKey(k account.CreatedKey) createdKeyJSON {
	return createdKeyJSON{keyJSON: toKeyJSON(k.Key), Key: k.Raw, Warning: KeyWarning}
}

func (s *Server) deleteKey(c echo.Context) error {
	// The id is parsed here and passed on in its canonical form: the store's check accepts
	// spellings such as urn:uuid:… that Postgres's uuid type refuses, which made a 500 of a 404.
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return account.ErrKeyNotFound
	}
	ctx := c.Request().Context()
	err = s.audited(ctx, func(tx pgx.Tx) error {
		store := account.NewStore(tx)
		if err := store.RevokeStandardKey(ctx, principalOf(c).AccountID, id.String()); err != nil {
			return err
		}
		k, err := store.KeyByID(ctx, principalOf(c).AccountID, id.String())
		if err != nil {
			return err
		}
		return record(ctx, tx, s.auditEvent(c, audit.KeyRevoked, keyDetail(k)))
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// keyDetail is an audit event's detail for key k: its kind, display form and label, never the
// key itself.
func keyDetail(k account.Key) string {
	return string(k.Kind) + " key " + k.Prefix + " (" + k.Label + ")"
}
