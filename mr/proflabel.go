// The allocating goroutine's pprof labels, for Tracking: code that runs
// under pprof.Do(ctx, pprof.Labels("request", id), ...) (or after
// pprof.SetGoroutineLabels) allocates device memory that the profile
// then carries those labels on, so `go tool pprof -tagfocus request=...`
// slices device memory by request, tenant or model.
//
// runtime/pprof keeps a goroutine's labels in the runtime and offers no
// call that reads them without the context that set them. The runtime
// exports the reader to runtime/pprof by linkname and keeps it for the
// packages that read it the same way (go.dev/issue/67401), so this file
// does too, and reads the label set through a mirror of its layout
// (runtime/pprof's labelMap: a slice of key and value strings). The
// layout is checked once, at the first Tracking adaptor, by setting known
// labels on a goroutine and reading them back; if it does not match (a Go
// release changed it), labels are not recorded and nothing else changes.
//
// Invariants: a labelSet is immutable and interned by content, so equal
// label sets are one pointer and a stack record can compare them by
// pointer. The cache from the runtime's pointer to our set is bounded
// (cleared when full): a label set made per request must not grow it
// without bound.

package mr

import (
	"context"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

//go:linkname runtimeGetProfLabel runtime/pprof.runtime_getProfLabel
func runtimeGetProfLabel() unsafe.Pointer

// runtimeLabelMap mirrors runtime/pprof's labelMap: one field, the set,
// whose one field is the sorted list of labels.
type runtimeLabelMap struct {
	list []struct{ key, value string }
}

// labelSet is one distinct set of labels, sorted by key.
type labelSet struct {
	labels []Label
	key    string // the labels, joined: the interning key
	hash   uint64
}

// Label is one pprof label: a key and a value.
type Label struct{ Key, Value string }

// maxLabelCache bounds the cache from the runtime's label pointers.
const maxLabelCache = 4096

// labelTable interns label sets. byPtr is read without a lock on the hot
// path (a sync.Map, replaced whole when it holds maxLabelCache entries);
// mu serializes the misses, which intern by content in byKey.
type labelTable struct {
	byPtr  atomic.Pointer[sync.Map] // unsafe.Pointer -> *labelSet
	mu     sync.Mutex
	cached int // entries in byPtr, under mu
	byKey  map[string]*labelSet
}

var (
	labelsOnce sync.Once
	labelsOK   bool
	labels     labelTable
)

// checkLabels verifies the mirror of the runtime's label layout once.
func checkLabels() {
	labelsOnce.Do(func() {
		done := make(chan bool)
		go func() {
			ctx := pprof.WithLabels(context.Background(), pprof.Labels("streamalloc.check", "b", "a", "1"))
			pprof.SetGoroutineLabels(ctx)
			got := readLabels(runtimeGetProfLabel())
			done <- slices.Equal(got, []Label{{"a", "1"}, {"streamalloc.check", "b"}})
		}()
		labelsOK = <-done
	})
}

// readLabels copies the labels at p (a runtime label map), sorted by key.
func readLabels(p unsafe.Pointer) []Label {
	if p == nil {
		return nil
	}
	m := (*runtimeLabelMap)(p)
	out := make([]Label, len(m.list))
	for i, l := range m.list {
		out[i] = Label{l.key, l.value}
	}
	slices.SortFunc(out, func(a, b Label) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// goroutineLabels returns the interned label set of the calling goroutine,
// or nil if it has none (or labels cannot be read).
func goroutineLabels() *labelSet {
	if !labelsOK {
		return nil
	}
	p := runtimeGetProfLabel()
	if p == nil {
		return nil
	}
	m := labels.byPtr.Load()
	if m != nil {
		if ls, ok := m.Load(p); ok {
			return ls.(*labelSet)
		}
	}
	labels.mu.Lock()
	defer labels.mu.Unlock()
	ls := internLabels(readLabels(p))
	if m = labels.byPtr.Load(); m == nil || labels.cached >= maxLabelCache {
		m = new(sync.Map)
		labels.byPtr.Store(m)
		labels.cached = 0
	}
	m.Store(p, ls)
	labels.cached++
	return ls
}

// internLabels returns the one labelSet of ls (sorted by key), nil for
// none. Caller holds labels.mu.
func internLabels(ls []Label) *labelSet {
	if len(ls) == 0 {
		return nil
	}
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.Key)
		b.WriteByte(0)
		b.WriteString(l.Value)
		b.WriteByte(0)
	}
	key := b.String()
	if s, ok := labels.byKey[key]; ok {
		return s
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	s := &labelSet{labels: ls, key: key, hash: h}
	if labels.byKey == nil {
		labels.byKey = make(map[string]*labelSet)
	}
	labels.byKey[key] = s
	return s
}

// Map returns the labels as a map, or nil for none.
func (ls *labelSet) Map() map[string]string {
	if ls == nil {
		return nil
	}
	m := make(map[string]string, len(ls.labels))
	for _, l := range ls.labels {
		m[l.Key] = l.Value
	}
	return m
}

// String is "{key:value, key:value}", sorted by key.
func (ls *labelSet) String() string {
	if ls == nil {
		return "{}"
	}
	parts := make([]string, len(ls.labels))
	for i, l := range ls.labels {
		parts[i] = l.Key + ":" + l.Value
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// keyString is the interning key, "" for none.
func (ls *labelSet) keyString() string {
	if ls == nil {
		return ""
	}
	return ls.key
}
