package app

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/migrations"
)

func newMigrateCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{
		Use: "migrate",
		Example: `  rocketdelay migrate up -f deploy/local/rocketdelay.yaml
  ROCKETDELAY_POSTGRES_URL=postgres://rd@db/rd rocketdelay migrate status`,
		Short: "Apply or inspect the Postgres schema migrations (under an advisory lock)",
	}
	var path string
	// run opens the migrator on the configured database and runs do with it.
	run := func(c *cobra.Command, do func(*migrations.Migrator) error) error {
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionPostgres)
		if err != nil {
			return err
		}
		return withPostgres(c, cfg, func(pg *pgxpool.Pool) error {
			m, err := migrations.New(pg, cfg.Log.Logger(stdio.Stderr))
			if err != nil {
				return err
			}
			defer m.Close()
			return do(m)
		})
	}
	up := &cobra.Command{
		Use: "up",
		Example: `  rocketdelay migrate up -f deploy/local/rocketdelay.yaml
  rocketdelay migrate up -o json`,
		Short: "Apply every pending migration",
		Args:  exactArgs(0),
	}
	upOut := outputFlag(up, outTable, outJSON)
	up.RunE = func(c *cobra.Command, _ []string) error {
		return run(c, func(m *migrations.Migrator) error {
			res, err := m.Up(c.Context())
			if err != nil {
				return err
			}
			if upOut.is(outJSON) {
				v := struct {
					Applied []migrationView `json:"applied"`
				}{[]migrationView{}}
				for _, r := range res {
					v.Applied = append(v.Applied, migrationView{Version: r.Version, Name: r.Name, Applied: true, DurationMS: r.Duration.Milliseconds()})
				}
				return writeJSON(c.OutOrStdout(), v)
			}
			if len(res) == 0 {
				_, err = fmt.Fprintln(c.OutOrStdout(), "schema is up to date; nothing to apply")
				return err
			}
			for _, r := range res {
				fmt.Fprintf(c.OutOrStdout(), "applied %05d %s (%s)\n", r.Version, r.Name, r.Duration.Round(time.Millisecond))
			}
			return nil
		})
	}
	status := &cobra.Command{
		Use: "status",
		Example: `  rocketdelay migrate status
  rocketdelay migrate status -o json`,
		Short: "List the migrations and whether each is applied",
		Args:  exactArgs(0),
	}
	statusOut := outputFlag(status, outTable, outJSON)
	status.RunE = func(c *cobra.Command, _ []string) error {
		return run(c, func(m *migrations.Migrator) error {
			st, err := m.Status(c.Context())
			if err != nil {
				return err
			}
			if statusOut.is(outJSON) {
				v := struct {
					Migrations []migrationView `json:"migrations"`
				}{[]migrationView{}}
				for _, s := range st {
					mv := migrationView{Version: s.Version, Name: s.Name, Applied: s.Applied}
					if s.Applied {
						at := s.AppliedAt.UTC()
						mv.AppliedAt = &at
					}
					v.Migrations = append(v.Migrations, mv)
				}
				return writeJSON(c.OutOrStdout(), v)
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
		})
	}
	for _, sub := range []*cobra.Command{up, status} {
		configFlag(sub, &path)
		cmd.AddCommand(sub)
	}
	return cmd
}

// migrationView is one migration of `migrate status -o json` ({"migrations": […]}) and
// `migrate up -o json` ({"applied": […]}, empty when the schema was up to date): applied (when) or pending, or, applied by `migrate
// up`, how long it took.
type migrationView struct {
	Version    int64      `json:"version"`
	Name       string     `json:"name"`
	Applied    bool       `json:"applied"`
	AppliedAt  *time.Time `json:"applied_at,omitempty"`
	DurationMS int64      `json:"duration_ms,omitempty"`
}
