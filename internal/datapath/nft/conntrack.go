package nft

import (
	"context"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Conntrack reads how full the conntrack table of the datapath's network namespace is: every
// nat and fullnat flow holds an entry, and a full table drops new flows.
func (d *Datapath) Conntrack(context.Context) (count, max uint64, err error) {
	return datapath.ConntrackFill()
}
