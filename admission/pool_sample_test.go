package admission

import (
	"fmt"
	"testing"
)

// manySlots is n ready slots named b0..b(n-1) with a budget of budget
// tokens each.
func manySlots(n, budget int) []SlotConfig {
	slots := make([]SlotConfig, n)
	for i := range slots {
		slots[i] = SlotConfig{Name: fmt.Sprintf("b%d", i), Ready: always, KVTokens: budget}
	}
	return slots
}

// TestSampledPickTakesOnlyWhatFits: past sampleMin slots a p2c grant
// samples its two candidates instead of listing them. It still grants
// only slots the ticket may go to and that have room, spreads the load
// over the fleet, and when the draws find fewer than two that fit (most
// slots full, or an Only list of one) it lists them and finds the one
// that does.
func TestSampledPickTakesOnlyWhatFits(t *testing.T) {
	const n = 4 * sampleMin
	p := testPool(manySlots(n, 1000), nil)
	used := map[string]int{}
	var held []*Lease
	for range 4 * n {
		l, o := p.Acquire(t.Context(), Ticket{Tokens: 100, Exclude: []string{"b0"}})
		if o != Admitted {
			t.Fatal(o)
		}
		if l.Slot.Name == "b0" {
			t.Fatal("granted a slot the ticket excludes")
		}
		used[l.Slot.Name]++
		held = append(held, l)
	}
	if len(used) < n/2 {
		t.Errorf("%d grants went to %d of %d slots: not spread", 4*n, len(used), n)
	}
	for _, l := range held {
		l.Release(Succeeded)
	}
	held = held[:0]
	// Fill every slot but b7; the next grant must find b7.
	for i := range n {
		if i == 7 {
			continue
		}
		l, o := p.Acquire(t.Context(), Ticket{Tokens: 1000, Only: []string{fmt.Sprintf("b%d", i)}})
		if o != Admitted {
			t.Fatal(o)
		}
		held = append(held, l)
	}
	for range 3 {
		l, o := p.Acquire(t.Context(), Ticket{Tokens: 300})
		if o != Admitted || l.Slot.Name != "b7" {
			t.Fatalf("%s on %v, want b7 (the only slot with room)", o, l)
		}
		held = append(held, l)
	}
	for _, l := range held {
		l.Release(Succeeded)
	}
	if got := p.Stats().Decisions; got["p2c"] == 0 || got["only"] == 0 {
		t.Errorf("decisions %v: want sampled p2c grants and listed ones", got)
	}
}

// BenchmarkPoolPick is one request's grant and release on an idle pool of
// n backends: flat in n (issue 30: at most 2 µs at 512).
func BenchmarkPoolPick(b *testing.B) {
	for _, n := range []int{1, 8, 64, 512} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			p := testPool(manySlots(n, 1<<30), nil)
			b.ReportAllocs()
			for b.Loop() {
				l, o := p.Acquire(b.Context(), Ticket{Tokens: 1000})
				if o != Admitted {
					b.Fatal(o)
				}
				l.Release(Succeeded)
			}
		})
	}
}
