package syntax

import (
	"errors"
	"strings"
	"testing"
)

// parseCase is one row of the table: an input, why it is (in)valid, and either the expected
// address or the expected failure.
type parseCase struct {
	why    string
	in     string
	local  string
	domain string
	err    error // nil for a valid address
}

func ok(why, in, local, domain string) parseCase {
	return parseCase{why: why, in: in, local: local, domain: domain}
}

func bad(why, in string, err error) parseCase {
	return parseCase{why: why, in: in, err: err}
}

var (
	local64  = strings.Repeat("a", 64)
	local65  = strings.Repeat("a", 65)
	label63  = strings.Repeat("b", 63)
	label64  = strings.Repeat("b", 64)
	domain63 = label63 + "." + label63 + "." + label63 + "." + strings.Repeat("c", 57) + ".com" // 253
	domain64 = label63 + "." + label63 + "." + label63 + "." + strings.Repeat("c", 58) + ".com" // 254
	// A 254-octet address: 64 + 1 + 189.
	domain189 = label63 + "." + label63 + "." + strings.Repeat("c", 57) + ".com"
	domain190 = label63 + "." + label63 + "." + strings.Repeat("c", 58) + ".com"
)

func parseCases() []parseCase {
	return []parseCase{
		// Ordinary valid addresses.
		ok("plain address", "john@example.com", "john", "example.com"),
		ok("dotted local part", "john.smith@example.com", "john.smith", "example.com"),
		ok("plus tag", "john+news@example.com", "john+news", "example.com"),
		ok("digits in local part", "user123@example.com", "user123", "example.com"),
		ok("digits only local part", "12345@example.com", "12345", "example.com"),
		ok("single character local part", "a@example.com", "a", "example.com"),
		ok("hyphen in local part", "first-last@example.com", "first-last", "example.com"),
		ok("underscore in local part", "first_last@example.com", "first_last", "example.com"),
		ok("every atext special", "!#$%&'*+-/=?^_`{|}~@example.com", "!#$%&'*+-/=?^_`{|}~", "example.com"),
		ok("apostrophe", "o'brien@example.ie", "o'brien", "example.ie"),
		ok("slash", "a/b@example.com", "a/b", "example.com"),
		ok("equals", "a=b@example.com", "a=b", "example.com"),
		ok("question mark", "what?@example.com", "what?", "example.com"),
		ok("braces", "{tag}@example.com", "{tag}", "example.com"),
		ok("pipe", "a|b@example.com", "a|b", "example.com"),
		ok("tilde", "~user@example.com", "~user", "example.com"),
		ok("hash", "#channel@example.com", "#channel", "example.com"),
		ok("caret", "a^b@example.com", "a^b", "example.com"),
		ok("backtick", "a`b@example.com", "a`b", "example.com"),
		ok("local part keeps its case", "John.Smith@example.com", "John.Smith", "example.com"),
		ok("domain is lowercased", "john@EXAMPLE.COM", "john", "example.com"),
		ok("mixed case domain", "john@ExAmPlE.CoM", "john", "example.com"),
		ok("leading space trimmed", "  john@example.com", "john", "example.com"),
		ok("trailing space trimmed", "john@example.com  ", "john", "example.com"),
		ok("tabs trimmed", "\tjohn@example.com\t", "john", "example.com"),
		ok("spaces and tabs trimmed together", " \t john@example.com \t ", "john", "example.com"),
		ok("subdomain", "john@mail.example.com", "john", "mail.example.com"),
		ok("deep subdomain", "john@a.b.c.d.example.com", "john", "a.b.c.d.example.com"),
		ok("hyphen in domain label", "john@my-company.com", "john", "my-company.com"),
		ok("double hyphen after the fourth position", "john@abc--company.com", "john", "abc--company.com"),
		ok("double hyphen in positions 3-4 of an xn-- label", "a@xn--bcher-kva.example", "a", "xn--bcher-kva.example"),
		ok("digits in domain label", "john@123mail.com", "john", "123mail.com"),
		ok("all-digit second-level label", "john@163.com", "john", "163.com"),
		ok("two-letter TLD", "john@example.de", "john", "example.de"),
		ok("long TLD", "john@example.photography", "john", "example.photography"),
		ok("country second level", "john@example.co.uk", "john", "example.co.uk"),
		ok("xn-- TLD", "john@example.xn--p1ai", "john", "example.xn--p1ai"),
		ok("xn-- second level", "john@xn--bcher-kva.de", "john", "xn--bcher-kva.de"),
		ok("upper-case XN-- label", "john@XN--BCHER-KVA.DE", "john", "xn--bcher-kva.de"),
		ok("unicode domain", "john@bücher.de", "john", "xn--bcher-kva.de"),
		ok("unicode upper case domain", "john@BÜCHER.DE", "john", "xn--bcher-kva.de"),
		ok("cyrillic domain and TLD", "ivan@пример.рф", "ivan", "xn--e1afmkfd.xn--p1ai"),
		ok("chinese domain", "li@例子.中国", "li", "xn--fsqu00a.xn--fiqs8s"),
		ok("ideographic full stop", "li@例子。中国", "li", "xn--fsqu00a.xn--fiqs8s"),
		ok("german sharp s kept (nontransitional)", "hans@straße.de", "hans", "xn--strae-oqa.de"),
		ok("japanese domain", "taro@日本語.jp", "taro", "xn--wgv71a119e.jp"),
		ok("greek domain", "nikos@παράδειγμα.gr", "nikos", "xn--hxajbheg2az3al.gr"),
		ok("accented latin domain", "jose@café.fr", "jose", "xn--caf-dma.fr"),
		ok("64-octet local part", local64+"@example.com", local64, "example.com"),
		ok("63-octet label", "john@"+label63+".com", "john", label63+".com"),
		ok("253-octet domain with short local part", "a@"+domain189, "a", domain189),
		ok("254-octet address", local64+"@"+domain189, local64, domain189),
		ok("single-letter labels", "a@b.co", "a", "b.co"),
		ok("single-letter TLD is alphabetic", "a@example.x", "a", "example.x"),
		ok("gmail", "jane.doe@gmail.com", "jane.doe", "gmail.com"),
		ok("yahoo co uk", "jane@yahoo.co.uk", "jane", "yahoo.co.uk"),
		ok("many dots in local part", "a.b.c.d.e@example.com", "a.b.c.d.e", "example.com"),
		ok("local part with dot then plus", "a.b+c@example.com", "a.b+c", "example.com"),
		ok("hyphen-leading local part", "-john@example.com", "-john", "example.com"),
		ok("hyphen-trailing local part", "john-@example.com", "john-", "example.com"),
		ok("plus-only local part", "+@example.com", "+", "example.com"),
		ok("punycode label with digits", "x@xn--80ak6aa92e.com", "x", "xn--80ak6aa92e.com"),
		ok("numbers in non-final labels", "x@1.2.3.example", "x", "1.2.3.example"),
		ok("label of digits and hyphens", "x@1-2-3.example", "x", "1-2-3.example"),
		ok("fullwidth latin domain mapped", "x@ｅｘａｍｐｌｅ.com", "x", "example.com"),
		ok("local part upper case with digits", "ABC123@example.org", "ABC123", "example.org"),
		ok("role address", "admin@example.com", "admin", "example.com"),
		ok("noreply", "no-reply@example.com", "no-reply", "example.com"),
		ok("local part of only specials", "__@example.com", "__", "example.com"),
		ok("domain with many labels", "x@a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.com", "x", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.com"),
		ok("museum TLD", "x@example.museum", "x", "example.museum"),

		// International local parts (RFC 6531), kept in NFC.
		ok("chinese local part and domain", "用户@例子.广告", "用户", "xn--fsqu00a.xn--4rr70v"),
		ok("devanagari local part and domain", "अजय@डाटा.भारत", "अजय", "xn--c2bd1gb.xn--h2brj9c"),
		ok("cyrillic local part and domain", "медведь@с-балалайкой.рф", "медведь", "xn----8sbaac5cahfb0b0a.xn--p1ai"),
		ok("accented latin local part", "jöhn@example.com", "jöhn", "example.com"),
		ok("greek local part", "θσερ@example.gr", "θσερ", "example.gr"),
		ok("emoji local part", "😀@example.com", "😀", "example.com"),
		ok("mixed ASCII and UTF-8 local part", "jeff葉@example.tw", "jeff葉", "example.tw"),
		ok("dotted UTF-8 local part", "иван.петров@example.com", "иван.петров", "example.com"),
		ok("decomposed local part becomes NFC", "jo\u0308hn@example.com", "j\u00f6hn", "example.com"),
		ok("combining mark after a letter", "e\u0301\u0302@example.com", "\u00e9\u0302", "example.com"),
		ok("21 three-octet characters are 63 octets", strings.Repeat("用", 21)+"@example.com", strings.Repeat("用", 21), "example.com"),

		// Empty and structural failures.
		bad("empty string", "", errEmpty),
		bad("only spaces", "   ", errEmpty),
		bad("only newline", "\n", errLineBreak),
		bad("trailing newline", "john@example.com\n", errLineBreak),
		bad("trailing CRLF", "john@example.com\r\n", errLineBreak),
		bad("leading CR", "\rjohn@example.com", errLineBreak),
		bad("LF then space before the address", "\n john@example.com", errLineBreak),
		bad("LF inside the domain", "john@example\n.com", errLineBreak),
		bad("CR inside the local part", "jo\rhn@example.com", errLineBreak),
		bad("vertical tab is not trimmed", "\vjohn@example.com", errLocalChar),
		bad("no at sign", "john.example.com", errNoAt),
		bad("plain word", "john", errNoAt),
		bad("only at sign", "@", errLocalEmpty),
		bad("missing local part", "@example.com", errLocalEmpty),
		bad("missing domain", "john@", errDomainEmpty),
		bad("two at signs", "john@doe@example.com", errMultipleAt),
		bad("at sign at both ends", "@john@", errMultipleAt),
		bad("two at signs in a row", "john@@example.com", errMultipleAt),
		bad("space before at", "john @example.com", errLocalChar),
		bad("space inside local part", "jo hn@example.com", errLocalChar),
		bad("space inside domain", "john@exa mple.com", errLabelChar),
		bad("space after at", "john@ example.com", errLabelChar),
		bad("mailto prefix keeps colon", "mailto:john@example.com", errLocalChar),
		bad("display name form", "John <john@example.com>", errLocalChar),
		bad("angle brackets", "<john@example.com>", errLocalChar),

		// Local part failures.
		bad("65-octet local part", local65+"@example.com", errLocalTooLong),
		bad("leading dot in local part", ".john@example.com", errLocalDotEdge),
		bad("trailing dot in local part", "john.@example.com", errLocalDotEdge),
		bad("consecutive dots in local part", "john..smith@example.com", errLocalDotDot),
		bad("three dots in local part", "a...b@example.com", errLocalDotDot),
		bad("only a dot", ".@example.com", errLocalDotEdge),
		bad("quoted local part", "\"john\"@example.com", errLocalQuoted),
		bad("quoted local part with space", "\"john smith\"@example.com", errLocalQuoted),
		bad("quoted local part with at", "\"a@b\"@example.com", errLocalQuoted),
		bad("partly quoted local part", "john.\"smith\"@example.com", errLocalQuoted),
		bad("comment in local part", "john(comment)@example.com", errComment),
		bad("leading comment", "(comment)john@example.com", errComment),
		bad("comment in domain", "john@(comment)example.com", errComment),
		bad("trailing comment in domain", "john@example.com(comment)", errComment),
		bad("zero-width space in local part", "jo\u200bhn@example.com", errLocalUnsafe),
		bad("right-to-left override in local part", "\u202ejohn@example.com", errLocalUnsafe),
		bad("four-per-em space in local part", "jo\u2005hn@example.com", errLocalUnsafe),
		bad("line separator in local part", "jo\u2028hn@example.com", errLocalUnsafe),
		bad("C1 control in local part", "jo\u009chn@example.com", errLocalUnsafe),
		bad("private-use character in local part", "jo\ue000hn@example.com", errLocalUnsafe),
		bad("unassigned code point in local part", "jo\ufdefhn@example.com", errLocalUnsafe),
		bad("combining mark first in local part", "\u0300john@example.com", errLocalUnsafe),
		bad("combining mark after a dot", "a.\u0300b@example.com", errLocalUnsafe),
		bad("22 three-octet characters are 66 octets", strings.Repeat("用", 22)+"@example.com", errLocalTooLong),
		bad("UTF-8 local part with two dots", "иван..петров@example.com", errLocalDotDot),
		bad("UTF-8 local part ending with a dot", "иван.@example.com", errLocalDotEdge),
		bad("comma in local part", "a,b@example.com", errLocalChar),
		bad("semicolon in local part", "a;b@example.com", errLocalChar),
		bad("colon in local part", "a:b@example.com", errLocalChar),
		bad("backslash in local part", "a\\b@example.com", errLocalChar),
		bad("square bracket in local part", "a[b]@example.com", errLocalChar),
		bad("less-than in local part", "a<b@example.com", errLocalChar),
		bad("tab in local part", "a\tb@example.com", errLocalChar),
		bad("NUL in local part", "a\x00b@example.com", errLocalChar),
		bad("DEL in local part", "a\x7fb@example.com", errLocalChar),
		bad("newline in the middle", "john\n@example.com", errLineBreak),
		bad("invalid UTF-8 in local part", "a\xffb@example.com", errLocalUTF8),

		// Domain failures.
		bad("reserved hyphens in positions 3-4", "a@ab--cd.com", errLabelHyphens34),
		bad("reserved hyphens in a subdomain label", "a@mail.yy--0.example", errLabelHyphens34),
		bad("reserved hyphens in the TLD", "a@example.ab--cd", errLabelHyphens34),
		bad("reserved hyphens after UTS-46 mapping", "a@ＡＢ－－cd.com", errDomainIDNA),
		bad("double hyphen in positions 3-4 of a label", "john@my--company.com", errLabelHyphens34),
		bad("IPv4 literal", "john@[192.168.0.1]", errIPLiteral),
		bad("IPv6 literal", "john@[IPv6:2001:db8::1]", errIPLiteral),
		bad("bare IPv4 address", "john@192.168.0.1", errTLD),
		bad("single label domain", "john@localhost", errSingleLabel),
		bad("single label TLD only", "john@com", errSingleLabel),
		bad("leading dot in domain", "john@.example.com", errDomainDotEdge),
		bad("trailing dot in domain", "john@example.com.", errDomainDotEdge),
		bad("only a dot as domain", "john@.", errDomainDotEdge),
		bad("consecutive dots in domain", "john@example..com", errLabelEmpty),
		bad("leading hyphen in label", "john@-example.com", errLabelHyphenEdge),
		bad("trailing hyphen in label", "john@example-.com", errLabelHyphenEdge),
		bad("hyphen-only label", "john@-.com", errLabelHyphenEdge),
		bad("trailing hyphen in TLD", "john@example.com-", errLabelHyphenEdge),
		bad("underscore in domain", "john@my_company.com", errLabelChar),
		bad("plus in domain", "john@a+b.com", errLabelChar),
		bad("slash in domain", "john@example.com/path", errLabelChar),
		bad("colon port in domain", "john@example.com:25", errLabelChar),
		bad("comma in domain", "john@example,com", errLabelChar),
		bad("exclamation in domain", "john@exam!ple.com", errLabelChar),
		bad("percent in domain", "john@exa%mple.com", errLabelChar),
		bad("64-octet label", "john@"+label64+".com", errLabelTooLong),
		bad("254-octet domain", "a@"+domain64, errDomainTooLong),
		bad("255-octet address", local64+"@"+domain190, errAddressTooLong),
		bad("253-octet domain but address too long", local64+"@"+domain63, errAddressTooLong),
		bad("numeric TLD", "john@example.123", errTLD),
		bad("alphanumeric TLD", "john@example.c0m", errTLD),
		bad("hyphenated TLD", "john@example.co-uk", errTLD),
		bad("bogus punycode label", "john@xn--zz.com", errDomainIDNA),
		bad("empty punycode TLD", "john@example.xn--", errDomainIDNA),
		ok("symbol allowed by UTS-46 lookup", "john@exa☃mple.com", "john", "xn--example-cz6d.com"),
		bad("fullwidth low line maps to an underscore", "john@exa＿mple.com", errDomainIDNA),
		bad("unicode domain with space", "john@bü cher.de", errDomainIDNA),
		bad("unicode domain ending with dot", "john@bücher.de.", errDomainDotEdge),
		bad("unicode domain with leading hyphen label", "john@-bücher.de", errDomainIDNA),
		bad("unicode domain with underscore", "john@bü_cher.de", errDomainIDNA),
		bad("unicode single label", "john@bücher", errSingleLabel),
		bad("unicode domain too long", "john@"+strings.Repeat("ü", 60)+".de", errLabelTooLong),
		bad("tab inside domain", "john@exam\tple.com", errLabelChar),
		bad("NUL inside domain", "john@exam\x00ple.com", errLabelChar),
		bad("trailing garbage after domain", "john@example.com>", errLabelChar),
		bad("domain of dots", "john@...", errDomainDotEdge),
		bad("ideographic full stop at the start", "john@。example.com", errDomainIDNA),
		bad("invalid UTF-8 in domain", "john@exa\xffmple.com", errDomainIDNA),
		bad("zero-width joiner in domain", "john@exa\u200dmple.com", errDomainIDNA),
		bad("right-to-left mixed with digits first", "john@1\u05d0.com", errDomainIDNA),
		bad("empty label in unicode domain", "john@bücher..de", errLabelEmpty),
		bad("ampersand in domain", "john@a&b.com", errLabelChar),
		bad("asterisk wildcard domain", "john@*.example.com", errLabelChar),
		bad("email as domain", "john@mailto:a.com", errLabelChar),
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	cases := parseCases()
	if len(cases) < 150 {
		t.Fatalf("the table has %d cases; keep at least 150", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.why, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Parse(%q) = %+v, %v; want error %q", tc.in, got, err, tc.err)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", tc.in, err)
				}
				if got != (Address{}) {
					t.Fatalf("Parse(%q) returned %+v with its error; want the zero Address", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) failed: %v", tc.in, err)
			}
			want := Address{Local: tc.local, Domain: tc.domain}
			if got != want {
				t.Fatalf("Parse(%q) = %+v; want %+v", tc.in, got, want)
			}
			// A valid address must survive a round trip through its string form.
			again, err := Parse(got.String())
			if err != nil || again != got {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func TestAddressString(t *testing.T) {
	t.Parallel()
	if got := (Address{Local: "Ann.Lee", Domain: "example.com"}).String(); got != "Ann.Lee@example.com" {
		t.Fatalf("String() = %q", got)
	}
}

func TestErrorMessageSaysWhy(t *testing.T) {
	t.Parallel()
	_, err := Parse("john..smith@example.com")
	if err == nil || err.Error() != "invalid address: the local part has two dots in a row" {
		t.Fatalf("error = %v; want the reason in plain words", err)
	}
}

// TestParseDoesNotAllocate guards the hot path: a lower-case ASCII address, valid or not, is
// checked without touching the heap.
func TestParseDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"jane.doe@example.com", "jane..doe@example.com", "jane@localhost"} {
		if n := testing.AllocsPerRun(100, func() { _, _ = Parse(in) }); n != 0 {
			t.Errorf("Parse(%q) allocates %.0f times; want 0", in, n)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("jane.doe+news@example-corp.com"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseUnicode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("jane@bücher.de"); err != nil {
			b.Fatal(err)
		}
	}
}
