package k8s

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// repoRoot is the root module, whose binary and config package the manifests must match.
const repoRoot = "../.."

// versionVar is the variable the Dockerfile stamps the version into; the test binary is
// built the same way, so `rocketdelay version` proves the -X path is right.
const (
	versionVar  = "github.com/rocketdelay/rocketdelay/app.Version"
	testVersion = "deploy-k8s-test"
)

var (
	tmpDir   string
	buildBin = sync.OnceValues(func() (string, error) {
		bin := filepath.Join(tmpDir, "rocketdelay")
		cmd := exec.Command("go", "build", "-trimpath",
			"-ldflags", "-s -w -X "+versionVar+"="+testVersion,
			"-o", bin, "./cmd/rocketdelay")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go build ./cmd/rocketdelay in the root module: %v\n%s", err, out)
		}
		return bin, nil
	})
)

func TestMain(m *testing.M) {
	var err error
	if tmpDir, err = os.MkdirTemp("", "rocketdelay-deploy-k8s-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

// binary returns the rocketdelay binary built from the root module's current source,
// with CGO_ENABLED=0 and -trimpath like the image.
func binary(t *testing.T) string {
	t.Helper()
	bin, err := buildBin()
	require.NoError(t, err)
	return bin
}

// configCheck runs the real `rocketdelay config check -f` on config with exactly the
// environment env (nothing inherited: the ROCKETDELAY_* of a developer's shell must not
// hide a gap in the manifests) and returns the effective configuration it prints.
func configCheck(t *testing.T, config string, env []string) map[string]any {
	t.Helper()
	f := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(f, []byte(config), 0o600))
	cmd := exec.Command(binary(t), "config", "check", "-f", f)
	cmd.Env = append([]string{}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "rocketdelay config check (environment names %v) failed:\n%s", envNames(env), stderr.String())
	var eff map[string]any
	require.NoError(t, yaml.Unmarshal(stdout.Bytes(), &eff), "config check output:\n%s", stdout.String())
	return eff
}

// migrateCheck runs the real `rocketdelay migrate status -f` on config with exactly the
// environment env, its Postgres URL replaced by a closed local port: the command must get
// past loading its configuration and fail only on reaching Postgres (exit code 5,
// unavailable). It proves that env is all the migration Job needs.
func migrateCheck(t *testing.T, config string, env []string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(f, []byte(config), 0o600))
	var cmdEnv []string
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name == "ROCKETDELAY_POSTGRES_URL" {
			kv = name + "=postgres://rocketdelay@127.0.0.1:1/rocketdelay?sslmode=disable&connect_timeout=5"
		}
		cmdEnv = append(cmdEnv, kv)
	}
	cmd := exec.Command(binary(t), "migrate", "status", "-f", f)
	cmd.Env = cmdEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "rocketdelay migrate status reached a Postgres at 127.0.0.1:1?\n%s", stderr.String())
	require.Equal(t, 5, exit.ExitCode(),
		"rocketdelay migrate status (environment names %v) must fail only on reaching Postgres (exit code 5):\n%s", envNames(env), stderr.String())
}

func envNames(env []string) []string {
	names := make([]string, len(env))
	for i, kv := range env {
		names[i], _, _ = strings.Cut(kv, "=")
	}
	return names
}

// binaryEnvVar is one entry of config.EnvVars in the root module.
type binaryEnvVar struct {
	name   string
	key    string // the YAML key it overrides, e.g. postgres.url
	secret bool   // it sets a config.Secret field
}

// binaryEnvVars parses the root module's config package and returns the environment
// variables the binary reads (the EnvVars table), each marked secret when its setter
// converts the value to config.Secret.
func binaryEnvVars(t *testing.T) map[string]binaryEnvVar {
	t.Helper()
	dir := filepath.Join(repoRoot, "config")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	vars := map[string]binaryEnvVar{}
	found := false
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if name.Name != "EnvVars" || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.CompositeLit)
				if !ok {
					continue
				}
				found = true
				for _, elt := range lit.Elts {
					v, ok := envVarEntry(elt)
					require.True(t, ok, "config.EnvVars entry at %s has no ROCKETDELAY_* name literal", fset.Position(elt.Pos()))
					vars[v.name] = v
				}
			}
			return false
		})
	}
	require.True(t, found, "no `var EnvVars = []EnvVar{…}` in %s", dir)
	require.NotEmpty(t, vars)
	return vars
}

func envVarEntry(elt ast.Expr) (binaryEnvVar, bool) {
	var v binaryEnvVar
	ast.Inspect(elt, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(n.Value)
			switch {
			case err != nil:
			case v.name == "" && strings.HasPrefix(s, "ROCKETDELAY_"):
				v.name = s
			case v.name != "" && v.key == "":
				v.key = s
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "Secret" {
				v.secret = true
			}
		}
		return true
	})
	return v, v.name != ""
}

// configConst returns the string value of a constant of the root module's config
// package, e.g. DefaultHTTPAddr, whichever of the package's files declares it.
func configConst(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(repoRoot, "config")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != name || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					require.True(t, ok && lit.Kind == token.STRING, "config.%s is not a string literal", name)
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					return v
				}
			}
		}
	}
	t.Fatalf("config.%s not found in the config package", name)
	return ""
}

// TestBinaryEnvVars guards the source parser the env check relies on.
func TestBinaryEnvVars(t *testing.T) {
	vars := binaryEnvVars(t)
	for name, want := range map[string]struct {
		key    string
		secret bool
	}{
		"ROCKETDELAY_REDIS_URL": {"redis.url", true}, "ROCKETDELAY_POSTGRES_URL": {"postgres.url", true},
		"ROCKETDELAY_ADMIN_TOKEN": {"admin.token", true}, "ROCKETDELAY_NAMESRV": {"rocketmq.nameServers", false},
		"ROCKETDELAY_HTTP_ADDR": {"http.addr", false}, "ROCKETDELAY_SHUTDOWN_TIMEOUT": {"shutdownTimeout", false},
	} {
		v, ok := vars[name]
		require.True(t, ok, "%s not found in config.EnvVars", name)
		require.Equal(t, want.key, v.key, "%s: key", name)
		require.Equal(t, want.secret, v.secret, "%s: secret", name)
	}
}
