package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/importer"
)

// ExitPartial is the exit status of sluice import --partial when it left something out.
const ExitPartial = 3

// importers are the formats sluice import reads, by name.
var importers = map[string]func(path string, opts importer.Options) (*importer.Result, error){
	"keepalived": importer.Keepalived,
	"nftlb":      importer.Nftlb,
	"ipvsadm":    importer.Ipvsadm,
}

func importCmd() *cobra.Command {
	var opts importer.Options
	cmd := &cobra.Command{
		Use:   "import keepalived|nftlb|ipvsadm FILE",
		Short: "Convert a keepalived, nftlb or ipvsadm -Sn config into a Sluice config (stdout)",
		Long: `Convert another balancer's config into a Sluice config, printed on stdout. Options Sluice has no
equivalent for are left as # comments saying why; what cannot be converted safely (regex checks,
fwmark services without --fwmark-rules…) fails with FILE:LINE and the reason, and nothing is
printed. The result is validated as sluice validate would: a config Sluice would refuse is refused
at the source line.

With --partial, every service that converts is printed and each thing that does not is left out
as a "# sluice import: FILE:LINE: reason" comment where it stood; a summary goes to stderr and the
exit status is 3 when anything was left out (0 when nothing was).`,
		Example: `  sluice import keepalived /etc/keepalived/keepalived.conf > sluice.yaml
  ipvsadm -Sn > ipvs.save && sluice import ipvsadm ipvs.save > sluice.yaml
  sluice import --partial nftlb /etc/nftlb.json > sluice.yaml
  iptables-save -t mangle > marks && sluice import --fwmark-rules marks keepalived keepalived.conf`,
		Args:      cobra.ExactArgs(2),
		ValidArgs: []string{"keepalived", "nftlb", "ipvsadm"},
		RunE: func(cmd *cobra.Command, args []string) error {
			convert, ok := importers[args[0]]
			if !ok {
				return fmt.Errorf("%q is not a format: keepalived, nftlb or ipvsadm", args[0])
			}
			res, err := convert(args[1], opts)
			if err != nil {
				return err
			}
			out, err := res.YAML()
			if err != nil {
				return err
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			if _, err := cmd.OutOrStdout().Write(out); err != nil {
				return err
			}
			if !opts.Partial {
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sluice import: %s\n", res.Summary())
			if len(res.Omitted) > 0 {
				return exitStatus(ExitPartial)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&opts.Partial, "partial", false, "convert every service that converts, leave the others out as comments (exit status 3 when any was)")
	cmd.Flags().StringVar(&opts.FwmarkRules, "fwmark-rules", "", "iptables-save or nft list ruleset output that sets the marks of fwmark services (keepalived, ipvsadm)")
	return cmd
}
