// Package bgp is Sluice's embedded BGP speaker: it announces the VIPs a node serves to the
// routers in front of it, so that they spread flows over every balancer by ECMP.
//
// The model is declarative, like a datapath. The engine hands the Speaker the whole desired
// state every time and the Speaker diffs inside:
//
//   - Configure(Config) gives the node's identity (ASN, router id, listen port) and its
//     neighbours. The first call starts a GoBGP server in the process; later calls add new
//     peers, remove deleted ones and restart only the sessions whose session parameters
//     (ASN, port, hold time, password) changed. A change of a peer's attributes or next hop
//     re-sends its routes without touching the session. A change of the node's identity
//     restarts the whole server and re-announces everything.
//   - Set([]Announcement) gives every prefix (a VIP as /32 or /128) the node must announce,
//     with its attributes. Prefixes that appear are announced, those that vanish are
//     withdrawn, those whose attributes change are announced again; the rest is not touched,
//     so calling Set with the same list sends nothing.
//
// A peer carries the address family of its own address: an IPv4 neighbour gets the IPv4
// announcements (ipv4-unicast), an IPv6 neighbour the IPv6 ones (ipv6-unicast). Each path is
// announced once; what differs per neighbour (extra communities, MED, LOCAL_PREF, next hop) is
// applied by a GoBGP export policy with one statement per neighbour, matched on the neighbour
// the path is sent to. The next hop defaults to the session's local address.
//
// The BGP protocol itself is GoBGP's (github.com/osrg/gobgp/v4); this package only translates.
package bgp
