// Package throwaway gives the examples their masters: those named in the
// environment, or throwaway local redis-server processes.
package throwaway

import (
	"fmt"
	"log"
	"os"

	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Masters returns the lock masters from REDLOCK_MASTERS and a data Redis
// from the variable dataEnv; when either is unset it starts three lock
// masters and a data Redis on 127.0.0.1, which stop removes. It ends the
// program with what to install when redis-server is missing.
func Masters(dataEnv string) (lock []string, data string, stop func()) {
	lock, data = masters.FromEnv(), os.Getenv(dataEnv)
	if len(lock) > 0 && data != "" {
		return lock, data, func() {}
	}
	fmt.Println("starting 3 throwaway lock masters and a data Redis on 127.0.0.1 ...")
	addrs, stop, err := redistest.Launch(4)
	if err != nil {
		log.Fatalf("%v\n(install Redis with: apt-get install -y redis-server)", err)
	}
	return addrs[:3], addrs[3], stop
}
