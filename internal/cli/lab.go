package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/lab"
)

func labCmd() *cobra.Command {
	var prefix string
	var backends, balancers int
	newLab := func() *lab.Lab {
		l := lab.New(prefix, backends)
		l.Balancers = balancers
		if self, err := os.Executable(); err == nil {
			l.UDPResponderCmd = lab.SluiceUDPResponder(self)
		}
		return l
	}
	cmd := &cobra.Command{Use: "lab", Short: "A network-namespace lab: client, balancer(s), nginx backends"}
	cmd.PersistentFlags().StringVar(&prefix, "prefix", "sluice", "namespace name prefix")
	cmd.PersistentFlags().IntVar(&backends, "backends", 3, "number of backends")
	cmd.PersistentFlags().IntVar(&balancers, "balancers", 1, "number of balancers; 2 or more put a BIRD router in front of them (ECMP)")
	cmd.AddCommand(
		&cobra.Command{
			Use: "up", Short: "Create the lab (idempotent)", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				l := newLab()
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
			},
		},
		&cobra.Command{
			Use: "down", Short: "Remove the lab and its processes", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return newLab().Down(cmd.Context()) },
		},
		&cobra.Command{
			Use: "status", Short: "Show the lab's namespaces and backend processes", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				st, err := newLab().Status(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), st.String())
				return nil
			},
		},
		udpResponderCmd(),
	)
	return cmd
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
