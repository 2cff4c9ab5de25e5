module github.com/quorumlock/quorumlock/sim

go 1.25

require (
	github.com/gomodule/redigo v1.9.3
	github.com/quorumlock/quorumlock v0.1.0
	github.com/yuin/gopher-lua v1.1.2
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
)

replace github.com/quorumlock/quorumlock => ../
