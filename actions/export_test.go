package actions

import (
	"sync"
	"testing"
)

// CountValidations counts, until the test ends, the Validate calls on the
// requests match selects, by request type. One test at a time may count.
func CountValidations(t testing.TB, match func(Change) bool) func(Type) int {
	t.Helper()
	var mu sync.Mutex
	n := map[Type]int{}
	f := func(r Change) {
		if match(r) {
			mu.Lock()
			n[r.Type]++
			mu.Unlock()
		}
	}
	if !validateHook.CompareAndSwap(nil, &f) {
		t.Fatal("another test counts validations")
	}
	t.Cleanup(func() { validateHook.Store(nil) })
	return func(typ Type) int {
		mu.Lock()
		defer mu.Unlock()
		return n[typ]
	}
}
