package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/decap"
)

// decapCmd is `sluice decap`: the backend side of mode tunnel, for hosts whose kernel has no
// ipip/fou modules.
func decapCmd() *cobra.Command {
	var o decap.Options
	cmd := &cobra.Command{
		Use:   "decap",
		Short: "Decapsulate mode tunnel's IPIP/GUE packets on a backend, without the ipip/fou modules",
		Long: "Runs a small tc BPF program on an interface of this backend that strips the IPIP or GUE " +
			"header of the packets a balancer sends to one of this host's addresses and hands the inner " +
			"packet (to a VIP of this host, as for dsr) to the stack; inner packets to other addresses are " +
			"dropped. The host's addresses are read at attach: attach again after adding a VIP.",
	}
	cmd.PersistentFlags().StringVar(&o.PinPath, "pin-path", "",
		"where the program's maps and links are pinned (default "+decap.DefaultPinPath+"; with --netns NAME: "+decapPinPath("NAME")+")")
	attach := &cobra.Command{
		Use:   "attach --interface IF [--gue-port N]",
		Short: "Decapsulate the tunnel packets arriving on an interface (again: refresh the host's addresses)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ebpf.MountBPFFS(); err != nil {
				return err
			}
			if err := decap.Attach(pinned(o)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "decapsulating IPIP%s on %s\n", gueText(o.GUEPort), o.Interface)
			return nil
		},
	}
	attach.Flags().StringVar(&o.Interface, "interface", "", "the interface tunnel packets arrive on")
	attach.Flags().Uint16Var(&o.GUEPort, "gue-port", decap.DefaultGUEPort, "the UDP port of GUE packets (0: IPIP only)")
	_ = attach.MarkFlagRequired("interface")
	detach := &cobra.Command{
		Use:   "detach --interface IF",
		Short: "Stop decapsulating on an interface",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return decap.Detach(pinned(o)) },
	}
	detach.Flags().StringVar(&o.Interface, "interface", "", "the interface to stop on")
	_ = detach.MarkFlagRequired("interface")
	var output string
	status := &cobra.Command{
		Use:   "status [-o table|json|yaml]",
		Short: "Show where decapsulation runs and its counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := decap.ReadStatus(pinned(o))
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), output, st, func(w io.Writer) error { return printDecap(w, st) })
		},
	}
	outputFlag(status, &output)
	cmd.AddCommand(attach, detach, status)
	return cmd
}

// pinned is o with its pin path settled once the process runs in its namespace: without
// --pin-path, the namespace's own (decapPinPath) when entered with --netns.
func pinned(o decap.Options) decap.Options {
	if ns := os.Getenv(enteredEnv); o.PinPath == "" && ns != "" {
		o.PinPath = decapPinPath(ns)
	}
	return o
}

// decapPinPath is the default pin path of the decapsulation in the namespace entered with
// --netns ns: beside the datapath's of that namespace, so that two namespaces never share one.
func decapPinPath(ns string) string { return filepath.Join(ebpf.NetnsPinPath(ns), "decap") }

// gueText names the GUE port of a decapsulation, if it takes GUE.
func gueText(port uint16) string {
	if port == 0 {
		return ""
	}
	return fmt.Sprintf(" and GUE (UDP port %d)", port)
}

// printDecap writes a decapsulation's status as text.
func printDecap(w io.Writer, st decap.Status) error {
	if len(st.Interfaces) == 0 {
		_, err := fmt.Fprintln(w, "decap: not attached")
		return err
	}
	c := st.Counts
	_, err := fmt.Fprintf(w, "decap: IPIP%s on %s; %d local prefixes\ndecapsulated: %d IPIP, %d GUE; dropped: %d malformed, %d to another host\n",
		gueText(st.GUEPort), strings.Join(st.Interfaces, ", "), st.LocalPrefixes, c.IPIP, c.GUE, c.Malformed, c.Foreign)
	return err
}
