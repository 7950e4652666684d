package mrpprof_test

import (
	"log"
	"net/http"
	_ "net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/streamalloc/streamalloc"
	"github.com/streamalloc/streamalloc/mr/mrpprof"
	"github.com/streamalloc/streamalloc/mr/mrprom"
)

// A server that shows where its device memory goes: the device-memory
// profile next to net/http/pprof's (go tool pprof
// http://localhost:6060/debug/pprof/device, -tagfocus by pprof labels),
// the summary at /debug/streamalloc/summary, and Prometheus metrics with
// a device label at /metrics.
func Example() {
	h, err := streamalloc.Setup(streamalloc.Config{Stats: true, Tracking: true})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()

	mrpprof.Register(nil, h.Resources()...)
	reg := prometheus.NewRegistry()
	for _, r := range h.Resources() {
		c, err := mrprom.ForChain(r, mrprom.Options{})
		if err != nil {
			log.Fatal(err)
		}
		reg.MustRegister(c)
	}
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe("localhost:6060", nil))
}
