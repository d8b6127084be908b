package escalation_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.RocketMQStragglers...)
}
