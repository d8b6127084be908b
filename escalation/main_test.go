package escalation_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
)

func TestMain(m *testing.M) {
	scheduler.RouteClientLog(testenv.Logger())
	goleak.VerifyTestMain(m, testenv.RocketMQStragglers...)
}
