package api

// routes registers every route of the API. Keep this the one list of paths: it is what
// /openapi.json must describe.
func (s *Server) routes() {
	e := s.echo
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
}
