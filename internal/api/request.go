package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"strings"

	"github.com/labstack/echo/v4"
)

// bindJSON decodes a JSON request body into dst, strictly: the Content-Type must be JSON, the
// body one object, and unknown fields are refused so that a mistyped field name is an error
// instead of a silently ignored one. Every failure is a 400 whose message names the field.
func bindJSON(c echo.Context, dst any) error {
	ct := c.Request().Header.Get(echo.HeaderContentType)
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != echo.MIMEApplicationJSON {
		return InvalidRequest("Content-Type must be application/json, not %q.", ct)
	}
	dec := json.NewDecoder(c.Request().Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return InvalidRequest("Request body must hold exactly one JSON object.")
	}
	return nil
}

func jsonError(err error) error {
	var (
		he     *echo.HTTPError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &he):
		return he // the body guard's 413
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
		return InvalidRequest("Field %s must be a %s, not %s.", typ.Field, jsonType(typ.Type.String()), typ.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return InvalidRequest("Unknown field %s.", f)
	}
	return InvalidRequest("Request body is not valid JSON.")
}

func jsonType(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "int", "int64", "float64":
		return "number"
	}
	return "value of another type"
}
