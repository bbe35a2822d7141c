package config

import (
	"reflect"
	"testing"
)

// TestFleetSectionCopiesConfig: each field of FleetConfig is the Config's
// field of the same name and type, and Fleet copies it (a field added to
// the section without being gathered stays zero and fails here).
func TestFleetSectionCopiesConfig(t *testing.T) {
	cfg := restartSample(t)
	cfg.Resolver = "10.0.0.53:53"
	cfg.ScrapeBudget = 300
	got := reflect.ValueOf(cfg.Fleet())
	src := reflect.ValueOf(cfg)
	for i := range got.NumField() {
		f := got.Type().Field(i)
		want := src.FieldByName(f.Name)
		if !want.IsValid() || want.Type() != f.Type {
			t.Errorf("FleetConfig.%s (%s) is not a field of Config", f.Name, f.Type)
			continue
		}
		if want.IsZero() {
			t.Fatalf("the sample config has no %s: the test cannot tell it is copied", f.Name)
		}
		if !reflect.DeepEqual(got.Field(i).Interface(), want.Interface()) {
			t.Errorf("Fleet().%s = %v, want the config's %v", f.Name, got.Field(i), want)
		}
	}
}
