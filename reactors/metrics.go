package reactors

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// register registers a worker's collectors with reg (none when reg is
// nil), naming the worker in an error.
func register(reg prometheus.Registerer, worker string, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("reactors: register %s metrics: %w", worker, err)
		}
	}
	return nil
}
