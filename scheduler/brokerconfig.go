package scheduler

import (
	"bufio"
	"bytes"
	"context"
	be "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// getBrokerConfig is the request code of RocketMQ's GET_BROKER_CONFIG; rocketmq-client-go's
// admin client has no call for it.
const getBrokerConfig = 26

// BrokerConfig asks the broker at addr (host:port) for its configuration, as mqadmin
// getBrokerConfig does, over RocketMQ's remoting protocol: a frame of a 4-byte length, a
// 4-byte header length (its top byte the serialisation, 0 for JSON), the JSON header and
// the body; the answer's body is the configuration as key=value lines.
func BrokerConfig(ctx context.Context, addr string) (map[string]string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("scheduler: broker config of %s: %w", addr, err)
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	header, _ := json.Marshal(map[string]any{"code": getBrokerConfig, "language": "GO", "version": 317, "opaque": 1,
		"flag": 0, "serializeTypeCurrentRPC": "JSON"}) // cannot fail: plain values
	frame := be.BigEndian.AppendUint32(nil, uint32(4+len(header)))
	frame = be.BigEndian.AppendUint32(frame, uint32(len(header))) // top byte 0: JSON
	if _, err := conn.Write(append(frame, header...)); err != nil {
		return nil, fmt.Errorf("scheduler: broker config of %s: %w", addr, err)
	}
	r := bufio.NewReader(conn)
	var lengths [8]byte
	if _, err := io.ReadFull(r, lengths[:]); err != nil {
		return nil, fmt.Errorf("scheduler: broker config of %s: %w", addr, err)
	}
	total, headerLen := be.BigEndian.Uint32(lengths[:4]), be.BigEndian.Uint32(lengths[4:])&0xffffff
	if total > 16<<20 || headerLen+4 > total {
		return nil, fmt.Errorf("scheduler: broker config of %s: not a RocketMQ answer (frame %d bytes, header %d)", addr, total, headerLen)
	}
	rest := make([]byte, total-4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("scheduler: broker config of %s: %w", addr, err)
	}
	var resp struct {
		Code   int    `json:"code"`
		Remark string `json:"remark"`
	}
	if err := json.Unmarshal(rest[:headerLen], &resp); err != nil {
		return nil, fmt.Errorf("scheduler: broker config of %s: bad answer header: %w", addr, err)
	}
	if resp.Code != 0 {
		return nil, fmt.Errorf("scheduler: broker config of %s: the broker answered code %d: %s", addr, resp.Code, resp.Remark)
	}
	cfg := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(rest[headerLen:]))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			cfg[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return cfg, sc.Err()
}
