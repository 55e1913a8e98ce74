package datapath

import "net/netip"

// SourceRefusal is Choice.Dropped for a client a service's access lists refuse: "source_deny
// PREFIX" for a client in the deny list's prefix denied, "not in source_allow" for one outside an
// allow list (allowed false), "" when the lists let it through.
func SourceRefusal(denied netip.Prefix, allowed bool) string {
	switch {
	case denied.IsValid():
		return "source_deny " + denied.String()
	case !allowed:
		return "not in source_allow"
	}
	return ""
}
