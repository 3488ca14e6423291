package trust

// Verify lets the external tests check a peer chain as a handshake would.
var Verify = (*Source).verify
