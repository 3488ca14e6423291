//go:build !linux

package bench

import "errors"

// probeSyncWrite is Linux's only.
func probeSyncWrite(string) (float64, error) {
	return 0, errors.New("not timed on this platform")
}
