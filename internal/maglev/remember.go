package maglev

import (
	"encoding/binary"
	"strconv"
	"sync"
)

// A process that builds the same tables as the one before (sluice apply -f of a file that changed
// one service, without a daemon) may hand Build the tables that one built, packed (Pack), by
// their inputs (Key): Build then unpacks a table instead of building it. Remembered returns the
// tables Build built or unpacked since, for the next process.

// MaxRemembered bounds the packed bytes remembered: past it, Build builds and keeps nothing more.
const MaxRemembered = 16 << 20

// memory holds the remembered tables; nil until Remember.
var memory struct {
	sync.Mutex
	on    bool
	given map[string][]byte // handed to Remember, not used yet
	used  map[string][]byte // built or unpacked since
	bytes int               // in used
	// tables are the tables of used, unpacked: Build hands the same one to every caller with the
	// same inputs (10,000 services of the same backends share one).
	tables map[string][]int
}

// Remember has Build take its tables from tables (packed, by Key) and remember the ones it
// builds or takes; tables may be nil.
func Remember(tables map[string][]byte) {
	memory.Lock()
	defer memory.Unlock()
	memory.on, memory.given, memory.used, memory.bytes = true, tables, map[string][]byte{}, 0
	memory.tables = map[string][]int{}
}

// Forget turns Remember off and drops its tables.
func Forget() {
	memory.Lock()
	defer memory.Unlock()
	memory.on, memory.given, memory.used, memory.bytes = false, nil, nil, 0
	memory.tables = nil
}

// Remembered returns the tables Build built or took since Remember, packed, by Key.
func Remembered() map[string][]byte {
	memory.Lock()
	defer memory.Unlock()
	return memory.used
}

// Key is the text of Build's inputs: the backends, in order, and the table size.
func Key(backends []Backend, m int) string {
	buf := strconv.AppendInt(nil, int64(m), 10)
	for _, b := range backends {
		buf = append(append(buf, ' '), b.ID...)
		buf = strconv.AppendUint(append(buf, '='), uint64(b.Weight), 10)
	}
	return string(buf)
}

// Pack writes a table as uvarints (one byte a slot below 128 backends; -1, no backend, as 0 and
// an index i as i+1).
func Pack(table []int) []byte {
	out := make([]byte, 0, len(table))
	for _, b := range table {
		out = binary.AppendUvarint(out, uint64(b+1))
	}
	return out
}

// Unpack reads a packed table whose slots index n backends; false when it is not one.
func Unpack(packed []byte, n int) ([]int, bool) {
	m := 0
	for _, b := range packed {
		if b < 0x80 { // the last byte of a uvarint
			m++
		}
	}
	table := make([]int, m)
	for i, j := 0, 0; j < len(packed); i++ {
		v, k := uint64(packed[j]), 1
		if v >= 0x80 {
			v, k = binary.Uvarint(packed[j:])
		}
		if k <= 0 || v > uint64(n) {
			return nil, false
		}
		table[i] = int(v) - 1
		j += k
	}
	return table, true
}

// remembered returns the table of key when Build built or took it since Remember, or Remember
// was given it, and remembers it as used.
func remembered(key string, m, n int) []int {
	memory.Lock()
	defer memory.Unlock()
	if table, ok := memory.tables[key]; ok {
		return table
	}
	packed, ok := memory.given[key]
	if !ok {
		return nil
	}
	table, ok := Unpack(packed, n)
	if !ok || len(table) != m {
		return nil
	}
	keep(key, packed, table)
	return table
}

// remember keeps a table Build built, while Remember is on.
func remember(key string, table []int) {
	memory.Lock()
	defer memory.Unlock()
	if memory.on {
		keep(key, Pack(table), table)
	}
}

// keep adds a table, packed and not, to the used ones, within MaxRemembered; memory is locked.
func keep(key string, packed []byte, table []int) {
	if _, ok := memory.used[key]; ok || memory.bytes+len(packed) > MaxRemembered {
		return
	}
	memory.used[key] = packed
	memory.tables[key] = table
	memory.bytes += len(packed)
}

// rememberOn tells whether Remember was called.
func rememberOn() bool {
	memory.Lock()
	defer memory.Unlock()
	return memory.on
}
