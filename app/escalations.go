package app

import (
	"context"
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
// pub, cancelled through cancels (noted as the escalation's), rendered by snd, their
// marks and links signed by signer; a step due early is taken as moved only when the
// wheel stage ws recorded the reschedule that moved it.
func escalator(cfg config.Config, rdb redis.UniversalClient, signer *escalation.Signer, pub escalation.Publisher, cancels failed.Canceller,
	ws *store.WheelStage, snd *sender.Chat, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*escalation.Escalator, error) {
	rotations, err := oncall.NewRotations(cfg.Rotations)
	if err != nil {
		return nil, err // validated with the configuration: only a bug reaches this
	}
	var links *escalation.Links
	if cfg.Ingress.PublicURL != "" {
		links = escalation.NewLinks(cfg.Ingress.PublicURL, signer, cfg.Ingress.AckLinkTTL)
	}
	cancels.Note = store.CancelNote{By: "escalation", Reason: "its episode was resolved or acknowledged"}
	return escalation.New(escalation.Options{Policies: cfg.Escalations, Rotations: rotations, Links: links, Signer: signer,
		MovedTo: ws.MovedTo},
		store.NewEpisodes(rdb, cfg.Redis.KeyPrefix, episodeRetention), pub, cancels, snd, logger,
		escalation.NewMetrics(reg), now), nil
}

// signer is the deployment's signer of marks, links and principals: the configuration's
// signing.keys, or the key generated once and kept in Redis.
func signer(ctx context.Context, cfg config.Config, rdb redis.UniversalClient) (*escalation.Signer, error) {
	keys := make([]string, 0, len(cfg.Signing.Keys))
	for _, k := range cfg.Signing.Keys {
		keys = append(keys, k.Reveal())
	}
	if len(keys) == 0 {
		k, err := store.SigningKey(ctx, rdb, cfg.Redis.KeyPrefix)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return escalation.NewSigner(keys...)
}
