package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// A JSON value of the wrong type is named for what the field takes, in JSON's words.
func TestJSONTypeErrorsNameTheType(t *testing.T) {
	t.Parallel()
	var batch struct {
		Emails []string `json:"emails"`
		Strict *bool    `json:"strict"`
	}
	for body, want := range map[string]string{
		`{"emails":"x"}`:    "Field emails must be an array of strings, not string.",
		`{"emails":[1]}`:    "Field emails must be a string, not number.",
		`{"strict":"yes"}`:  "Field strict must be a boolean, not string.",
		`["a@example.com"]`: "Request body must be a JSON object, not array.",
	} {
		err := jsonError(json.NewDecoder(strings.NewReader(body)).Decode(&batch))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
