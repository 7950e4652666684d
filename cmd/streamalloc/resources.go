package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// resourceNames are the resources the command can build, in the order
// "all" expands to.
var resourceNames = []string{"direct", "async", "pool", "arena", "binning"}

// newResource builds a fresh resource by name on dev. Suballocators take
// their chunks from a Direct resource, so that the memory they report as
// reserved is all the memory they hold: no driver pool caches behind them.
func newResource(name string, dev gpu.Device) (mr.Resource, error) {
	switch name {
	case "direct":
		return mr.NewDirect(dev), nil
	case "async":
		return mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	case "pool":
		return mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	case "arena":
		return mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{})
	case "binning":
		return mr.NewBinning(mr.NewDirect(dev), mr.BinningOptions{})
	}
	return nil, fmt.Errorf("unknown resource %q (want one of %s)", name, strings.Join(resourceNames, ", "))
}

// parseResources splits a comma-separated --resource value, expanding
// "all", and rejects unknown names before any work starts.
func parseResources(v string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "all":
			names = append(names, resourceNames...)
		case slices.Contains(resourceNames, n):
			names = append(names, n)
		default:
			return nil, fmt.Errorf("--resource: unknown resource %q (want one of %s, or all)", n, strings.Join(resourceNames, ", "))
		}
	}
	var uniq []string
	for _, n := range names {
		if !slices.Contains(uniq, n) {
			uniq = append(uniq, n)
		}
	}
	return uniq, nil
}

// closeResource releases what a resource holds once the command is done
// with it, if it can.
func closeResource(r mr.Resource) error {
	if c, ok := r.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
