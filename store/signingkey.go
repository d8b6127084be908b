package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/redis/go-redis/v9"
)

// SigningKey returns the deployment's generated signing key, kept in Redis under the key
// prefix ({p}:signing-key, no expiry): the first replica to ask makes it (32 random
// bytes, hex), every other one reads the same. It signs the service's own marks and links
// when the configuration names no signing keys (config signing.keys).
func SigningKey(ctx context.Context, rdb redis.UniversalClient, prefix string) (string, error) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	mine := hex.EncodeToString(b[:])
	prev, err := rdb.SetArgs(ctx, newKeys(prefix).signingKey(), mine, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return mine, nil
	case err != nil:
		return "", redisFail("signing key", err)
	}
	return prev, nil
}
