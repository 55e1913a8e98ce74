package conntrackd

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// Stats are conntrackd's counters (`conntrackd -s`), since the process started.
type Stats struct {
	// Link is the sync link's device as conntrackd reports it.
	Link string `json:"link"`
	// Messages on the sync link: sent and received packets and bytes, and socket errors.
	PacketsSent     uint64 `json:"packets_sent"`
	PacketsReceived uint64 `json:"packets_received"`
	BytesSent       uint64 `json:"bytes_sent"`
	BytesReceived   uint64 `json:"bytes_received"`
	SendErrors      uint64 `json:"send_errors"`
	ReceiveErrors   uint64 `json:"receive_errors"`
	// MalformedMessages were dropped as such; LostMessages are FTFW sequence gaps (then
	// retransmitted on the peer's side).
	MalformedMessages uint64 `json:"malformed_messages"`
	LostMessages      uint64 `json:"lost_messages"`
	// Entries are this node's flows in conntrackd's cache, sent to the peers.
	Entries uint64 `json:"entries"`
	// Injected counts the peers' entries written into this node's kernel table, and
	// InjectFailed those the kernel refused.
	InjectCreated   uint64 `json:"inject_created"`
	InjectUpdated   uint64 `json:"inject_updated"`
	InjectDestroyed uint64 `json:"inject_destroyed"`
	InjectFailed    uint64 `json:"inject_failed"`
}

// Injected is the number of the peers' entries written into this node's kernel table.
func (s Stats) Injected() uint64 { return s.InjectCreated + s.InjectUpdated + s.InjectDestroyed }

// statsCounter matches one "label: N" of conntrackd's statistics, and numberFirst one "N label".
var (
	statsCounter = regexp.MustCompile(`([A-Za-z][A-Za-z ]*?):\s*(\d+)`)
	numberFirst  = regexp.MustCompile(`(\d+) ([A-Za-z]+ [A-Za-z]+)`)
	linkSection  = regexp.MustCompile(`^(?:UDP|TCP|multicast) traffic \(active device=([^)]*)\)$`)
)

// ParseStats reads the output of `conntrackd -s`.
func ParseStats(out string) (Stats, error) {
	var st Stats
	counters := map[string]uint64{}
	section := ""
	for line := range strings.SplitSeq(out, "\n") {
		if t := strings.TrimSpace(line); line != "" && line[0] != ' ' && line[0] != '\t' && strings.HasSuffix(t, ":") {
			section = strings.TrimSuffix(t, ":")
			if m := linkSection.FindStringSubmatch(section); m != nil {
				section, st.Link = "link", m[1]
			}
			continue
		}
		prev := ""
		for _, m := range statsCounter.FindAllStringSubmatch(line, -1) {
			label := m[1]
			if label == "failed" {
				label = prev + " failed"
			}
			prev = label
			counters[section+"/"+label] = atou(m[2])
		}
		for _, m := range numberFirst.FindAllStringSubmatch(line, -1) {
			counters[section+"/"+m[2]] = atou(m[1])
		}
	}
	if st.Link == "" {
		return Stats{}, errors.New("conntrackd's statistics name no sync link")
	}
	for key, field := range map[string]*uint64{
		"link/Pckts sent": &st.PacketsSent, "link/Pckts recv": &st.PacketsReceived,
		"link/Bytes sent": &st.BytesSent, "link/Bytes recv": &st.BytesReceived,
		"link/Error send": &st.SendErrors, "link/Error recv": &st.ReceiveErrors,
		"message tracking/Malformed msgs": &st.MalformedMessages, "message tracking/Lost msgs": &st.LostMessages,
		"cache internal/current active connections": &st.Entries,
		"external inject/connections created":       &st.InjectCreated,
		"external inject/connections updated":       &st.InjectUpdated,
		"external inject/connections destroyed":     &st.InjectDestroyed,
	} {
		*field = counters[key]
	}
	for _, op := range []string{"created", "updated", "destroyed"} {
		st.InjectFailed += counters["external inject/connections "+op+" failed"]
	}
	return st, nil
}

func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}
