package labcli

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/packetgen"
)

// labFlags name the lab that up, down and status act on.
type labFlags struct {
	prefix              string
	backends, balancers int
	routed              bool
}

// add gives cmd the lab's flags.
func (f *labFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.prefix, "prefix", "sluice", "namespace name prefix")
	cmd.Flags().IntVar(&f.backends, "backends", 3, "number of backends")
	cmd.Flags().IntVar(&f.balancers, "balancers", 1, "number of balancers; 2 or more put a BIRD router in front of them (ECMP)")
	cmd.Flags().BoolVar(&f.routed, "routed-backends", false, "put the backends behind a router on subnets of their own, decapsulating with sluice decap (mode tunnel)")
}

// lab is the lab the flags name, its UDP backends answered by this binary's udp-responder.
func (f *labFlags) lab() *lab.Lab {
	l := lab.New(f.prefix, f.backends)
	l.Balancers = f.balancers
	l.RoutedBackends = f.routed
	if self, err := os.Executable(); err == nil {
		l.UDPResponderCmd = lab.LabUDPResponder(self)
	}
	return l
}

// labCmds are `sluice-lab up|down|status`: a network-namespace lab of a client, balancer(s) and
// nginx backends.
func labCmds() []*cobra.Command {
	return []*cobra.Command{
		labCmd("up", "Create the lab: client, balancer(s), nginx backends (idempotent)", labUp),
		labCmd("down", "Remove the lab and its processes", func(cmd *cobra.Command, l *lab.Lab) error {
			return l.Down(cmd.Context())
		}),
		labCmd("status", "Show the lab's namespaces and backend processes", labStatus),
	}
}

// labCmd is a command that runs on the lab its flags name.
func labCmd(use, short string, run func(*cobra.Command, *lab.Lab) error) *cobra.Command {
	f := &labFlags{}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd, f.lab()) },
	}
	f.add(cmd)
	return cmd
}

// labStatus prints l's namespaces and processes.
func labStatus(cmd *cobra.Command, l *lab.Lab) error {
	st, err := l.Status(cmd.Context())
	if err != nil {
		return err
	}
	fmt.Fprint(cmd.OutOrStdout(), st.String())
	return nil
}

// labUp brings l up and says what it built.
func labUp(cmd *cobra.Command, l *lab.Lab) error {
	if err := l.Up(cmd.Context()); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if l.Balancers == 1 {
		fmt.Fprintf(out, "lab %s up: client %s, balancer %s, %d backends; VIPs %s and %s\n",
			l.Prefix, l.ClientNS(), l.BalancerNS(), l.Backends, lab.VIP4, lab.VIP6)
		return nil
	}
	fmt.Fprintf(out, "lab %s up: client %s, router %s (BIRD AS %d, birdc -s %s), balancers %s..%s (AS %d), %d backends; VIPs %s and %s\n",
		l.Prefix, l.ClientNS(), l.RouterNS(), lab.RouterASN, l.BirdSocket(),
		l.BalancerNSOf(1), l.BalancerNSOf(l.Balancers), lab.BalancerASN, l.Backends, lab.VIP4, lab.VIP6)
	return nil
}

func udpResponderCmd() *cobra.Command {
	var listen, reply string
	cmd := &cobra.Command{
		Use: "udp-responder", Hidden: true, Args: cobra.NoArgs,
		Short: "Answer each UDP datagram with a fixed reply, from the address it was sent to (lab backends)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.ServeUDP(cmd.Context(), listen, []byte(reply+"\n"))
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":5353", "address to listen on")
	cmd.Flags().StringVar(&reply, "reply", "", "reply payload")
	return cmd
}

// ppsSenderCmd is the generator of `sluice-lab bench pps --steer`: frames on an interface for a while, as fast
// as the kernel takes them, waiting whenever the socket's send buffer is full.
func ppsSenderCmd() *cobra.Command {
	var (
		kind, dstMAC, source, sourceNet string
		destinations                    []string
		spec                            packetgen.Spec
		duration                        time.Duration
	)
	cmd := &cobra.Command{
		Use: "pps-sender", Hidden: true, Args: cobra.NoArgs,
		Short: "Send small UDP or SYN frames as fast as the kernel takes them, print how many (bench pps)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			switch kind {
			case "udp":
				spec.Kind = packetgen.UDP
			case "syn":
				spec.Kind = packetgen.SYN
			default:
				return fmt.Errorf("--kind: %q is neither udp nor syn", kind)
			}
			if spec.DstMAC, err = net.ParseMAC(dstMAC); err != nil {
				return fmt.Errorf("--dst-mac: %w", err)
			}
			ifi, err := net.InterfaceByName(spec.Interface)
			if err != nil {
				return fmt.Errorf("--dev: %w", err)
			}
			spec.SrcMAC = ifi.HardwareAddr
			if source != "" {
				if spec.Source, err = netip.ParseAddr(source); err != nil {
					return fmt.Errorf("--source: %w", err)
				}
			}
			if sourceNet != "" {
				if spec.SourceNet, err = netip.ParsePrefix(sourceNet); err != nil {
					return fmt.Errorf("--source-net: %w", err)
				}
			}
			for _, d := range destinations {
				a, err := netip.ParseAddr(d)
				if err != nil {
					return fmt.Errorf("--dst: %w", err)
				}
				spec.Destinations = append(spec.Destinations, a)
			}
			sent, err := packetgen.Send(cmd.Context(), spec, duration)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%d\n", sent)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Interface, "dev", "eth0", "interface to send on")
	f.StringVar(&kind, "kind", "udp", "udp (one source, random ports) or syn (random sources and ports)")
	f.StringVar(&dstMAC, "dst-mac", "", "next hop's MAC address")
	f.StringVar(&source, "source", "", "UDP source address")
	f.StringVar(&sourceNet, "source-net", "", "SYN source network")
	f.StringSliceVar(&destinations, "dst", nil, "destination addresses, used in turn")
	f.Uint16Var(&spec.DstPort, "port", 80, "destination port")
	f.DurationVar(&duration, "duration", 5*time.Second, "how long to send")
	return cmd
}
