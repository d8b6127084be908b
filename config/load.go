package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Decode reads YAML from r strictly: an unknown key or a value of the wrong type is an
// error that names the line. Durations may be written with days ("30d", "1d12h"; see
// ParseDuration); one that is not a duration is an error naming its key and line. An
// empty document yields the zero Config.
func Decode(r io.Reader) (Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if data, err = withDays(data); err != nil {
		return Config{}, err
	}
	var c Config
	if err := decodeStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// decodeStrict decodes the YAML document data into v, refusing unknown keys; an empty
// document leaves v as it is. Its errors show none of the values: a secret written in
// the wrong place is never echoed, only its line and what was expected.
func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for i, e := range te.Errors {
			te.Errors[i] = cannotUnmarshal.ReplaceAllStringFunc(unknownKey.ReplaceAllStringFunc(e, hideOddKey), hideValue)
		}
		return err
	}
	// A parse error may quote the input (an alias's anchor name: a secret pasted
	// after a "*"): what it quotes is shown only when it looks like a key name.
	return errors.New(quoted.ReplaceAllStringFunc(err.Error(), hideQuoted))
}

// quoted finds what a YAML parse error quotes: 'text'.
var quoted = regexp.MustCompile(`'[^']*'`)

// hideQuoted keeps a quoted text of YAML's syntax (an indicator the parser expected:
// '-', ':') and hides any with a letter or a digit: an anchor's name is the input, and
// a token is often letters and digits only.
func hideQuoted(q string) string {
	if !strings.ContainsFunc(q, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		return q
	}
	return "'(not shown)'"
}

// unknownKey finds the strict decoder's "field KEY not found in type T".
var unknownKey = regexp.MustCompile(`field (.*) not found in type (\S+)`)

// cannotUnmarshal finds the decoder's "cannot unmarshal TAG `VALUE` into T".
var cannotUnmarshal = regexp.MustCompile("cannot unmarshal (\\S+) `.*?` into (\\S+)")

// hideValue drops the value from a type error, and a tag that is not one of YAML's own
// (!!str, !!int, …): either may be a secret written in the wrong place. The line number
// and the expected type say what to fix.
func hideValue(m string) string {
	sub := cannotUnmarshal.FindStringSubmatch(m)
	tag := sub[1]
	if !strings.HasPrefix(tag, "!!") || !keyName.MatchString(tag[2:]) {
		tag = "a value with a custom tag"
	}
	return "cannot unmarshal " + tag + " into " + sub[2]
}

// keyName is what a configuration key looks like.
var keyName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,39}$`)

// hideOddKey keeps an unknown key in the error when it looks like a key name (a typo to
// fix) and leaves it out otherwise: a token pasted one indentation too far, or a value
// written as a key, is not echoed into logs.
func hideOddKey(m string) string {
	sub := unknownKey.FindStringSubmatch(m)
	if keyName.MatchString(sub[1]) {
		return m
	}
	return "an unknown key that does not look like a key name (not shown: a value written as a key, or mis-indented?) in type " + sub[2]
}

// FileEnv is the environment variable that names the configuration file of a command
// given no -f.
const FileEnv = "ROCKETDELAY_CONFIG"

// DefaultFiles are the configuration files a command given neither -f nor FileEnv reads:
// the first that exists.
var DefaultFiles = []string{"rocketdelay.yaml", "/etc/rocketdelay/rocketdelay.yaml"}

// File is the configuration file a command reads: flag (its -f) when given, else the
// file FileEnv names, else the first of DefaultFiles that exists, else "" (no file: the
// environment alone).
func File(flag string, getenv func(string) string) string {
	if flag != "" {
		return flag
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if f := getenv(FileEnv); f != "" {
		return f
	}
	for _, f := range DefaultFiles {
		// A file that exists but cannot be read is still the one meant: Load says why.
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			return f
		}
	}
	return ""
}

// Load reads the YAML file at path (no file when path is ""), applies the environment
// overrides from getenv (os.Getenv when nil), fills in defaults and validates sections,
// every section when none is given (ValidateSections): a command loads what it uses.
func Load(path string, getenv func(string) string, sections ...Section) (Config, error) {
	var c Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: read %s: %w", path, err)
		}
		c, err = Decode(bytes.NewReader(data))
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if err := only(c.applyEnv(getenv), sections); err != nil {
		return Config{}, err
	}
	if err := only(c.resolveSecrets(getenv, os.ReadFile), sections); err != nil {
		return Config{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Targets)) {
		if am := c.Targets[name].Alertmanager; am != nil && am.Template != "" {
			c.files = append(c.files, am.Template)
		}
	}
	c = c.WithDefaults()
	if err := c.ValidateSections(sections...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// EnvVar is one environment override: when the variable is set and not empty, it
// replaces the key's value from the file.
type EnvVar struct {
	Name string // e.g. ROCKETDELAY_NAMESRV
	Key  string // the YAML key it overrides
	set  func(c *Config, v string) error
}

// EnvVars lists every environment variable Load reads.
var EnvVars = []EnvVar{
	{"ROCKETDELAY_LOG_LEVEL", "log.level", func(c *Config, v string) error { c.Log.Level = v; return nil }},
	{"ROCKETDELAY_LOG_FORMAT", "log.format", func(c *Config, v string) error { c.Log.Format = v; return nil }},
	{"ROCKETDELAY_HTTP_ADDR", "http.addr", func(c *Config, v string) error { c.HTTP.Addr = v; return nil }},
	{"ROCKETDELAY_NAMESRV", "rocketmq.nameServers", func(c *Config, v string) error {
		c.RocketMQ.NameServers = splitList(v)
		return nil
	}},
	{"ROCKETDELAY_BROKERS", "rocketmq.brokers", func(c *Config, v string) error {
		c.RocketMQ.Brokers = splitList(v)
		return nil
	}},
	{"ROCKETDELAY_TOPIC", "rocketmq.topic", func(c *Config, v string) error { c.RocketMQ.Topic = v; return nil }},
	{"ROCKETDELAY_ROCKETMQ_ACCESS_KEY", "rocketmq.accessKey", func(c *Config, v string) error { c.RocketMQ.AccessKey = v; return nil }},
	{"ROCKETDELAY_ROCKETMQ_SECRET_KEY", "rocketmq.secretKey", func(c *Config, v string) error { c.RocketMQ.SecretKey = Secret(v); return nil }},
	{"ROCKETDELAY_ROCKETMQ_TLS", "rocketmq.tls", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.RocketMQ.TLS = b
		return err
	}},
	{"ROCKETDELAY_GROUP", "rocketmq.group", func(c *Config, v string) error { c.RocketMQ.Group = v; return nil }},
	{"ROCKETDELAY_LEVELS", "scheduler.levels", func(c *Config, v string) error {
		l, err := ParseDelayLevels(v)
		c.Scheduler.Levels = l
		return err
	}},
	{"ROCKETDELAY_THRESHOLD", "scheduler.threshold", func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.Scheduler.Threshold = d
		return err
	}},
	{"ROCKETDELAY_SCHEDULER_MODE", "scheduler.mode", func(c *Config, v string) error { c.Scheduler.Mode = v; return nil }},
	{"ROCKETDELAY_REDIS_URL", "redis.url", func(c *Config, v string) error { c.Redis.URL = Secret(v); return nil }},
	// The topology variables replace the file's whole topology (a URL included).
	{"ROCKETDELAY_REDIS_SENTINEL", "redis.sentinel.addresses", func(c *Config, v string) error {
		if c.Redis.Sentinel == nil {
			c.Redis.Sentinel = &RedisSentinel{}
		}
		c.Redis.Sentinel.Addresses, c.Redis.URL, c.Redis.Cluster = splitList(v), "", nil
		return nil
	}},
	{"ROCKETDELAY_REDIS_SENTINEL_MASTER", "redis.sentinel.masterName", func(c *Config, v string) error {
		if c.Redis.Sentinel == nil {
			c.Redis.Sentinel = &RedisSentinel{}
		}
		c.Redis.Sentinel.MasterName, c.Redis.URL, c.Redis.Cluster = v, "", nil
		return nil
	}},
	{"ROCKETDELAY_REDIS_CLUSTER", "redis.cluster.addresses", func(c *Config, v string) error {
		if c.Redis.Cluster == nil {
			c.Redis.Cluster = &RedisCluster{}
		}
		c.Redis.Cluster.Addresses, c.Redis.URL, c.Redis.Sentinel = splitList(v), "", nil
		return nil
	}},
	{"ROCKETDELAY_REDIS_KEY_PREFIX", "redis.keyPrefix", func(c *Config, v string) error { c.Redis.KeyPrefix = v; return nil }},
	{"ROCKETDELAY_REDIS_DURABILITY", "redis.durability", func(c *Config, v string) error { c.Redis.Durability = v; return nil }},
	{"ROCKETDELAY_POSTGRES_URL", "postgres.url", func(c *Config, v string) error { c.Postgres.URL = Secret(v); return nil }},
	{"ROCKETDELAY_SENDER_BASE_URL", "sender.baseURL", func(c *Config, v string) error { c.Sender.BaseURL = v; return nil }},
	{"ROCKETDELAY_SENDER_WINDOW", "sender.window", func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.Sender.Window = d
		return err
	}},
	{"ROCKETDELAY_SENDER_LIMIT", "sender.limit", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		c.Sender.Limit = n
		return err
	}},
	{"ROCKETDELAY_ADMIN_TOKEN", "admin.token", func(c *Config, v string) error { c.Admin.Token = Secret(v); return nil }},
	{"ROCKETDELAY_INGEST_TOKEN", "ingress.token", func(c *Config, v string) error { c.Ingress.Token = Secret(v); return nil }},
	{"ROCKETDELAY_SHUTDOWN_TIMEOUT", "shutdownTimeout", func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.ShutdownTimeout = d
		return err
	}},
}

func (c *Config) applyEnv(getenv func(string) string) error {
	var errs []error
	for _, ev := range EnvVars {
		v := getenv(ev.Name)
		if v == "" {
			continue
		}
		if err := ev.set(c, v); err != nil {
			// The value may be a secret: name the variable, not its content.
			errs = append(errs, &FieldError{Key: ev.Key, Reason: fmt.Sprintf("from %s: %v", ev.Name, redactErr(err, v))})
		}
	}
	return errors.Join(errs...)
}

func redactErr(err error, value string) string {
	return strings.ReplaceAll(err.Error(), value, "<value>")
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		out = append(out, f)
	}
	return out
}

// RedactedJSON returns the effective configuration as indented JSON with the keys of
// its YAML (durations as Go durations such as "1m0s") and every secret printed as
// "<secret>"; `rocketdelay config check -o json` prints it.
func (c Config) RedactedJSON() ([]byte, error) {
	y, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("config: render: %w", err)
	}
	var tree map[string]any
	if err := yaml.Unmarshal(y, &tree); err != nil {
		return nil, fmt.Errorf("config: render: %w", err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil {
		return nil, fmt.Errorf("config: render: %w", err)
	}
	return out.Bytes(), nil
}

// Redacted returns the effective configuration as YAML with every secret printed as
// "<secret>"; `rocketdelay config check` prints it.
func (c Config) Redacted() string {
	out, err := yaml.Marshal(c)
	if err != nil { // only unmarshalable types could fail, and Config has none
		return fmt.Sprintf("config: cannot render: %v", err)
	}
	return string(out)
}

// Files are the files besides the configuration file that c's values came from when it
// was loaded: the file: secrets and the targets' Alertmanager templates, read at load
// or at the service's start. A change of one of them is a change of the configuration.
func (c Config) Files() []string { return slices.Clone(c.files) }
