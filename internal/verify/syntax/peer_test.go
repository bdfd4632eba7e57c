package syntax

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// peerCase is one line of testdata/peer_syntax.jsonl: an input of the peer suite and the peer's
// verdict on it with its default options.
type peerCase struct {
	In       string `json:"in"`
	Valid    bool   `json:"valid"`
	PeerTest string `json:"peer_test"`
}

func loadPeerCases(t *testing.T) []peerCase {
	t.Helper()
	f, err := os.Open("testdata/peer_syntax.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []peerCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		var c peerCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("testdata/peer_syntax.jsonl: %v", err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestPeerSuite runs the peer's own syntax cases (testdata/peer_syntax.md says where they come
// from) through Parse. Every case must get the peer's verdict except an input with spaces or tabs
// around the address, which Parse trims (docs/api.md, "The verify result"): such an input must
// then be judged exactly as its trimmed form is.
func TestPeerSuite(t *testing.T) {
	t.Parallel()
	cases := loadPeerCases(t)
	if len(cases) < 200 {
		t.Fatalf("testdata/peer_syntax.jsonl has %d cases; the peer suite has more than 200", len(cases))
	}
	agree, trimmed := 0, 0
	for _, c := range cases {
		got, err := Parse(c.In)
		if (err == nil) == c.Valid {
			agree++
			continue
		}
		if core := strings.Trim(c.In, " \t"); core != c.In {
			again, err2 := Parse(core)
			if again == got && (err == nil) == (err2 == nil) {
				trimmed++
				continue
			}
		}
		t.Errorf("%q (%s): peer says valid=%v, Parse = %+v, %v", c.In, c.PeerTest, c.Valid, got, err)
	}
	t.Logf("the peer suite agrees on %d of %d cases; %d more differ only by the spaces or tabs trimmed around them", agree, len(cases), trimmed)
}

// TestPeerSuiteCoversTheStrictRules makes sure the peer cases that concern layer 1's stricter
// rules stay in the data: line breaks, the reserved "--" and international local parts.
func TestPeerSuiteCoversTheStrictRules(t *testing.T) {
	t.Parallel()
	var lineBreaks, hyphens, intl int
	for _, c := range loadPeerCases(t) {
		switch {
		case strings.ContainsAny(c.In, "\r\n"):
			lineBreaks++
		case strings.Contains(c.In, "--") && !strings.Contains(c.In, "xn--"):
			hyphens++
		case c.Valid && strings.IndexFunc(c.In[:strings.LastIndexByte(c.In, '@')], func(r rune) bool { return r >= 0x80 }) >= 0:
			intl++
		}
	}
	if lineBreaks < 20 || hyphens < 2 || intl < 13 {
		t.Fatalf("peer cases: %d with CR or LF, %d with a reserved --, %d valid international local parts; want at least 20, 2 and 13", lineBreaks, hyphens, intl)
	}
}
