// Package flowsync replicates the ebpf datapath's flow tables between balancer nodes over UDP on
// the sync interface, so that a flow moving to another node (a VRRP takeover or fail-back, ECMP,
// a restart) finds its backend and translation already there.
//
// A Replicator streams the flows its datapath creates and closes (datapath.FlowReplicator's
// WatchFlows) to every peer, or to a multicast group, writes what its peers send into its own
// datapath (ImportFlows), and answers a peer that (re)joins with a paced full resync
// (SnapshotFlows). Every Options.RefreshInterval it sends its peers its active flows again, so
// that their copies keep a fresh idle time. Nothing on the way blocks the datapath: updates wait
// in a bounded queue and a full queue drops and counts.
//
// # Wire format, version 1
//
// Every datagram is one UDP payload of at most Options.MTU bytes (default 1400, so that a 1500
// byte link never fragments it), big-endian:
//
//	offset size field
//	0      4    magic "SLFS"
//	4      1    version, 1
//	5      1    type: 1 updates, 2 resync-request, 3 resync-data, 4 resync-end, 5 heartbeat,
//	            6 refresh
//	6      2    records: how many flow records the body holds
//	8      8    sender node id, random, chosen when the sender starts
//	16     8    sequence number, per sender node id, from 1, +1 per datagram
//	24     8    sender's clock, Unix nanoseconds
//	32     ...  body
//	end-32 32   HMAC-SHA256 with the shared secret over every byte before it
//
// Bodies by type:
//
//	updates          records
//	resync-request   empty (its node id and sequence number name the request)
//	resync-data      request reference (requester node id 8, request sequence number 8), records
//	resync-end       request reference (16), total records of the resync (8)
//	heartbeat        empty
//	refresh          records
//
// A flow record is 32 bytes for IPv4 and 80 for IPv6; all its addresses are of its family, but for
// family 46, a tunnel's flow whose backend (and NAT source) are of the other family than its
// client and listener (6in4, 4in6): 80 bytes, its IPv4 addresses mapped (::ffff:a.b.c.d). Records
// of family 46 go in datagrams of their own, so that a receiver that predates them (and drops a
// datagram whose body does not decode) loses no other record:
//
//	0  1  family: 4, 6 or 46
//	1  1  protocol: 6 tcp, 17 udp
//	2  1  flags: bit 0 closing (FIN or RST seen), bit 1 nat source present; others 0
//	3  1  conntrack TCP state (1 to 10) of a TCP flow of the kernel's conntrack table, whose
//	      full resyncs travel on a port of their own (internal/cttable); 0 for other records
//	4  4  idle, milliseconds (saturating)
//	8  .. client, listener, backend, nat source: each an address (4 or 16) then a port (2);
//	      the nat source is all zero when flag bit 1 is clear
//
// A receiver drops, counts by reason (DropReason) and logs (at most once per reason every
// logEvery) a datagram that is too short or long, has another magic or version, a wrong HMAC
// (checked in constant time), comes from an address that is not a peer (or, with a group, from
// more senders than maxGroupPeers), carries the receiver's own node id, repeats a sequence number
// of its sender or falls outside the 64-datagram window (a replay), carries a clock more than
// Options.MaxSkew away from the receiver's, or whose body does not decode. A peer's datagrams can
// make a receiver allocate nothing beyond its one datagram buffer and one record slice sized for
// the largest datagram.
//
// # Liveness and full resync
//
// Every node sends a heartbeat every Options.Heartbeat (default 1s); a peer from which nothing
// valid arrived for three of them is down. When a peer comes up (first heard, back after being
// down, or restarted: a new node id from its address), a node sends it a resync-request; the
// peer answers, to the requester's address only, with its whole flow table in resync-data
// datagrams paced to Options.ResyncRate bytes per second (shared by every resync it serves), then
// a resync-end with the total. A resync whose data stalls for three heartbeats, or that ended
// with fewer records than its total (lost datagrams), is requested again, up to three attempts.
// The initial sync is done once a resync from a peer completed, or Options.InitialSyncTimeout
// passed (the node then went ahead without).
//
// # Refresh
//
// The datapath tells of a flow only when it is created or starts closing, never per packet, so
// a peer's copy would keep the idle time its update or resync gave it: past the service's
// flow_timeout it no longer counts as active there, past 120 s a new fullnat flow of the peer may
// take its source port, and the LRU evicts it in the end. So every Options.RefreshInterval
// (default 1 minute) a node sends its whole table of active flows again in refresh datagrams, to
// the peers connected when it begins (unicast, one copy each) or to the group: paced by the same
// token bucket as the resyncs (Options.ResyncRate for all together, the bytes of every copy
// counted), so that a million IPv4 flows (32 MB) take about 4 s at the default 8 MiB/s and never
// saturate the link. A refresh still running when the next is due makes that one skipped and
// counted (Status.RefreshesSkipped): two never run at once. A receiver imports a refresh's
// records as it imports updates; the datapath keeps whichever of its entry and the record was
// seen last, so a refresh renews the copy's last packet time and changes nothing else.
//
// Every record a resync or refresh sends carries the flow's idle time aged by the time since
// the walk of the table began, so that the pacing never makes a flow look more recent on the
// receiver than on the sender: two nodes that send each other's copies back in their refreshes
// cannot keep an idle flow alive (each round trip ages it by no less than the real time, less
// the datagrams' transit).
//
// # Horizon
//
// Once a peer's full resync completed, its flows made until horizonMargin before its latest
// datagram are all here; the earliest such time over the peers is handed to the datapath every
// horizonEvery (datapath.FlowReplicator.ReplicatedUntil, Status.ReplicatedUntil), which ends
// second chance for the table changes before it (horizon.go). Nothing on the wire carries it.
//
// Type 6 was added to version 1 without changing the version, since nothing else changed: a
// receiver built before it drops refresh datagrams as decode_error (counted and logged, nothing
// else changes: updates, resyncs and heartbeats still pass) and its copies age as before until
// it is upgraded too.
package flowsync
