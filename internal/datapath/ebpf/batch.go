package ebpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// batchSize is how many entries one batch syscall reads; hash maps need at least a bucket's worth.
const batchSize = 4096

// readAll calls fn for the entries of m in order (key order for arrays) until fn returns false.
// Entries the program changes meanwhile may be seen twice or not at all.
func readAll[K, V any](m *ebpf.Map, fn func(K, V) bool) error {
	keys, values := make([]K, batchSize), make([]V, batchSize)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, values, nil)
		for i := range n {
			if !fn(keys[i], values[i]) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", m, err)
		}
	}
}

// writer changes maps and counts the entries it writes or deletes: Apply's cost.
type writer struct{ entries int }

func (w *writer) put(m *ebpf.Map, key, value any) error {
	if err := m.Put(key, value); err != nil {
		return fmt.Errorf("writing %s: %w", m, err)
	}
	w.entries++
	return nil
}

// delete removes one entry; one already gone is fine.
func (w *writer) delete(m *ebpf.Map, key any) error {
	err := m.Delete(key)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting from %s: %w", m, err)
	}
	w.entries++
	return nil
}

// putAll writes entries in batches.
func putAll[K, V any](w *writer, m *ebpf.Map, keys []K, values []V) error {
	for len(keys) > 0 {
		n := min(len(keys), batchSize)
		done, err := m.BatchUpdate(keys[:n], values[:n], nil)
		w.entries += done
		if err != nil {
			return fmt.Errorf("writing %s: %w", m, err)
		}
		keys, values = keys[n:], values[n:]
	}
	return nil
}

// deleteAll deletes entries in batches, skipping those already gone (flows the LRU evicted).
func deleteAll[K any](w *writer, m *ebpf.Map, keys []K) error {
	for len(keys) > 0 {
		n := min(len(keys), batchSize)
		done, err := m.BatchDelete(keys[:n], nil)
		w.entries += done
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			done++ // keys[done] was gone: go on after it
		case err != nil:
			return fmt.Errorf("deleting from %s: %w", m, err)
		}
		keys = keys[done:]
	}
	return nil
}
