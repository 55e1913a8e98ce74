package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/importer"
)

// importers are the formats sluice import reads, by name.
var importers = map[string]func(path string) (*importer.Result, error){
	"keepalived": importer.Keepalived,
	"nftlb":      importer.Nftlb,
	"ipvsadm":    importer.Ipvsadm,
}

func importCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "import keepalived|nftlb|ipvsadm FILE",
		Short: "Convert a keepalived, nftlb or ipvsadm -Sn config into a Sluice config (stdout)",
		Long: `Convert another balancer's config into a Sluice config, printed on stdout. Options Sluice has no
equivalent for are left as # comments saying why; what cannot be converted safely (TUN, fwmark
services, digest checks…) fails with FILE:LINE and the reason, and nothing is printed.`,
		Example: `  sluice import keepalived /etc/keepalived/keepalived.conf > sluice.yaml
  ipvsadm -Sn > ipvs.save && sluice import ipvsadm ipvs.save > sluice.yaml
  sluice import nftlb /etc/nftlb.json > sluice.yaml`,
		Args:      cobra.ExactArgs(2),
		ValidArgs: []string{"keepalived", "nftlb", "ipvsadm"},
		RunE: func(cmd *cobra.Command, args []string) error {
			convert, ok := importers[args[0]]
			if !ok {
				return fmt.Errorf("%q is not a format: keepalived, nftlb or ipvsadm", args[0])
			}
			res, err := convert(args[1])
			if err != nil {
				return err
			}
			out, err := res.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
}
