package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"strings"

	"github.com/labstack/echo/v4"
)

// bindJSON decodes a JSON request body into dst, strictly: the Content-Type must be JSON, the
// body one object, and unknown fields are refused so that a mistyped field name is an error
// instead of a silently ignored one. A NUL character anywhere in the body is refused too
// (refuseNUL). Every failure is a 400 whose message names the field.
func bindJSON(c echo.Context, dst any) error {
	ct := c.Request().Header.Get(echo.HeaderContentType)
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != echo.MIMEApplicationJSON {
		return InvalidRequest("Content-Type must be application/json, not %q.", ct)
	}
	// The whole body is read first so that the NUL check sees all of it before any field is
	// used. The body guard caps it at MaxBodyBytes, and the decoder buffered all of it anyway.
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return jsonError(err)
	}
	if err := refuseNUL(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return InvalidRequest("Request body must hold exactly one JSON object.")
	}
	return nil
}

// jsonError maps a failure to read or decode a request body. Reading fails only with the body
// guard's 413 or the body read deadline (bodyDeadline); everything else is the client's JSON.
func jsonError(err error) error {
	var (
		he     *echo.HTTPError
		ne     net.Error
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &he):
		return he // the body guard's 413
	case errors.As(err, &ne) && ne.Timeout():
		return requestTimeout()
	case errors.Is(err, io.EOF):
		return InvalidRequest("Request body is empty; send a JSON object.")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return InvalidRequest("Request body is truncated JSON.")
	case errors.As(err, &syntax):
		return InvalidRequest("Request body is not valid JSON (at byte %d).", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return InvalidRequest("Request body must be a JSON object, not %s.", typ.Value)
		}
		return InvalidRequest("Field %s must be %s, not %s.", typ.Field, jsonType(typ.Type.String()), typ.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return InvalidRequest("Unknown field %s.", f)
	}
	return InvalidRequest("Request body is not valid JSON.")
}

// jsonType names the JSON value a Go type decodes from, with its article.
func jsonType(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch goType {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "float64":
		return "a number"
	case "[]string":
		return "an array of strings"
	}
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	}
	return "a value of another type"
}
