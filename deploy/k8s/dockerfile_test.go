package k8s

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line  int
	cmd   string   // upper case: FROM, RUN, …
	flags []string // leading --flags of FROM, RUN, COPY, ADD
	args  string   // the rest, as written
	exec  []string // the JSON (exec) form, when args is one
}

// stage is one build stage: its FROM and the instructions up to the next FROM.
type stage struct {
	image, name string
	ins         []instruction
}

// parseDockerfile is a small Dockerfile parser: comments, line continuations with \,
// instruction flags, the exec (JSON) form, stages, and ${ARG} in FROM from the global
// ARGs. It covers what this repository's Dockerfile uses (no heredocs, no escape
// directive).
func parseDockerfile(t *testing.T, file string) []stage {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var (
		ins     []instruction
		buf     strings.Builder
		start   int
		lineNum int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lineNum++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && buf.Len() == 0) {
			continue
		}
		if buf.Len() == 0 {
			start = lineNum
		}
		if cont, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			buf.WriteString(cont + " ")
			continue
		}
		buf.WriteString(line)
		ins = append(ins, parseInstruction(start, buf.String()))
		buf.Reset()
	}
	require.NoError(t, sc.Err())
	require.Zero(t, buf.Len(), "%s ends inside a continued line", file)

	globals := map[string]string{}
	var stages []stage
	for _, in := range ins {
		switch {
		case in.cmd == "FROM":
			fields := strings.Fields(in.args)
			require.NotEmpty(t, fields, "line %d: FROM without an image", in.line)
			st := stage{image: os.Expand(fields[0], func(k string) string { return globals[k] })}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			require.Equal(t, "ARG", in.cmd, "line %d: only ARG may come before the first FROM", in.line)
			k, v, _ := strings.Cut(in.args, "=")
			globals[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
		default:
			stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
		}
	}
	require.NotEmpty(t, stages, "%s has no FROM", file)
	return stages
}

func parseInstruction(line int, s string) instruction {
	cmd, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	in := instruction{line: line, cmd: strings.ToUpper(cmd)}
	rest = strings.TrimSpace(rest)
	for strings.HasPrefix(rest, "--") {
		flag, r, _ := strings.Cut(rest, " ")
		in.flags = append(in.flags, flag)
		rest = strings.TrimSpace(r)
	}
	in.args = rest
	if strings.HasPrefix(rest, "[") {
		var l []string
		if json.Unmarshal([]byte(rest), &l) == nil {
			in.exec = l
		}
	}
	return in
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func (s stage) last(t *testing.T, cmd string) instruction {
	t.Helper()
	l := s.all(cmd)
	require.NotEmpty(t, l, "the final stage has no %s", cmd)
	return l[len(l)-1]
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	require.GreaterOrEqual(t, len(stages), 2, "a multi-stage build: a Go builder and a minimal final stage")
	final := stages[len(stages)-1]

	// The final stage: a base without a shell, the binary from the builder, non-root.
	require.Regexp(t, `^(gcr\.io/distroless/static(-debian\d+)?:nonroot|scratch)(@sha256:[0-9a-f]{64})?$`, final.image,
		"final stage: a minimal base without a shell")
	for _, run := range final.all("RUN") {
		shell := run.exec == nil || (len(run.exec) > 0 && regexp.MustCompile(`(^|/)(ba|da|a)?sh$`).MatchString(run.exec[0]))
		require.False(t, shell, "line %d: the final stage has no shell; no shell-form RUN", run.line)
	}
	user := final.last(t, "USER")
	require.Regexp(t, `^[1-9][0-9]*(:[1-9][0-9]*)?$`, user.args, "line %d: USER must be a non-root numeric uid[:gid] (runAsNonRoot checks numbers)", user.line)
	require.Equal(t, "65532:65532", user.args, "the manifests' runAsUser/runAsGroup are 65532")
	ep := final.last(t, "ENTRYPOINT")
	require.Equal(t, []string{"/rocketdelay"}, ep.exec, "line %d: ENTRYPOINT in exec form", ep.line)
	cmd := final.last(t, "CMD")
	require.Equal(t, []string{"serve", "-f", configPath}, cmd.exec, "line %d: CMD in exec form", cmd.line)
	for _, e := range final.all("ENV") {
		require.False(t, looksSecret(e.args), "line %d: a secret in ENV", e.line)
	}
	_, port, err := net.SplitHostPort(configConst(t, "DefaultHTTPAddr"))
	require.NoError(t, err)
	require.Equal(t, port, final.last(t, "EXPOSE").args, "EXPOSE the default http.addr port")

	// The binary comes from the builder stage.
	var from, binPath string
	for _, c := range final.all("COPY") {
		f := strings.Fields(c.args)
		if len(f) == 2 && f[1] == "/rocketdelay" {
			for _, fl := range c.flags {
				if v, ok := strings.CutPrefix(fl, "--from="); ok {
					from, binPath = v, f[0]
				}
			}
		}
	}
	require.NotEmpty(t, from, "the final stage copies /rocketdelay --from the builder")
	var build *stage
	for i := range stages[:len(stages)-1] {
		if stages[i].name == from {
			build = &stages[i]
		}
	}
	require.NotNil(t, build, "no stage named %q", from)
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	toolchain := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindSubmatch(gomod)
	require.NotNil(t, toolchain, "go.mod names the toolchain (make builds with it)")
	require.Equal(t, "golang:"+string(toolchain[1]), build.image, "builder: exactly go.mod's toolchain, the Go that make test and govulncheck judged")

	// The go build: static, reproducible paths, stripped, version stamped.
	cgoOff := false
	for _, e := range build.all("ENV") {
		if regexp.MustCompile(`(^|\s)CGO_ENABLED=0(\s|$)`).MatchString(e.args) {
			cgoOff = true
		}
	}
	var goBuild *instruction
	argVersion := false
	for i, in := range build.ins {
		if in.cmd == "ARG" && regexp.MustCompile(`^VERSION(=|$)`).MatchString(in.args) {
			argVersion = true
		}
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			require.Nil(t, goBuild, "line %d: one go build", in.line)
			goBuild = &build.ins[i]
			require.True(t, argVersion, "line %d: ARG VERSION must be declared in the builder stage, before the go build (an ARG before FROM is not visible in a stage)", in.line)
		}
	}
	require.NotNil(t, goBuild, "the builder stage runs go build")
	require.True(t, cgoOff || regexp.MustCompile(`(^|\s)CGO_ENABLED=0\s`).MatchString(goBuild.args), "line %d: CGO_ENABLED=0", goBuild.line)
	require.NotContains(t, goBuild.args, "CGO_ENABLED=1")
	require.Regexp(t, `(^|\s)-trimpath(\s|$)`, goBuild.args, "line %d: -trimpath", goBuild.line)
	ld := regexp.MustCompile(`-ldflags[= ]"([^"]*)"`).FindStringSubmatch(goBuild.args)
	require.NotNil(t, ld, "line %d: -ldflags \"…\"", goBuild.line)
	require.Regexp(t, `(^|\s)-s -w(\s|$)`, ld[1])
	require.Contains(t, ld[1], "-X "+versionVar+"=${VERSION}", "the version variable the test binary is stamped through too")
	require.Regexp(t, `-o `+regexp.QuoteMeta(binPath)+`(\s|$)`, goBuild.args, "go build writes the file the final stage copies")
	require.Regexp(t, `\./cmd/rocketdelay(\s|$)`, goBuild.args)

	// The same -X works on the real source: the test binary was built with it.
	out, err := exec.Command(binary(t), "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.HasPrefix(string(out), "rocketdelay "+testVersion+"\n"), "%s", out)
}

// TestDockerignore: the build context keeps everything `go build ./cmd/rocketdelay`
// needs (go.mod, go.sum, every non-test Go file and every //go:embed file), and leaves the heavy and irrelevant parts out.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	require.NoError(t, err)
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(p string) bool {
		out := false
		for _, pat := range patterns {
			neg := strings.HasPrefix(pat, "!")
			pat = path.Clean(strings.TrimPrefix(strings.TrimPrefix(pat, "!"), "/"))
			if dockerignoreMatch(pat, p) {
				out = !neg
			}
		}
		return out
	}
	for _, p := range []string{".git", "bin", "deploy/local/.cache"} {
		require.True(t, ignored(p), "%s belongs out of the build context", p)
	}
	needed := 0
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" || rel == "deploy" || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		isSource := path.Ext(rel) == ".go" && !strings.HasSuffix(rel, "_test.go") && !strings.Contains(rel, "/testdata/")
		if !isSource && rel != "go.mod" && rel != "go.sum" {
			return nil
		}
		needed++
		require.False(t, ignored(rel), ".dockerignore leaves out %s, which the build needs", rel)
		if !isSource {
			return nil
		}
		// Files embedded with //go:embed are part of the build too.
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?m)^//go:embed (.+)$`).FindAllStringSubmatch(string(src), -1) {
			for _, pat := range strings.Fields(m[1]) {
				files, err := filepath.Glob(filepath.Join(filepath.Dir(p), pat))
				require.NoError(t, err)
				require.NotEmpty(t, files, "%s: //go:embed %s matches nothing", rel, pat)
				for _, f := range files {
					frel, _ := filepath.Rel(repoRoot, f)
					needed++
					require.False(t, ignored(filepath.ToSlash(frel)), ".dockerignore leaves out %s, embedded by %s", frel, rel)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, needed, 10)
}

// dockerignoreMatch matches like Docker's .dockerignore: a pattern matches a path or any
// of its parent directories; ** matches any number of directories.
func dockerignoreMatch(pat, p string) bool {
	for {
		if globMatch(strings.Split(pat, "/"), strings.Split(p, "/")) {
			return true
		}
		parent := path.Dir(p)
		if parent == "." || parent == p {
			return false
		}
		p = parent
	}
}

func globMatch(pat, p []string) bool {
	if len(pat) == 0 {
		return len(p) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(p); i++ {
			if globMatch(pat[1:], p[i:]) {
				return true
			}
		}
		return false
	}
	if len(p) == 0 {
		return false
	}
	ok, err := path.Match(pat[0], p[0])
	return err == nil && ok && globMatch(pat[1:], p[1:])
}
