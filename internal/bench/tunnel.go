package bench

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/decap"
)

// backendDecap is backend i's sluice decap on eth0, pinned under its namespace's pins (where
// the lab's routed backends keep theirs), taking IPIP and GUE on the default port.
func backendDecap(e *Env, i int) decap.Options {
	return decap.Options{
		PinPath:   filepath.Join(ebpf.NetnsPinPath(e.Lab.BackendNS(i)), "decap"),
		Interface: "eth0",
		GUEPort:   decap.DefaultGUEPort,
	}
}

// attachDecap makes every backend decapsulate what a tunnel candidate sends it (`sluice decap
// attach --interface eth0` in each backend's namespace); the backends already hold the VIP
// ranges and answer from the VIP straight to the client, as for dsr. On an error it detaches
// again from the backends it attached to.
func attachDecap(e *Env) error {
	for i := 1; i <= e.Lab.Backends; i++ {
		o := backendDecap(e, i)
		if err := e.Lab.Do(e.Lab.BackendNS(i), func() error { return decap.Attach(o) }); err != nil {
			err = fmt.Errorf("sluice decap on %s: %w", e.Lab.BackendNS(i), err)
			return errors.Join(err, detachDecap(e, i-1))
		}
	}
	return nil
}

// detachDecap undoes attachDecap on backends 1 to n.
func detachDecap(e *Env, n int) error {
	var errs []error
	for i := 1; i <= n; i++ {
		o := backendDecap(e, i)
		if err := e.Lab.Do(e.Lab.BackendNS(i), func() error { return decap.Detach(o) }); err != nil {
			errs = append(errs, fmt.Errorf("sluice decap detach on %s: %w", e.Lab.BackendNS(i), err))
		}
	}
	return errors.Join(errs...)
}
