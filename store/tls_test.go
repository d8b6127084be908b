package store_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestRedisTLSInEveryTopology starts real Redis servers that speak only TLS and require
// a client certificate (a single node, a primary behind a sentinel, a one-node Cluster)
// and reaches each through redis.tls: the service's scripts run on each; a client
// without the CA or without its certificate is refused.
func TestRedisTLSInEveryTopology(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tlsCfg := &config.RedisTLS{CAFile: pki.ca, CertFile: pki.clientCert, KeyFile: pki.clientKey}

	single := startTLSRedis(t, pki)
	primary := startTLSRedis(t, pki)
	sentinel := startTLSSentinel(t, pki, "tlsprimary", primary)
	node := startTLSRedis(t, pki, "--cluster-enabled", "yes", "--tls-cluster", "yes", "--cluster-announce-ip", "127.0.0.1")
	makeOneNodeCluster(t, pki, node)

	topologies := map[string]config.Redis{
		"single":   {URL: config.Secret("rediss://" + single + "/0")},
		"sentinel": {Sentinel: &config.RedisSentinel{MasterName: "tlsprimary", Addresses: []string{sentinel}}},
		"cluster":  {Cluster: &config.RedisCluster{Addresses: []string{node}}},
	}
	ctx := context.Background()
	for name, c := range topologies {
		c.TLS = tlsCfg
		rdb, err := store.OpenRedisConfig(ctx, c)
		require.NoError(t, err, name)
		// A script, as every write of the service is one.
		got, err := rdb.Eval(ctx, "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])",
			[]string{"{tls}:k"}, name).Text()
		require.NoError(t, err, name)
		require.Equal(t, name, got)
		require.NoError(t, rdb.Close())

		noCert := c
		noCert.TLS = &config.RedisTLS{CAFile: pki.ca}
		_, err = store.OpenRedisConfig(ctx, noCert)
		require.ErrorIs(t, err, store.ErrUnavailable, "%s: a client without its certificate is refused", name)

		noCA := c
		noCA.TLS = &config.RedisTLS{CertFile: pki.clientCert, KeyFile: pki.clientKey}
		_, err = store.OpenRedisConfig(ctx, noCA)
		require.ErrorIs(t, err, store.ErrUnavailable, "%s: a server signed by an unknown CA is refused", name)
		require.Contains(t, err.Error(), "certificate", name)
	}

	missing := topologies["single"]
	missing.TLS = &config.RedisTLS{CAFile: filepath.Join(t.TempDir(), "none.pem")}
	_, err := store.OpenRedisConfig(ctx, missing)
	require.ErrorContains(t, err, "redis.tls.caFile")
}

// testPKI is a certificate authority and the server and client certificates it signed,
// as PEM files.
type testPKI struct {
	dir, ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	p := testPKI{dir: dir}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rocketdelay test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p.ca = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
	}
	// Redis uses its certificate both ways (replication, the cluster bus, a sentinel's
	// own connections), so the server's is good for both.
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageAny)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}

// tlsArgs are the arguments of a Redis server that speaks only TLS on port and requires
// client certificates.
func (p testPKI) tlsArgs(port int) []string {
	return []string{"--port", "0", "--tls-port", fmt.Sprint(port), "--tls-cert-file", p.serverCert, "--tls-key-file", p.serverKey,
		"--tls-ca-cert-file", p.ca, "--tls-auth-clients", "yes", "--tls-replication", "yes"}
}

// freePort is a loopback port nothing listens on, and whose +10000 (a Cluster's bus) is
// free too.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			bus.Close()
			return port
		}
	}
	t.Fatal("no free loopback port pair")
	return 0
}

// startTLSRedis starts a Redis server that speaks only TLS, with extra arguments, and
// returns its address once it answers.
func startTLSRedis(t *testing.T, p testPKI, extra ...string) string {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	args := append(p.tlsArgs(port), "--dir", dir, "--save", "", "--appendonly", "no", "--bind", "127.0.0.1")
	runRedisServer(t, append(args, extra...)...)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitTLSPing(t, p, addr)
	return addr
}

// startTLSSentinel starts a sentinel, speaking only TLS, that monitors primary under
// name, and returns its address once it knows the primary.
func startTLSSentinel(t *testing.T, p testPKI, name, primary string) string {
	t.Helper()
	port := freePort(t)
	host, primaryPort, _ := strings.Cut(primary, ":")
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor %s %s %s 1\n", name, host, primaryPort)), 0o600))
	runRedisServer(t, append([]string{conf, "--sentinel"}, p.tlsArgs(port)...)...)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitTLSPing(t, p, addr)
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, TLSConfig: p.clientTLS(t)})
	defer c.Close()
	require.Eventually(t, func() bool {
		got, err := c.GetMasterAddrByName(context.Background(), name).Result()
		return err == nil && len(got) == 2 && got[1] == primaryPort
	}, 30*time.Second, 50*time.Millisecond, "the sentinel never named the primary")
	return addr
}

// makeOneNodeCluster gives the Cluster node at addr every slot and waits until the
// Cluster is ok.
func makeOneNodeCluster(t *testing.T, p testPKI, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: p.clientTLS(t)})
	defer c.Close()
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err())
	require.Eventually(t, func() bool {
		info, err := c.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	}, 30*time.Second, 50*time.Millisecond, "the one-node Cluster never became ok")
}

func runRedisServer(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is missing: run deploy/local/up, which installs it")
	cmd := exec.Command(bin, args...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("redis-server %s:\n%s", strings.Join(args, " "), out.String())
		}
	})
}

// clientTLS is the TLS configuration of a client that trusts the CA and has its
// certificate.
func (p testPKI) clientTLS(t *testing.T) *tls.Config {
	t.Helper()
	pemCA, err := os.ReadFile(p.ca)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pemCA))
	cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	require.NoError(t, err)
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func waitTLSPing(t *testing.T, p testPKI, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: p.clientTLS(t), MaxRetries: -1})
	defer c.Close()
	require.Eventually(t, func() bool { return c.Ping(context.Background()).Err() == nil },
		30*time.Second, 50*time.Millisecond, "redis at %s never answered over TLS", addr)
}
