module github.com/quorumlock/quorumlock/valkey

go 1.25.0

replace github.com/quorumlock/quorumlock => ../

require (
	github.com/quorumlock/quorumlock v0.1.0
	github.com/valkey-io/valkey-go v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/gomodule/redigo v1.9.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
