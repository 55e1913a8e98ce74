package bench

import (
	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/lab"
)

// portFrames are the frames the lab's switch sent out of its ports and those it dropped there
// (a full ring at the other end: with --switch xdp a redirected frame has no queue to wait in).
type portFrames struct{ sent, dropped uint64 }

// readSwitchPorts sums the transmit counters of the switch's ports; false when one cannot be read.
func readSwitchPorts(e *Env) (portFrames, bool) {
	var total portFrames
	for _, p := range switchPorts(e) {
		err := lab.WithHandle(p.port.ns, func(h *netlink.Handle) error {
			link, err := h.LinkByName(p.port.dev)
			if err != nil {
				return err
			}
			if s := link.Attrs().Statistics; s != nil {
				total.sent += s.TxPackets
				total.dropped += s.TxDropped
			}
			return nil
		})
		if err != nil {
			return portFrames{}, false
		}
	}
	return total, true
}

// switchDropClock measures the share of the frames the switch dropped at its ports over a run: a
// run that lost frames there measured the lab, not the candidate.
type switchDropClock struct {
	e     *Env
	start portFrames
}

// startSwitchDropClock starts measuring; nil where the ports cannot be read.
func startSwitchDropClock(e *Env) *switchDropClock {
	start, ok := readSwitchPorts(e)
	if !ok {
		return nil
	}
	return &switchDropClock{e: e, start: start}
}

// share is the frames dropped since the start over those sent or dropped; nil when not measured.
func (c *switchDropClock) share() *float64 {
	if c == nil {
		return nil
	}
	now, ok := readSwitchPorts(c.e)
	if !ok {
		return nil
	}
	return dropShare(c.start, now)
}

// dropShare is the share of the frames dropped between two readings; nil when the counters went
// back (a port made again) or no frame passed.
func dropShare(before, after portFrames) *float64 {
	if after.sent < before.sent || after.dropped < before.dropped {
		return nil
	}
	sent, dropped := after.sent-before.sent, after.dropped-before.dropped
	if sent+dropped == 0 {
		return nil
	}
	share := float64(dropped) / float64(sent+dropped)
	return &share
}
