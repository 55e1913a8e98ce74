package config

import "regexp"

// interfaceName is a device name as the kernel takes it (dev_valid_name: under IFNAMSIZ, 16
// bytes, with no '/', ':' or whitespace), narrowed to the characters an nft chain name holds:
// the nft datapath names a chain after each DSR ingress device.
var interfaceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// interfaceNameRule says what validInterfaceName accepts.
const interfaceNameRule = "1 to 15 letters, digits, '-', '_' or '.', and not . or .."

// validInterfaceName tells whether name can be a network device's name (see interfaceName).
func validInterfaceName(name string) bool {
	return interfaceName.MatchString(name) && name != "." && name != ".."
}
