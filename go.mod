module github.com/quorumlock/quorumlock

go 1.22

require (
	github.com/gomodule/redigo v1.9.3
	github.com/google/uuid v1.6.0
	github.com/hashicorp/go-multierror v1.1.1
	go.uber.org/goleak v1.3.0
)

require github.com/hashicorp/errwrap v1.0.0 // indirect
