package wire

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// A message read back from the broker's store by its offset message id: how a hopping
// alert, whose body and properties live only in the broker, is moved earlier
// (failed.Rescheduler publishes a copy of a new generation at the new time). The pinned
// rocketmq-client-go has the request (VIEW_MESSAGE_BY_ID) only in an internal package,
// so Reader speaks it itself: one remoting command on one connection, signed as the
// client signs its own (Access).

// ErrMessageGone means the broker no longer has the message at that offset (its commit
// log file was deleted) or never had one there, or the id names no message this reader
// can read: reading it again will not help.
var ErrMessageGone = errors.New("wire: the broker has no message at that offset")

// Reader reads messages back from the brokers' stores. The zero value reads unsigned
// over plain TCP with a 3 s bound.
type Reader struct {
	// Access signs the request and chooses TLS, as for the other clients.
	Access Access
	// Timeout bounds one read, dial included. Default 3s.
	Timeout time.Duration
}

// remoting request and response codes (org.apache.rocketmq.remoting.protocol.RequestCode,
// ResponseCode).
const (
	requestViewMessageByID = 33
	responseSuccess        = 0
	responseSystemError    = 1
	// notFoundRemark begins the broker's answer for an offset its store does not hold
	// (AdminBrokerProcessor.viewMessageById).
	notFoundRemark  = "can not find message by the offset"
	remotingVersion = 317 // what the pinned client sends
	maxFrame        = 16 << 20
)

// Read returns the message whose offset message id (primitive.SendResult.OffsetMsgID: the
// storing broker's address and the message's commit log offset) is offsetID, as the
// broker stored it: for a delayed message, in its delay topic with its real topic among
// its properties. An error wraps ErrMessageGone when the broker answered that it has no
// such message; any other error (the broker unreachable, a refusal) may pass.
func (r Reader) Read(ctx context.Context, offsetID string) (*primitive.MessageExt, error) {
	id, err := primitive.UnmarshalMsgID([]byte(offsetID))
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not an offset message id: %v", ErrMessageGone, offsetID, err)
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(id.Addr, strconv.Itoa(id.Port))
	d := net.Dialer{}
	var conn net.Conn
	if r.Access.TLS {
		// As the pinned client dials (Access.TLS): private from listeners, unverified.
		conn, err = (&tls.Dialer{NetDialer: &d, Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", addr) //nolint:gosec // see Access.TLS
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("wire: read back a message from broker %s: %w", addr, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	fields := map[string]string{"offset": strconv.FormatInt(id.Offset, 10)}
	if c := r.Access.credentials(); c != nil {
		fields = sign(fields, *c)
	}
	if err := writeCommand(conn, requestViewMessageByID, fields); err != nil {
		return nil, fmt.Errorf("wire: read back a message from broker %s: %w", addr, err)
	}
	code, remark, body, err := readResponse(bufio.NewReader(conn))
	if err != nil {
		return nil, fmt.Errorf("wire: read back a message from broker %s: %w", addr, err)
	}
	if code != responseSuccess {
		// The broker answers SYSTEM_ERROR with this remark for an offset its store does
		// not hold; SYSTEM_ERROR with another (an ACL refusal, a fault) and other codes
		// (no permission, busy) may pass.
		if code == responseSystemError && strings.HasPrefix(remark, notFoundRemark) {
			return nil, fmt.Errorf("%w (broker %s, offset %d: %s)", ErrMessageGone, addr, id.Offset, remark)
		}
		return nil, fmt.Errorf("wire: read back offset %d from broker %s: answered code %d: %s", id.Offset, addr, code, remark)
	}
	msgs := primitive.DecodeMessage(body)
	if len(msgs) != 1 {
		return nil, fmt.Errorf("%w: offset %d of broker %s: %d messages decoded from %d bytes", ErrMessageGone, id.Offset, addr, len(msgs), len(body))
	}
	return msgs[0], nil
}

// command is a remoting command's header, serialized as JSON.
type command struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields"`
}

// writeCommand writes a request without a body: the frame's length, the header's
// length (its top byte 0: JSON), the header.
func writeCommand(w io.Writer, code int, fields map[string]string) error {
	header, err := json.Marshal(command{Code: code, Language: "GO", Version: remotingVersion, Opaque: 1, ExtFields: fields})
	if err != nil {
		return err
	}
	frame := make([]byte, 8, 8+len(header))
	binary.BigEndian.PutUint32(frame[0:4], uint32(4+len(header)))
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(header)))
	_, err = w.Write(append(frame, header...))
	return err
}

// readResponse reads one frame and returns its code, remark and body.
func readResponse(r io.Reader) (code int, remark string, body []byte, err error) {
	var size uint32
	if err := binary.Read(r, binary.BigEndian, &size); err != nil {
		return 0, "", nil, err
	}
	if size < 4 || size > maxFrame {
		return 0, "", nil, fmt.Errorf("a frame of %d bytes", size)
	}
	frame := make([]byte, size)
	if _, err := io.ReadFull(r, frame); err != nil {
		return 0, "", nil, err
	}
	mark := binary.BigEndian.Uint32(frame[0:4])
	n := int(mark & 0xFFFFFF)
	if mark>>24 != 0 || 4+n > len(frame) {
		return 0, "", nil, fmt.Errorf("a header this reader cannot decode (serialization %d, %d bytes)", mark>>24, n)
	}
	var h command
	if err := json.Unmarshal(frame[4:4+n], &h); err != nil {
		return 0, "", nil, fmt.Errorf("header: %w", err)
	}
	return h.Code, h.Remark, frame[4+n:], nil
}

// sign adds RocketMQ's remoting signature to a request's fields, as the client's ACL
// hook does: the HMAC-SHA1, under the secret key, of the values of the fields and the
// access key ordered by name (the body too, but a read has none).
func sign(fields map[string]string, c primitive.Credentials) map[string]string {
	all := map[string]string{"AccessKey": c.AccessKey}
	if c.SecurityToken != "" {
		all["SecurityToken"] = c.SecurityToken
	}
	for k, v := range fields {
		all[k] = v
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	slices.Sort(names)
	mac := hmac.New(sha1.New, []byte(c.SecretKey))
	for _, k := range names {
		mac.Write([]byte(all[k]))
	}
	all["Signature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return all
}

// CopyProps are the properties of a message that a copy of its alert carries: all but
// the broker's own and the scheduling ones (due time, delay, target, id, hops,
// generation), which the copy sets itself (Copy).
func CopyProps(msg *primitive.MessageExt) map[string]string {
	out := map[string]string{}
	for k, v := range msg.GetProperties() {
		switch {
		case SystemProperty(k), k == PropDeliverAt, k == PropDelay, k == PropTarget, k == PropID, k == PropHops, k == PropGen:
		default:
			out[k] = v
		}
	}
	return out
}
