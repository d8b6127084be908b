package scheduler

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/sender/topic"
)

// javaExamples is where the Java examples of docs/channels.md live.
const javaExamples = "../docs/examples/java"

// The Java examples of docs/channels.md (Topic targets), with the official RocketMQ Java client: OrderTimeoutProducer
// publishes delayed order messages for the topic target "orders" through rocketdelay's
// topic, and OrderTimeoutConsumer, a plain consumer of the business topic, receives
// each once, stored by the broker no earlier than its due time, with its tag, keys,
// property and body as the producer set them.
func TestJavaClientsThroughATopicTarget(t *testing.T) {
	t.Parallel()
	lib := testenv.Env(t, "ROCKETDELAY_LOCAL_ROCKETMQ_LIB")
	javac, err := exec.LookPath("javac")
	require.NoError(t, err, "javac (openjdk-17-jdk-headless) is missing: run deploy/local/up, which installs it")
	classes := t.TempDir()
	cp := filepath.Join(lib, "*")
	out, err := exec.Command(javac, "-cp", cp, "-d", classes,
		filepath.Join(javaExamples, "OrderTimeoutProducer.java"), filepath.Join(javaExamples, "OrderTimeoutConsumer.java")).CombinedOutput()
	require.NoError(t, err, "javac: %s", out)
	cp = classes + string(os.PathListSeparator) + cp

	bizTopic := testenv.Unique("rd_java_orders_")
	h := newTopicHarness(t, 10*time.Second, map[string]topic.Target{
		"orders": {Target: "orders", TopicTarget: config.TopicTarget{Name: bizTopic}},
	})
	sinktest.CreateTopic(t, h.ns, bizTopic)
	_, m := h.start("java")

	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var consumed bytes.Buffer
	consumer := exec.CommandContext(ctx, "java", "-cp", cp, "OrderTimeoutConsumer", h.ns, bizTopic, testenv.Unique("rd_java_c_"),
		strconv.Itoa(n), "150")
	consumer.Stdout = &consumed
	consumer.Stderr = &consumed
	require.NoError(t, consumer.Start())
	// Due 12 s out: a broker hop (threshold 10 s), then the wheel stage.
	published, err := exec.CommandContext(ctx, "java", "-cp", cp, "OrderTimeoutProducer", h.ns, h.topic, strconv.Itoa(n), "12000",
		testenv.Unique("java")).CombinedOutput()
	require.NoError(t, err, "producer: %s", published)
	require.NoError(t, consumer.Wait(), "the consumer did not receive %d messages: %s", n, consumed.String())

	due := map[string]int64{}
	for l := range strings.Lines(string(published)) {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "published" {
			due[f[1]], _ = strconv.ParseInt(f[3], 10, 64)
		}
	}
	require.Len(t, due, n, "producer output: %s", published)
	seen := map[string]string{}
	sc := bufio.NewScanner(&consumed)
	for sc.Scan() {
		// received ID MSGID RECEIVED_MS STORE_MS TAG KEYS shop=VALUE BODY
		f := strings.SplitN(sc.Text(), " ", 9)
		if len(f) < 9 || f[0] != "received" {
			continue
		}
		id := f[1]
		at, ok := due[id]
		require.True(t, ok, "received %s, which was not published", id)
		if prev, dup := seen[id]; dup {
			require.Equal(t, prev, f[2], "%s reached the consumer as two broker messages", id)
			continue
		}
		seen[id] = f[2]
		stored, _ := strconv.ParseInt(f[4], 10, 64)
		require.GreaterOrEqual(t, stored, at, "%s stored %d ms before its due time", id, at-stored)
		i := id[strings.LastIndex(id, "-")+1:]
		require.Equal(t, "close", f[5])
		require.ElementsMatch(t, []string{"order-" + i, id}, strings.Split(f[6], ","))
		require.Equal(t, "shop=eu-1", f[7])
		require.Equal(t, `{"order":`+i+`,"action":"close-if-unpaid"}`, f[8])
	}
	require.Len(t, seen, n)
	ids := make([]string, 0, n)
	for id := range due {
		ids = append(ids, id)
	}
	h.settle(ids, m)
}

// docs/channels.md shows the Java examples' marked parts as they are in the files the
// test above compiles and runs.
func TestDocsJavaExamplesAreTheTestedOnes(t *testing.T) {
	doc, err := os.ReadFile("../docs/channels.md")
	require.NoError(t, err)
	for file, part := range map[string]string{"OrderTimeoutProducer.java": "producer", "OrderTimeoutConsumer.java": "consumer"} {
		src, err := os.ReadFile(filepath.Join(javaExamples, file))
		require.NoError(t, err)
		s := string(src)
		begin, end := strings.Index(s, "// README:begin "+part+"\n"), strings.Index(s, "// README:end "+part)
		require.True(t, begin >= 0 && end > begin, "%s has no README:begin/end %s markers", file, part)
		block := s[begin+len("// README:begin "+part+"\n") : end]
		block = block[:strings.LastIndex(block, "\n")+1]
		// The doc's block is the marked part with its common indentation removed.
		var want strings.Builder
		indent := len(block) - len(strings.TrimLeft(block, " "))
		for l := range strings.Lines(block) {
			want.WriteString(strings.TrimPrefix(l, strings.Repeat(" ", indent)))
		}
		require.Contains(t, string(doc), "```java\n"+want.String()+"```", "docs/channels.md's %s example differs from %s", part, file)
	}
}
