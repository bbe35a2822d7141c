package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Budget is a fleet-wide rate of requests a second to the backends
// (scrape_budget, health.budget): "auto" (the zero value) or a positive
// number. Past it, each backend is asked less often, so that the fleet's
// requests a second stay at the budget however many backends it has.
type Budget float64

// Auto reports whether the budget is "auto".
func (b Budget) Auto() bool { return b == 0 }

// PerSecond is the budget in requests a second: the number given, or for
// auto, autoBackends backends asked every interval.
func (b Budget) PerSecond(autoBackends int, interval time.Duration) float64 {
	if b > 0 {
		return float64(b)
	}
	return float64(autoBackends) / interval.Seconds()
}

// Stretch is the interval each of n backends is asked at when the whole
// fleet may make perSecond requests a second: interval, or n / perSecond
// when that is longer.
func Stretch(interval time.Duration, n int, perSecond float64) time.Duration {
	if perSecond <= 0 || n <= 0 {
		return interval
	}
	d := time.Duration(math.Ceil(float64(n) / perSecond * float64(time.Second)))
	return max(interval, d)
}

const budgetWant = `want "auto" or a positive number of requests a second`

// UnmarshalYAML reads "auto" or a positive number.
func (b *Budget) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return errors.New(budgetWant)
	}
	if n.Value == "auto" {
		*b = 0
		return nil
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("%s, got %q", budgetWant, n.Value)
	}
	*b = Budget(v)
	return nil
}

// MarshalYAML writes "auto" or the number.
func (b Budget) MarshalYAML() (any, error) {
	if b.Auto() {
		return "auto", nil
	}
	return float64(b), nil
}

// validate adds a problem when the budget at path is negative (a config
// built in code; decoding never makes one).
func (b Budget) validate(p *problems, path string) {
	if b < 0 || math.IsNaN(float64(b)) {
		p.add(path, "%s, got %v", budgetWant, float64(b))
	}
}
