package command_test

import (
	"testing"

	"github.com/hcpbot/hcpbot/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const channel = "C0INCIDENTS"
