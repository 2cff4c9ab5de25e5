// Package valkey_test runs the integration suites (the conformance suite
// and the Redis Cluster members' cases) through the valkey-go adapter,
// valkey.New. They live in the integration module so that the adapter's
// own module requires nothing its shipped code does not import.
package valkey_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
