package planted

import (
	"os/exec"
	"testing"
)

// launch runs redis-server itself, as a module that cannot import
// internal/redistest does.
func launch() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	return exec.Command(bin, "--port", "0").Start()
}

func TestOwnStarter(t *testing.T) { _ = launch() }
