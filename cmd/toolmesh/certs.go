package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/devca"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// certsCmd writes a development CA and the certificates of an orchestrator, workers and
// clients, each with its SPIFFE ID, and a key that signs development bearer tokens with
// its key set, and prints the configuration that uses them.
func certsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	dir := fs.String("dir", "certs", "directory to write the PEM files to")
	td := fs.String("trust-domain", "toolmesh.local", "SPIFFE trust domain of every identity")
	workers := fs.String("workers", "math", "tool groups to issue worker certificates for: spiffe://<trust-domain>/worker/<group> each")
	clients := fs.String("clients", "dev", "client names to issue certificates for: spiffe://<trust-domain>/client/<name> each")
	hosts := fs.String("hosts", "localhost,127.0.0.1", "host names and IP addresses the orchestrator's and workers' certificates name")
	days := fs.Int("days", 30, "how long the certificates are valid")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: toolmesh certs [flags]\n\nWrites a development CA and certificates for mutual TLS, and a key that signs\ndevelopment bearer tokens (jwt-signing-key.pem, for toolmesh token) with its key set\n(jwks.json, for auth.jwt). Its CA key is not kept: run it again for new certificates\n(and a new signing key). Production certificates come from your issuer (cert-manager,\nSPIRE) with the same SPIFFE IDs, production tokens from your identity provider.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *days < 1 || *days > 3650 {
		return errors.New("-days must be between 1 and 3650")
	}
	life := time.Duration(*days) * 24 * time.Hour
	ca, err := devca.NewCA(*td, life)
	if err != nil {
		return err
	}
	hostList := split(*hosts)
	issue := func(name, path string) (trust.Files, error) {
		leaf, err := ca.Issue(path, time.Now().Add(-time.Minute), life, hostList...)
		if err != nil {
			return trust.Files{}, err
		}
		return ca.Write(*dir, name, leaf)
	}
	orch, err := issue("orchestrator", "/orchestrator")
	if err != nil {
		return err
	}
	orchID := "spiffe://" + *td + "/orchestrator"
	fmt.Fprintf(stdout, "Wrote a development CA and certificates to %s (valid %d days).\n\n", *dir, *days)
	fmt.Fprintf(stdout, "Orchestrator config (%s):\n\ntls:\n  ca_file: %s\n  cert_file: %s\n  key_file: %s\ntrust:\n  workers:\n", orchID, abs(orch.CA), abs(orch.Cert), abs(orch.Key))
	var workerLines []string
	for _, g := range split(*workers) {
		f, err := issue("worker-"+g, "/worker/"+g)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "    - {id: spiffe://%s/worker/%s, groups: [%s]}\n", *td, g, g)
		workerLines = append(workerLines, fmt.Sprintf("  toolworker -groups %s -tls-ca %s -tls-cert %s -tls-key %s -orchestrator-id %s", g, abs(f.CA), abs(f.Cert), abs(f.Key), orchID))
	}
	var clientLines, clientIDs []string
	for _, c := range split(*clients) {
		f, err := issue("client-"+c, "/client/"+c)
		if err != nil {
			return err
		}
		clientIDs = append(clientIDs, "spiffe://"+*td+"/client/"+c)
		clientLines = append(clientLines, fmt.Sprintf("  toolmesh -tls-ca %s -tls-cert %s -tls-key %s -server-id %s tools", abs(f.CA), abs(f.Cert), abs(f.Key), orchID))
	}
	if len(clientIDs) > 0 {
		fmt.Fprintf(stdout, "  clients: [%s]\n", strings.Join(clientIDs, ", "))
	}
	fmt.Fprintf(stdout, "\nWorkers:\n\n%s\n\nClients:\n\n%s\n", strings.Join(workerLines, "\n"), strings.Join(clientLines, "\n"))
	sk, err := devca.NewSigningKey()
	if err != nil {
		return err
	}
	keyFile, jwksFile, err := sk.Write(*dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nBearer tokens instead of client certificates (with tenants, each token's tenant must be\none of them):\n\nauth:\n  jwt: {jwks_file: %s, issuer: %q, audience: %s}\n\n", abs(jwksFile), devIssuer, devAudience)
	fmt.Fprintf(stdout, "  toolmesh token -key %s -tenant acme > tok\n  toolmesh -token-file tok tools\n\n(in the clear to a loopback orchestrator only; with tls, add the client's -tls-* flags)\n", abs(keyFile))
	return nil
}

func split(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
