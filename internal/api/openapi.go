package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openapiJSON is the OpenAPI description of every route (docs/api.md). Tests check each route's real
// responses against it, so it cannot drift from the code unnoticed.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) openapi(c echo.Context) error {
	c.Response().Header().Set(echo.HeaderCacheControl, publicDocCache)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapiJSON)
}
