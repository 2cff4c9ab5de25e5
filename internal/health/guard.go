package health

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/quorumlock/quorumlock/observe"
)

// Guard wraps o in an Observer that recovers a panic of o: a faulty
// observer must neither crash the client (OnMasterAnswer runs on a
// transport's goroutine, where nobody could recover it) nor unwind an
// acquisition after the masters granted it, stranding a lock its caller
// never got. The first panic is logged at Error on logger (when not nil);
// the later ones only counted. A nil o stays nil: no observer costs
// nothing.
func Guard(o observe.Observer, logger *slog.Logger) observe.Observer {
	if o == nil {
		return nil
	}
	return guarded{o: o, logger: logger, panics: new(atomic.Int64)}
}

// guarded is the Observer Guard returns.
type guarded struct {
	o      observe.Observer
	logger *slog.Logger
	panics *atomic.Int64
}

// recovered is deferred by each method of g.
func (g guarded) recovered(method string) {
	p := recover()
	if p == nil {
		return
	}
	if g.panics.Add(1) == 1 && g.logger != nil {
		g.logger.LogAttrs(context.Background(), slog.LevelError, "redlock: observer panicked",
			slog.String("method", method), slog.Any("panic", p),
			slog.String("note", "recovered; further panics of the observer are not logged"))
	}
}

func (g guarded) OnAcquire(ctx context.Context, e observe.AcquireEvent) {
	defer g.recovered("OnAcquire")
	g.o.OnAcquire(ctx, e)
}

func (g guarded) OnExtend(ctx context.Context, e observe.ExtendEvent) {
	defer g.recovered("OnExtend")
	g.o.OnExtend(ctx, e)
}

func (g guarded) OnRelease(ctx context.Context, e observe.ReleaseEvent) {
	defer g.recovered("OnRelease")
	g.o.OnRelease(ctx, e)
}

func (g guarded) OnLoss(ctx context.Context, e observe.LossEvent) {
	defer g.recovered("OnLoss")
	g.o.OnLoss(ctx, e)
}

func (g guarded) OnMasterAnswer(ctx context.Context, e observe.MasterAnswer) {
	defer g.recovered("OnMasterAnswer")
	g.o.OnMasterAnswer(ctx, e)
}

func (g guarded) OnMasterState(ctx context.Context, e observe.MasterStateEvent) {
	defer g.recovered("OnMasterState")
	g.o.OnMasterState(ctx, e)
}
