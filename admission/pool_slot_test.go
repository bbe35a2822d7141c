package admission

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestSlotIsStatsEntry: Pool.Slot(name) is the entry Stats lists for
// name (in-flight work, gauges, scrape failures), and reports a name the
// pool does not have as absent.
func TestSlotIsStatsEntry(t *testing.T) {
	var slots []SlotConfig
	for i := range 3 {
		slots = append(slots, SlotConfig{Name: fmt.Sprintf("b%d", i), Ready: always, MaxInFlight: 2})
	}
	p := testPool(slots, nil)
	l, o := p.Acquire(t.Context(), Ticket{Tokens: 5})
	if o != Admitted {
		t.Fatal(o)
	}
	defer l.Release(Succeeded)
	p.SetGauges("b1", Gauges{Waiting: 3, Running: 1, At: time.Now()})
	p.ScrapeFailed("b2", true, "unreadable")
	for _, want := range p.Stats().Slots {
		got, ok := p.Slot(want.Name)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Slot(%q) = %+v, %v; Stats lists %+v", want.Name, got, ok, want)
		}
	}
	if _, ok := p.Slot("nope"); ok {
		t.Error("Slot reports a backend the pool does not have")
	}
}
