package chatsim

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// DecodeOptions reads Options from YAML strictly (an unknown key is an error naming its
// line): robots (name, kind, token, secret, keyword, limit), limit, window, throttle.
func DecodeOptions(data []byte) (Options, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var o Options
	if err := dec.Decode(&o); err != nil {
		return Options{}, err
	}
	return o, nil
}

// ParseRobots parses robots written [KIND:]TOKEN[=SECRET], comma-separated (the
// `rocketdelay chat-sim --robots` flag); KIND is dingtalk, wecom or feishu, default
// dingtalk.
func ParseRobots(spec string) ([]Robot, error) {
	var out []Robot
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		kind, rest, found := strings.Cut(item, ":")
		if !found {
			kind, rest = "", item
		}
		token, secret, _ := strings.Cut(rest, "=")
		if token == "" {
			return nil, fmt.Errorf("robot %d has no token", len(out)+1)
		}
		out = append(out, Robot{Kind: kind, Token: token, Secret: secret})
	}
	return out, nil
}

// Validate reports what New would refuse: no robot, or a robot whose token is empty or
// repeats another's. Errors never show a token.
func (o Options) Validate() error {
	if len(o.Robots) == 0 {
		return errors.New("at least one robot is needed")
	}
	seen := map[string]bool{}
	kinds := map[string]bool{}
	served := o.Platforms
	if len(served) == 0 {
		served = platforms.All
	}
	for _, p := range served {
		kinds[p.Kind()] = true
	}
	for i, r := range o.Robots {
		if r.Token == "" || seen[r.Kind+"/"+r.Token] {
			return fmt.Errorf("robot %d has an empty or repeated token", i+1)
		}
		seen[r.Kind+"/"+r.Token] = true
		if r.Kind != "" && !kinds[r.Kind] {
			return fmt.Errorf("robot %d is of kind %q, not one of the platforms served", i+1, r.Kind)
		}
	}
	return nil
}
