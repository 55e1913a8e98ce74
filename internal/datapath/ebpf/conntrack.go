package ebpf

import (
	"context"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Conntrack reads how full the conntrack table of the datapath's network namespace is. The
// program's balanced flows bypass conntrack, but the namespace's other traffic (and flows the
// program passes to the stack) does not, and a full table drops it.
func (d *Datapath) Conntrack(context.Context) (count, max uint64, err error) {
	return datapath.ConntrackFill()
}
