package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/console"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/sender"
)

// newTemplateCmd is `rocketdelay template …`: the Alertmanager templates of the robot
// groups, tried without Alertmanager or a chat.
func newTemplateCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Short:   "Try the Alertmanager templates of the robot groups",
		Example: `  rocketdelay template render --target ops --notification firing.json`,
	}
	var path, target, file string
	render := &cobra.Command{
		Use:   "render --target NAME --notification FILE [-o table|json]",
		Short: "Render an Alertmanager notification with a target's template, as the receiver would",
		Long: `render reads an Alertmanager webhook notification (the JSON Alertmanager posts to
/api/v1/alertmanager/NAME, version 4; - reads it from stdin) and renders it with the
template of the robot group --target (targets.NAME.alertmanager.template, or its
platform's built-in one) and its mention rules, exactly as the receiver does. It prints
the title, whom it mentions and the text; with -o json, the body the receiver publishes:
the platform's message JSON (DingTalk, WeCom or Feishu). It fails, saying why, when the
notification is not one, the template fails on it, or the platform would refuse the
body.`,
		Example: `  rocketdelay template render --target ops --notification firing.json
  rocketdelay template render -f deploy/local/rocketdelay.yaml --target wecom-ops --notification resolved.json -o json
  # What Alertmanager would post, captured from its logs or a webhook echo
  rocketdelay template render --target ops --notification - < notification.json`,
		Args: exactArgs(0),
	}
	out := outputFlag(render, outTable, outJSON)
	render.RunE = func(c *cobra.Command, _ []string) error {
		if target == "" || file == "" {
			return usageError(c, "give --target NAME and --notification FILE")
		}
		n, err := readNotification(c.InOrStdin(), file)
		if err != nil {
			return err
		}
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionTargets, config.SectionSender)
		if err != nil {
			return err
		}
		if _, ok := cfg.Targets[target]; !ok {
			return usageError(c, "--target %q is not a target of this configuration (known: %s)", target, targetNames(cfg))
		}
		r, err := newRenderer(cfg)
		if err != nil {
			return err
		}
		m, body, err := r.render(target, n)
		if err != nil {
			return err
		}
		if out.is(outJSON) {
			_, err := fmt.Fprintln(c.OutOrStdout(), body)
			return err
		}
		return writeRendered(c.OutOrStdout(), m)
	}
	configFlag(render, &path)
	render.Flags().StringVar(&target, "target", "", "the robot group whose template renders it")
	render.Flags().StringVar(&file, "notification", "", "the Alertmanager notification, a JSON file (- for stdin)")
	_ = render.RegisterFlagCompletionFunc("target", completeTargets(stdio, &path))
	_ = render.MarkFlagFilename("notification", "json")
	cmd.AddCommand(render)
	return cmd
}

// readNotification reads the Alertmanager notification in file (stdin for "-").
func readNotification(stdin io.Reader, file string) (ingress.Notification, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return ingress.Notification{}, fmt.Errorf("%w: --notification: %v", ErrUsage, err)
	}
	var n ingress.Notification
	if err := json.Unmarshal(data, &n); err != nil {
		return ingress.Notification{}, fmt.Errorf("--notification %s: not the JSON of an Alertmanager notification: %w", file, err)
	}
	return n, nil
}

// renderer renders Alertmanager notifications with the targets' templates, as the
// receiver does: for `template render` and the console's template page
// (console.Renderer).
type renderer struct {
	cfg  config.Config
	chat *sender.Chat // checks the rendered body as the platform would
}

func newRenderer(cfg config.Config) (renderer, error) {
	chat, err := bodyChecker(cfg)
	if err != nil {
		return renderer{}, err
	}
	return renderer{cfg: cfg, chat: chat}, nil
}

// render renders n with target's template and mention rules, and returns the message and
// the platform's message JSON, indented; it fails when the template fails on n or the
// platform would refuse the body.
func (r renderer) render(target string, n ingress.Notification) (sender.Message, string, error) {
	m, err := ingress.Render(r.cfg, target, n)
	if err != nil {
		return sender.Message{}, "", err
	}
	body, err := r.chat.Body(target, m)
	if err == nil {
		err = r.chat.Check(target, body)
	}
	if err != nil {
		return sender.Message{}, "", fmt.Errorf("target %q: the platform would refuse the rendered message: %w", target, err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, body, "", "  "); err != nil {
		return sender.Message{}, "", err
	}
	return m, indented.String(), nil
}

// Targets are the chat targets, sorted.
func (r renderer) Targets() []string {
	var names []string
	for name, t := range r.cfg.Targets {
		if t.Topic == nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Render is render for the console: notification is the JSON Alertmanager posts.
func (r renderer) Render(target string, notification []byte) (console.Rendered, error) {
	var n ingress.Notification
	if err := json.Unmarshal(notification, &n); err != nil {
		return console.Rendered{}, fmt.Errorf("not the JSON of an Alertmanager notification: %w", err)
	}
	m, body, err := r.render(target, n)
	if err != nil {
		return console.Rendered{}, err
	}
	return console.Rendered{Title: m.Title, Mentions: mentions(m), Text: m.Text, Body: body, Kind: r.cfg.Targets[target].Channel()}, nil
}

// writeRendered prints a rendered message for a person: its title, whom it mentions, its
// text.
func writeRendered(w io.Writer, m sender.Message) error {
	_, err := fmt.Fprintf(w, "title: %s\nmentions: %s\ntext:\n%s\n", m.Title, mentions(m), m.Text)
	return err
}

// mentions says whom m mentions: "nobody", or everyone, user ids and mobiles.
func mentions(m sender.Message) string {
	var who []string
	if m.Mentions.All {
		who = append(who, "everyone")
	}
	who = append(who, m.Mentions.Users...)
	who = append(who, m.Mentions.Mobiles...)
	if len(who) == 0 {
		return "nobody"
	}
	return strings.Join(who, ", ")
}
