package signals

import "strings"

// This file is a port of the suggestion algorithm of mailcheck.js 1.1.1 (MIT licence, see
// LICENSES/mailcheck.txt): the same default lists in the same order, the same sift3 distance and
// the same thresholds, so that it gives exactly mailcheck's answers. testdata/golden.json,
// written by data/mailcheck-golden.js running the real mailcheck, holds the proof.
//
// Two changes make it fast without changing any answer: exact membership is checked in a map
// first (mailcheck returns at once on an exact match, wherever it is in the list), and a
// candidate whose length alone puts it beyond the threshold is skipped (sift3 can never be less
// than half the difference of the lengths, so such a candidate can be neither the answer nor
// an earlier minimum that the answer must beat).

// mailcheck's defaultDomains, defaultSecondLevelDomains and defaultTopLevelDomains, in order:
// ties go to the first candidate, so the order matters.
var (
	mcDomains = []string{"msn.com", "bellsouth.net",
		"telus.net", "comcast.net", "optusnet.com.au",
		"earthlink.net", "qq.com", "sky.com", "icloud.com",
		"mac.com", "sympatico.ca", "googlemail.com",
		"att.net", "xtra.co.nz", "web.de",
		"cox.net", "gmail.com", "ymail.com",
		"aim.com", "rogers.com", "verizon.net",
		"rocketmail.com", "google.com", "optonline.net",
		"sbcglobal.net", "aol.com", "me.com", "btinternet.com",
		"charter.net", "shaw.ca"}

	mcSecondLevel = []string{"yahoo", "hotmail", "mail", "live", "outlook", "gmx"}

	mcTopLevel = []string{"com", "com.au", "com.tw", "ca", "co.nz", "co.uk", "de",
		"fr", "it", "ru", "net", "org", "edu", "gov", "jp", "nl", "kr", "se", "eu",
		"ie", "co.il", "us", "at", "be", "dk", "hk", "es", "gr", "ch", "no", "cz",
		"in", "net", "net.au", "info", "biz", "mil", "co.jp", "sg", "hu"}
)

// mailcheck's thresholds (domainThreshold, secondLevelThreshold, topLevelThreshold are all 2),
// doubled because distances are kept doubled to stay in integers: sift3 is a multiple of ½.
const threshold2 = 2 * 2

// noMatch2 is mailcheck's initial minimum distance (99), doubled.
const noMatch2 = 2 * 99

var (
	mcDomainSet      = toSet(mcDomains)
	mcSecondLevelSet = toSet(mcSecondLevel)
	mcTopLevelSet    = toSet(mcTopLevel)
)

func toSet(list []string) map[string]struct{} {
	m := make(map[string]struct{}, len(list))
	for _, s := range list {
		m[s] = struct{}{}
	}
	return m
}

// mailcheck returns mailcheck.js's suggested domain for domain (lower case), or "" where
// mailcheck returns false. It is Mailcheck.suggest with the address part left out, because
// only the domain affects the answer.
func mailcheck(domain string) string {
	domain = strings.TrimSpace(domain)
	// splitEmail fails on an empty domain or one with an "@" in it (an empty address part).
	if domain == "" || strings.IndexByte(domain, '@') >= 0 {
		return ""
	}
	// splitEmail: the second-level domain is the first label, the top-level domain the rest;
	// a domain of one label is all top-level domain.
	sld, tld := "", domain
	if dot := strings.IndexByte(domain, '.'); dot >= 0 {
		sld, tld = domain[:dot], domain[dot+1:]
	}
	if in(mcSecondLevelSet, sld) && in(mcTopLevelSet, tld) {
		return ""
	}
	if in(mcDomainSet, domain) {
		return ""
	}
	if d := closest(domain, mcDomains, mcDomainSet); d != "" {
		return d
	}
	closestSLD := closest(sld, mcSecondLevel, mcSecondLevelSet)
	closestTLD := closest(tld, mcTopLevel, mcTopLevelSet)
	// Like String.prototype.replace with a string pattern, only the first occurrence changes.
	out, changed := domain, false
	if closestSLD != "" && closestSLD != sld {
		out, changed = strings.Replace(out, sld, closestSLD, 1), true
	}
	if closestTLD != "" && closestTLD != tld {
		out, changed = strings.Replace(out, tld, closestTLD, 1), true
	}
	if !changed {
		return ""
	}
	return out
}

func in(m map[string]struct{}, s string) bool {
	_, ok := m[s]
	return ok
}

// closest is findClosestDomain: s itself if it is in list (set holds list's members), else the
// first candidate with the least sift3 distance if that distance is within the threshold, else "".
func closest(s string, list []string, set map[string]struct{}) string {
	if s == "" {
		return ""
	}
	if in(set, s) {
		return s
	}
	best, bestDist := "", noMatch2
	for _, c := range list {
		diff := len(s) - len(c)
		if diff < 0 {
			diff = -diff
		}
		if diff > threshold2 {
			continue
		}
		if d := sift3x2(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist > threshold2 {
		return ""
	}
	return best
}

// sift3x2 is mailcheck's sift3Distance times two. Domains here are ASCII, so bytes stand for
// JavaScript's UTF-16 code units.
func sift3x2(s1, s2 string) int {
	if len(s1) == 0 {
		return 2 * len(s2)
	}
	if len(s2) == 0 {
		return 2 * len(s1)
	}
	const maxOffset = 5
	c, offset1, offset2, lcs := 0, 0, 0, 0
	for c+offset1 < len(s1) && c+offset2 < len(s2) {
		if s1[c+offset1] == s2[c+offset2] {
			lcs++
		} else {
			offset1, offset2 = 0, 0
			for i := 0; i < maxOffset; i++ {
				if c+i < len(s1) && s1[c+i] == s2[c] {
					offset1 = i
					break
				}
				if c+i < len(s2) && s1[c] == s2[c+i] {
					offset2 = i
					break
				}
			}
		}
		c++
	}
	return len(s1) + len(s2) - 2*lcs
}
