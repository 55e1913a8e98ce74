package cli

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/datapath/ebpf"
)

func whichCmd(g *globals) *cobra.Command {
	var protocol, output string
	cmd := &cobra.Command{
		Use:   "which VIP:PORT SRC:SPORT",
		Short: "Show the backend the ebpf datapath gives a flow, by running its program on a synthetic packet",
		Long: `Runs the program the ebpf datapath attached on a synthetic packet from SRC:SPORT to VIP:PORT
(a TCP ACK or a UDP datagram) and prints the backend it picks: the one a tracked flow keeps, or
the Maglev choice for a new one, which is then forgotten again. IPv6 as [addr]:port.`,
		Example: "  sluice which 10.91.9.100:80 10.91.1.2:40000\n  sluice --netns sluice-lb which [fd00:91:9::100]:80 [fd00:91:1::2]:40000",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			vip, err := netip.ParseAddrPort(args[0])
			if err != nil {
				return fmt.Errorf("VIP:PORT %q: %w", args[0], err)
			}
			src, err := netip.ParseAddrPort(args[1])
			if err != nil {
				return fmt.Errorf("SRC:SPORT %q: %w", args[1], err)
			}
			if err := mountBPFFS(); err != nil {
				return err
			}
			dp, err := ebpf.New(g.logger(), ebpf.Options{PinPath: pinPath()})
			if err != nil {
				return err
			}
			defer dp.Close()
			c, err := dp.Which(protocol, vip, src)
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), output, c, func(w io.Writer) error {
				how := "new flow, Maglev pick"
				if c.Tracked {
					how = "tracked flow, kept"
				}
				fmt.Fprintf(w, "%s -> %s/%s: backend %s (service %s, %s, %s)\n", src, vip, protocol, c.Backend, c.Service, c.Mode, how)
				if c.NATPort != 0 {
					fmt.Fprintf(w, "  fullnat source port %d\n", c.NATPort)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&protocol, "protocol", "p", "tcp", "tcp or udp")
	outputFlag(cmd, &output)
	return cmd
}
