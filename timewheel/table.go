package timewheel

import (
	"hash/maphash"
	"math"
	"math/bits"
)

// entry is one pending key. Entries live in pages of a slab and are linked
// into the list of their slot by index; a free entry is linked into the free
// list through next.
type entry struct {
	key  string
	at   int64 // when the key fires, in ns since the wheel's origin; its tick is the first at or after it
	next int32 // next entry in the slot list or the free list, or nilIdx
	prev int32 // previous entry in the slot list, or nilIdx for the head
}

const (
	nilIdx int32 = -1

	pageShift = 10 // 1024 entries of 32 bytes: growing never copies old entries
	pageSize  = 1 << pageShift
	pageMask  = pageSize - 1

	minIndexSlots = 16
)

// table maps keys to slab entries. It is a slab of entries plus an
// open-addressing index (linear probing, backward-shift deletion, no
// tombstones). An index slot holds the key's 32-bit hash in its high half and
// entry index+1 in its low half (0 means empty), so probing compares hashes
// without touching the entries and growing rehashes without touching the keys.
// Memory is about 32 bytes of entry plus 11–21 bytes of index per key.
type table struct {
	seed  maphash.Seed // set once by newTable
	index []uint64
	mask  uint32
	n     int // keys in the table

	pages [][]entry
	used  int32 // entries ever handed out from pages
	free  int32 // head of the free list
}

func newTable(capacity int) table {
	t := table{seed: maphash.MakeSeed(), free: nilIdx}
	t.index = make([]uint64, indexSlotsFor(capacity))
	t.mask = uint32(len(t.index) - 1)
	for range (capacity + pageSize - 1) / pageSize {
		t.pages = append(t.pages, make([]entry, pageSize))
	}
	return t
}

// indexSlotsFor returns the index size that holds n keys at a load of at
// most 3/4.
func indexSlotsFor(n int) int {
	need := n + n/3 + 1
	return max(minIndexSlots, 1<<bits.Len(uint(need-1)))
}

// clear forgets every key and frees the memory. The seed stays: hash is
// called without the wheel's lock.
func (t *table) clear() {
	t.index, t.mask, t.n = nil, 0, 0
	t.pages, t.used, t.free = nil, 0, nilIdx
}

func (t *table) hash(key string) uint32 { return uint32(maphash.String(t.seed, key)) }

// entry returns the entry at index i.
func (t *table) entry(i int32) *entry { return &t.pages[i>>pageShift][i&pageMask] }

// find returns the entry index of key, or nilIdx.
func (t *table) find(key string, h uint32) int32 {
	for pos := h & t.mask; ; pos = (pos + 1) & t.mask {
		s := t.index[pos]
		if s == 0 {
			return nilIdx
		}
		if uint32(s>>32) == h {
			if i := int32(uint32(s)) - 1; t.entry(i).key == key {
				return i
			}
		}
	}
}

// full reports whether the slab cannot hand out another entry.
func (t *table) full() bool { return t.free == nilIdx && t.used == math.MaxInt32 }

// insert adds key, which must not be present, and returns its entry index.
// The entry's key is set; the caller sets the rest.
func (t *table) insert(key string, h uint32) int32 {
	if (t.n+1)*4 > len(t.index)*3 {
		t.grow()
	}
	i := t.free
	if i != nilIdx {
		t.free = t.entry(i).next
	} else {
		if int(t.used) == len(t.pages)*pageSize {
			t.pages = append(t.pages, make([]entry, pageSize))
		}
		i = t.used
		t.used++
	}
	t.entry(i).key = key
	t.place(uint64(h)<<32 | uint64(uint32(i)+1))
	t.n++
	return i
}

// place puts an index slot value at the first free position of its probe
// sequence.
func (t *table) place(s uint64) {
	pos := uint32(s>>32) & t.mask
	for t.index[pos] != 0 {
		pos = (pos + 1) & t.mask
	}
	t.index[pos] = s
}

func (t *table) grow() {
	old := t.index
	t.index = make([]uint64, 2*len(old))
	t.mask = uint32(len(t.index) - 1)
	for _, s := range old {
		if s != 0 {
			t.place(s)
		}
	}
}

// remove deletes the entry at index i from the index and puts it on the free
// list. It returns the entry's key.
func (t *table) remove(i int32) string {
	e := t.entry(i)
	key := e.key
	want := uint32(i) + 1
	pos := t.hash(key) & t.mask
	for probes := 0; uint32(t.index[pos]) != want; probes++ {
		if probes == len(t.index) {
			panic("timewheel: entry missing from its index")
		}
		pos = (pos + 1) & t.mask
	}
	// Backward-shift deletion: pull later members of the probe run into the
	// hole unless their home lies cyclically after the hole.
	hole := pos
	for j := (hole + 1) & t.mask; ; j = (j + 1) & t.mask {
		s := t.index[j]
		if s == 0 {
			break
		}
		home := uint32(s>>32) & t.mask
		if (j-home)&t.mask >= (j-hole)&t.mask {
			t.index[hole] = s
			hole = j
		}
	}
	t.index[hole] = 0
	t.n--
	*e = entry{next: t.free, prev: nilIdx}
	t.free = i
	return key
}
