//go:build !unix

package benchkit

import (
	"errors"
	"time"
)

func cpuTime() (time.Duration, error) {
	return 0, errors.New("benchkit: CPU time is measured on unix only")
}
