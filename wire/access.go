package wire

import (
	"sync"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// Access is how a client of rocketdelay reaches the name servers and brokers: the
// credentials that sign each request, and TLS. The zero value is unsigned plain TCP, for
// brokers without authentication.
//
// The signature is RocketMQ's remoting one (an HMAC of the request's fields under the
// secret key, sent with the access key), which brokers check with ACL 1.0's aclEnable and
// with ACL 2.0's authenticationEnabled alike.
type Access struct {
	// AccessKey and SecretKey sign every request when both are set.
	AccessKey, SecretKey string
	// TLS dials every connection with TLS. The pinned rocketmq-client-go does not verify
	// the server's certificate (it dials with InsecureSkipVerify): the connection is
	// private from anyone who only listens, not from someone who can stand in the middle.
	//
	// It is the whole process's: the client keeps the setting in a package-level default
	// that every client's options point at (its WithTls options write it), so it is
	// turned on once, before the first client that asks for it is made, and stays on.
	TLS bool
}

// tlsOnce turns the client's TLS on for the process (Access.TLS).
var tlsOnce sync.Once

// useTLS sets the client's process-wide TLS flag once: through a throwaway admin client,
// the one kind that can be closed without having been started, so that no client that
// is dialling reads the flag while it is written.
func useTLS() {
	tlsOnce.Do(func() {
		adm, err := admin.NewAdmin(admin.WithTls(true), admin.WithResolver(primitive.NewPassthroughResolver([]string{"127.0.0.1:9876"})))
		if err == nil {
			_ = adm.Close()
		}
	})
}

// Signed reports whether a signs requests.
func (a Access) Signed() bool { return a.credentials() != nil }

// credentials are a's, or nil when it signs nothing.
func (a Access) credentials() *primitive.Credentials {
	if a.AccessKey == "" || a.SecretKey == "" {
		return nil
	}
	return &primitive.Credentials{AccessKey: a.AccessKey, SecretKey: a.SecretKey}
}

// ProducerOptions are a's options for a producer.
func (a Access) ProducerOptions() []producer.Option {
	var out []producer.Option
	if c := a.credentials(); c != nil {
		out = append(out, producer.WithCredentials(*c))
	}
	if a.TLS {
		useTLS()
	}
	return out
}

// ConsumerOptions are a's options for a push or pull consumer.
func (a Access) ConsumerOptions() []consumer.Option {
	var out []consumer.Option
	if c := a.credentials(); c != nil {
		out = append(out, consumer.WithCredentials(*c))
	}
	if a.TLS {
		useTLS()
	}
	return out
}

// AdminOptions are a's options for the admin client (topic creation, queue offsets).
func (a Access) AdminOptions() []admin.AdminOption {
	var out []admin.AdminOption
	if c := a.credentials(); c != nil {
		out = append(out, admin.WithCredentials(*c))
	}
	if a.TLS {
		useTLS()
	}
	return out
}
