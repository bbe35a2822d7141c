package sim

import "testing"

// TestPyFloat: floats are written as Python's repr writes them (the
// expected strings are Python 3's repr of each value).
func TestPyFloat(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{1, "1.0"}, {0.5, "0.5"}, {-2, "-2.0"}, {1e-5, "1e-05"}, {1e16, "1e+16"}, {1.5e16, "1.5e+16"},
		{9999999999999998, "9999999999999998.0"}, {0.0001, "0.0001"}, {0.7, "0.7"}, {1e21, "1e+21"},
		{123456789.123, "123456789.123"}, {1e-300, "1e-300"}, {5e-324, "5e-324"}, {0, "0.0"},
		{1e6, "1000000.0"}, {1e15, "1000000000000000.0"}, {2.5e7, "25000000.0"},
	} {
		if got := pyFloat(c.f); got != c.want {
			t.Errorf("pyFloat(%v) = %s, want %s", c.f, got, c.want)
		}
	}
}
