package app

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/migrations"
	"github.com/rocketdelay/rocketdelay/store"
)

func newMigrateCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply or inspect the Postgres schema migrations (under an advisory lock)",
	}
	var path string
	open := func(c *cobra.Command) (*migrations.Migrator, func(), error) {
		cfg, err := loadConfig(path, stdio)
		if err != nil {
			return nil, nil, err
		}
		logger := newLogger(stdio.Stderr, cfg.Log)
		pool, err := store.OpenPostgres(c.Context(), cfg.Postgres.URL.Reveal())
		if err != nil {
			return nil, nil, err
		}
		m, err := migrations.New(pool, logger)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return m, func() { m.Close(); pool.Close() }, nil
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			m, done, err := open(c)
			if err != nil {
				return err
			}
			defer done()
			res, err := m.Up(c.Context())
			if err != nil {
				return err
			}
			if len(res) == 0 {
				_, err = fmt.Fprintln(c.OutOrStdout(), "schema is up to date; nothing to apply")
				return err
			}
			for _, r := range res {
				fmt.Fprintf(c.OutOrStdout(), "applied %05d %s (%s)\n", r.Version, r.Name, r.Duration.Round(time.Millisecond))
			}
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			m, done, err := open(c)
			if err != nil {
				return err
			}
			defer done()
			st, err := m.Status(c.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
			for _, s := range st {
				state, at := "pending", "-"
				if s.Applied {
					state, at = "applied", s.AppliedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%05d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
			}
			return tw.Flush()
		},
	}
	for _, sub := range []*cobra.Command{up, status} {
		configFlag(sub, &path)
		cmd.AddCommand(sub)
	}
	return cmd
}
