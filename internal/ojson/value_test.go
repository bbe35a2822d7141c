package ojson

import "testing"

// TestLaxInt: pydantic's lax int reads a JSON float with no fractional
// part as that integer; a fraction, a non-number or an infinity is not one.
func TestLaxInt(t *testing.T) {
	cases := []struct {
		in       string
		integral bool
		n        int64
		fits     bool
	}{
		{`7`, true, 7, true}, {`-0`, true, 0, true}, {`7.0`, true, 7, true}, {`2e3`, true, 2000, true},
		{`-1.0`, true, -1, true}, {`1.5`, false, 0, false}, {`1e-1`, false, 0, false},
		{`1e400`, false, 0, false}, {`1e19`, true, 0, false}, {`99999999999999999999`, true, 0, false},
		{`"7"`, false, 0, false}, {`true`, false, 0, false}, {`null`, false, 0, false},
	}
	for _, c := range cases {
		v, err := Parse([]byte(c.in), DefaultMaxDepth)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		n, ok := v.LaxInt()
		if v.Integral() != c.integral || n != c.n || ok != c.fits {
			t.Errorf("%s: Integral %v, LaxInt (%d, %v); want %v, (%d, %v)", c.in, v.Integral(), n, ok, c.integral, c.n, c.fits)
		}
	}
}
