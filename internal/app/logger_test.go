package app_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
)

// The log format follows MAILVET_LOG_FORMAT, and unset it is JSON unless a dev process writes to
// a terminal (docs/operations.md, "Logs"); a buffer or a file is no terminal.
func TestLoggerFormat(t *testing.T) {
	t.Parallel()
	text := regexp.MustCompile(`^time=\d\d:\d\d:\d\d\.\d{3} level=INFO msg="api listening" service=api addr=127\.0\.0\.1:8080\n$`)
	for _, c := range []struct {
		format string
		dev    bool
		json   bool
	}{
		{"", false, true},
		{"", true, true}, // dev mode, but the output is a buffer
		{config.LogJSON, true, true},
		{config.LogText, false, false},
		{config.LogText, true, false},
	} {
		var buf bytes.Buffer
		app.Logger(&buf, "api", config.Config{LogFormat: c.format, Dev: c.dev}).Info("api listening", "addr", "127.0.0.1:8080")
		line := buf.String()
		if c.json {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] != "api listening" || rec["service"] != "api" {
				t.Errorf("format %q dev %v: want a JSON line, got %q (%v)", c.format, c.dev, line, err)
			}
		} else if !text.MatchString(line) {
			t.Errorf("format %q dev %v: want a text line matching %s, got %q", c.format, c.dev, text, line)
		}
	}
}

// A regular file is no terminal: a dev process whose stderr is redirected to one logs JSON.
func TestLoggerFileIsNoTerminal(t *testing.T) {
	t.Parallel()
	f, err := os.Create(t.TempDir() + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	app.Logger(f, "api", config.Config{Dev: true}).Info("hello")
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "{") {
		t.Errorf("want JSON in a file, got %q", b)
	}
}
