package dingtalksim

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DecodeOptions reads Options from YAML strictly (an unknown key is an error naming its
// line): robots (name, token, secret, keyword, limit), limit, window, throttle.
func DecodeOptions(data []byte) (Options, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var o Options
	if err := dec.Decode(&o); err != nil {
		return Options{}, err
	}
	return o, nil
}

// ParseRobots parses robots written TOKEN or TOKEN=SECRET, comma-separated (the
// `rocketdelay dingtalk-sim --robots` flag).
func ParseRobots(spec string) ([]Robot, error) {
	var out []Robot
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		token, secret, _ := strings.Cut(item, "=")
		if token == "" {
			return nil, fmt.Errorf("robot %d has no token", len(out)+1)
		}
		out = append(out, Robot{Token: token, Secret: secret})
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
	for i, r := range o.Robots {
		if r.Token == "" || seen[r.Token] {
			return fmt.Errorf("robot %d has an empty or repeated token", i+1)
		}
		seen[r.Token] = true
	}
	return nil
}
