package gpu

import (
	"errors"
	"testing"
)

func TestCheckLocation(t *testing.T) {
	for _, c := range []struct {
		name    string
		ordinal int
		loc     Location
		want    error
	}{
		{"this device", 1, DeviceLocation(1), nil},
		{"host", 1, HostLocation(), nil},
		{"host ignores ID", 0, Location{Kind: LocationHost, ID: -5}, nil},
		{"NUMA node 0", 0, Location{Kind: LocationHostNUMA}, nil},
		{"NUMA node max", 0, Location{Kind: LocationHostNUMA, ID: MaxNUMANode}, nil},
		{"another device", 1, DeviceLocation(0), ErrInvalidDevice},
		{"NUMA node -1", 0, Location{Kind: LocationHostNUMA, ID: -1}, ErrInvalidValue},
		{"NUMA node past max", 0, Location{Kind: LocationHostNUMA, ID: MaxNUMANode + 1}, ErrInvalidValue},
		{"zero location", 0, Location{}, ErrInvalidValue},
		{"kind 4", 0, Location{Kind: 4}, ErrInvalidValue},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckLocation(c.ordinal, c.loc)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("CheckLocation(%d, %v) = %v, want %v", c.ordinal, c.loc, err, c.want)
			}
		})
	}
}

func TestCheckAdvice(t *testing.T) {
	for _, c := range []struct {
		name string
		a    Advice
		loc  Location
		want error
	}{
		{"read-mostly zero location", AdviseSetReadMostly, Location{}, nil},
		{"unset read-mostly other device", AdviseUnsetReadMostly, DeviceLocation(3), nil},
		{"preferred host", AdviseSetPreferredLocation, HostLocation(), nil},
		{"accessed by this device", AdviseSetAccessedBy, DeviceLocation(0), nil},
		{"unset accessed by other device", AdviseUnsetAccessedBy, DeviceLocation(3), ErrInvalidDevice},
		{"preferred zero location", AdviseSetPreferredLocation, Location{}, ErrInvalidValue},
		{"unset preferred zero location", AdviseUnsetPreferredLocation, Location{}, ErrInvalidValue},
		{"advice 0", Advice(0), HostLocation(), ErrInvalidValue},
		{"advice 7", Advice(7), HostLocation(), ErrInvalidValue},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckAdvice(0, c.a, c.loc)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("CheckAdvice(0, %v, %v) = %v, want %v", c.a, c.loc, err, c.want)
			}
		})
	}
}
