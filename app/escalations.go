package app

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/oncall"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// episodeRetention is how long an ended escalation episode is kept for the record (the
// API, the console, the commands).
const episodeRetention = 7 * 24 * time.Hour

// escalator builds the escalation runtime: episodes in Redis, steps published through
// pub, cancelled through cancels (noted as the escalation's), rendered by snd.
func escalator(cfg config.Config, rdb redis.UniversalClient, pub escalation.Publisher, cancels failed.Canceller,
	snd *sender.Chat, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*escalation.Escalator, error) {
	rotations, err := oncall.NewRotations(cfg.Rotations)
	if err != nil {
		return nil, err // validated with the configuration: only a bug reaches this
	}
	var links *escalation.Links
	if cfg.Ingress.PublicURL != "" {
		links = escalation.NewLinks(cfg.Ingress.PublicURL, cfg.Ingress.Token, cfg.Ingress.AckLinkTTL)
	}
	cancels.Note = store.CancelNote{By: "escalation", Reason: "its episode was resolved or acknowledged"}
	return escalation.New(escalation.Options{Policies: cfg.Escalations, Rotations: rotations, Links: links},
		store.NewEpisodes(rdb, cfg.Redis.KeyPrefix, episodeRetention), pub, cancels, snd, logger,
		escalation.NewMetrics(reg), now), nil
}
