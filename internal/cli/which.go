package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/datapath/nft"
)

func whichCmd(g *globals) *cobra.Command {
	var protocol, output, dpName string
	cmd := &cobra.Command{
		Use:   "which VIP:PORT SRC:SPORT",
		Short: "Show the backend the datapath gives a flow",
		Long: `Prints the backend the datapath programmed here gives a flow from SRC:SPORT to VIP:PORT: the
one a tracked flow keeps, or the Maglev (or hash) choice for a new one; or, for a new flow the
service's source_deny or source_allow drops, "dropped:" and the list (the deny prefix that holds
the client, or "not in source_allow"). Nothing is changed.
  ebpf: runs a copy of the attached program that counts nothing on a synthetic packet (a TCP
        ACK or a UDP datagram); a flow it did not track before is forgotten again.
  nft:  reads the tables back and computes the kernel's jhash of the flow; a tracked flow is its
        conntrack entry (nat, fullnat) or its element of the service's flow map (dsr).
The datapath is the one the namespace holds (ebpf when its pins exist, nft otherwise, and nft for
a service ebpf hands to the synproxy), or --datapath. IPv6 as [addr]:port.`,
		Example: "  sluice which 10.91.9.100:80 10.91.1.2:40000\n  sluice --netns sluice-lb which -p udp [fd00:91:9::100]:53 [fd00:91:1::2]:40000",
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
			dp, err := whichDatapath(g, dpName)
			if err != nil {
				return err
			}
			defer dp.Close()
			c, err := dp.Which(protocol, vip, src)
			if err != nil && dpName == "" {
				// ebpf hands its syn_protection services to nft: ask nft before giving up.
				if nftDP, nftErr := nft.New(g.logger()); nftErr == nil {
					if nc, nftErr := nftDP.Which(protocol, vip, src); nftErr == nil {
						c, err = nc, nil
					}
				}
			}
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), output, c, func(w io.Writer) error {
				printChoice(w, src, vip, protocol, c)
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&protocol, "protocol", "p", "tcp", "tcp or udp")
	cmd.Flags().StringVar(&dpName, "datapath", "", "nft or ebpf (default: the one programmed here)")
	_ = cmd.RegisterFlagCompletionFunc("datapath", cobra.FixedCompletions([]string{"nft", "ebpf"}, cobra.ShellCompDirectiveNoFileComp))
	outputFlag(cmd, &output)
	return cmd
}

// printChoice writes what the datapath does with a flow from src to vip: the backend it gives
// it, or why it drops it.
func printChoice(w io.Writer, src, vip netip.AddrPort, protocol string, c datapath.Choice) {
	if c.Dropped != "" {
		fmt.Fprintf(w, "%s -> %s/%s: dropped: %s (service %s, %s, new flow)\n", src, vip, protocol, c.Dropped, c.Service, c.Mode)
		return
	}
	how := "new flow, Maglev pick"
	if c.Tracked {
		how = "tracked flow, kept"
	}
	fmt.Fprintf(w, "%s -> %s/%s: backend %s (service %s, %s, %s)\n", src, vip, protocol, c.Backend, c.Service, c.Mode, how)
	if c.NATPort != 0 {
		fmt.Fprintf(w, "  fullnat source port %d\n", c.NATPort)
	}
}

// flowChooser is a datapath that tells the backend it gives a flow.
type flowChooser interface {
	Which(protocol string, vip, src netip.AddrPort) (datapath.Choice, error)
	Close() error
}

// whichDatapath opens the named datapath, or when none is named the one the namespace holds:
// ebpf when its pin path exists (its Flush removes it), nft otherwise.
func whichDatapath(g *globals, name string) (flowChooser, error) {
	if name == "" {
		name = "nft"
		if _, err := os.Stat(pinPath()); err == nil {
			name = "ebpf"
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	switch name {
	case "nft":
		dp, err := nft.New(g.logger())
		return nftChooser{dp}, err
	case "ebpf":
		if err := ebpf.MountBPFFS(); err != nil {
			return nil, err
		}
		return ebpf.New(g.logger(), ebpf.Options{PinPath: pinPath()})
	}
	return nil, fmt.Errorf("--datapath %q: want nft or ebpf", name)
}

// nftChooser is the nft datapath, which holds nothing to close.
type nftChooser struct{ *nft.Datapath }

func (nftChooser) Close() error { return nil }
