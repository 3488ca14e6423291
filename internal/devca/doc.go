// Package devca issues development identities: a certificate authority for SPIFFE
// certificates and a key that signs bearer tokens, for `toolmesh certs`, `toolmesh
// token`, the benchmarks and tests. Production certificates come from the platform's
// issuer (cert-manager, SPIRE) and tokens from the identity provider.
package devca
