package cli

import (
	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/config"
)

// schemaCmd prints the config file's JSON Schema, for editors (docs/config.md).
func schemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the config file (docs/sluice.schema.json)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.JSONSchemaText())
			return err
		},
	}
}
