package planted_test

import (
	"testing"

	rt "github.com/quorumlock/quorumlock/internal/redistest"
)

func TestDirect(t *testing.T) { rt.StartOne(t) }

func ExampleDirect() { rt.Launch(1) }
