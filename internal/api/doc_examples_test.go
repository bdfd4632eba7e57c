package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// docExampleSchemas names, for each section of the docs that shows a JSON body (file, then the
// text of the nearest heading above the block), what that body is: a route's response ("METHOD
// /path STATUS", its schema taken from /openapi.json) or a component schema ("#Name", for bodies
// no route answers with: callbacks, the last line of a stream, error envelopes). A new JSON block
// under a heading missing here fails TestDocJSONExamplesMatchSpec until it is added, so that every
// example a developer copies from the docs is checked against the contract.
var docExampleSchemas = map[string]string{
	"README.md:Try it: `make demo`":                         "POST /v1/email/verify 200",
	"docs/api.md:Verify one address":                        "POST /v1/email/verify 200",
	"docs/api.md:Verify a batch":                            "POST /v1/email/verify/batch 200",
	"docs/api.md:The last line of an incomplete stream":     "#StreamError",
	"docs/api.md:Asynchronous verification":                 "POST /v1/email/verify 202",
	"docs/api.md:Job states":                                "GET /v1/email/jobs/{job_id} 200",
	"docs/api.md:The callback request":                      "#JobResult",
	"docs/api.md:GET /v1/management/account":                "GET /v1/management/account 200",
	"docs/api.md:GET /v1/management/keys":                   "GET /v1/management/keys 200",
	"docs/api.md:POST /v1/management/keys":                  "POST /v1/management/keys 201",
	"docs/api.md:GET /v1/management/usage":                  "GET /v1/management/usage 200",
	"docs/api.md:GET /v1/management/usage/summary":          "GET /v1/management/usage/summary 200",
	"docs/api.md:POST /v1/management/billing/portal":        "POST /v1/management/billing/portal 200",
	"docs/api.md:GET /v1/management/deliveries":             "GET /v1/management/deliveries 200",
	"docs/api.md:POST /v1/management/deliveries/{id}/retry": "POST /v1/management/deliveries/{id}/retry 202",
	"docs/api.md:GET /v1/management/audit":                  "GET /v1/management/audit 200",
	"docs/api.md:GET /v1/management/account/export":         "GET /v1/management/account/export 200",
	"docs/api.md:DELETE /v1/email/history":                  "DELETE /v1/email/history 200",
	"docs/api.md:Errors":                                    "#Error",
	"docs/errors.md:Error reference":                        "#RateLimitExceeded",
	"docs/errors.md:service_unavailable":                    "#StreamError",
	"docs/lists.md:Uploading":                               "POST /v1/email/lists 202",
	"docs/lists.md:Bad input":                               "POST /v1/email/lists 400",
	"docs/lists.md:The completion callback":                 "#ListCallback",
	"docs/sandbox.md:Creating a sandbox key":                "POST /v1/management/keys 201",
}

// elided marks what an example leaves out: a "…" key stands for the object's other fields, a
// string containing "…" for a value shortened for the page ("0b6f3c1e-…"), an array element
// like "… 28 more …" for further elements.
const elided = "…"

// docJSONBlock is one ```json block of a Markdown page and the heading it sits under.
type docJSONBlock struct {
	file, heading string
	line          int
	body          string
}

var docHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// docJSONBlocks returns the ```json blocks of the repository's README and docs/ pages.
func docJSONBlocks(t *testing.T) []docJSONBlock {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	var blocks []docJSONBlock
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(path), "../../")
		lines := strings.Split(string(raw), "\n")
		heading := ""
		for i := 0; i < len(lines); i++ {
			if m := docHeading.FindStringSubmatch(lines[i]); m != nil {
				heading = m[1]
				continue
			}
			if !strings.HasPrefix(lines[i], "```") {
				continue
			}
			lang, start := strings.TrimSpace(strings.TrimPrefix(lines[i], "```")), i
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			}
			if lang == "json" {
				blocks = append(blocks, docJSONBlock{name, heading, start + 1, strings.Join(lines[start+1:i], "\n")})
			}
		}
	}
	return blocks
}

// TestDocJSONExamplesMatchSpec checks every JSON body shown in README.md and docs/ against the
// schema /openapi.json gives it: the fields it shows exist (the schemas refuse unknown fields),
// their values have the documented types and enums, and an example that elides nothing has every
// required field. Tests of real responses check the code against the same schemas, so an example
// that passes here shows what the API answers.
func TestDocJSONExamplesMatchSpec(t *testing.T) {
	t.Parallel()
	doc, _ := loadSpec(t)
	blocks := docJSONBlocks(t)
	if len(blocks) < 20 {
		t.Fatalf("found only %d JSON blocks in README.md and docs/", len(blocks))
	}
	used := map[string]bool{}
	for _, b := range blocks {
		where := fmt.Sprintf("%s:%d (under %q)", b.file, b.line, b.heading)
		key := b.file + ":" + b.heading
		target, ok := docExampleSchemas[key]
		if !ok {
			t.Errorf("%s: a JSON example not in docExampleSchemas; add %q with its route or schema", where, key)
			continue
		}
		used[key] = true
		schema, err := docSchema(doc, target)
		if err != nil {
			t.Errorf("%s: %s: %v", where, target, err)
			continue
		}
		var v any
		dec := json.NewDecoder(strings.NewReader(b.body))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Errorf("%s: not valid JSON: %v", where, err)
			continue
		}
		for _, problem := range checkExample(schema, numbersToFloat(v), "$") {
			t.Errorf("%s: as %s: %s", where, target, problem)
		}
	}
	for key := range docExampleSchemas {
		if !used[key] {
			t.Errorf("docExampleSchemas[%q]: no JSON block under that heading any more", key)
		}
	}
}

// docSchema resolves a docExampleSchemas target to its schema.
func docSchema(doc *openapi3.T, target string) (*openapi3.Schema, error) {
	if name, ok := strings.CutPrefix(target, "#"); ok {
		ref := doc.Components.Schemas[name]
		if ref == nil {
			return nil, fmt.Errorf("no component schema %q", name)
		}
		return ref.Value, nil
	}
	f := strings.Fields(target)
	if len(f) != 3 {
		return nil, fmt.Errorf("want METHOD /path STATUS")
	}
	item := doc.Paths.Find(f[1])
	if item == nil {
		return nil, fmt.Errorf("no such path in /openapi.json")
	}
	op := item.GetOperation(f[0])
	if op == nil {
		return nil, fmt.Errorf("no such operation in /openapi.json")
	}
	status, err := strconv.Atoi(f[2])
	if err != nil {
		return nil, err
	}
	resp := op.Responses.Status(status)
	if resp == nil || resp.Value == nil {
		return nil, fmt.Errorf("status %d is not documented", status)
	}
	media := resp.Value.Content.Get("application/json")
	if media == nil || media.Schema == nil {
		return nil, fmt.Errorf("status %d has no application/json body", status)
	}
	return media.Schema.Value, nil
}

// numbersToFloat turns the decoder's json.Number values into float64, as VisitJSON expects.
func numbersToFloat(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = numbersToFloat(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbersToFloat(e)
		}
	}
	return v
}

// hasElision reports whether v elides anything, anywhere inside it.
func hasElision(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.Contains(v, elided)
	case map[string]any:
		for k, e := range v {
			if k == elided || hasElision(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, hasElision)
	}
	return false
}

// checkExample validates v against s. What elides nothing is validated whole (required fields,
// enums, formats); an elided string only needs the schema to allow a string, an elided object
// only that the fields it shows are declared and valid, an elided array element is skipped.
func checkExample(s *openapi3.Schema, v any, path string) []string {
	if !hasElision(v) {
		if err := s.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
			return []string{fmt.Sprintf("%s: %v", path, err)}
		}
		return nil
	}
	switch v := v.(type) {
	case string:
		if !schemaAllows(s, "string") {
			return []string{fmt.Sprintf("%s: %q is a string, the schema does not allow one", path, v)}
		}
	case []any:
		if !schemaAllows(s, "array") {
			return []string{fmt.Sprintf("%s: an array, the schema does not allow one", path)}
		}
		items := arrayItems(s)
		var problems []string
		for i, e := range v {
			if str, ok := e.(string); ok && strings.Contains(str, elided) && (items == nil || !schemaAllows(items, "string")) {
				continue
			}
			if items != nil {
				problems = append(problems, checkExample(items, e, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
		return problems
	case map[string]any:
		if !schemaAllows(s, "object") {
			return []string{fmt.Sprintf("%s: an object, the schema does not allow one", path)}
		}
		var problems []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range v {
				if !yield(k) {
					return
				}
			}
		}) {
			if k == elided {
				continue
			}
			prop, declared := objectProperty(s, k)
			if !declared {
				problems = append(problems, fmt.Sprintf("%s: field %q is not in the schema", path, k))
				continue
			}
			if prop != nil {
				problems = append(problems, checkExample(prop, v[k], path+"."+k)...)
			}
		}
		return problems
	}
	return nil
}

// schemaAllows reports whether s (or one of its allOf/oneOf/anyOf parts) allows JSON type typ; a
// schema that names no type allows every type.
func schemaAllows(s *openapi3.Schema, typ string) bool {
	if s.Type != nil && len(*s.Type) > 0 {
		return s.Type.Includes(typ)
	}
	for _, r := range s.AllOf {
		if r.Value != nil && !schemaAllows(r.Value, typ) {
			return false
		}
	}
	if alts := slices.Concat(s.OneOf, s.AnyOf); len(alts) > 0 {
		return slices.ContainsFunc(alts, func(r *openapi3.SchemaRef) bool {
			return r.Value != nil && schemaAllows(r.Value, typ)
		})
	}
	return true
}

// arrayItems returns the items schema of s, looking into its allOf/oneOf/anyOf parts.
func arrayItems(s *openapi3.Schema) *openapi3.Schema {
	if s.Items != nil {
		return s.Items.Value
	}
	for _, group := range [][]*openapi3.SchemaRef{s.AllOf, s.OneOf, s.AnyOf} {
		for _, r := range group {
			if r.Value != nil {
				if it := arrayItems(r.Value); it != nil {
					return it
				}
			}
		}
	}
	return nil
}

// objectProperty returns the schema of field k of object schema s: a declared property (in s or
// one of its allOf/oneOf/anyOf parts), else additionalProperties. declared is false when s refuses
// the field; prop is nil when the field is allowed with no schema to check it against.
func objectProperty(s *openapi3.Schema, k string) (prop *openapi3.Schema, declared bool) {
	if p := s.Properties[k]; p != nil {
		return p.Value, true
	}
	parts := slices.Concat(s.AllOf, s.OneOf, s.AnyOf)
	for _, r := range parts {
		if r.Value != nil {
			if p, ok := objectProperty(r.Value, k); ok && p != nil {
				return p, true
			}
		}
	}
	if ap := s.AdditionalProperties; ap.Schema != nil {
		return ap.Schema.Value, true
	} else if ap.Has != nil && !*ap.Has {
		return nil, false
	}
	if len(parts) > 0 {
		// A composed schema declares what its parts declare.
		for _, r := range parts {
			if r.Value != nil {
				if _, ok := objectProperty(r.Value, k); ok {
					return nil, true
				}
			}
		}
		return nil, false
	}
	return nil, true
}
