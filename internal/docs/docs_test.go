package docs

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/app"
)

// root is the repository's root, relative to this package.
const root = "../.."

// markdownFiles lists every markdown file of the repository (README.md, docs/**,
// deploy/**, …), relative to root, leaving out hidden directories (.git, caches).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
			return err
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, files, "README.md")
	require.Contains(t, files, "docs/configuration.md")
	return files
}

// A block is a fenced code block: its info string (sh, console, …) and its lines.
type block struct {
	lang  string
	lines []string
	line  int // where it starts, 1-based
}

// A parsed markdown file: its prose lines (code blocks blanked, so line numbers hold),
// its code blocks and the anchors of its headings.
type parsed struct {
	prose   []string
	blocks  []block
	anchors map[string]bool
}

var fence = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_-]*)")

func parse(t *testing.T, file string) parsed {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	require.NoError(t, err)
	p := parsed{anchors: map[string]bool{}}
	seen := map[string]int{}
	var open *block
	var marker string
	for i, line := range strings.Split(string(b), "\n") {
		if m := fence.FindStringSubmatch(line); m != nil && (open == nil || strings.HasPrefix(strings.TrimSpace(line), marker)) {
			if open == nil {
				open, marker = &block{lang: m[2], line: i + 1}, m[1]
			} else {
				p.blocks = append(p.blocks, *open)
				open = nil
			}
			p.prose = append(p.prose, "")
			continue
		}
		if open != nil {
			open.lines = append(open.lines, line)
			p.prose = append(p.prose, "")
			continue
		}
		p.prose = append(p.prose, line)
		if h, ok := heading(line); ok {
			slug := slug(h)
			if n := seen[slug]; n > 0 {
				p.anchors[slug+"-"+strconv.Itoa(n)] = true
			} else {
				p.anchors[slug] = true
			}
			seen[slug]++
		}
	}
	require.Nil(t, open, "%s: a code block opened at line %d is never closed", file, func() int {
		if open == nil {
			return 0
		}
		return open.line
	}())
	return p
}

var atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// heading returns the text of an ATX heading line.
func heading(line string) (string, bool) {
	m := atxHeading.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// slug is GitHub's anchor of a heading: its text without markup, lowercased, keeping
// letters, digits, spaces, hyphens and underscores, each space a hyphen.
func slug(h string) string {
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1") // a link: its text
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Where is my alert? On-call's five questions":               "where-is-my-alert-on-calls-five-questions",
		"The local stack (`deploy/local/`)":                         "the-local-stack-deploylocal",
		"Timer mode (RocketMQ 5)":                                   "timer-mode-rocketmq-5",
		"Topic targets: delayed messages for any RocketMQ consumer": "topic-targets-delayed-messages-for-any-rocketmq-consumer",
		"Sender: one queue per target across replicas":              "sender-one-queue-per-target-across-replicas",
		"Every scenario and its last full run":                      "every-scenario-and-its-last-full-run",
	} {
		require.Equal(t, want, slug(h), h)
	}
}

// link finds an inline link or image: [text](target) or ![alt](target "title").
var link = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// inlineCode finds a code span, whose content is not a link.
var inlineCode = regexp.MustCompile("`[^`]*`")

// TestRelativeLinksResolve checks every relative link of every markdown file of the
// repository: its file exists inside the repository, and its #anchor, where it has one, is
// a heading of that file. A link is relative: no absolute path, and no link leaves the
// repository (../shared and the like).
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	docs := map[string]parsed{}
	for _, f := range files {
		docs[f] = parse(t, f)
	}
	checked := 0
	for _, f := range files {
		for i, line := range docs[f].prose {
			for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				where := f + ":" + strconv.Itoa(i+1)
				require.False(t, strings.HasPrefix(target, "/"), "%s: %s is an absolute path; links are relative", where, target)
				path, anchor, _ := strings.Cut(target, "#")
				dest := f
				if path != "" {
					dest = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
					require.False(t, dest == ".." || strings.HasPrefix(dest, "../"), "%s: %s points outside the repository", where, target)
					_, err := os.Stat(filepath.Join(root, dest))
					require.NoError(t, err, "%s: %s does not exist", where, target)
				}
				if anchor != "" {
					d, ok := docs[dest]
					require.True(t, ok, "%s: %s has an anchor but %s is not markdown", where, target, dest)
					require.True(t, d.anchors[anchor], "%s: %s has no heading #%s", where, dest, anchor)
				}
				checked++
			}
		}
	}
	require.Greater(t, checked, 50, "the links were not found: has the parser broken?")
}

// commands returns the command lines a code block shows: in a console block the lines
// after "$ ", in a sh block every line; continuation lines joined, comments dropped.
func commands(b block) []string {
	var out []string
	var cur strings.Builder
	for _, l := range b.lines {
		if cur.Len() == 0 {
			if b.lang == "console" {
				rest, ok := strings.CutPrefix(l, "$ ")
				if !ok {
					continue
				}
				l = rest
			}
			if strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	return out
}

// words splits a shell command line into words, the way sh does for quotes and
// backslashes; an unquoted # starts a comment. The operators ;, &&, || and | end a
// simple command: they are returned as words of their own.
func words(line string) []string {
	var out []string
	var w strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			out = append(out, w.String())
		}
		w.Reset()
		inWord = false
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else if r == '\\' && quote == '"' && i+1 < len(rs) {
				i++
				w.WriteRune(rs[i])
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			w.WriteRune(rs[i])
			inWord = true
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && !inWord:
			flush()
			return out
		case r == ';' || r == '|' || r == '&':
			flush()
			op := string(r)
			if i+1 < len(rs) && (rs[i+1] == '&' || rs[i+1] == '|') {
				i++
				op += string(rs[i])
			}
			out = append(out, op)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return out
}

// simple splits words into simple commands at the shell's operators.
func simple(ws []string) [][]string {
	var out [][]string
	var cur []string
	for _, w := range ws {
		if slices.Contains([]string{";", "&&", "||", "|", "&"}, w) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, w)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// makeTargets reads the targets of the repository's Makefile.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(b), -1) {
		targets[m[1]] = true
	}
	require.True(t, targets["run"] && targets["test"], "the Makefile's targets were not found")
	return targets
}

// TestShownCommandsExist checks every command a sh or console block of the repository's
// markdown shows that starts with rocketdelay (or bin/rocketdelay), make or go run/test:
// a rocketdelay command line must parse in the program's own command tree (its
// subcommand and every flag exist: the line is run with --help added, which parses it
// and runs nothing), a make target must be one of the Makefile's, and a Go package path
// must be a directory of the repository holding Go files.
func TestShownCommandsExist(t *testing.T) {
	targets := makeTargets(t)
	counts := map[string]int{}
	for _, f := range markdownFiles(t) {
		for _, b := range parse(t, f).blocks {
			if b.lang != "sh" && b.lang != "console" {
				continue
			}
			for _, line := range commands(b) {
				dir := "."
				for _, cmd := range simple(words(line)) {
					for len(cmd) > 0 && strings.Contains(cmd[0], "=") && !strings.HasPrefix(cmd[0], "-") {
						cmd = cmd[1:] // VAR=value before the command
					}
					if len(cmd) == 0 {
						continue
					}
					where := f + " (block at line " + strconv.Itoa(b.line) + "): " + line
					switch name := cmd[0]; {
					case name == "cd" && len(cmd) == 2:
						dir = filepath.Join(dir, cmd[1])
					case name == "rocketdelay" || name == "bin/rocketdelay":
						err := app.Run(context.Background(), append(slices.Clone(cmd[1:]), "--help"), app.IO{
							Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard,
							Getenv: func(string) string { return "" },
						})
						require.NoError(t, err, "%s: not a rocketdelay command line", where)
						counts["rocketdelay"]++
					case name == "make":
						for _, arg := range cmd[1:] {
							if strings.HasPrefix(arg, "-") || strings.Contains(arg, "=") {
								continue
							}
							require.True(t, targets[arg], "%s: the Makefile has no target %q", where, arg)
							counts["make"]++
						}
					case name == "go" && len(cmd) > 1 && (cmd[1] == "run" || cmd[1] == "test"):
						for _, arg := range cmd[2:] {
							if !strings.HasPrefix(arg, "./") {
								continue
							}
							pkg := strings.TrimSuffix(strings.TrimSuffix(arg, "..."), "/")
							ents, err := os.ReadDir(filepath.Join(root, dir, pkg))
							require.NoError(t, err, "%s: no package %s", where, arg)
							hasGo := strings.HasSuffix(arg, "...") || slices.ContainsFunc(ents, func(e fs.DirEntry) bool {
								return strings.HasSuffix(e.Name(), ".go")
							})
							require.True(t, hasGo, "%s: %s holds no Go files", where, arg)
							counts["go"]++
						}
					}
				}
			}
		}
	}
	require.Greater(t, counts["rocketdelay"], 10, "the rocketdelay commands were not found: has the parser broken?")
	require.GreaterOrEqual(t, counts["make"], 2, "make run and make test were not found")
	require.Positive(t, counts["go"], "the go commands were not found")
}
