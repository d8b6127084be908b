package app

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	out, _, err := run(t, nil, "version")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "rocketdelay "+Version+"\n"), out)
	require.Contains(t, out, "go:     "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
}

// version reads the commit, its time, whether the checkout was modified and the Go
// version from the build information; the version set with -ldflags wins over the
// module's, which wins over "dev".
func TestVersionOfBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "-buildmode", Value: "exe"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "894a0b1c0ffee"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	v := versionOf(bi, true)
	require.Equal(t, versionView{Version: Version, Commit: "894a0b1c0ffee", CommitTime: "2026-12-01T10:00:00Z", Modified: true,
		GoVersion: "go1.99.1", Platform: runtime.GOOS + "/" + runtime.GOARCH}, v)
	var out strings.Builder
	require.NoError(t, v.write(&out))
	require.Contains(t, out.String(), "commit: 894a0b1c0ffee (modified: built with uncommitted changes), committed 2026-12-01T10:00:00Z\n")

	bi.Main.Version = "v1.4.2"
	require.Equal(t, "v1.4.2", versionOf(bi, true).Version, "go install …@v1.4.2")
	defer func(v string) { Version = v }(Version)
	Version = "1.5.0-rc1"
	require.Equal(t, "1.5.0-rc1", versionOf(bi, true).Version, "-ldflags -X wins")

	none := versionOf(nil, false)
	require.Equal(t, runtime.Version(), none.GoVersion)
	require.Empty(t, none.Commit)
}

// A plain `go build` of a git checkout stamps the commit and whether the checkout was
// modified, and `version -o json` says both. The checkout is a module of its own whose
// main calls app.Run, as cmd/rocketdelay does.
func TestVersionOfAPlainGoBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	// The program's go.mod requires what rocketdelay's does, at the same versions: with a
	// shorter list the go command completes it from the whole module graph, whose go.mod
	// files a clean module cache does not hold (rocketdelay's own build never needs them).
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	_, requires, found := strings.Cut(string(mod), "\n")
	require.True(t, found)
	write("go.mod", "module example.com/rdversion\n"+requires+"\nrequire github.com/rocketdelay/rocketdelay v0.0.0\n\n"+
		"replace github.com/rocketdelay/rocketdelay => "+root+"\n")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	write("go.sum", string(sum))
	write("main.go", `package main

import (
	"context"
	"os"

	"github.com/rocketdelay/rocketdelay/app"
)

func main() {
	err := app.Run(context.Background(), os.Args[1:], app.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	os.Exit(app.ExitCode(err))
}
`)
	bin := filepath.Join(t.TempDir(), "rocketdelay")
	sh := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		// Offline, from the module cache; -mod=mod completes go.mod's requirements.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %v: %s", name, args, out)
		return strings.TrimSpace(string(out))
	}
	// -buildvcs=true is go build's default in a checkout (auto); this machine's go env
	// turns it off.
	build := func() versionView {
		sh("go", "build", "-buildvcs=true", "-o", bin, ".")
		out, err := exec.Command(bin, "version", "-o", "json").Output()
		require.NoError(t, err)
		var v versionView
		require.NoError(t, json.Unmarshal(out, &v))
		return v
	}
	build() // completes go.mod, to be committed
	sh("git", "init", "-q")
	sh("git", "add", "-A")
	sh("git", "commit", "-q", "-m", "build")
	head := sh("git", "rev-parse", "HEAD")

	v := build()
	require.Equal(t, head, v.Commit)
	require.False(t, v.Modified)
	require.NotEmpty(t, v.CommitTime)
	require.Equal(t, runtime.Version(), v.GoVersion)
	require.True(t, strings.HasPrefix(v.Version, "v0.0.0-") && strings.HasSuffix(v.Version, head[:12]),
		"the module's pseudo-version from its commit: %s", v.Version)

	write("main.go", strings.Replace(readFile(t, filepath.Join(dir, "main.go")), "func main() {", "// changed\nfunc main() {", 1))
	v = build()
	require.Equal(t, head, v.Commit)
	require.True(t, v.Modified, "a build with uncommitted changes says so")
	require.True(t, strings.HasSuffix(v.Version, head[:12]+"+dirty"), v.Version)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
