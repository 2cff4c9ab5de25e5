// A program that reports a client's work to OpenTelemetry.
package main

import (
	"fmt"
	"os"

	"go.opentelemetry.io/otel"

	qlotel "github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	obs, err := qlotel.New(qlotel.WithMeterProvider(otel.GetMeterProvider()), qlotel.WithTracerProvider(otel.GetTracerProvider()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err := redigo.NewFromAddrs(os.Args[1:], redlock.WithObserver(obs))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
}
