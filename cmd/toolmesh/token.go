package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/devca"
)

// The issuer and audience of development tokens: what toolmesh certs prints for auth.jwt.
const (
	devIssuer   = "https://toolmesh.local/dev"
	devAudience = "toolmesh"
)

// maxTokenTTL bounds a development token's lifetime.
const maxTokenTTL = 30 * 24 * time.Hour

// tokenCmd prints a development bearer token signed with the key toolmesh certs wrote.
func tokenCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	key := fs.String("key", "certs/jwt-signing-key.pem", "the signing key toolmesh certs wrote")
	tenant := fs.String("tenant", "", "the tenant the token acts for (required)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid (at most 720h)")
	issuer := fs.String("issuer", devIssuer, "the token's iss: auth.jwt.issuer")
	audience := fs.String("audience", devAudience, "the token's aud: auth.jwt.audience")
	subject := fs.String("subject", "dev", "the token's sub: who the caller is, in the audit log")
	tenantClaim := fs.String("tenant-claim", "tenant", "the claim the tenant goes in: auth.jwt.tenant_claim")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: toolmesh token -tenant t [flags]\n\nPrints a development bearer token (ES256, signed with -key, named by the kid of the\njwks.json beside it) for toolmesh -token-file. Production tokens come from your\nidentity provider.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	case *tenant == "":
		return errors.New("-tenant is required: the orchestrator takes the caller's tenant from the token")
	case *subject == "":
		return errors.New("-subject is required: the orchestrator refuses a token without a sub, which names the caller")
	case *ttl <= 0 || *ttl > maxTokenTTL:
		return fmt.Errorf("-ttl must be between 1s and %s, got %s", maxTokenTTL, *ttl)
	}
	k, err := devca.ReadSigningKey(*key)
	if err != nil {
		return fmt.Errorf("-key: %w", err)
	}
	raw, err := k.Sign(devca.TokenClaims{Issuer: *issuer, Audience: *audience, Subject: *subject, TenantClaim: *tenantClaim, Tenant: *tenant, TTL: *ttl})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, raw)
	return err
}
