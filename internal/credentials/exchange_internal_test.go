package credentials

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolmesh/toolmesh/internal/credentials/credentialstest"
)

// A caller that missed the cache just before another caller's flight filled it and
// ended starts a flight of its own: that flight finds the token in the cache and does not
// exchange again. (Without the look in the flight, TestExchangeOncePerCaller failed now
// and then: call 21 of 50 got a second token.)
func TestFlightAfterAFilledCacheDoesNotExchange(t *testing.T) {
	srv := credentialstest.Start("toolmesh", "client-s3cret-value", "billing-api")
	t.Cleanup(srv.Close)
	secret := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secret, []byte("client-s3cret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := NewExchanger(ExchangeOptions{Group: "billing", TokenEndpoint: srv.URL, ClientID: srv.ClientID, ClientSecretFile: secret,
		Audience: "billing-api", Scope: "billing.read"})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("test-key-not-a-secret"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.Token(t.Context(), alice)
	if err != nil {
		t.Fatal(err)
	}
	// The late caller: it looked at the cache before the first flight filled it, and
	// flies now that the first has ended.
	r := <-e.fly(t.Context(), sha256.Sum256([]byte(alice)), alice)
	if r.Err != nil || r.Val != first {
		t.Fatalf("the late caller's flight: %v, %v; want the first caller's token", r.Val, r.Err)
	}
	if n := srv.Calls.Load(); n != 1 {
		t.Errorf("the token endpoint was called %d times for one caller, want 1", n)
	}
}
