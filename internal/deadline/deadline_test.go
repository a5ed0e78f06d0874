package deadline

import (
	"testing"
	"time"
)

// TestRenewal: the first operation sets a deadline d away; one that
// starts while that deadline is more than Keep(d) away keeps it; one
// after Forget, or once the deadline is nearer, sets its own.
func TestRenewal(t *testing.T) {
	var r Renewing
	if _, ok := r.Next(); ok {
		t.Fatal("the zero Renewing set a deadline")
	}
	const d = time.Hour
	r.Init(d, Keep(d))
	before := time.Now()
	first, ok := r.Next()
	if !ok || first.Before(before.Add(d)) || first.After(time.Now().Add(d)) {
		t.Fatalf("first deadline %v (%v), want %v from now", first, ok, d)
	}
	if _, ok := r.Next(); ok {
		t.Error("a deadline set just now was renewed")
	}
	if r.Passed() {
		t.Error("a deadline an hour away has passed")
	}
	r.Forget()
	if r.Passed() {
		t.Error("a forgotten deadline has passed")
	}
	if _, ok := r.Next(); !ok {
		t.Error("the deadline was not set again after Forget")
	}
	// A timeout that renews at every operation (keep = d).
	r.Init(time.Millisecond, time.Millisecond)
	r.Next()
	time.Sleep(2 * time.Millisecond)
	if !r.Passed() {
		t.Error("a deadline 1 ms away has not passed 2 ms later")
	}
	if _, ok := r.Next(); !ok {
		t.Error("a passed deadline was kept")
	}
}
