package disposable

// set is a read-only set of domains built for lookups that neither allocate nor copy: the domains
// stay in one string (the embedded file, in the binary's read-only data, or an operator file) and
// an open-addressing hash table holds indexes into it. For the 158,701 embedded domains that is
// 2.8 MB of heap; a map[string]struct{} measured 6.7 MB keyed by substrings of the embedded text
// and 9.4 MB with copied keys. Both would fit the 30 MB budget; this one also keeps GC work low
// (no pointers in the table) and start-up short.
type set struct {
	blob  string
	off   []uint32 // offset of domain i in blob
	size  []uint8  // length of domain i (domains are at most 253 octets)
	table []uint32 // 0 is an empty slot; otherwise i+1
	mask  uint64
}

// newSet builds a set of the domains of blob, given as offsets and lengths; duplicates are
// dropped. The table has at least twice as many slots as domains, which keeps linear-probing
// chains short.
func newSet(blob string, off []uint32, size []uint8) *set {
	n := uint64(1)
	for n < uint64(len(off))*2 {
		n <<= 1
	}
	s := &set{
		blob:  blob,
		off:   make([]uint32, 0, len(off)),
		size:  make([]uint8, 0, len(off)),
		table: make([]uint32, n),
		mask:  n - 1,
	}
	for i := range off {
		d := blob[off[i] : off[i]+uint32(size[i])]
		slot, found := s.find(d)
		if found {
			continue
		}
		s.off = append(s.off, off[i])
		s.size = append(s.size, size[i])
		s.table[slot] = uint32(len(s.off))
	}
	return s
}

// find returns the slot holding d, or the empty slot where d would go.
func (s *set) find(d string) (slot uint64, found bool) {
	h := hash(d) & s.mask
	for {
		e := s.table[h]
		if e == 0 {
			return h, false
		}
		if equalFold(s.at(e-1), d) {
			return h, true
		}
		h = (h + 1) & s.mask
	}
}

func (s *set) at(i uint32) string { return s.blob[s.off[i] : s.off[i]+uint32(s.size[i])] }

// has reports whether d is in the set, ignoring ASCII case.
func (s *set) has(d string) bool {
	if s == nil || len(s.off) == 0 {
		return false
	}
	_, found := s.find(d)
	return found
}

func (s *set) len() int {
	if s == nil {
		return 0
	}
	return len(s.off)
}

// hash is 64-bit FNV-1a over the ASCII-lowercased bytes of d, so that lookups need not lowercase
// (and so copy) their argument.
func hash(d string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(d); i++ {
		h ^= uint64(lower(d[i]))
		h *= 1099511628211
	}
	// Fold the high bits in: the table index uses only the low ones.
	return h ^ h>>32
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}
