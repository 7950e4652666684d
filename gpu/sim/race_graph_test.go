// Race scenarios of graph launches: a graph's nodes run with the
// orderings its edges give and no others, so an unordered conflict inside
// a graph is a data race, and launches of one executable are ordered.

package sim_test

import "github.com/streamalloc/streamalloc/gpu"

func init() { scenarios = append(scenarios, graphScenarios...) }

// captureFork captures on s1 a fork into s2 (body1 on s1, body2 on s2,
// after the fork), joined back into s1 either before body1 (join first)
// or at the end, and returns the executable.
func captureFork(v *env, joinFirst bool, body1, body2 func()) gpu.GraphExec {
	fork, join := v.e, newEventOrPanic(v)
	cs := v.s1.(gpu.CaptureStream)
	check(cs.BeginCapture(gpu.CaptureRelaxed))
	check(fork.Record(v.s1))
	check(v.s2.WaitEvent(fork))
	body2()
	check(join.Record(v.s2))
	if joinFirst {
		check(v.s1.WaitEvent(join))
		body1()
	} else {
		body1()
		check(v.s1.WaitEvent(join))
	}
	g, err := cs.EndCapture()
	check(err)
	x, err := g.Instantiate(0)
	check(err)
	check(g.Destroy())
	return x
}

func newEventOrPanic(v *env) gpu.Event {
	e, err := v.dev.NewEvent(false)
	check(err)
	return e
}

var graphScenarios = []scenario{
	{"graph: unordered writes on two branches", true, func(v *env) {
		x := captureFork(v, false,
			func() { check(v.k.Fill(v.s1, v.p, words, 1)) },
			func() { check(v.k.Fill(v.s2, v.p, words, 2)) })
		check(x.Launch(v.s1))
		check(v.s1.Synchronize())
		check(x.Destroy())
	}},
	{"graph: writes ordered by the join", false, func(v *env) {
		x := captureFork(v, true,
			func() { check(v.k.Fill(v.s1, v.p, words, 1)) },
			func() { check(v.k.Fill(v.s2, v.p, words, 2)) })
		for range 3 {
			check(x.Launch(v.s1))
		}
		check(v.s1.Synchronize())
		check(x.Destroy())
	}},
	{"graph: launches on two streams are ordered", false, func(v *env) {
		cs := v.s1.(gpu.CaptureStream)
		check(cs.BeginCapture(gpu.CaptureRelaxed))
		check(v.k.Fill(v.s1, v.p, words, 1))
		g, err := cs.EndCapture()
		check(err)
		x, err := g.Instantiate(0)
		check(err)
		check(x.Launch(v.s1))
		check(x.Launch(v.s2)) // after the launch on S1, as the driver orders it
		check(v.s2.Synchronize())
		check(v.s1.Synchronize())
		check(x.Destroy())
		check(g.Destroy())
	}},
	{"graph: host writes pinned memory a launch still reads", true, func(v *env) {
		host, err := v.dev.MallocHost(4096)
		check(err)
		cs := v.s1.(gpu.CaptureStream)
		check(cs.BeginCapture(gpu.CaptureRelaxed))
		check(v.dev.CopyHtoDAsync(v.p, host, v.s1))
		g, err := cs.EndCapture()
		check(err)
		x, err := g.Instantiate(0)
		check(err)
		check(x.Launch(v.s1))
		host[0] = 1 // the launch reads host: not ordered before this write
		check(v.s1.Synchronize())
		check(x.Destroy())
		check(g.Destroy())
	}},
}
