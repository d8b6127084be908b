package wire

import (
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
	TLS bool
}

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
		out = append(out, producer.WithTls(true))
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
		out = append(out, consumer.WithTls(true))
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
		out = append(out, admin.WithTls(true))
	}
	return out
}
