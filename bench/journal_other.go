//go:build !linux

package bench

import "errors"

// probeSyncWrite is Linux's only.
func probeSyncWrite(string) (backToBack, afterIdle float64, err error) {
	return 0, 0, errors.New("not timed on this platform")
}
